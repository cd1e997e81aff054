"""numpy's aliasing for the modular backend's arrays: what a write into an array changes, and who sees it.

A ``ModArray`` made by a structural map of another (a basic slice, a transpose, an expand_dims, a
broadcast) remembers its parent and the map (``_parent``, ``_fn``), as a numpy view remembers its base.
A write (``x[key] = v``, ``x += v``, ``np.add.at``) goes to the *root* of the chain -- the array that owns
the entries -- at the root entries numpy itself selects: the chain of maps is run on the root's entry
numbers (``core.language.index_map``'s idea), so a strided slice of a transpose writes exactly where
numpy writes. The root's buffers are never changed in place (``Field.value`` may share them with other
arrays of the same computation): the root gets new buffers, a new computation id (so no cached value is
reused after a write), bounds joined over the old value and the written one (sound upper bounds for
``symbolic.modular.bound``), and every live view of it is recomputed from it.

What numpy decides by memory layout -- whether a reshape or a ravel is a view or a copy -- this backend
does not model: a write into such a result, or a use of one after its base was written, is refused
(``core.language.refuse_view_write``), never guessed. Writes into a spec's inputs (leaves) are refused.
"""
from __future__ import annotations

import hashlib
import weakref

import numpy as np

from vjpcert.core import language as lang
from vjpcert.core.registry import refuse
from vjpcert.symbolic.modular import bound as bnd

VIEW, MAYBE = "view", "maybe"          # always a view in numpy; a view or a copy by memory layout


def is_view(key, shape) -> bool:
    """Whether numpy's ``x[key]`` is a view of x (basic indexing) or a copy (advanced indexing), as
    numpy decides it: the key applied to a zero-stride array of the shape (no memory to speak of)."""
    z = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape, strides=(0,) * len(shape))
    return bool(np.may_share_memory(z[key], z))


def scalar_result(fn, x) -> bool | None:
    """Whether numpy's ``fn`` gives a scalar (True) or a 0-d array (False) on an operand like ``x``:
    asked of numpy on a stand-in of x's shape (a scalar where x is one; no memory to speak of)."""
    probe = np.int8(0) if x.ndim == 0 and x.scalar else \
        np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=x.shape, strides=(0,) * x.ndim)
    try:
        return isinstance(fn(probe), np.generic)
    except Exception:                        # noqa: BLE001 -- a map numpy cannot run on the stand-in
        return None


def link(child, parent, fn, kind) -> None:
    """``child`` is ``fn(parent)``, a view (or, for MAYBE, possibly a view) of it."""
    child._parent, child._fn, child._kind = parent, fn, kind
    if parent._children is None:
        parent._children = []
    # weak references, compared by identity only (a WeakSet would compare arrays with ==, refused)
    parent._children.append(weakref.ref(child))


def _ids(root) -> np.ndarray:
    if root._ids is None:
        root._ids = np.arange(root.size, dtype=np.int64).reshape(root.shape)
    return root._ids


def resolve(a, what: str):
    """(root, the root's entry numbers at each entry of ``a``) for a write into ``a``."""
    if a._parent is None:
        return a, _ids(a)
    if a._kind == MAYBE:
        lang.refuse_view_write(f"{what} into the result of a reshape or ravel (numpy makes it a view or "
                               f"a copy by the memory layout of its base)")
    root, ids = resolve(a._parent, what)
    return root, np.asarray(a._fn(ids))


def _placed(b, target, shape):
    """``b`` (the bound of the values written at the root entries ``target``) as a bound on the root's
    shape: written entries carry the value's class indices, the others index 0 of each class (an extra
    factor they lack, which ``bnd.join`` accounts for)."""
    if b is None or not b.cls:
        return b
    b = bnd.align(b, target.ndim)
    cls = {}
    size = int(np.prod(shape, dtype=np.int64))
    for idx, sources in b.cls.values():
        full = np.zeros(size, dtype=np.int64)
        full[target.ravel()] = np.broadcast_to(idx, target.shape).ravel()
        bnd.put(cls, bnd.reduce_index(full.reshape(shape)), sources)
    return bnd.Bound(b.n, b.h, cls)


