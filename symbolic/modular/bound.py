"""Degree and coefficient-size bounds of the modular backend's arrays, denominators by provenance.

Every entry of every array the modular backend computes is, as a function of the independent
variables (the leaves, the atoms, sqrt(pi) and the algebraic constants), a quotient

    v = N_v / prod_c  f_c[I_c(entry)] ** e_c

where N_v is a polynomial with deg N_v <= n and |N_v|_1 <= 2^h (integer coefficients), and each
*denominator class* c is a list of fixed polynomials f_c[0], f_c[1], ... (deg <= ``deg``,
|f|_1 <= 2^``bits``) together with an index array I_c (broadcastable to the array's shape) that says
which of them divides which entry. The classes are born in three places: an inversion (``inv``: the
numerators of the inverted entries, one per entry, a fresh source id per call), a rational constant's
integer denominator (source ``("int", q)``), and negative powers of sqrt(pi). Tracking the *index*
and not only a count is what keeps a denominator shared by many entries (a softmax row's 1/Z, a
LayerNorm row's 1/sqrt(var + eps)) from being multiplied in again each time those entries are
combined: two entries with the same (source, index) have the same factor, so their sum needs it once.

The rules, each an induction step of the invariant above (d = sum e deg, k = sum e bits):

- a * b: N = N_a N_b, the classes' exponents added (equal source and index: the same factor);
- a + b: over the least common multiple L of the two denominators (the union of the classes, the
  larger exponent where they are equal): N = N_a (L / D_a) + N_b (L / D_b), so
  deg N <= max(n_a + d - d_a, n_b + d - d_b) and |N|_1 <= 2^(max(h_a + k - k_a, h_b + k - k_b) + 1);
- a sum of K entries over some axes: a class whose index does not vary along them is common to all
  terms; one that varies contributes the product of its distinct factors met along them (at most
  the most distinct indices at one position of the other axes), a new class indexed by the remaining
  axes it varies along (its source names the class and the axes: the same product, the same source);
  then deg N <= n + d' - d and |N|_1 <= 2^(h + k' - k) K;
- 1 / a: the new denominator is N_a itself (one factor per entry of a, a fresh source), the new
  numerator is a's denominator: (n, h) = (d_a, k_a);
- reshapes, transposes, slices, broadcasts and repeats move the index arrays with the values.

A declared denominator may be a multiple of the true one (a union instead of a true lcm, a count of
indices instead of distinct factors): the numerator is then multiplied by the same extra factors,
which the rules above count, so every bound stays an upper bound. ``symbolic.modular`` turns the
residual's (deg N, deg D, log2 |N|_1, log2 |D|_1) into the false-pass probability.
"""
from __future__ import annotations

import hashlib
import itertools
import math
from fractions import Fraction

import numpy as np

_SOURCES = itertools.count(1)


def fresh_source() -> int:
    return next(_SOURCES)


def _key(src, idx: np.ndarray):
    if idx.size <= 1:
        return (src, idx.shape, int(idx.ravel()[0]) if idx.size else None)
    digest = hashlib.blake2b(np.ascontiguousarray(idx).tobytes(), digest_size=16).digest()
    return (src, idx.shape, digest)


def _rekey(key, idx: np.ndarray, size: int):
    """The key of ``idx``, made from an index array of ``size`` entries keyed ``key`` by adding or
    dropping unit axes: the same entries in the same order, so the same bytes -- no second hash."""
    return (key[0], idx.shape, key[2]) if idx.size == size else _key(key[0], idx)


def reduce_index(x: np.ndarray) -> np.ndarray:
    """x with every axis along which it does not vary cut to size 1 (broadcast axes for free; a
    materialised copy is checked entry by entry, so a repeat or a reshape does not lose sharing)."""
    x = np.asarray(x)
    if x.ndim == 0 or x.size == 0:
        return x
    cut = tuple(slice(0, 1) if (x.shape[a] == 1 or x.strides[a] == 0) else slice(None) for a in range(x.ndim))
    x = x[cut]
    if x.size > 1:
        for a in range(x.ndim):
            if x.shape[a] > 1:
                first = x.take([0], axis=a)
                if np.array_equal(x, np.broadcast_to(first, x.shape)):
                    x = first
    return x


class Bound:
    """(n, h) of the numerator and the denominator classes {key: (index, e, deg, bits)}."""

    __slots__ = ("n", "h", "cls")

    def __init__(self, n, h, cls=None):
        self.n = float(n)
        self.h = float(h)
        self.cls = cls or {}

    @property
    def d(self) -> float:
        return float(sum(e * deg for _, e, deg, _ in self.cls.values()))

    @property
    def k(self) -> float:
        return float(sum(e * bits for _, e, _, bits in self.cls.values()))

    def numbers(self) -> tuple:
        """(deg N, deg D, log2 |N|_1, log2 |D|_1) of every entry."""
        return (self.n, self.d, self.h, self.k)

    def __repr__(self):
        return f"Bound(n={self.n:g}, d={self.d:g}, h={self.h:.1f}, k={self.k:.1f}, classes={len(self.cls)})"


