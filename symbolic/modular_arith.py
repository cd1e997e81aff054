"""Exact vectorised arithmetic mod a prime p in [2^59, 2^60) on numpy int64 arrays.

The floor beneath ``symbolic.modular_backend``: residues are int64 entries in [0, p); every operation
returns exact residues, never a rounded number. Three tools make that exact and fast:

- elementwise products split one factor into 30-bit halves, y = 2^30 y_h + y_l: each of x y_l, x y_h
  and (x y_h mod p) 2^30 is below 2^92, so a float64 estimate of its quotient by p (below 2^33,
  relative error a few 2^-53) is within 1 of the true one, and the remainder, taken in wrapping int64
  arithmetic, has its true value in (-p, 2p): one correction each way reduces it. The loop is one
  fused Numba ufunc (`_mulmod`), so a product is one pass over memory, not a dozen numpy temporaries;
- matmuls run on float64 BLAS, exact because every partial sum is an integer below 2^53. One operand is
  *pre-shifted*: with a = sum_i 2^(20 i) a_i in 20-bit limbs a_i,

      a b = sum_i a_i (2^(20 i) b mod p) = sum_j 2^(20 j) D_j,   D_j = sum_i a_i b^(i)_j,

  where b^(i)_j is limb j of b^(i) = 2^(20 i) b mod p. Every D_j is one contraction of length 3K of
  products below 2^40 -- below 2^53 for K <= 2730 -- and all three come out of ONE dgemm
  [a_0 a_1 a_2] @ [[b^(i)_j]]. Only three output limbs are recombined (not the five diagonals of a
  plain limb product), and in float64: D_0 + 2^20 D_1 + 2^40 D_2 < 2^94, so its quotient by p is
  below 2^35 and a float64 estimate of it (relative error a few 2^-53) is within 1 of the true one;
  the remainder is again taken in wrapping integer arithmetic (`_recombine3`, fused like `_mulmod`).
  The cheaper operand (by size) is the one pre-shifted; limbs are written straight into the dgemm's
  operand buffers (`_limb`), never concatenated.
- sums split entries into 31-bit halves, so 2^32 terms fit int64.

A division by a value that is 0 mod p raises ``Pole``: the caller resamples, never a silently wrong
value. The rest of the modular tier (atoms, bounds, the array type spec code sees) lives above this.
"""
from __future__ import annotations

import numba
import numpy as np

LIMB_BITS = 20
LIMBS = 3                                   # 3 x 20 bits = 60 bits: residues mod p < 2^60
_MASK = (1 << LIMB_BITS) - 1
MAX_CONTRACTION = (1 << 53) // (LIMBS << (2 * LIMB_BITS))   # 2730: 3 K limb products < 2^40 sum < 2^53
PRIME_LO_BITS = 59                          # primes in [2^59, 2^60)
_HALF = 30                                  # the split of one factor in an elementwise product


class Pole(ZeroDivisionError):
    """A division by a value that is 0 mod p at the sampled point: resample."""


# ---- the fused loops (Numba ufuncs: numpy broadcasting, one pass, compiled once and cached on disk).
# int64 multiplication and shifts wrap in them (LLVM's mul/shl without overflow flags), which is what
# the exactness arguments in the module docstring rely on.

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


@numba.vectorize(["int64(int64, int64, int64, float64)"], cache=True)
def _mulmod(x, y, p, inv_p):
    """x y mod p for 0 <= x < 2^62 and 0 <= y < 2^60."""
    lo = _mulmod_small(x, y & ((1 << _HALF) - 1), p, inv_p)
    hi = _mulmod_small(_mulmod_small(x, y >> _HALF, p, inv_p), 1 << _HALF, p, inv_p)
    return _reduce(lo + hi, p)


@numba.vectorize(["int64(int64, int64, int64)"], cache=True)
def _addmod(x, y, p):
    """x + y mod p for residues x, y."""
    r = x + y - p
    return r + ((r >> 63) & p)


@numba.vectorize(["int64(int64, int64, int64)"], cache=True)
def _submod(x, y, p):
    """x - y mod p for residues x, y."""
    r = x - y
    return r + ((r >> 63) & p)


@numba.vectorize(["int64(float64, float64, float64, int64, float64)"], cache=True)
def _recombine3(d0, d1, d2, p, inv_p):
    """d0 + 2^20 d1 + 2^40 d2 mod p for integers d_j in [0, 2^53) held in float64."""
    q = np.int64((d0 + d1 * float(1 << LIMB_BITS) + d2 * float(1 << (2 * LIMB_BITS))) * inv_p)
    return _reduce((np.int64(d0) + (np.int64(d1) << LIMB_BITS) + (np.int64(d2) << (2 * LIMB_BITS))) - q * p, p)


@numba.vectorize(["float64(int64, int64)"], cache=True)
def _limb(x, shift):
    """The 20-bit limb of x at bit `shift`, as float64 (exact)."""
    return np.float64((x >> shift) & _MASK)


