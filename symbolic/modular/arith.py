"""Exact vectorised arithmetic mod a prime p in [2^59, 2^60) on numpy int64 arrays.

The floor beneath ``symbolic.modular.backend``: residues are int64 entries in [0, p); every operation
returns exact residues, never a rounded number. Three tools make that exact and fast:

- elementwise products split one factor into 30-bit halves, y = 2^30 y_h + y_l: each of x y_l, x y_h
  and (x y_h mod p) 2^30 is below 2^92, so a float64 estimate of its quotient by p (below 2^33,
  relative error a few 2^-53) is within 1 of the true one, and the remainder, taken in wrapping int64
  arithmetic, has its true value in (-p, 2p): one correction each way reduces it;
- matmuls run on float64 BLAS, exact because every partial sum is an integer below 2^53. One operand is
  *pre-shifted*: with a = sum_i 2^(20 i) a_i in 20-bit limbs a_i,

      a b = sum_i a_i (2^(20 i) b mod p) = sum_j 2^(20 j) D_j,   D_j = sum_i a_i b^(i)_j,

  where b^(i)_j is limb j of b^(i) = 2^(20 i) b mod p. Every D_j is one contraction of length 3K of
  products below 2^40 -- below 2^53 for K <= 2730 -- and all three come out of ONE dgemm
  [a_0 a_1 a_2] @ [[b^(i)_j]]. Only three output limbs are recombined (not the five diagonals of a
  plain limb product), and in float64: D_0 + 2^20 D_1 + 2^40 D_2 < 2^94, so its quotient by p is
  below 2^35 and a float64 estimate of it (relative error a few 2^-53) is within 1 of the true one;
  the remainder is again taken in wrapping integer arithmetic. The cheaper operand (by size) is the
  one pre-shifted; limbs are written straight into the dgemm's operand buffers, never concatenated.
- long contractions (K >= KARATSUBA_MIN_CONTRACTION, where the dgemm outweighs the output's
  recombination) multiply the limbs of both sides as polynomials in 2^20 by Karatsuba instead: six
  dgemms P0 = a_0 b_0, P1, P2, P01 = (a_0 + a_1)(b_0 + b_1), P12, P02 instead of nine. Sums of two
  limbs are below 2^21, so each product sum is below 2^53 for K <= 2048; the five diagonals
  c_0..c_4 are differences of them (exact), and sum_k c_k 2^(20 k) is reduced with 2^60 mod p.
- sums split entries into 31-bit halves, so 2^32 terms fit int64.

A division by a value that is 0 mod p raises ``Pole``: the caller resamples, never a silently wrong
value. The loops themselves are fused Numba kernels (``symbolic.modular.kernels``): one pass over
memory per operation, not a dozen numpy temporaries, on every core for large arrays. The rest of the
modular tier (atoms, bounds, the array type spec code sees) lives above this.
"""
from __future__ import annotations

import numpy as np

from vjpcert.symbolic.modular import kernels as mk

LIMB_BITS = mk.LIMB_BITS
LIMBS = 3                                   # 3 x 20 bits = 60 bits: residues mod p < 2^60
MAX_CONTRACTION = (1 << 53) // (LIMBS << (2 * LIMB_BITS))   # 2730: 3 K limb products < 2^40 sum < 2^53
# Karatsuba: sums of two limbs are < 2^21, their products < 2^42, K of them < 2^53 for K <= 2048
KARATSUBA_MAX_CONTRACTION = (1 << 53) >> (2 * (LIMB_BITS + 1))
KARATSUBA_MIN_CONTRACTION = 256             # below it the output's extra recombination costs more
PRIME_LO_BITS = 59                          # primes in [2^59, 2^60)


class Pole(ZeroDivisionError):
    """A division by a value that is 0 mod p at the sampled point: resample."""


def _flat(x):
    """x as a flat view when it is C-contiguous and large enough for the parallel loops, else None."""
    return x.reshape(-1) if x.size >= mk.PARALLEL_MIN and x.flags.c_contiguous else None