LEAF = Bound(1, 0)
ATOM = Bound(1, 0)
ONE = Bound(0, 0)


def const(q) -> Bound | None:
    """A rational constant: its numerator as the coefficient, its denominator as a class."""
    q = Fraction(q)
    if q == 0:
        return None
    cls = {}
    if q.denominator > 1:
        _add_class(cls, ("int", q.denominator), np.zeros((), np.int64), 1, 0.0, math.log2(q.denominator))
    return Bound(0, math.log2(abs(q.numerator)), cls)


def constant_class(src, deg, bits, e=1) -> Bound:
    """1 / (a fixed polynomial of degree ``deg``): sqrt(pi)^-e and the like."""
    cls = {}
    _add_class(cls, src, np.zeros((), np.int64), e, float(deg), float(bits))
    return Bound(0, 0, cls)


def _add_class(cls: dict, src, idx, e, deg, bits, how=max, key=None):
    """Add a class (``key``: its key where the caller has it, ``idx`` unchanged -- hashing a large index
    array again is most of a small op's cost)."""
    key = _key(src, idx) if key is None else key
    old = cls.get(key)
    if old is None:
        cls[key] = (idx, e, deg, bits)
    else:
        cls[key] = (idx, how(old[1], e), max(old[2], deg), max(old[3], bits))


def align(b: Bound | None, ndim: int) -> Bound | None:
    """Index arrays with ``ndim`` axes (numpy's broadcasting: new axes on the left)."""
    if b is None or not b.cls or all(idx.ndim == ndim for idx, *_ in b.cls.values()):
        return b
    cls = {}
    for key, (idx, e, deg, bits) in b.cls.items():
        if idx.ndim == ndim:
            _add_class(cls, key[0], idx, e, deg, bits, key=key)
            continue
        if idx.ndim > ndim:
            moved = idx.reshape(idx.shape[idx.ndim - ndim:])       # only unit axes are dropped
        else:
            moved = idx.reshape((1,) * (ndim - idx.ndim) + idx.shape)
        _add_class(cls, key[0], moved, e, deg, bits, key=_rekey(key, moved, idx.size))
    return Bound(b.n, b.h, cls)


def mul(a: Bound | None, b: Bound | None, ndim: int) -> Bound | None:
    if a is None or b is None:
        return None
    a, b = align(a, ndim), align(b, ndim)
    cls = dict(a.cls)
    for key, (idx, e, deg, bits) in b.cls.items():
        _add_class(cls, key[0], idx, e, deg, bits, how=lambda x, y: x + y, key=key)
    return Bound(a.n + b.n, a.h + b.h, cls)


def add(a: Bound | None, b: Bound | None, ndim: int) -> Bound | None:
    """Over the union of the two denominators (a multiple of their lcm)."""
    if a is None:
        return align(b, ndim)
    if b is None:
        return align(a, ndim)
    a, b = align(a, ndim), align(b, ndim)
    cls = dict(a.cls)
    for key, (idx, e, deg, bits) in b.cls.items():
        _add_class(cls, key[0], idx, e, deg, bits, key=key)
    out = Bound(0, 0, cls)
    d, k = out.d, out.k
    out.n = max(a.n + d - a.d, b.n + d - b.d)
    out.h = max(a.h + k - a.k, b.h + k - b.k) + 1.0
    return out


def join(bounds, ndim: int) -> Bound | None:
    """One bound valid for every entry of several arrays laid side by side (where, concatenate)."""
    out = None
    for b in bounds:
        out = add(out, b, ndim) if out is not None else align(b, ndim)
    return out


def pow_(b: Bound | None, k: int) -> Bound | None:
    if k == 0:
        return ONE
    if b is None:
        return None
    return Bound(k * b.n, k * b.h, {key: (idx, k * e, deg, bits) for key, (idx, e, deg, bits) in b.cls.items()})


def inv(a: Bound, shape) -> Bound:
    """1 / a: a's numerator, one factor per entry, becomes a fresh class; a's denominator the numerator."""
    idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    cls = {}
    _add_class(cls, fresh_source(), idx, 1, a.n, a.h)
    return Bound(a.d, a.k, cls)


def fresh_per_entry(n, h, deg, bits, shape) -> Bound:
    """A value N / f with one new denominator f per entry (sin, cos as rational functions of u)."""
    idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    cls = {}
    _add_class(cls, fresh_source(), idx, 1, float(deg), float(bits))
    return Bound(n, h, cls)


