"""The fused loops beneath ``symbolic.modular.arith``: exact residue arithmetic mod p < 2^60, compiled
by Numba (once, cached on disk).

Each operation is written once, for one entry (``_mulmod1``, ``_recombine3_1``, ``_karatsuba5_1``),
and run two ways: as a Numba ufunc (numpy's broadcasting, one thread) and as a ``prange`` loop on
every core for large arrays (``run``) -- over flat arrays for the elementwise operations, over the rows
of (G, R, C) blocks of any strides for a matmul's limb planes and recombinations. The loops are typed
up front (their signatures), so they load from the cache at import, not at a first call inside a
trial. Why each one is exact is in ``arith``'s docstring.

int64 multiplication and shifts wrap here (LLVM's mul and shl without overflow flags): the exactness
arguments take remainders in wrapping arithmetic whose true value lies in (-p, 2p).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange
from numba.types import Array, b1, f8, i8, u8, void

# the types the loops are compiled for: inputs read-only (a broadcast or a spec's leaf is), so any
# int64 array of the rank is accepted; outputs writable
_IN1 = Array(i8, 1, "C", readonly=True)
_ROWS = Array(i8, 2, "C", readonly=True)
_IN3 = Array(i8, 3, "A", readonly=True)
# contiguous only, where a loop vectorises: three times faster than over strided arrays (a matmul's
# Karatsuba operands are staged contiguously first; its products are contiguous)
_IN3C = Array(i8, 3, "C", readonly=True)

LIMB_BITS = 20
MASK = (1 << LIMB_BITS) - 1
HALF = 30                                   # the split of one factor in an elementwise product
PARALLEL_MIN = 1 << 16                      # entries below which a parallel loop's start-up costs more
# A fork-safe threading layer (TBB, else Numba's own work queue): GNU OpenMP, Numba's pick where it is
# installed, aborts a process forked after it ran ("fork() called from a process already using GNU
# OpenMP"), and the checkers fork a child per strategy in the same worker that ran a modular trial.
numba.config.THREADING_LAYER = "forksafe"


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


@numba.njit(cache=True, inline="always")
def _addmod1(x, y, p):
    """x + y mod p for residues x, y."""
    r = x + y - p
    return r + ((r >> 63) & p)


@numba.njit(cache=True, inline="always")
def _powmod(x, e, p, inv_p):
    """x^e mod p by squaring, for a residue x and e >= 0."""
    out = np.int64(1)
    while e:
        if e & 1:
            out = _mulmod1(out, x, p, inv_p)
        e >>= 1
        x = _mulmod1(x, x, p, inv_p)
    return out


# ---------------------------------------------------------------------------- ufuncs (broadcasting)
@numba.vectorize(["int64(int64, int64, int64, float64)"], cache=True)
def mulmod(x, y, p, inv_p):
    return _mulmod1(x, y, p, inv_p)


@numba.vectorize(["int64(int64, int64, int64)"], cache=True)
def addmod(x, y, p):
    """x + y mod p for residues x, y."""
    return _addmod1(x, y, p)


@numba.vectorize(["int64(int64, int64, int64)"], cache=True)
def submod(x, y, p):
    """x - y mod p for residues x, y."""
    r = x - y
    return r + ((r >> 63) & p)


# ---------------------------------------------------------------------------- flat loops, every core
@numba.njit([void(_IN1, _IN1, i8[::1], i8, f8)], cache=True, parallel=True)
def mulmod_flat(x, y, out, p, inv_p):
    for i in prange(out.size):
        out[i] = _mulmod1(x[i], y[i], p, inv_p)


@numba.njit([void(_IN1, i8, i8[::1], i8, f8)], cache=True, parallel=True)
def mulmod_scalar_flat(x, s, out, p, inv_p):
    for i in prange(out.size):
        out[i] = _mulmod1(x[i], s, p, inv_p)


INV_RUN = 4096                              # entries sharing one exponentiation in ``inv_flat``


@numba.njit([void(_IN1, i8[::1], i8, f8, i8)], cache=True, parallel=True)
def inv_flat(x, out, p, inv_p, e):
    """out = 1 / x mod p for nonzero residues x, by Montgomery's trick on runs of INV_RUN entries: the
    run's prefix products, one inverse of the whole run's product as its e-th power (e = p - 2, Fermat),
    and a backward pass, where t = 1 / (x_lo ... x_i) gives 1 / x_i = t (x_lo ... x_(i-1)) and then
    t x_i = 1 / (x_lo ... x_(i-1)). Three products per entry instead of an exponentiation each."""
    n = x.size
    for run in prange((n + INV_RUN - 1) // INV_RUN):
        lo = run * INV_RUN
        hi = min(n, lo + INV_RUN)
        acc = np.int64(1)
        for i in range(lo, hi):
            out[i] = acc                    # the product of the run's entries before i
            acc = _mulmod1(acc, x[i], p, inv_p)
        t = _powmod(acc, e, p, inv_p)
        for i in range(hi - 1, lo - 1, -1):
            out[i] = _mulmod1(t, out[i], p, inv_p)
            t = _mulmod1(t, x[i], p, inv_p)


@numba.njit([void(_ROWS, i8[::1], i8[::1])], cache=True, parallel=True)
def split_sums(x, lo, hi):
    """lo[i], hi[i] = the sums of the low 31 bits and of the rest (x >> 31) of row i of x (R, K)."""
    R, K = x.shape
    for r in prange(R):
        a = np.int64(0)
        b = np.int64(0)
        for k in range(K):
            v = x[r, k]
            a += v & 0x7FFFFFFF
            b += v >> 31
        lo[r] = a
        hi[r] = b


@numba.njit(cache=True, inline="always")
def _mix1(x):
    """splitmix64's finaliser on one uint64 (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit([void(_IN1, i8[::1], u8, u8, u8)], cache=True, parallel=True)