class ModP:
    """Vectorised arithmetic mod one prime p (p in [2^59, 2^60)) on int64 arrays of residues."""

    def __init__(self, p: int):
        if not (2 ** PRIME_LO_BITS <= p < 2 ** (PRIME_LO_BITS + 1)):
            raise ValueError("the modular backend needs a prime in [2^59, 2^60)")
        self.p = p
        self._p = np.int64(p)
        self.inv_p = 1.0 / p
        self._r60 = np.int64(pow(2, 3 * LIMB_BITS, p))
        self._buffers: dict[str, np.ndarray] = {}
        self.poles = 0                         # poles raised: a spec that swallows one is refused

    # ---- elementwise
    def add(self, a, b):
        return mk.addmod(a, b, self._p)

    def sub(self, a, b):
        return mk.submod(a, b, self._p)

    def neg(self, a):
        return mk.submod(np.int64(0), a, self._p)

    def mul(self, a, b):
        """a * b mod p for residues a, b (module docstring); mul_scalar's range for a."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        if b.ndim == 0 and a.ndim:
            return self._mul_by(a, b)
        if a.ndim == 0 and b.ndim:
            return self._mul_by(b, a)
        fa, fb = _flat(a), _flat(b)
        if fa is not None and fb is not None and a.shape == b.shape:
            out = np.empty(a.shape, dtype=np.int64)
            mk.run(mk.mulmod_flat, a.size, fa, fb, out.reshape(-1), self._p, self.inv_p)
            return out
        return mk.mulmod(a, b, self._p, self.inv_p)

    def mul_scalar(self, a, s: int):
        """a * s mod p for a constant s and any int64 a in [0, 2^62): a need not be reduced first."""
        return self._mul_by(np.asarray(a, dtype=np.int64), np.int64(int(s) % self.p))

    def _mul_by(self, a, s):
        fa = _flat(a)
        if fa is None:
            return mk.mulmod(a, s, self._p, self.inv_p)
        out = np.empty(a.shape, dtype=np.int64)
        mk.run(mk.mulmod_scalar_flat, a.size, fa, s, out.reshape(-1), self._p, self.inv_p)
        return out

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
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        if K == 0 or 0 in shape:                           # an empty sum, or nothing to sum
            return np.zeros(shape, dtype=np.int64)
        karatsuba = K >= KARATSUBA_MIN_CONTRACTION
        limit = KARATSUBA_MAX_CONTRACTION if karatsuba else MAX_CONTRACTION
        step = -(-K // -(-K // limit))                     # equal chunks of at most the limit
        chunk = self._karatsuba_chunk if karatsuba else self._matmul_chunk
        total = None
        for start in range(0, K, step):
            part = chunk(a[..., start:start + step], b[..., start:start + step, :])
            total = part if total is None else self.add(total, part)
        return total

    def _scratch(self, role: str, shape: tuple) -> np.ndarray:
        """A float64 work array of ``shape`` for one role in a matmul chunk (an operand's limbs, the
        dgemm's product), reused by the next chunk: a fresh array of a GB pays its page faults on
        first touch, every time -- up to seconds on a busy machine. Never returned to a caller."""
        n = int(np.prod(shape))
        buf = self._buffers.get(role)
        if buf is None or buf.size < n:
            buf = self._buffers[role] = np.empty(n)
        return buf[:n].reshape(shape)

    def _shifted(self, x) -> list:
        """x, 2^20 x, 2^40 x mod p."""
        return [x] + [self.mul_scalar(x, pow(2, LIMB_BITS * i, self.p)) for i in range(1, LIMBS)]

    def _matmul_chunk(self, a, b):
        """One exact chunk (K <= MAX_CONTRACTION) as ONE dgemm with the smaller operand pre-shifted."""
        m, K, n = a.shape[-2], a.shape[-1], b.shape[-1]
        if b.size <= a.size:
            # [a_0 a_1 a_2] (m x 3K) @ [b^(0)_j; b^(1)_j; b^(2)_j] (3K x n) = D_j, the j stacked in front
            b = b.reshape((1,) * (a.ndim - b.ndim) + b.shape)      # so the stacked j cannot meet a's batch
            A = self._scratch("a", a.shape[:-1] + (LIMBS * K,))
            for i in range(LIMBS):
                mk.limb(a, LIMB_BITS * i, out=A[..., i * K:(i + 1) * K])
            B = self._scratch("b", (LIMBS,) + b.shape[:-2] + (LIMBS * K, n))
            for i, shifted in enumerate(self._shifted(b)):
                for j in range(LIMBS):
                    mk.limb(shifted, LIMB_BITS * j, out=B[j, ..., i * K:(i + 1) * K, :])
            batch = np.broadcast_shapes(A.shape[:-2], B.shape[1:-2])
            D = np.matmul(A, B, out=self._scratch("product", (LIMBS,) + batch + (m, n)))
            out_shape = D.shape[1:]
            D = D.reshape(1, LIMBS, -1)
        else:
            # the mirror image: rows i, columns j: a^(j)_i (3m x 3K) @ [b_0; b_1; b_2]; row block i = D_i
            A = self._scratch("a", a.shape[:-2] + (LIMBS * m, LIMBS * K))
            for j, shifted in enumerate(self._shifted(a)):
                for i in range(LIMBS):
                    mk.limb(shifted, LIMB_BITS * i, out=A[..., i * m:(i + 1) * m, j * K:(j + 1) * K])
            B = self._scratch("b", b.shape[:-2] + (LIMBS * K, n))
            for i in range(LIMBS):
                mk.limb(b, LIMB_BITS * i, out=B[..., i * K:(i + 1) * K, :])
            batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
            D = np.matmul(A, B, out=self._scratch("product", batch + (LIMBS * m, n)))
            out_shape = D.shape[:-2] + (m, n)
            D = D.reshape(-1, LIMBS, m * n)
        del A, B
        out = np.empty(out_shape, dtype=np.int64)
        mk.run(mk.recombine3_flat, out.size, D, out.reshape(D.shape[0], -1), self._p, self.inv_p)
        return out

    def _karatsuba_chunk(self, a, b):
        """One exact chunk (K <= KARATSUBA_MAX_CONTRACTION) of a long contraction: the 20-bit limbs of
        both sides, multiplied as polynomials in 2^20 by Karatsuba -- six dgemms (one batched call), not
        the nine of the pre-shifted product -- and the five diagonals recombined."""
        nd = max(a.ndim, b.ndim)                       # so the stacked six cannot meet a batch axis
        operands = []
        for role, x in (("a", a), ("b", b)):
            x = np.ascontiguousarray(x.reshape((1,) * (nd - x.ndim) + x.shape))
            X = self._scratch(role, (6,) + x.shape)
            mk.run(mk.karatsuba_operand, x.size, x.reshape(-1), X.reshape(6, -1))
            operands.append(X)
        A, B = operands
        batch = np.broadcast_shapes(A.shape[1:-2], B.shape[1:-2])
        P = np.matmul(A, B, out=self._scratch("product", (6,) + batch + (A.shape[-2], B.shape[-1])))
        del operands, A, B
        out = np.empty(P.shape[1:], dtype=np.int64)
        mk.run(mk.karatsuba5_flat, out.size, P.reshape(6, -1), out.reshape(-1), self._p, self.inv_p, self._r60)
        return out

    def matmul_sum(self, pairs):
        """sum_i a_i @ b_i mod p as one contraction (the a_i side by side, the b_i stacked)."""
        a = np.concatenate([np.asarray(x, dtype=np.int64) for x, _ in pairs], axis=-1)
        b = np.concatenate([np.asarray(y, dtype=np.int64) for _, y in pairs], axis=-2)
        return self.matmul(a, b)