def sum_axes(b: Bound | None, shape, axes, keepdims: bool = False) -> Bound | None:
    """The bound of the sum over ``axes`` of an array of ``shape``."""
    ndim = len(shape)
    axes = tuple(sorted(set(a % ndim for a in axes))) if ndim else ()
    K = int(np.prod([shape[a] for a in axes], dtype=np.int64)) if axes else 1
    if b is None or K == 0:
        return None
    b = align(b, ndim)
    kept = tuple(a for a in range(ndim) if a not in axes)

    def drop(idx):
        return idx if keepdims else idx.reshape(tuple(idx.shape[a] for a in kept))

    cls = {}
    for key, (idx, e, deg, bits) in b.cls.items():
        vary = [a for a in axes if idx.shape[a] > 1]
        if not vary:                        # the summed axes are unit axes of idx
            kept_idx = drop(idx)
            _add_class(cls, key[0], kept_idx, e, deg, bits, key=_rekey(key, kept_idx, idx.size))
            continue
        count = _distinct_along(idx, vary)
        rest = tuple(1 if a in axes else idx.shape[a] for a in range(ndim))
        new = np.arange(int(np.prod(rest, dtype=np.int64)), dtype=np.int64).reshape(rest)
        # the product over the distinct factors met along the summed axes depends only on the class
        # (its source and index) and on those axes: the same product has the same source everywhere
        _add_class(cls, ("prod", key, tuple(vary)), drop(new), e, count * deg, count * bits)
    out = Bound(0, 0, cls)
    out.n = b.n + out.d - b.d
    out.h = b.h + out.k - b.k + math.log2(K) if K > 1 else b.h + out.k - b.k
    return out


def _distinct_along(idx: np.ndarray, vary) -> int:
    """The most distinct indices met along the axes ``vary`` at any one position of the others (the
    product of their sizes where that is cheaper to state than to count)."""
    size = int(np.prod([idx.shape[a] for a in vary], dtype=np.int64))
    if idx.size > 1 << 24 or size <= 1:
        return size
    x = np.moveaxis(idx, list(vary), list(range(idx.ndim - len(vary), idx.ndim))).reshape(-1, size)
    x = np.sort(x, axis=1)
    return int((np.diff(x, axis=1) != 0).sum(axis=1).max()) + 1


def remap(b: Bound | None, fn, in_shape) -> Bound | None:
    """The bound after a structural map ``fn`` (a reshape, a transpose, a slice, a repeat) of an array
    of ``in_shape``: the index arrays are mapped the same way."""
    if b is None or not b.cls:
        return b
    b = align(b, len(in_shape))
    cls = {}
    for key, (idx, e, deg, bits) in b.cls.items():
        moved = reduce_index(np.asarray(fn(np.broadcast_to(idx, in_shape))))
        _add_class(cls, key[0], moved, e, deg, bits)
    return Bound(b.n, b.h, cls)


def unit_axes(b: Bound | None, fn) -> Bound | None:
    """``fn`` adds or removes unit axes of the index arrays only (no broadcast needed)."""
    if b is None or not b.cls:
        return b
    cls = {}
    for key, (idx, e, deg, bits) in b.cls.items():
        moved = fn(idx)
        _add_class(cls, key[0], moved, e, deg, bits, key=_rekey(key, moved, idx.size))
    return Bound(b.n, b.h, cls)


def matmul(a: Bound | None, b: Bound | None, a_ndim: int, b_ndim: int, a_shape, b_shape) -> Bound | None:
    """sum_k a[..., i, k] b[..., k, j]: the product's classes on (..., i, k, j), then the sum over k."""
    if a is None or b is None:
        return None
    a, b = align(a, a_ndim), align(b, b_ndim)
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if a_ndim == 1:
        a, a_shape = unit_axes(a, lambda x: x[None, :]), (1,) + a_shape
    if b_ndim == 1:
        b, b_shape = unit_axes(b, lambda x: x[:, None]), b_shape + (1,)
    a = unit_axes(a, lambda x: x[..., None])                    # (..., i, k, 1)
    b = unit_axes(b, lambda x: x[..., None, :, :])              # (..., 1, k, j)
    full = np.broadcast_shapes(a_shape + (1,), b_shape[:-2] + (1,) + b_shape[-2:])
    out = sum_axes(mul(a, b, len(full)), full, (len(full) - 2,))
    if b_ndim == 1:
        out = unit_axes(out, lambda x: x[..., 0])
    if a_ndim == 1:
        out = unit_axes(out, lambda x: x[..., 0, :] if b_ndim != 1 else x[..., 0])
    return out
