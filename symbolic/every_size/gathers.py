"""numpy's advanced indexing on the arrays of the shape-polymorphic trace, and the constructs made of
it: ``x[static int array]``, ``x[static bool mask]``, ``np.take``, ``np.take_along_axis``,
``np.repeat``.

An advanced index is static (numpy ints or bools, never traced values), so numpy's rule is followed
by decomposing it: the index arrays broadcast to one shape, and for each entry of that shape (C order)
the index is a *basic* one -- the arrays replaced by that entry's ints -- whose result is one slice of
the answer. The slices are stacked where numpy puts the broadcast axes: in place of the advanced
entries when those are next to each other in the key, else first. ``advanced_parts`` is also what a
write with such a key uses (``writes``), one basic write per entry in numpy's order.
"""
from __future__ import annotations

import numbers

import numpy as np
import sympy as sp

from vjpcert.core.registry import refuse
from vjpcert.symbolic.every_size.constructs import _insert_axis, concatenate, getitem, reshape, stack
from vjpcert.symbolic.every_size.layouts import ravel
from vjpcert.symbolic.every_size.sizes import dim_or_int
from vjpcert.symbolic.every_size.symarray import CONSTRUCTS, SymArray, _axis, lift


def _index_array(k):
    """k as a static numpy int or bool array when it is an advanced index (a list, a tuple or an array
    of rank >= 1), else None. A 0-d int array is an int, as in numpy."""
    if isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "iu":
        return None
    if not isinstance(k, (list, tuple, np.ndarray)):
        return None
    try:
        arr = np.asarray(k)
    except ValueError:
        refuse(f"index {k!r}: a ragged index array")
    if arr.size == 0:
        refuse("an index that selects nothing")
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind not in "iu":
        refuse(f"index {k!r}: an index array holds static ints or bools (no traced values, no sizes)")
    return arr.astype(np.int64)


def is_advanced(key: tuple) -> bool:
    return any(_index_array(k) is not None for k in key)


def _is_int(k) -> bool:
    return (isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_))) or \
        (isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "iu")


def advanced_parts(A: SymArray, key: tuple):
    """(basic keys, broadcast shape, result axis): ``A[key]`` is the stack, at the result axis, of
    ``A[basic]`` for the basic keys in C order over the broadcast shape, reshaped to it there."""
    key = tuple(key)
    arrays_in = [_index_array(k) for k in key]
    width = [0 if k is None or k is Ellipsis else (arr.ndim if arr is not None and arr.dtype.kind == "b" else 1)
             for k, arr in zip(key, arrays_in)]
    if sum(k is Ellipsis for k in key) > 1:
        refuse("two Ellipses in one index")
    if sum(width) > A.ndim:
        refuse(f"{sum(width)} indices into a {A.ndim}-d array")
    # entries: (position in the key, "adv", int array) | (position, "basic", item); an Ellipsis becomes
    # its slices but keeps its position, so advanced indices on either side of it are apart, as in numpy
    entries, ax = [], 0
    for i, (k, arr) in enumerate(zip(key, arrays_in)):
        if k is Ellipsis:
            entries += [(i, "basic", slice(None))] * (A.ndim - sum(width))
            ax += A.ndim - sum(width)
        elif arr is None:
            entries.append((i, "basic", k))
            ax += k is not None
        elif arr.dtype.kind == "b":
            covered = A._shape[ax:ax + arr.ndim]
            if len(covered) != arr.ndim or any(not (z.is_Integer and int(z) == n) for z, n in zip(covered, arr.shape)):
                refuse(f"a boolean index of shape {arr.shape} for axes of size {tuple(map(str, covered))} "
                       f"(numpy needs the mask's shape to be the axes' own, for every size)")
            entries += [(i, "adv", a) for a in arr.nonzero()]
            ax += arr.ndim
        else:
            entries.append((i, "adv", arr))
            ax += 1
    if not any(k is Ellipsis for k in key):
        entries += [(len(key), "basic", slice(None))] * (A.ndim - ax)
    # with an index array present, numpy counts the ints as advanced indices too
    entries = [(i, "adv", np.asarray(k, dtype=np.int64)) if kind == "basic" and _is_int(k) else (i, kind, k)
               for i, kind, k in entries]
    try:
        arrays = np.broadcast_arrays(*[k for _, kind, k in entries if kind == "adv"])
    except ValueError:
        refuse("index arrays that do not broadcast together")
    bshape = arrays[0].shape
    if 0 in bshape:
        refuse("an index that selects nothing")
    where = sorted({i for i, kind, _ in entries if kind == "adv"})
    first = min(n for n, (_, kind, _) in enumerate(entries) if kind == "adv")
    if where == list(range(where[0], where[-1] + 1)):
        pos = sum(1 for _, kind, _ in entries[:first] if kind == "basic")      # slices and Nones before
    else:
        pos = 0                                  # advanced indices apart: numpy puts their axes first
    entries = [(kind, k) for _, kind, k in entries]
    keys = []
    for t in np.ndindex(*bshape):
        it = iter(arrays)
        keys.append(tuple(int(next(it)[t]) if kind == "adv" else k for kind, k in entries))
    return keys, bshape, pos


