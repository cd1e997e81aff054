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

How the classes are held is what makes a recurrence affordable. A gate's division at every step of a
GRU is a new class, so the state at step t has classes from all t steps before it, and an operation
that visited every class would make a run over T steps cost T^2 class visits (a GRU at T = 2048:
hours). The classes are therefore grouped by index array -- an operation that moves indices (a
reshape, a sum's product over an axis) acts once per index array, not once per class -- and each
group's sources are an immutable ``Sources`` of sorted integer ids with their (e, deg, bits) as
arrays, shared between bounds by reference: a step's state carries the classes of the steps before
it without copying them one by one, two groups merge by one array search, and a merge that adds
nothing returns the larger group itself. A source that is a key (a constant's denominator, the
product of a class over some axes) is interned to an id, so the same factor met twice is recognised
as one: the bounds are the ones a class-by-class walk would compute.
"""
from __future__ import annotations

import hashlib
import math
import operator
from fractions import Fraction

import numpy as np

_NEXT_SOURCE = [1]


def fresh_source(n: int = 1) -> int:
    """A new source id (the first of ``n`` consecutive new ones)."""
    out = _NEXT_SOURCE[0]
    _NEXT_SOURCE[0] += n
    return out


def _key(idx: np.ndarray):
    """The key of an index array: its shape and its entries (a digest of them above one entry)."""
    if idx.size <= 1:
        return (idx.shape, int(idx.ravel()[0]) if idx.size else None)
    digest = hashlib.blake2b(np.ascontiguousarray(idx).tobytes(), digest_size=16).digest()
    return (idx.shape, digest)


def _rekey(key, idx: np.ndarray, size: int):
    """The key of ``idx``, made from an index array of ``size`` entries keyed ``key`` by adding or
    dropping unit axes: the same entries in the same order, so the same bytes -- no second hash."""
    return (idx.shape, key[1]) if idx.size == size else _key(idx)


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


def _source_id(src) -> int:
    """An int for a source: a fresh source is one already; a constant's key ("int", sqrt(pi)) is
    interned, so that the same one met twice is the same factor (ids are never reused)."""
    if isinstance(src, int):
        return src
    out = _IDS.get(src)
    if out is None:
        out = _IDS[src] = fresh_source()
    return out


_IDS: dict = {}
_PRODUCTS: dict = {}        # (index key, axes) -> (sorted ids of the classes, the ids of their products)


def _product_ids(ids: np.ndarray, key, vary: tuple) -> np.ndarray:
    """The ids of the products, over the axes ``vary``, of the classes ``ids`` on the index keyed ``key``
    (interned like ``_source_id``'s keys, by array search)."""
    known, products_ = _PRODUCTS.get((key, vary), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    pos = np.searchsorted(known, ids)
    found = known[np.minimum(pos, len(known) - 1)] == ids if len(known) else np.zeros(len(ids), bool)
    out = np.empty(len(ids), np.int64)
    out[found] = products_[pos[found]]
    fresh = ids[~found]
    if len(fresh):
        out[~found] = fresh_source(len(fresh)) + np.arange(len(fresh), dtype=np.int64)
        where = pos[~found]
        _PRODUCTS[(key, vary)] = (np.insert(known, where, fresh), np.insert(products_, where, out[~found]))
    return out


def forget_products() -> None:
    """Drop the interned keys (between checks: a key met again later gets a new id, which can only
    count its factor twice -- a looser bound, never a smaller one)."""
    _IDS.clear()
    _PRODUCTS.clear()


class Sources:
    """The classes of one index array: sorted source ids and their (e, deg, bits), with the totals
    ``d`` = sum e deg and ``k`` = sum e bits. Never changed once built: bounds share them, so a
    recurrence's state, met at every step with the classes of all the steps before, is carried from
    one bound to the next by reference; two of them merge by array operations (a merge of a state
    with itself or with classes it has already costs a search, no copy)."""

    __slots__ = ("ids", "e", "deg", "bits", "d", "k", "memo")

    def __init__(self, ids, e, deg, bits):
        self.ids, self.e, self.deg, self.bits = ids, e, deg, bits
        self.d = float(np.dot(e, deg)) if len(ids) else 0.0
        self.k = float(np.dot(e, bits)) if len(ids) else 0.0
        self.memo = {}

    @classmethod
    def one(cls, src, e, deg, bits) -> "Sources":
        return cls(np.array([_source_id(src)], np.int64), np.array([e], float), np.array([deg], float),
                   np.array([bits], float))

    def __len__(self):
        return len(self.ids)


def _merge(a: Sources, b: Sources, how) -> Sources:
    """The classes of both (an entry's factor met in both: one factor, its exponent ``how`` of the
    two exponents -- the larger for a sum's common denominator, their sum for a product)."""
    if len(a) < len(b):
        a, b = b, a
    if not len(b):
        return a
    pos = np.searchsorted(a.ids, b.ids)
    at = np.minimum(pos, len(a) - 1)
    met = a.ids[at] == b.ids
    i, j = at[met], np.flatnonzero(met)
    e, deg, bits = a.e.copy(), a.deg.copy(), a.bits.copy()
    if how is max:
        if met.all() and ((a.e[i] >= b.e) & (a.deg[i] >= b.deg) & (a.bits[i] >= b.bits)).all():
            return a                        # b's classes are a's, none with a larger exponent
        e[i] = np.maximum(a.e[i], b.e[j])
    else:
        e[i] = a.e[i] + b.e[j]
    deg[i] = np.maximum(a.deg[i], b.deg[j])
    bits[i] = np.maximum(a.bits[i], b.bits[j])
    new = ~met
    if not new.any():
        return Sources(a.ids, e, deg, bits)
    where = pos[new]
    return Sources(np.insert(a.ids, where, b.ids[new]), np.insert(e, where, b.e[new]),
                   np.insert(deg, where, b.deg[new]), np.insert(bits, where, b.bits[new]))


def put(cls: dict, idx, sources: Sources, how=max, key=None) -> None:
    """Add the classes ``sources`` on index array ``idx`` to ``cls`` ({key: (idx, Sources)}; ``key``:
    idx's key where the caller has it -- hashing a large index array again is most of a small op's
    cost)."""
    if not len(sources):
        return
    key = _key(idx) if key is None else key
    old = cls.get(key)
    cls[key] = (idx, sources) if old is None else (old[0], _merge(old[1], sources, how))


def _one(src, idx, e, deg, bits) -> dict:
    return {_key(idx): (idx, Sources.one(src, e, float(deg), float(bits)))}


def products(sources: Sources, key, vary: tuple, count: int) -> Sources:
    """The classes of a product over the ``count`` distinct factors met along the axes ``vary`` of each
    class of ``sources`` (on the index array keyed ``key``). It depends only on the class (its source
    and index) and on those axes: the same product has the same source everywhere."""
    memo = (key, vary, count)
    out = sources.memo.get(memo)
    if out is None:
        ids = _product_ids(sources.ids, key, vary)
        order = np.argsort(ids, kind="stable")
        deg, bits = sources.deg, sources.bits
        out = sources.memo[memo] = Sources(ids[order], sources.e[order], (count * deg)[order],
                                           (count * bits)[order])
    return out


class Bound:
    """(n, h) of the numerator and the denominator classes, grouped by index array:
    {key: (index, Sources)}; never changed once built."""

    __slots__ = ("n", "h", "cls")

    def __init__(self, n, h, cls=None):
        self.n = float(n)
        self.h = float(h)
        self.cls = cls or {}

    @property
    def d(self) -> float:
        return float(sum(s.d for _, s in self.cls.values()))

    @property
    def k(self) -> float:
        return float(sum(s.k for _, s in self.cls.values()))

    def numbers(self) -> tuple:
        """(deg N, deg D, log2 |N|_1, log2 |D|_1) of every entry."""
        return (self.n, self.d, self.h, self.k)

    def __repr__(self):
        return (f"Bound(n={self.n:g}, d={self.d:g}, h={self.h:.1f}, k={self.k:.1f}, "
                f"classes={sum(len(s) for _, s in self.cls.values())})")


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
        cls = _one(("int", q.denominator), np.zeros((), np.int64), 1, 0.0, math.log2(q.denominator))
    return Bound(0, math.log2(abs(q.numerator)), cls)


def constant_class(src, deg, bits, e=1) -> Bound:
    """1 / (a fixed polynomial of degree ``deg``): sqrt(pi)^-e and the like."""
    return Bound(0, 0, _one(src, np.zeros((), np.int64), e, deg, bits))


def align(b: Bound | None, ndim: int) -> Bound | None:
    """Index arrays with ``ndim`` axes (numpy's broadcasting: new axes on the left)."""
    if b is None or not b.cls or all(idx.ndim == ndim for idx, _ in b.cls.values()):
        return b
    cls = {}
    for key, (idx, sources) in b.cls.items():
        if idx.ndim == ndim:
            put(cls, idx, sources, key=key)
            continue
        if idx.ndim > ndim:
            moved = idx.reshape(idx.shape[idx.ndim - ndim:])       # only unit axes are dropped
        else:
            moved = idx.reshape((1,) * (ndim - idx.ndim) + idx.shape)
        put(cls, moved, sources, key=_rekey(key, moved, idx.size))
    return Bound(b.n, b.h, cls)


def mul(a: Bound | None, b: Bound | None, ndim: int) -> Bound | None:
    if a is None or b is None:
        return None
    a, b = align(a, ndim), align(b, ndim)
    cls = dict(a.cls)
    for key, (idx, sources) in b.cls.items():
        put(cls, idx, sources, how=operator.add, key=key)
    return Bound(a.n + b.n, a.h + b.h, cls)


def add(a: Bound | None, b: Bound | None, ndim: int) -> Bound | None:
    """Over the union of the two denominators (a multiple of their lcm)."""
    if a is None:
        return align(b, ndim)
    if b is None:
        return align(a, ndim)
    a, b = align(a, ndim), align(b, ndim)
    cls = dict(a.cls)
    for key, (idx, sources) in b.cls.items():
        put(cls, idx, sources, key=key)
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
    return Bound(k * b.n, k * b.h, {key: (idx, _power(sources, k)) for key, (idx, sources) in b.cls.items()})


def _power(sources: Sources, k: int) -> Sources:
    out = sources.memo.get(("pow", k))
    if out is None:
        out = sources.memo[("pow", k)] = Sources(sources.ids, k * sources.e, sources.deg, sources.bits)
    return out


def inv(a: Bound, shape) -> Bound:
    """1 / a: a's numerator, one factor per entry, becomes a fresh class; a's denominator the numerator."""
    idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    return Bound(a.d, a.k, _one(fresh_source(), idx, 1, a.n, a.h))


def fresh_per_entry(n, h, deg, bits, shape) -> Bound:
    """A value N / f with one new denominator f per entry (sin, cos as rational functions of u)."""
    idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    return Bound(n, h, _one(fresh_source(), idx, 1, deg, bits))


def along(b: Bound, ndim: int, axes, keepdims: bool) -> dict:
    """The classes of ``b`` (index arrays of ``ndim`` axes) after a product over ``axes``: a
    class that does not vary along them is common to all the terms; one that varies contributes the
    product of its distinct factors met along them (at most the most distinct indices at one position
    of the other axes), a new class indexed by the remaining axes it varies along."""
    kept = tuple(a for a in range(ndim) if a not in axes)

    def drop(idx):
        return idx if keepdims else idx.reshape(tuple(idx.shape[a] for a in kept))

    cls = {}
    for key, (idx, sources) in b.cls.items():
        vary = tuple(a for a in axes if idx.shape[a] > 1)
        if not vary:                        # the summed axes are unit axes of idx
            kept_idx = drop(idx)
            put(cls, kept_idx, sources, key=_rekey(key, kept_idx, idx.size))
            continue
        count = _distinct_along(idx, vary)
        rest = tuple(1 if a in axes else idx.shape[a] for a in range(ndim))
        new = np.arange(int(np.prod(rest, dtype=np.int64)), dtype=np.int64).reshape(rest)
        put(cls, drop(new), products(sources, key, vary, count))
    return cls


def sum_axes(b: Bound | None, shape, axes, keepdims: bool = False) -> Bound | None:
    """The bound of the sum over ``axes`` of an array of ``shape``."""
    ndim = len(shape)
    axes = tuple(sorted(set(a % ndim for a in axes))) if ndim else ()
    K = int(np.prod([shape[a] for a in axes], dtype=np.int64)) if axes else 1
    if b is None or K == 0:
        return None
    b = align(b, ndim)
    out = Bound(0, 0, along(b, ndim, axes, keepdims))
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
    for idx, sources in b.cls.values():
        put(cls, reduce_index(np.asarray(fn(np.broadcast_to(idx, in_shape)))), sources)
    return Bound(b.n, b.h, cls)


def unit_axes(b: Bound | None, fn) -> Bound | None:
    """``fn`` adds or removes unit axes of the index arrays only (no broadcast needed)."""
    if b is None or not b.cls:
        return b
    cls = {}
    for key, (idx, sources) in b.cls.items():
        moved = fn(idx)
        put(cls, moved, sources, key=_rekey(key, moved, idx.size))
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
