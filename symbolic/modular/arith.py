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
- a matmul runs in blocks of output rows, columns and batch entries (``ModP._contract``), each
  operand's block at most BLOCK residues: its limb planes (three to nine times that in float64) stay
  small and in cache, whatever the matmul's size, and a block of one operand is reused by every block
  of the other it meets. Blocks and chunks only split the sum: every partial sum is the same integer.
- sums split entries into 31-bit halves, so 2^32 terms fit int64.
- inverses by Montgomery's trick (``kernels.inv_flat``): prefix products, one Fermat inverse a^(p-2)
  per run of entries, three products per entry.

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
KARATSUBA_MIN_CONTRACTION = 32              # below it the output's extra recombination costs about as much
PRIME_LO_BITS = 59                          # primes in [2^59, 2^60)
BLOCK = 1 << 20                             # entries of one operand's block in a matmul (``_contract``)


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
        mk.run(mk.mulmod_scalar_flat, a.size, fa, np.int64(s), out.reshape(-1), self._p, self.inv_p)
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
        """1 / a mod p (module docstring); a value that is 0 mod p raises Pole."""
        a = np.asarray(a, dtype=np.int64)
        if np.any(a == 0):
            self.poles += 1
            raise Pole("division by a value that is 0 mod p at the sampled point")
        flat = np.ascontiguousarray(a).reshape(-1)
        out = np.empty(a.shape, dtype=np.int64)
        mk.run(mk.inv_flat, a.size, flat, out.reshape(-1), self._p, self.inv_p, np.int64(self.p - 2))
        return out

    def sum(self, a, axis, keepdims=False):
        """Sum mod p without overflow: 31-bit halves summed separately (2^32 terms fit int64) -- in one
        pass (``kernels.split_sums``) where the summed axes are the trailing axes of a contiguous array."""
        a = np.asarray(a, dtype=np.int64)
        axes = tuple(range(a.ndim)) if axis is None else tuple(sorted(x % a.ndim for x in np.atleast_1d(axis)))
        kept = a.ndim - len(axes)
        if a.size and a.flags.c_contiguous and axes == tuple(range(kept, a.ndim)):
            rows = a.reshape(-1, int(np.prod(a.shape[kept:])))
            lo, hi = np.empty(rows.shape[0], dtype=np.int64), np.empty(rows.shape[0], dtype=np.int64)
            mk.run(mk.split_sums, a.size, rows, lo, hi)
            shape = a.shape[:kept] + ((1,) * len(axes) if keepdims else ())
            lo, hi = lo.reshape(shape)[()], hi.reshape(shape)[()]
        else:
            lo = np.sum(a & 0x7FFFFFFF, axis=axis, keepdims=keepdims)
            hi = np.sum(a >> 31, axis=axis, keepdims=keepdims)
        return self.add(self.mul_scalar(np.mod(hi, self.p), 1 << 31), np.mod(lo, self.p))

    # ---- matmul
    def matmul(self, a, b):
        """a @ b mod p, exactly, with float64 BLAS (module docstring); contractions longer than
        MAX_CONTRACTION (KARATSUBA_MAX_CONTRACTION) are split into equal chunks. ``a`` and ``b`` may be
        tuples of arrays, side by side and stacked: sum_i a_i @ b_i as one contraction (``matmul_sum``)."""
        if not isinstance(a, tuple):
            a, b = (a,), (b,)
        a = tuple(np.asarray(x, dtype=np.int64) for x in a)
        b = tuple(np.asarray(y, dtype=np.int64) for y in b)
        if len(a) == 1 and (a[0].ndim == 1 or b[0].ndim == 1):
            vec_a, vec_b = a[0].ndim == 1, b[0].ndim == 1
            out = self.matmul(a[0][None, :] if vec_a else a[0], b[0][:, None] if vec_b else b[0])
            if vec_a:
                out = out[..., 0, :]
            if vec_b:
                out = out[..., 0]
            return out
        K = sum(x.shape[-1] for x in a)
        batch = np.broadcast_shapes(*[x.shape[:-2] for x in a + b])
        shape = batch + (a[0].shape[-2], b[0].shape[-1])
        if K == 0 or 0 in shape:                           # an empty sum, or nothing to sum
            return np.zeros(shape, dtype=np.int64)
        karatsuba = K >= KARATSUBA_MIN_CONTRACTION
        limit = KARATSUBA_MAX_CONTRACTION if karatsuba else MAX_CONTRACTION
        step = -(-K // -(-K // limit))                     # equal chunks of at most the limit
        return self._contract(a, b, shape, step, karatsuba)

    def matmul_sum(self, pairs):
        """sum_i a_i @ b_i mod p as one contraction (the a_i side by side, the b_i stacked), each a_i's
        limbs written straight into the dgemm's operands (no concatenated copy); the a_i, b_i have at
        least two axes."""
        return self.matmul(tuple(x for x, _ in pairs), tuple(y for _, y in pairs))

    def _scratch(self, role: str, shape: tuple, dtype=np.float64) -> np.ndarray:
        """A work array of ``shape`` for one role in a matmul block (an operand's limbs, the dgemm's
        product), reused by the next block and the next matmul: a fresh array pays its page faults on
        first touch, every time. Never returned to a caller."""
        n = int(np.prod(shape))
        buf = self._buffers.get(role)
        if buf is None or buf.size < n or buf.dtype != dtype:
            buf = self._buffers[role] = np.empty(n, dtype=dtype)
        return buf[:n].reshape(shape)

    def _contract(self, a: tuple, b: tuple, shape: tuple, step: int, karatsuba: bool):
        """sum_i a_i @ b_i (contraction K = sum of the a_i's last axes) into a new array of ``shape``, in
        contraction chunks of ``step`` and blocks of output rows, columns and batch entries whose
        operands hold at most BLOCK entries each: the work arrays stay that small (a block's limbs are
        a few times its residues) and in cache, however large the matmul. Every block is exact, and a
        chunk after the first is added mod p to what the earlier ones left in the output."""
        batch, (m, n) = shape[:-2], shape[-2:]
        # one batch axis G: a view, but where a broadcast batch axis cannot merge with another (a copy)
        a = [np.broadcast_to(x, batch + x.shape[-2:]).reshape((-1,) + x.shape[-2:]) for x in a]
        b = [np.broadcast_to(y, batch + y.shape[-2:]).reshape((-1,) + y.shape[-2:]) for y in b]
        out = np.empty((a[0].shape[0], m, n), dtype=np.int64)
        o = out
        if not karatsuba and n > m:
            # the pre-shifted side (nine limb planes) is the smaller one: (a b)^T = b^T a^T
            a, b = [y.transpose(0, 2, 1) for y in b], [x.transpose(0, 2, 1) for x in a]
            o, m, n = out.transpose(0, 2, 1), n, m
        widths = [x.shape[-1] for x in a]
        K, G = sum(widths), o.shape[0]
        rows = max(1, min(m, BLOCK // step))
        cols = max(1, min(n, BLOCK // step, BLOCK // rows))
        group = 1 if rows < m or cols < n else max(1, BLOCK // max(m * step, step * n, m * n))
        block = self._karatsuba_block if karatsuba else self._preshifted_block
        for g in range(0, G, group):
            gs = slice(g, g + group)
            for c in range(0, n, cols):
                cs = slice(c, c + cols)
                for k in range(0, K, step):
                    pieces = list(_pieces(widths, k, min(K, k + step)))
                    right = [(b[i][gs, lo:hi, cs], off, hi - lo) for i, lo, hi, off in pieces]
                    bop = None
                    for r in range(0, m, rows):
                        rs = slice(r, r + rows)
                        left = [(a[i][gs, rs, lo:hi], off, hi - lo) for i, lo, hi, off in pieces]
                        bop = block(left, right, bop, min(step, K - k), o[gs, rs, cs], k > 0)
        return out.reshape(shape)

    def _preshifted_block(self, left, right, bop, Kc: int, out, accumulate: bool):
        """One block of a short contraction (Kc <= MAX_CONTRACTION) as ONE dgemm:
        [a_0 a_1 a_2] (R x 3Kc) @ [[b^(i)_j]] (3Kc x 3N), row block i holding b^(i) = 2^(20 i) b mod p,
        column block j its limb j; output column block j is D_j. ``left``, ``right``: (piece, offset,
        width) of the chunk's columns of a and rows of b; ``bop``: b's planes of this chunk, built by the
        block before (the same chunk and columns) or None. Returns them for the next block."""
        G, R = out.shape[0], out.shape[1]
        N = out.shape[2]
        if bop is None:
            bop = self._scratch("b", (G, LIMBS * Kc, LIMBS * N))
            planes = bop.reshape(G, LIMBS, Kc, LIMBS, N).transpose(1, 3, 0, 2, 4)
            for y, off, w in right:
                mk.run(mk.shifted_limb_planes, y.size, y, planes[:, :, :, off:off + w, :], self._p, self.inv_p)
        aop = self._scratch("a", (G, R, LIMBS * Kc))
        planes = aop.reshape(G, R, LIMBS, Kc).transpose(2, 0, 1, 3)
        for x, off, w in left:
            mk.run(mk.limb_planes, x.size, x, planes[..., off:off + w])
        D = np.matmul(aop, bop, out=self._scratch("product", (G, R, LIMBS * N)))
        mk.run(mk.recombine3_planes, out.size, D.reshape(G, R, LIMBS, N).transpose(2, 0, 1, 3), out,
               self._p, self.inv_p, accumulate)
        return bop

    def _karatsuba_block(self, left, right, bop, Kc: int, out, accumulate: bool):
        """One block of a long contraction (Kc <= KARATSUBA_MAX_CONTRACTION): the 20-bit limbs of both
        sides, multiplied as polynomials in 2^20 by Karatsuba -- six dgemms (one batched call), not the
        nine of the pre-shifted product -- and the five diagonals recombined. As ``_preshifted_block``."""
        G, R, N = out.shape
        if bop is None:
            bop = self._karatsuba_planes("b", right, (G, Kc, N), 1)
        aop = self._karatsuba_planes("a", left, (G, R, Kc), 2)
        P = np.matmul(aop, bop, out=self._scratch("product", (6, G, R, N)))
        mk.run(mk.karatsuba5_planes, out.size, P, out, self._p, self.inv_p, self._r60, accumulate)
        return bop

    def _karatsuba_planes(self, role: str, pieces: list, shape: tuple, axis: int):
        """The six Karatsuba planes, (6,) + ``shape``, of one operand's block made of ``pieces`` (piece,
        offset, width) along ``axis``, the contraction. Several pieces, or a strided one, are first
        copied side by side into one contiguous block: the loop runs three times faster on contiguous
        arrays than on strided ones (``kernels``), far more than the copy costs."""
        planes = self._scratch(role, (6,) + shape)
        x = pieces[0][0]
        if len(pieces) > 1 or not x.flags.c_contiguous:
            x = self._scratch(f"{role} residues", shape, np.int64)
            for y, off, w in pieces:
                x[(slice(None),) * axis + (slice(off, off + w),)] = y
        mk.run(mk.karatsuba_planes, x.size, x, planes)
        return planes


def _pieces(widths: list, lo: int, hi: int):
    """(index, first, end, offset) of each segment's columns within [lo, hi) of the segments laid side
    by side (widths given), the offset counted from lo."""
    start = 0
    for i, w in enumerate(widths):
        first, end = max(lo, start), min(hi, start + w)
        if first < end:
            yield i, first - start, end - start, first - lo
        start += w