def gather(A: SymArray, key: tuple) -> SymArray:
    keys, bshape, pos = advanced_parts(A, key)
    out = stack([getitem(A, k) for k in keys], axis=pos)
    if len(bshape) != 1:
        shape = [dim_or_int(z) for z in out._shape]
        out = reshape(out, shape[:pos] + list(bshape) + shape[pos + 1:])
    return out


def result_shape(A: SymArray, key: tuple) -> tuple:
    """The shape (SymPy sizes) of ``A[key]`` for an advanced key, without building it."""
    keys, bshape, pos = advanced_parts(A, key)
    part = getitem(A, keys[0])._shape
    return part[:pos] + tuple(sp.Integer(n) for n in bshape) + part[pos:]


# ---------------------------------------------------------------------------- numpy functions of them
def take(a, indices, axis=None):
    A = lift(a)
    if axis is None:
        A, axis = ravel(A), 0
    ax = _axis(axis, A.ndim)
    idx = np.asarray(indices) if isinstance(indices, (list, tuple)) else indices
    return getitem(A, (slice(None),) * ax + (idx,))


def take_along_axis(arr, indices, axis):
    """numpy's take_along_axis: out[..., i, ...] = arr[..., indices[..., i, ...], ...] along ``axis``,
    indices broadcast against arr on the other axes (a size-1 axis of indices takes all of arr's)."""
    A = lift(arr)
    if axis is None:
        A, axis = ravel(A), 0
    ax = _axis(axis, A.ndim)
    I = _index_array(indices)
    if I is None or I.dtype.kind == "b" or I.ndim != A.ndim:
        refuse("np.take_along_axis with indices that are not a static int array of the array's rank")
    spread = [k for k in range(A.ndim) if k != ax and I.shape[k] == 1 and A._shape[k] != 1]
    for k in range(A.ndim):
        if k != ax and k not in spread and not (A._shape[k].is_Integer and int(A._shape[k]) == I.shape[k]):
            refuse(f"np.take_along_axis with indices of size {I.shape[k]} along an axis of size {A._shape[k]}")
    grid_axes = [k for k in range(A.ndim) if k not in spread]
    grid = np.empty(tuple(I.shape[k] for k in grid_axes), dtype=object)
    for m in np.ndindex(*I.shape):
        key = tuple(slice(None) if k in spread else int(I[m]) if k == ax else m[k] for k in range(A.ndim))
        part = getitem(A, key)
        for k in grid_axes:                      # the dropped axes back, of size 1, in order
            part = _insert_axis(part, k)
        grid[tuple(m[k] for k in grid_axes)] = part
    return _block(grid, grid_axes)


def _block(grid: np.ndarray, axes: list, at: tuple = ()):
    """The arrays of an object grid joined along ``axes`` (grid dimension d along array axis axes[d])."""
    if len(at) == grid.ndim:
        return grid[at]
    d = len(at)
    return concatenate([_block(grid, axes, at + (i,)) for i in range(grid.shape[d])], axis=axes[d])


def repeat(a, repeats, axis=None):
    """np.repeat: a constant count r is the array stacked r times next to itself and read as one axis
    (so along an axis of any size); counts per entry need an axis of constant size."""
    A = lift(a)
    if axis is None:
        A, axis = ravel(A), 0
    ax = _axis(axis, A.ndim)
    if _is_int(repeats):
        r = int(repeats)
        if r < 1:
            refuse(f"np.repeat {r} times: an empty array")
        if r == 1:
            return getitem(A, ())
        shape = [dim_or_int(z) for z in A._shape]
        return reshape(stack([A] * r, axis=ax + 1), shape[:ax] + [dim_or_int(A._shape[ax] * r)] + shape[ax + 1:])
    counts = _index_array(repeats)
    n = A._shape[ax]
    if counts is None or counts.ndim != 1 or not n.is_Integer or counts.size not in (1, int(n)) or (counts < 0).any():
        refuse("np.repeat with counts that are neither one int nor static ints, one per entry of an axis of "
               "constant size")
    counts = np.broadcast_to(counts, (int(n),))
    lead = (slice(None),) * ax
    parts = [getitem(A, lead + (slice(i, i + 1),)) for i, c in enumerate(counts.tolist()) for _ in range(c)]
    if not parts:
        refuse("np.repeat with counts that are all 0: an empty array")
    return concatenate(parts, axis=ax)


CONSTRUCTS.update(advanced=is_advanced, gather=gather)