class ModP:
    """Vectorised arithmetic mod one prime p (p in [2^59, 2^60)) on int64 arrays of residues."""

    def __init__(self, p: int):
        if not (2 ** PRIME_LO_BITS <= p < 2 ** (PRIME_LO_BITS + 1)):
            raise ValueError("the modular backend needs a prime in [2^59, 2^60)")
        self.p = p
        self._p = np.int64(p)
        self.inv_p = 1.0 / p
        self.poles = 0                         # poles raised: a spec that swallows one is refused

    # ---- elementwise
    def add(self, a, b):
        return _addmod(a, b, self._p)

    def sub(self, a, b):
        return _submod(a, b, self._p)

    def neg(self, a):
        return _submod(np.int64(0), a, self._p)

    def mul(self, a, b):
        """a * b mod p for residues a, b (module docstring)."""
        return _mulmod(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64), self._p, self.inv_p)

    def mul_scalar(self, a, s: int):
        """a * s mod p for a constant s and any int64 a in [0, 2^62): a need not be reduced first."""
        return _mulmod(np.asarray(a, dtype=np.int64), np.int64(int(s) % self.p), self._p, self.inv_p)

    def pow(self, a, k: int):
        if k < 0:
            return self.pow(self.inv(a), -k)
        out = np.ones_like(np.asarray(a, dtype=np.int64))
        base = np.asarray(a, dtype=np.int64)
        while k:
            if k & 1:
                out = self.mul(out, base)
            k >>= 1
            if k:
                base = self.mul(base, base)
        return out

    def inv(self, a):
        a = np.asarray(a, dtype=np.int64)
        if np.any(a == 0):
            self.poles += 1
            raise Pole("division by a value that is 0 mod p at the sampled point")
        if a.size <= 4096:             # Python's pow: faster than an exponentiation by squaring here
            flat = [pow(int(v), -1, self.p) for v in a.ravel()]
            return np.array(flat, dtype=np.int64).reshape(a.shape)
        return self.pow(a, self.p - 2)

    def sum(self, a, axis, keepdims=False):
        """Sum mod p without overflow: 31-bit halves summed separately (2^32 terms fit int64)."""
        lo = np.sum(a & 0x7FFFFFFF, axis=axis, keepdims=keepdims)
        hi = np.sum(a >> 31, axis=axis, keepdims=keepdims)
        return self.add(self.mul_scalar(np.mod(hi, self.p), 1 << 31), np.mod(lo, self.p))

    # ---- matmul
    def matmul(self, a, b):
        """a @ b mod p, exactly, with float64 BLAS (module docstring); contractions longer than
        MAX_CONTRACTION are split into equal chunks."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        if a.ndim == 1 or b.ndim == 1:
            vec_a, vec_b = a.ndim == 1, b.ndim == 1
            out = self.matmul(a[None, :] if vec_a else a, b[:, None] if vec_b else b)
            if vec_a:
                out = out[..., 0, :]
            if vec_b:
                out = out[..., 0]
            return out
        K = a.shape[-1]
        if K == 0:                                         # an empty sum
            return np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                            dtype=np.int64)
        step = -(-K // -(-K // MAX_CONTRACTION))           # equal chunks of at most MAX_CONTRACTION
        total = None
        for start in range(0, K, step):
            part = self._matmul_chunk(a[..., start:start + step], b[..., start:start + step, :])
            total = part if total is None else self.add(total, part)
        return total

    def _shifted(self, x) -> list:
        """x, 2^20 x, 2^40 x mod p."""
        return [x] + [self.mul_scalar(x, pow(2, LIMB_BITS * i, self.p)) for i in range(1, LIMBS)]

    def _matmul_chunk(self, a, b):
        """One exact chunk (K <= MAX_CONTRACTION) as ONE dgemm with the smaller operand pre-shifted."""
        m, K, n = a.shape[-2], a.shape[-1], b.shape[-1]
        if b.size <= a.size:
            # [a_0 a_1 a_2] (m x 3K) @ [b^(0)_j; b^(1)_j; b^(2)_j] (3K x n) = D_j, the j stacked in front
            b = b.reshape((1,) * (a.ndim - b.ndim) + b.shape)      # so the stacked j cannot meet a's batch
            A = np.empty(a.shape[:-1] + (LIMBS * K,))
            for i in range(LIMBS):
                _limb(a, LIMB_BITS * i, out=A[..., i * K:(i + 1) * K])
            B = np.empty((LIMBS,) + b.shape[:-2] + (LIMBS * K, n))
            for i, shifted in enumerate(self._shifted(b)):
                for j in range(LIMBS):
                    _limb(shifted, LIMB_BITS * j, out=B[j, ..., i * K:(i + 1) * K, :])
            D = np.matmul(A, B)                                      # D[j]: contiguous
        else:
            # the mirror image: rows i, columns j: a^(j)_i (3m x 3K) @ [b_0; b_1; b_2]; row block i = D_i
            A = np.empty(a.shape[:-2] + (LIMBS * m, LIMBS * K))
            for j, shifted in enumerate(self._shifted(a)):
                for i in range(LIMBS):
                    _limb(shifted, LIMB_BITS * i, out=A[..., i * m:(i + 1) * m, j * K:(j + 1) * K])
            B = np.empty(b.shape[:-2] + (LIMBS * K, n))
            for i in range(LIMBS):
                _limb(b, LIMB_BITS * i, out=B[..., i * K:(i + 1) * K, :])
            P = np.matmul(A, B)
            D = [P[..., i * m:(i + 1) * m, :] for i in range(LIMBS)]
        del A, B
        return _recombine3(D[0], D[1], D[2], self._p, self.inv_p)

    def matmul_sum(self, pairs):
        """sum_i a_i @ b_i mod p as one contraction (the a_i side by side, the b_i stacked)."""
        a = np.concatenate([np.asarray(x, dtype=np.int64) for x, _ in pairs], axis=-1)
        b = np.concatenate([np.asarray(y, dtype=np.int64) for _, y in pairs], axis=-2)
        return self.matmul(a, b)