def write(a, key, value, derive, accumulate=False) -> None:
    """``a[key] = value`` (``accumulate``: ``np.add.at(a, key, value)``) with numpy's semantics. ``key``
    None is the whole array (an in-place operator). ``value`` is a ModArray of ``a``'s field."""
    what = "np.add.at" if accumulate else "a write in place"
    root, ids = resolve(a, what)
    if root.leaf:
        lang.refuse_input_write()
    if root.ndim == 0 and root.scalar is not False:
        refuse(f"{what} into a numpy scalar (numpy: it does not support item assignment)")
    if not ids.flags.writeable:
        refuse(f"{what} into the result of np.broadcast_to: numpy makes it read-only")
    target = ids if key is None else np.asarray(ids[key])
    F = root.F
    tf = target.ravel()
    vals = np.broadcast_to(value.v, target.shape).ravel()
    tvals = None if value.t is None else np.broadcast_to(value.t, target.shape).ravel()
    sid = None if root.sid is None or value.sid is None else derive(
        "add.at" if accumulate else "setitem", (target.shape, _digest(tf)), root, value)
    nv = np.array(root.v, dtype=np.int64).reshape(-1)
    nt = None
    if root.t is not None or tvals is not None:
        nt = np.zeros(root.size, np.int64) if root.t is None else np.array(root.t, dtype=np.int64).reshape(-1)
    nd = root.ndim
    if accumulate:
        for sel in _occurrences(tf):
            nv[tf[sel]] = F.add(nv[tf[sel]], vals[sel])
            if tvals is not None:
                nt[tf[sel]] = F.add(nt[tf[sel]], tvals[sel])
        # each entry is its old value plus some of the values: within the old value plus all of them
        total = bnd.sum_axes(bnd.align(value.b, target.ndim), target.shape, range(target.ndim))
        ttotal = bnd.sum_axes(bnd.align(value.tb, target.ndim), target.shape, range(target.ndim))
        b, tb = bnd.add(root.b, total, nd), bnd.add(root.tb, ttotal, nd)
    else:
        nv[tf] = vals
        if nt is not None:
            nt[tf] = 0 if tvals is None else tvals
        b = bnd.join([root.b, _placed(value.b, target, root.shape)], nd)
        tb = bnd.join([root.tb, _placed(value.tb, target, root.shape)], nd)
    value.used()
    root.v = nv.reshape(root.shape)
    root.t = None if nt is None else nt.reshape(root.shape)
    root.b, root.tb = bnd.align(b, nd), bnd.align(tb, nd)
    root.exact = root.qa = root.atom = None
    root.sid = sid
    refresh(root)


def _occurrences(tf: np.ndarray):
    """Masks of the k-th occurrence of each target, k = 0, 1, ...: within one mask no target repeats."""
    order = np.argsort(tf, kind="stable")
    s = tf[order]
    start = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
    rank_sorted = np.arange(s.size) - np.repeat(start, np.diff(np.r_[start, s.size]))
    rank = np.empty_like(rank_sorted)
    rank[order] = rank_sorted
    return [rank == k for k in range(int(rank.max(initial=-1)) + 1)]


def _digest(x: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(x).tobytes(), digest_size=16).hexdigest()


def refresh(parent) -> None:
    """Every live view of ``parent`` recomputed from it (its base was written); a MAYBE view is marked
    stale: a later use of it is refused."""
    live = [c for c in (r() for r in parent._children or ()) if c is not None]
    if parent._children is not None:
        parent._children = [weakref.ref(c) for c in live]
    for child in live:
        if child._kind == MAYBE or parent._stale:
            child._stale = True
        else:
            child.assign(parent._mapped(child._fn, child._desc))
        refresh(child)
