"""numpy's writes on the arrays of the shape-polymorphic trace -- ``x[key] = v``, the in-place
operators, ``np.add.at`` -- and who sees them (numpy's aliasing), for every size at once.

A ``SymArray`` is a value made of immutable pieces. A write gives the written array new pieces, on the
same Python object, so an alias (``w = z``) sees it, as in numpy. The new pieces are the old ones
outside the written box, cut by numpy's own slices, and the value's pieces inside it, placed by the
box's affine map per axis (entry u of the value at start + step u): the written array is again a
function of its indices for every size, with no test of a size or a value.

Views. A basic index of an array is a view in numpy: the result remembers its parent and key
(``view``), a write into it is a write into the parent at that key (up the chain to the array that
owns the entries), and every live view of a written array is read again from it at its next use. Other results that
numpy may make views of their base -- transpose, reshape, flip, broadcast_to, ... (``derived``) -- are
marked stale when their base is written: a write into one, or a use after the base changed, is refused
(``core.language.refuse_view_write``), never guessed. Writes into a spec's inputs, or views of them,
are refused as in every tier (``core.language.INPUT_WRITE``).
"""
from __future__ import annotations

import weakref

import numpy as np
import sympy as sp

from vjpcert.core import language
from vjpcert.core.registry import refuse
from vjpcert.symbolic.every_size.constructs import getitem, index_plan, positive_steps
from vjpcert.symbolic.every_size.gathers import advanced_parts, is_advanced, result_shape
from vjpcert.symbolic.every_size.sizes import Dim, same
from vjpcert.symbolic.every_size.symarray import (CONSTRUCTS, UFUNCS, Piece, SymArray, broadcast_to, lift)

VIEW, DERIVED = "view", "derived"


# ---------------------------------------------------------------------------- who sees a write
def _link(child: SymArray, parent: SymArray, kind: str, key=None) -> SymArray:
    if child is parent:
        child = child.clone()
    child._parent, child._kind, child._key = parent, kind, key
    if parent._children is None:
        parent._children = []
    # weak references, compared by identity (a WeakSet would compare arrays with ==, which is refused)
    parent._children.append(weakref.ref(child))
    return child


def view(out: SymArray, parent: SymArray, key) -> SymArray:
    """``out = parent[key]``: a view when the key is basic and leaves an array (numpy's ``x[0, 0]`` of a
    2-d array is a scalar, a copy), else a new array."""
    key = key if isinstance(key, tuple) else (key,)
    if is_advanced(key):
        return out
    if out.ndim == 0 and not any(k is Ellipsis or k is None for k in key):
        return out if out is not parent else out.clone()
    return _link(out, parent, VIEW, key)


def derived(out: SymArray, parent) -> SymArray:
    """``out``, a result numpy may make a view of ``parent`` (a transpose, a reshape, ...)."""
    return _link(out, parent, DERIVED) if isinstance(parent, SymArray) else out


def _refresh(A: SymArray) -> None:
    """Every live view of A to be read again from it at its next use (``SymArray.pieces``: a view the
    spec never uses again costs nothing); derived results marked stale."""
    live = [c for c in (r() for r in A._children or ()) if c is not None]
    A._children = [weakref.ref(c) for c in live] or None
    for child in live:
        if child._kind == VIEW and not A._stale:
            child._dirty = True
        else:
            child._stale = True
        _refresh(child)


def _target(A: SymArray, what: str) -> None:
    """Refuse a write into A where numpy's would reach an input, or where this tier cannot follow it."""
    chain, a = [], A
    while a is not None:
        chain.append(a)
        a = a._parent
    if chain[-1].input:
        language.refuse_input_write()
    if any(a._kind == DERIVED for a in chain[:-1]):
        language.refuse_view_write(f"{what} into the result of a reshape, transpose or other view")
    A.pieces                                   # a stale array refuses its use here


def _assign(A: SymArray, new: SymArray) -> None:
    """A's entries become new's (same shape), through A's parents when A is a view."""
    if A._kind == VIEW:
        _assign(A._parent, written(A._parent, A._key, new))
        return
    A._pieces = list(new.pieces)
    _refresh(A)


# ---------------------------------------------------------------------------- the written array
def _placed(P: Piece, axes) -> Piece:
    """Piece P of an array placed into a bigger one: ``axes[k]`` is ("box", start, step) for an axis of
    P's array (its entry u at start + step u), or ("at", c) for an axis it does not have (an index c:
    the piece gets the map (1, c, 1) there and ignores its local index)."""
    maps, own = [], []
    it = iter(P.maps)
    for k, ax in enumerate(axes):
        if ax[0] == "at":
            maps.append((1, ax[1], 1))
            continue
        a, b, z = next(it)
        _, start, step = ax
        maps.append((step * a, start + step * b, z))
        own.append(k)
    return Piece(maps, lambda idx, P=P, own=tuple(own): P.value(tuple(idx[k] for k in own)))


