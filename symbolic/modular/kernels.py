"""The fused loops beneath ``symbolic.modular.arith``: exact residue arithmetic mod p < 2^60, compiled
by Numba (once, cached on disk).

Each operation is written once, for one entry (``_mulmod1``, ``_recombine3_1``, ``_karatsuba5_1``),
and run two ways: as a Numba ufunc (numpy's broadcasting, one thread) and, for the large contiguous
arrays a block at production size makes, as a ``prange`` loop over the flat array on every core
(``run``). Why each one is exact is in ``arith``'s docstring.

int64 multiplication and shifts wrap here (LLVM's mul and shl without overflow flags): the exactness
arguments take remainders in wrapping arithmetic whose true value lies in (-p, 2p).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

LIMB_BITS = 20
MASK = (1 << LIMB_BITS) - 1
HALF = 30                                   # the split of one factor in an elementwise product
PARALLEL_MIN = 1 << 16                      # entries below which a parallel loop's start-up costs more


# ---------------------------------------------------------------------------- one entry
@numba.njit(cache=True, inline="always")
def _reduce(r, p):
    """r in (-p, 2p) -> [0, p), without branches (a random residue would mispredict half of them)."""
    r += (r >> 63) & p
    r -= p
    return r + ((r >> 63) & p)


@numba.njit(cache=True, inline="always")
def _mulmod_small(x, y, p, inv_p):
    """x y mod p for 0 <= x < 2^62, 0 <= y < 2^30 (x y < 2^92): float64 quotient estimate within 1."""
    q = np.int64(np.float64(x) * np.float64(y) * inv_p)
    return _reduce(x * y - q * p, p)


@numba.njit(cache=True, inline="always")
def _mulmod1(x, y, p, inv_p):
    """x y mod p for 0 <= x < 2^62 and 0 <= y < 2^60."""
    lo = _mulmod_small(x, y & ((1 << HALF) - 1), p, inv_p)
    hi = _mulmod_small(_mulmod_small(x, y >> HALF, p, inv_p), 1 << HALF, p, inv_p)
    return _reduce(lo + hi, p)


@numba.njit(cache=True, inline="always")
def _recombine3_1(d0, d1, d2, p, inv_p):
    """d0 + 2^20 d1 + 2^40 d2 mod p for integers d_j in [0, 2^53) held in float64 (sum < 2^94)."""
    q = np.int64((d0 + d1 * float(1 << LIMB_BITS) + d2 * float(1 << (2 * LIMB_BITS))) * inv_p)
    return _reduce((np.int64(d0) + (np.int64(d1) << LIMB_BITS) + (np.int64(d2) << (2 * LIMB_BITS))) - q * p, p)


@numba.njit(cache=True, inline="always")
def _karatsuba5_1(p0, p1, p2, p01, p12, p02, p, inv_p, r60):
    """sum_k c_k 2^(20 k) mod p from the six Karatsuba products (integers below 2^53 in float64):
    c0 = P0, c1 = P01 - P0 - P1, c2 = P02 - P0 - P2 + P1, c3 = P12 - P1 - P2, c4 = P2 -- each an
    integer below 2^53, so exact in float64. c0 + 2^20 c1 + 2^40 c2 < 2^94 reduces as in
    ``_recombine3_1``, c3 + 2^20 c4 < 2^74 likewise, and the second is multiplied by r60 = 2^60 mod p."""
    c1 = p01 - p0 - p1
    c2 = p02 - p0 - p2 + p1
    c3 = p12 - p1 - p2
    lo = _recombine3_1(p0, c1, c2, p, inv_p)
    q = np.int64((c3 + p2 * float(1 << LIMB_BITS)) * inv_p)
    hi = _reduce((np.int64(c3) + (np.int64(p2) << LIMB_BITS)) - q * p, p)
    return _reduce(lo + _mulmod1(hi, r60, p, inv_p), p)


# ---------------------------------------------------------------------------- ufuncs (broadcasting)
@numba.vectorize(["int64(int64, int64, int64, float64)"], cache=True)
def mulmod(x, y, p, inv_p):
    return _mulmod1(x, y, p, inv_p)


@numba.vectorize(["int64(int64, int64, int64)"], cache=True)
def addmod(x, y, p):
    """x + y mod p for residues x, y."""
    r = x + y - p
    return r + ((r >> 63) & p)


@numba.vectorize(["int64(int64, int64, int64)"], cache=True)
def submod(x, y, p):
    """x - y mod p for residues x, y."""
    r = x - y
    return r + ((r >> 63) & p)


@numba.vectorize(["float64(int64, int64)"], cache=True)
def limb(x, shift):
    """The 20-bit limb of x at bit ``shift``, as float64 (exact)."""
    return np.float64((x >> shift) & MASK)


# ---------------------------------------------------------------------------- flat loops, every core
@numba.njit(cache=True, parallel=True)
def mulmod_flat(x, y, out, p, inv_p):
    for i in prange(out.size):
        out[i] = _mulmod1(x[i], y[i], p, inv_p)


@numba.njit(cache=True, parallel=True)
def mulmod_scalar_flat(x, s, out, p, inv_p):
    for i in prange(out.size):
        out[i] = _mulmod1(x[i], s, p, inv_p)


@numba.njit(cache=True, parallel=True)
def recombine3_flat(d, out, p, inv_p):
    """d: (B, 3, N) limb sums, out: (B, N)."""
    for b in range(d.shape[0]):
        for i in prange(d.shape[2]):
            out[b, i] = _recombine3_1(d[b, 0, i], d[b, 1, i], d[b, 2, i], p, inv_p)


@numba.njit(cache=True, parallel=True)
def karatsuba_operand(x, out):
    """x: (N,) residues; out: (6, N) -- limbs 0, 1, 2 and the sums 0+1, 1+2, 0+2."""
    for i in prange(x.size):
        v = x[i]
        a0 = np.float64(v & MASK)
        a1 = np.float64((v >> LIMB_BITS) & MASK)
        a2 = np.float64((v >> (2 * LIMB_BITS)) & MASK)
        out[0, i] = a0
        out[1, i] = a1
        out[2, i] = a2
        out[3, i] = a0 + a1
        out[4, i] = a1 + a2
        out[5, i] = a0 + a2


@numba.njit(cache=True, parallel=True)
def karatsuba5_flat(P, out, p, inv_p, r60):
    """P: (6, N) Karatsuba products, out: (N,)."""
    for i in prange(out.size):
        out[i] = _karatsuba5_1(P[0, i], P[1, i], P[2, i], P[3, i], P[4, i], P[5, i], p, inv_p, r60)


def run(loop, size: int, *args):
    """``loop(*args)`` on Numba's threads (NUMBA_NUM_THREADS; default every core) for ``size`` >=
    PARALLEL_MIN entries, else on one (waking the others costs more than a small loop, and several test
    processes would fight over them)."""
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS if size >= PARALLEL_MIN else 1)
    loop(*args)