def hash_flat(v, out, k1, k2, p):
    """out = mix(mix(v ^ k1) ^ k2) mod p: the keyed atom hash (``Field.hash``), k1, k2, p uint64."""
    for i in prange(v.size):
        out[i] = np.int64(_mix1(_mix1(np.uint64(v[i]) ^ k1) ^ k2) % p)


# ---------------------------------------------------------------------------- matmul operands and outputs
# One block of an exact matmul (``arith.ModP._contract``): residues x of shape (G, R, C), any strides
# (slices, transposes and broadcasts of the caller's arrays), written as float64 limb planes into the
# dgemm's operand buffers, and the dgemm's products recombined into residues. Rows (G R of them) are
# split over the threads.
@numba.njit([void(_IN3, f8[:, :, :, :])], cache=True, parallel=True)
def limb_planes(x, out):
    """out[i] = limb i of x (i = 0, 1, 2): x (G, R, C), out (3, G, R, C)."""
    G, R, C = x.shape
    for gr in prange(G * R):
        g, r = gr // R, gr % R
        for c in range(C):
            v = x[g, r, c]
            out[0, g, r, c] = np.float64(v & MASK)
            out[1, g, r, c] = np.float64((v >> LIMB_BITS) & MASK)
            out[2, g, r, c] = np.float64((v >> (2 * LIMB_BITS)) & MASK)


@numba.njit([void(_IN3, f8[:, :, :, :, :], i8, f8)], cache=True, parallel=True)
def shifted_limb_planes(x, out, p, inv_p):
    """out[i, j] = limb j of 2^(20 i) x mod p (i, j = 0, 1, 2): x (G, R, C), out (3, 3, G, R, C)."""
    G, R, C = x.shape
    s1 = _powmod(np.int64(2), np.int64(LIMB_BITS), p, inv_p)
    s2 = _powmod(np.int64(2), np.int64(2 * LIMB_BITS), p, inv_p)
    for gr in prange(G * R):
        g, r = gr // R, gr % R
        for c in range(C):
            v = x[g, r, c]
            for i in range(3):
                s = v if i == 0 else _mulmod1(v, s1 if i == 1 else s2, p, inv_p)
                out[i, 0, g, r, c] = np.float64(s & MASK)
                out[i, 1, g, r, c] = np.float64((s >> LIMB_BITS) & MASK)
                out[i, 2, g, r, c] = np.float64((s >> (2 * LIMB_BITS)) & MASK)


@numba.njit([void(_IN3C, f8[:, :, :, ::1])], cache=True, parallel=True)
def karatsuba_planes(x, out):
    """out = limbs 0, 1, 2 of x and the sums 0+1, 1+2, 0+2: x (G, R, C), out (6, G, R, C)."""
    G, R, C = x.shape
    for gr in prange(G * R):
        g, r = gr // R, gr % R
        for c in range(C):
            v = x[g, r, c]
            a0 = np.float64(v & MASK)
            a1 = np.float64((v >> LIMB_BITS) & MASK)
            a2 = np.float64((v >> (2 * LIMB_BITS)) & MASK)
            out[0, g, r, c] = a0
            out[1, g, r, c] = a1
            out[2, g, r, c] = a2
            out[3, g, r, c] = a0 + a1
            out[4, g, r, c] = a1 + a2
            out[5, g, r, c] = a0 + a2


@numba.njit([void(f8[:, :, :, :], i8[:, :, :], i8, f8, b1)], cache=True, parallel=True)
def recombine3_planes(d, out, p, inv_p, accumulate):
    """out = D_0 + 2^20 D_1 + 2^40 D_2 mod p (added to out where ``accumulate``): d (3, G, R, N) the limb
    sums, out (G, R, N)."""
    G, R, N = out.shape
    for gr in prange(G * R):
        g, r = gr // R, gr % R
        for c in range(N):
            v = _recombine3_1(d[0, g, r, c], d[1, g, r, c], d[2, g, r, c], p, inv_p)
            out[g, r, c] = _addmod1(out[g, r, c], v, p) if accumulate else v


@numba.njit([void(f8[:, :, :, ::1], i8[:, :, ::1], i8, f8, i8, b1), void(f8[:, :, :, :], i8[:, :, :], i8, f8, i8, b1)],
            cache=True, parallel=True)
def karatsuba5_planes(P, out, p, inv_p, r60, accumulate):
    """out = the Karatsuba products recombined (added to out where ``accumulate``): P (6, G, R, N),
    out (G, R, N)."""
    G, R, N = out.shape
    for gr in prange(G * R):
        g, r = gr // R, gr % R
        for c in range(N):
            v = _karatsuba5_1(P[0, g, r, c], P[1, g, r, c], P[2, g, r, c], P[3, g, r, c], P[4, g, r, c],
                              P[5, g, r, c], p, inv_p, r60)
            out[g, r, c] = _addmod1(out[g, r, c], v, p) if accumulate else v


def run(loop, size: int, *args):
    """``loop(*args)`` on Numba's threads (NUMBA_NUM_THREADS; default every core) for ``size`` >=
    PARALLEL_MIN entries, else on one (waking the others costs more than a small loop, and several test
    processes would fight over them)."""
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS if size >= PARALLEL_MIN else 1)
    loop(*args)
