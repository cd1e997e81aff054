"""Exact vectorised arithmetic mod a prime p in [2^59, 2^60) on numpy int64 arrays.

The floor beneath ``symbolic.modular_backend``: residues are int64 entries in [0, p); every operation
returns exact residues, never a rounded number. Three tools make that exact and fast:

- elementwise products estimate the quotient a b / p in 80-bit long double (its 64-bit mantissa puts
  the estimate within 1 of the true quotient < 2^61), then take a b - q p in wrapping int64 arithmetic:
  its true value lies in (-p, 2p), so the wrapped value is the true one, and one correction each way
  reduces it;
- matmuls run on float64 BLAS, exact because every partial sum is an integer below 2^53. One operand is
  *pre-shifted*: with a = sum_i 2^(20 i) a_i in 20-bit limbs a_i,

      a b = sum_i a_i (2^(20 i) b mod p) = sum_j 2^(20 j) D_j,   D_j = sum_i a_i b^(i)_j,

  where b^(i)_j is limb j of b^(i) = 2^(20 i) b mod p. Every D_j is one contraction of length 3K of
  products below 2^40 -- below 2^53 for K <= 2730 -- and all three come out of ONE dgemm
  [a_0 a_1 a_2] @ [[b^(i)_j]]. Only three output limbs are recombined (not the five diagonals of a
  plain limb product), and in float64: D_0 + 2^20 D_1 + 2^40 D_2 < 2^94, so its quotient by p is
  below 2^35 and a float64 estimate of it (relative error a few 2^-53) is within 1 of the true one;
  the remainder is again taken in wrapping integer arithmetic. The cheaper operand (by size) is the
  one pre-shifted.
- sums split entries into 31-bit halves, so 2^32 terms fit int64.

A division by a value that is 0 mod p raises ``Pole``: the caller resamples, never a silently wrong
value. The rest of the modular tier (atoms, bounds, the array type spec code sees) lives above this.
"""
from __future__ import annotations

import numpy as np

LIMB_BITS = 20
LIMBS = 3                                   # 3 x 20 bits = 60 bits: residues mod p < 2^60
_MASK = (1 << LIMB_BITS) - 1
MAX_CONTRACTION = (1 << 53) // (LIMBS << (2 * LIMB_BITS))   # 2730: 3 K limb products < 2^40 sum < 2^53
PRIME_LO_BITS = 59                          # primes in [2^59, 2^60)


class Pole(ZeroDivisionError):
    """A division by a value that is 0 mod p at the sampled point: resample."""


def _limbs(x) -> list:
    """The LIMBS 20-bit limbs of residues x as float64 arrays (exact: each < 2^20)."""
    return [((x >> (LIMB_BITS * i)) & _MASK).astype(np.float64) for i in range(LIMBS)]


class ModP:
    """Vectorised arithmetic mod one prime p (p in [2^59, 2^60)) on int64 arrays of residues."""

    def __init__(self, p: int):
        if not (2 ** PRIME_LO_BITS <= p < 2 ** (PRIME_LO_BITS + 1)):
            raise ValueError("the modular backend needs a prime in [2^59, 2^60)")
        self.p = p
        self.inv_p = np.longdouble(1) / np.longdouble(p)
        self.poles = 0                         # poles raised: a spec that swallows one is refused

    # ---- elementwise
    def add(self, a, b):
        s = a + b
        return s - self.p * (s >= self.p)

    def sub(self, a, b):
        s = a - b
        return s + self.p * (s < 0)

    def neg(self, a):
        return (self.p - a) % self.p

    def _reduce_wrapped(self, r):
        """r in (-p, 2p) -> [0, p)."""
        p = np.int64(self.p)
        r = np.asarray(r)
        if r.ndim == 0:
            r = r + p if r < 0 else r
            return r - p if r >= p else r
        np.add(r, p, out=r, where=r < 0)                  # r is a fresh temporary of the caller's
        np.subtract(r, p, out=r, where=r >= p)
        return r

    def mul(self, a, b):
        """a * b mod p: q = a b / p from an 80-bit estimate, truncated (a b / p >= 0, and the estimate
        is within 1 of the true quotient), then a b - q p in wrapping int64 arithmetic."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        q = (a.astype(np.longdouble) * b.astype(np.longdouble) * self.inv_p).astype(np.int64)
        with np.errstate(over="ignore"):
            r = np.multiply(a, b) - np.multiply(q, np.int64(self.p))
        return self._reduce_wrapped(r)

    def mul_scalar(self, a, s: int):
        """a * s mod p for a constant s < p and any int64 a in [0, 2^62): one long-double product with
        the precomputed s / p (the quotient estimate is within 1: a s / p < 2^63), then exact wrapping
        int64 arithmetic as in ``mul``; a need not be reduced first."""
        s = int(s) % self.p
        a = np.asarray(a, dtype=np.int64)
        q = (a.astype(np.longdouble) * (np.longdouble(s) * self.inv_p)).astype(np.int64)
        with np.errstate(over="ignore"):
            r = np.multiply(a, np.int64(s)) - np.multiply(q, np.int64(self.p))
        return self._reduce_wrapped(r)

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
        m, n = a.shape[-2], b.shape[-1]
        if b.size <= a.size:
            # [a_0 a_1 a_2] (m x 3K) @ [b^(0)_j; b^(1)_j; b^(2)_j] (3K x n) = D_j, the j stacked in front
            limbs = [_limbs(s) for s in self._shifted(b)]            # limbs[i][j] = b^(i)_j
            B = np.stack([np.concatenate([limbs[i][j] for i in range(LIMBS)], axis=-2) for j in range(LIMBS)])
            del limbs
            D = np.matmul(np.concatenate(_limbs(a), axis=-1), B)     # D[j]: contiguous
            del B
        else:
            # the mirror image: rows i, columns j: a^(j)_i (3m x 3K) @ [b_0; b_1; b_2]; row block i = D_i
            limbs = [_limbs(s) for s in self._shifted(a)]            # limbs[j][i] = a^(j)_i
            A = np.concatenate([np.concatenate([limbs[j][i] for j in range(LIMBS)], axis=-1)
                                for i in range(LIMBS)], axis=-2)
            del limbs
            P = np.matmul(A, np.concatenate(_limbs(b), axis=-2))
            del A
            D = [P[..., i * m:(i + 1) * m, :] for i in range(LIMBS)]
        return self._recombine(D)

    def _recombine(self, D):
        """D_0 + 2^20 D_1 + 2^40 D_2 mod p for float64 arrays of integers in [0, 2^53): a float64
        quotient estimate (within 1: the quotient is < 2^35), the remainder in wrapping uint64
        arithmetic (its true value lies in (-p, 2p))."""
        est = D[0] + D[1] * float(1 << LIMB_BITS)
        est += D[2] * float(1 << (2 * LIMB_BITS))
        est *= 1.0 / self.p
        q = est.astype(np.uint64)
        with np.errstate(over="ignore"):
            s = D[0].astype(np.uint64)
            for j in range(1, LIMBS):
                s += D[j].astype(np.uint64) << np.uint64(LIMB_BITS * j)
            s -= q * np.uint64(self.p)
        return self._reduce_wrapped(s.view(np.int64))

    def matmul_sum(self, pairs):
        """sum_i a_i @ b_i mod p as one contraction (the a_i side by side, the b_i stacked)."""
        a = np.concatenate([np.asarray(x, dtype=np.int64) for x, _ in pairs], axis=-1)
        b = np.concatenate([np.asarray(y, dtype=np.int64) for _, y in pairs], axis=-2)
        return self.matmul(a, b)