def written(A: SymArray, key, value) -> SymArray:
    """A new array: A with ``A[key] = value`` done, for a basic key (ints, slices of any step, None,
    Ellipsis); ``value`` broadcast to the box, as numpy does."""
    key = key if isinstance(key, tuple) else (key,)
    base, key, flipped = positive_steps(A, key)
    if flipped:                                  # write the reversed axes' box, then reverse them back
        return CONSTRUCTS["flip"](written(base, key, value), flipped)
    plan, shape = index_plan(A, key)
    V = lift(value)
    if A.boolean and not V.boolean:
        refuse("a write of values into a mask (numpy would cast them to bool: a comparison of values)")
    V = broadcast_to(V, tuple(shape))
    new_axes = [k for k, item in enumerate(plan) if item[0] == "new"]
    if new_axes:                                 # the value's axes for None in the key: size 1, dropped
        V = getitem(V, tuple(0 if item[0] == "new" else slice(None) for item in plan if item[0] != "at"))
    items = [item for item in plan if item[0] != "new"]
    inside = [("at", it[2]) if it[0] == "at" else ("box", it[2], it[4]) for it in items]
    pieces = [_placed(P, inside) for P in V.pieces]
    # the rest: for each axis k, the box on the axes before it, outside it on k, everything after it
    ctx = A.ctx
    for k, item in enumerate(items):
        S = A._shape[k]
        if item[0] == "at":
            c = item[2]
            outside = [(sp.Integer(0), c, 1), (c + 1, S, 1)]
        else:
            _, _, start, stop, step, _ = item
            if step == 1 and same(start, 0) and same(stop, S):
                continue
            outside = [(sp.Integer(0), start, 1)] + [(start + r, stop, step) for r in range(1, step)] + [(stop, S, 1)]
        before = [(it[2], it[2] + 1, 1) if it[0] == "at" else (it[2], it[3], it[4]) for it in items[:k]]
        for lo, hi, st in outside:
            if ctx.nonneg(lo - hi):              # provably empty
                continue
            box = before + [(lo, hi, st)] + [(sp.Integer(0), z, 1) for z in A._shape[k + 1:]]
            part = getitem(A, tuple(slice(_int(a), _int(b), s) for a, b, s in box))
            pieces += [_placed(P, [("box", a, s) for a, _, s in box]) for P in part.pieces]
    return SymArray(A._shape, pieces, A.boolean)


def _int(v):
    """A slice bound for numpy's own indexing: an int, or a size as a dim."""
    v = sp.sympify(v)
    return int(v) if v.is_Integer else Dim(v)


# ---------------------------------------------------------------------------- the spec's writes
def setitem(A: SymArray, key, value) -> None:
    language.check_call("setitem")
    _target(A, "a write in place")
    key = key if isinstance(key, tuple) else (key,)
    if not is_advanced(key):
        _assign(A, written(A, key, value))
        return
    keys, bshape, pos = advanced_parts(A, key)
    V = broadcast_to(lift(value), result_shape(A, key))
    new = A
    for t, k in zip(np.ndindex(*bshape), keys):       # in numpy's order: a repeated entry's last value stays
        new = written(new, k, _part(V, pos, t))
    _assign(A, new)


def _part(V: SymArray, pos: int, t: tuple) -> SymArray:
    """The value written at broadcast entry t: V's axes pos .. pos + len(t) - 1 fixed at t."""
    return getitem(V, (slice(None),) * pos + tuple(int(i) for i in t))


def add_at(A, key, values) -> None:
    """np.add.at: unbuffered, so an entry named twice gets both values."""
    language.check_call("add.at")
    if not isinstance(A, SymArray):
        refuse("np.add.at of traced values into a plain numpy array")
    _target(A, "np.add.at")
    key = key if isinstance(key, tuple) else (key,)
    if not is_advanced(key):
        _assign(A, written(A, key, getitem(A, key) + values))
        return
    keys, bshape, pos = advanced_parts(A, key)
    V = broadcast_to(lift(values), result_shape(A, key))
    new = A
    for t, k in zip(np.ndindex(*bshape), keys):
        new = written(new, k, getitem(new, k) + _part(V, pos, t))
    _assign(A, new)


def in_place(A: SymArray, other, name: str) -> SymArray:
    """``A op= other``: the result written into A itself (numpy keeps A's shape: a result that
    broadcasts to another shape is numpy's error)."""
    language.check_call("setitem")
    _target(A, "a write in place")
    new = UFUNCS[name](A, other)
    if len(new._shape) != len(A._shape) or not all(same(a, b) for a, b in zip(new._shape, A._shape)):
        refuse(f"an in-place {name} whose result has shape {tuple(map(str, new._shape))}, not the array's "
               f"{tuple(map(str, A._shape))} (numpy refuses it)")
    if A.boolean and not new.boolean:
        refuse("an in-place update of a mask with values (numpy would cast them to bool)")
    _assign(A, new)
    return A


CONSTRUCTS.update(view=view, derived=derived, setitem=setitem, in_place=in_place, add_at=add_at)
