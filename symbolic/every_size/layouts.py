"""Layout constructs of the shape-polymorphic trace, each lowered to the pieces and sums the rest of the
trace already follows: ``np.moveaxis`` / ``np.swapaxes`` (a transpose), ``np.outer`` (a broadcast
product), ``np.diff`` (shifted slices), ``np.pad`` with zeros (a concatenation with zero blocks, so a
strided slice of a padded array sees its parts), ``np.einsum`` with explicit subscripts (transposes,
new axes, a broadcast product and a sum), strided slices that cut a contiguous part of an array, and
the moves of entries: ``np.flip`` (each piece read backwards), ``np.roll`` (two slices concatenated),
``np.tile`` (copies concatenated), ``np.split`` (slices), ``np.ravel`` (a reshape), ``np.squeeze``
and ``np.expand_dims`` (unit axes).

Where numpy's rule is structural (which axis goes where), numpy computes it on a small concrete array,
so the trace never has its own reading of numpy's rules.
"""
from __future__ import annotations

import numbers

import numpy as np
import sympy as sp
from sympy import Sum

from vjpcert.core.registry import refuse
from vjpcert.symbolic.every_size.atoms import Ind
from vjpcert.symbolic.every_size.constructs import _insert_axis, concatenate, getitem, reduce, reshape
from vjpcert.symbolic.every_size.sizes import Dim, _Context, divide_exactly, residue, same
from vjpcert.symbolic.every_size.symarray import CONSTRUCTS, Piece, SymArray, _axis, _no_extra, lift


def _permutation(fn, ndim: int, *args) -> tuple:
    """The axis permutation numpy's ``fn`` (moveaxis, swapaxes) makes of an ndim-d array: read off the
    shape it gives an array whose axes have distinct sizes 1..ndim."""
    probe = np.empty(tuple(range(1, ndim + 1)), dtype=np.int8)
    return tuple(s - 1 for s in fn(probe, *args).shape)


def _static_axes(v, what: str):
    items = v if isinstance(v, (tuple, list)) else (v,)
    for a in items:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers.Integral):
            refuse(f"{what} {a!r}: axes are ints")
    return v


def moveaxis(a, source, destination):
    A = lift(a)
    perm = _permutation(np.moveaxis, A.ndim, _static_axes(source, "np.moveaxis source"),
                        _static_axes(destination, "np.moveaxis destination"))
    return A.transpose(perm)


def swapaxes(a, axis1, axis2):
    A = lift(a)
    perm = _permutation(np.swapaxes, A.ndim, _axis(axis1, A.ndim), _axis(axis2, A.ndim))
    return A.transpose(perm)


def outer(a, b):
    A, B = lift(a), lift(b)
    A, B = (X if X.ndim == 1 else ravel(X) for X in (A, B))          # numpy flattens them
    return A[:, None] * B[None, :]


def diff(a, n=1, axis=-1):
    A = lift(a)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) or n < 0:
        refuse(f"np.diff(..., n={n!r}): n is a nonnegative int")
    ax = _axis(axis, A.ndim)
    lo = tuple(slice(None) if k != ax else slice(1, None) for k in range(A.ndim))
    hi = tuple(slice(None) if k != ax else slice(None, -1) for k in range(A.ndim))
    for _ in range(int(n)):
        A = A[lo] - A[hi]
    return A


def pad(a, pad_width, mode="constant", constant_values=0):
    """np.pad with zeros (False for a mask) and constant widths: a concatenation of zero blocks and the
    array, axis by axis (numpy's broadcasting of ``pad_width`` to (ndim, 2))."""
    A = lift(a)
    if mode != "constant" or not (isinstance(constant_values, numbers.Integral) and constant_values == 0):
        refuse("np.pad other than with zeros (mode='constant', constant_values=0)")
    try:
        widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (A.ndim, 2))
    except (TypeError, ValueError):
        refuse(f"np.pad with widths {pad_width!r}: widths are constant ints (numpy's (ndim, 2) pairs)")
    if (widths < 0).any():
        refuse("np.pad with a negative width")
    for ax, (before, after) in enumerate(widths.tolist()):
        parts = []
        for w in (before, after):
            shape = list(A._shape)
            shape[ax] = sp.Integer(w)
            # a mask padded with False stays a mask (a padded image's inside, as max-pooling with
            # padding builds it)
            parts.append(SymArray.full(tuple(shape), lambda idx: sp.Integer(0), A.boolean) if w else None)
        blocks = [p for p in (parts[0], A, parts[1]) if p is not None]
        A = concatenate(blocks, ax) if len(blocks) > 1 else A
    return A


def einsum(subscripts, *operands, **kw):
    """np.einsum with explicit subscripts ("ij,jk->ik"): each operand's axes put in the order of the
    output's letters then the summed ones, new axes where a letter is absent, the broadcast product,
    and a sum over the summed letters. Repeated letters in one operand (a diagonal), '...' and implicit
    output are refused."""
    if kw:
        refuse(f"np.einsum with {sorted(kw)}: only the subscripts and the operands are followed")
    if not isinstance(subscripts, str) or "->" not in subscripts:
        refuse("np.einsum without explicit output subscripts ('ij,jk->ik'): write the output after '->'")
    spec = subscripts.replace(" ", "")
    if "." in spec:
        refuse("np.einsum with '...': write every axis with a letter")
    ins, out = spec.split("->")
    ins = ins.split(",")
    if len(ins) != len(operands):
        refuse(f"np.einsum subscripts {subscripts!r} name {len(ins)} operands, {len(operands)} given")
    arrays = [lift(o) for o in operands]
    sizes: dict[str, sp.Expr] = {}
    for letters, A in zip(ins, arrays):
        if not letters.isalpha() and letters:
            refuse(f"np.einsum subscripts {letters!r}: letters only")
        if len(set(letters)) != len(letters):
            refuse(f"np.einsum with a repeated letter in {letters!r} (a diagonal) is not followed")
        if len(letters) != A.ndim:
            refuse(f"np.einsum subscripts {letters!r} for a {A.ndim}-d operand")
        for c, z in zip(letters, A._shape):
            if c in sizes and not same(sizes[c], z):
                refuse(f"np.einsum letter {c!r} has sizes {sizes[c]} and {z}")
            sizes.setdefault(c, z)
    if len(set(out)) != len(out) or any(c not in sizes for c in out):
        refuse(f"np.einsum output {out!r}: each letter once, and each from an operand")
    order = list(out) + sorted(c for c in sizes if c not in out)
    product = None
    for letters, A in zip(ins, arrays):
        present = [c for c in order if c in letters]
        A = A.transpose(tuple(letters.index(c) for c in present)) if A.ndim > 1 else A
        if A.ndim < len(order):
            A = A[tuple(slice(None) if c in letters else None for c in order)]
        product = A if product is None else product * A
    summed = list(range(len(out), len(order)))
    return reduce(product, summed, False, "sum") if summed else product


def strided_cut(ctx: _Context, b, z, start, stop, step, L, u):
    """(new axis map, old local index) of the entries start + step * t (t < L) of a slice that fall in a
    contiguous part [b, b + z - 1] of an axis which they may overlap at either end (a strided slice of
    a padded array): the first and last t inside must be polynomials in the sizes; else refused."""
    last = b + z - 1
    if ctx.nonneg(start - b):
        t_lo = sp.Integer(0)
    elif ctx.nonneg(b - start):
        d = sp.expand(b - start)
        r = residue(d, step)
        t_lo = None if r is None else divide_exactly(d + (step - r) % step, step)
    else:
        t_lo = None
    end = sp.expand(start + step * (L - 1))
    if ctx.nonneg(last - end):
        t_hi = sp.expand(L - 1)
    elif ctx.nonneg(end - last) and ctx.nonneg(last - start):
        e = sp.expand(last - start)
        r = residue(e, step)
        t_hi = None if r is None else divide_exactly(e - r, step)
    else:
        t_hi = None
    if t_lo is None or t_hi is None:
        refuse("a strided slice cuts a part of the array where the cut is not known for every size")
    count = sp.expand(t_hi - t_lo + 1)
    if not ctx.nonneg(count):
        refuse("a strided slice meets a part of the array in a number of entries not known for every size")
    return (1, t_lo, count), sp.expand(start + step * (t_lo + u) - b)


# ---------------------------------------------------------------------------- moves of entries
def _axis_list(axis, ndim: int, what: str) -> list[int]:
    if axis is None:
        return list(range(ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    return [_axis(a, ndim) for a in _static_axes(items, what)]


def _static_int(v, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        refuse(f"{what} {v!r}: a static int")
    return int(v)


def flip(a, axis=None):
    A = lift(a)
    for ax in _axis_list(axis, A.ndim, "np.flip axis"):
        A = _reversed(A, ax)
    return A


def _reversed(A: SymArray, ax: int) -> SymArray:
    """Entry j of the axis is entry n - 1 - j: a piece at j = a p + b (p < z) lands at
    j' = a p' + (n - 1 - b - a (z - 1)) with p' = z - 1 - p, so its step stays positive."""
    n = A._shape[ax]
    pieces = []
    for P in A.pieces:
        a, b, z = P.maps[ax]
        maps = list(P.maps)
        maps[ax] = (a, n - 1 - b - a * (z - 1), z)
        pieces.append(Piece(maps, lambda idx, P=P, z=z: P.value(idx[:ax] + (sp.expand(z - 1 - idx[ax]),)
                                                                 + idx[ax + 1:])))
    return SymArray(A._shape, pieces, A.boolean)


def roll(a, shift, axis=None):
    A = lift(a)
    if axis is None:                              # numpy rolls the flattened array and reshapes it back
        if A.ndim == 1:
            return roll(A, shift, 0)
        return reshape(roll(ravel(A), shift, 0), tuple(Dim(z) for z in A._shape))
    shifts = list(shift) if isinstance(shift, (tuple, list)) else [shift]
    axes = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    if len(shifts) == 1:
        shifts *= len(axes)
    elif len(axes) == 1:
        axes *= len(shifts)
    if len(shifts) != len(axes):
        refuse(f"np.roll with {len(shifts)} shifts and {len(axes)} axes")
    for s, ax in zip(shifts, axes):
        A = _rolled(A, _static_int(s, "np.roll shift"), _axis(ax, A.ndim))
    return A


def _rolled(A: SymArray, s: int, ax: int) -> SymArray:
    """x rolled by s along ax: its last s entries, then the rest. Along an axis of symbolic size n only
    s = +-1 is followed: a larger shift wraps more than once where n < |s|, which two slices do not say."""
    n = A._shape[ax]
    if n.is_Integer:
        s %= max(int(n), 1)
    elif abs(s) > 1:
        refuse(f"np.roll by {s} along an axis of size {n}: for every size only a shift of 1 is followed "
               f"(below size {abs(s)} the shift wraps more than once)")
    if s == 0:
        return A
    lead = (slice(None),) * ax
    return concatenate([A[lead + (slice(-s, None),)], A[lead + (slice(None, -s),)]], axis=ax)


def tile(a, reps):
    A = lift(a)
    reps = [_static_int(r, "np.tile repetition") for r in (reps if isinstance(reps, (tuple, list)) else (reps,))]
    if any(r < 1 for r in reps):
        refuse(f"np.tile with a repetition below 1 ({reps}): an empty array")
    while A.ndim < len(reps):                        # numpy promotes the array with leading axes
        A = _insert_axis(A, 0)
    reps = [1] * (A.ndim - len(reps)) + reps        # ... and the reps with leading ones
    for ax, r in enumerate(reps):
        if r > 1:
            A = concatenate([A] * r, axis=ax)
    return A


def split(a, indices_or_sections, axis=0):
    A = lift(a)
    ax = _axis(axis, A.ndim)
    n = A._shape[ax]
    if isinstance(indices_or_sections, (tuple, list)):
        cuts = [_static_int(i, "np.split index") for i in indices_or_sections]
        bounds = [sp.expand(n + c) if c < 0 else sp.Integer(c) for c in cuts]
        if not all(b.is_Integer for b in bounds) and any(c < 0 for c in cuts):
            refuse("np.split at an index counted from the end of an axis of symbolic size")
    else:
        k = _static_int(indices_or_sections, "np.split sections")
        part = divide_exactly(n, k) if k >= 1 else None
        if part is None:
            refuse(f"np.split into {k} sections of an axis of size {n}: not an exact division for every size")
        bounds = [part * t for t in range(1, k)]
    lead = (slice(None),) * ax
    edges = [None, *bounds, None]
    return [A[lead + (slice(lo, hi),)] for lo, hi in zip(edges, edges[1:])]


def reshape_ordered(a, shape, order="C"):
    """np.reshape with numpy's ``order``: in Fortran order, a.reshape(s, order="F") is
    a.T.reshape(s[::-1]).T (both read and write the entries with the first index fastest)."""
    A = lift(a)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if order == "F":
        return reshape(A.transpose(), shape[::-1]).transpose()
    return reshape(A, shape)


def ravel(a, order="C"):
    A = lift(a)
    return reshape_ordered(A, (Dim(sp.Mul(*A._shape)),), order)


def squeeze(a, axis=None):
    A = lift(a)
    if axis is None:
        if any(not z.is_Integer for z in A._shape):
            refuse("np.squeeze without an axis of an array of symbolic size (at size 1 numpy would drop that "
                   "axis too): name the axes")
        axes = [k for k, z in enumerate(A._shape) if z == 1]
    else:
        axes = _axis_list(axis, A.ndim, "np.squeeze axis")
        if any(A._shape[k] != 1 for k in axes):
            refuse(f"np.squeeze of an axis whose size is not 1 ({[str(A._shape[k]) for k in axes]})")
    return reshape(A, tuple(Dim(z) for k, z in enumerate(A._shape) if k not in axes))


def expand_dims(a, axis):
    A = lift(a)
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    out_ndim = A.ndim + len(items)
    axes = sorted(_axis(x, out_ndim) for x in _static_axes(items, "np.expand_dims axis"))
    if len(set(axes)) != len(axes):
        refuse(f"np.expand_dims with a repeated axis {axis!r}")
    for ax in axes:
        A = _insert_axis(A, ax)
    return A


CONSTRUCTS.update(swapaxes=swapaxes, strided_cut=strided_cut, flip=flip)


def cumsum(A, axis=None, dtype=None, out=None) -> SymArray:
    """np.cumsum along one axis (of the flattened array without one): entry i of that axis is the sum
    over the whole axis of entry k times Ind(i - k) (k <= i: a mask, as np.tril's, so the sum's limits
    stay sizes). The axis must be one piece (a concatenation along it would need the sum cut at the
    seam)."""
    _no_extra({"dtype": dtype, "out": out}, "cumsum")
    A = lift(A)
    if axis is None:
        A, axis = ravel(A), 0
    ax = _axis(axis, A.ndim)
    if len(A.pieces) != 1 or not same(A.pieces[0].maps[ax][2], A._shape[ax]):
        n = A._shape[ax]
        if not n.is_Integer:
            refuse("np.cumsum along an axis of symbolic size the array is made of several pieces on (a "
                   "concatenation, an interleave): write the sum of each part")
        # an axis of constant length: the running sums of its entries, one by one
        lead = (slice(None),) * ax
        parts = [getitem(A, lead + (slice(i, i + 1),)) for i in range(int(n))]
        for i in range(1, len(parts)):
            parts[i] = parts[i - 1] + parts[i]
        return concatenate(parts, axis=ax)
    P, G = A.pieces[0], A.ctx.G

    z = A._shape[ax]

    def value(idx):
        k = G.index("k", z)
        return Sum(P.value(idx[:ax] + (k,) + idx[ax + 1:]) * Ind(idx[ax] - k), (k, 0, z - 1))
    return SymArray(A._shape, [Piece(P.maps, value)], A.boolean)


def prod(a, axis=None, keepdims=False):
    """np.prod: over an axis of constant size the product of its entries, one by one; over an axis of
    symbolic size (a number of factors that depends on the size) ``exp`` of the sum of the factors'
    logs, which holds for positive factors -- an assumption the statement then carries
    (``PRODUCT_ASSUMPTION``). A factor masked to 1 (``np.where(mask, a, 1)``, a gate's cumulative
    product) contributes the mask times log a, so the sum's limits stay sizes as cumsum's do."""
    A = lift(a)
    axes = sorted({_axis(x, A.ndim) for x in (range(A.ndim) if axis is None else
                                                 axis if isinstance(axis, (tuple, list)) else (axis,))})
    out = A
    for ax in reversed(axes):
        n = out._shape[ax]
        if not n.is_Integer:
            out = _product_along(out, ax)
            continue
        lead = (slice(None),) * ax
        factors = [getitem(out, lead + (i,)) for i in range(int(n))]
        out = factors[0] * 1 if factors else refuse("np.prod over an empty axis")
        for f in factors[1:]:
            out = out * f
    if keepdims:
        for ax in axes:
            out = _insert_axis(out, ax)
    return out


PRODUCT_ASSUMPTION = ("the factors of a product along an axis of symbolic size are positive (np.prod there "
                      "is exp of the sum of their logs)")


def _product_along(A: SymArray, ax: int) -> SymArray:
    """np.prod along axis ``ax`` of symbolic size: exp(sum_k log f_k), the axis removed."""
    if len(A.pieces) != 1 or not same(A.pieces[0].maps[ax][2], A._shape[ax]):
        refuse("np.prod along an axis of symbolic size the array is made of several pieces on (a "
               "concatenation, an interleave): write the product of each part")
    P, G = A.pieces[0], A.ctx.G
    z = A._shape[ax]
    G.assume(PRODUCT_ASSUMPTION)
    maps = P.maps[:ax] + P.maps[ax + 1:]

    def value(idx):
        k = G.index("k", z)
        return sp.exp(Sum(_log_of_factor(P.value(idx[:ax] + (k,) + idx[ax:])), (k, 0, z - 1)))
    return SymArray(A._shape[:ax] + A._shape[ax + 1:], [Piece(maps, value)], False)


def _log_of_factor(f):
    """log f for a factor f = 1 + M (v - 1) with M a product of mask indicators (0 or 1): M log v, so a
    factor masked to 1 adds 0. A factor whose masks are not of that form is refused."""
    d = sp.expand(f - 1)
    masks = [frozenset(x for x in sp.Mul.make_args(t) if isinstance(x, Ind)) for t in sp.Add.make_args(d)]
    if d == 0 or not any(masks):
        return sp.log(f)
    M = masks[0]
    if any(m != M for m in masks) or any(sp.Mul.make_args(t).count(x) != 1
                                         for t in sp.Add.make_args(d) for x in M):
        refuse("np.prod along an axis of symbolic size of factors masked otherwise than np.where(mask, a, 1)")
    mask = sp.Mul(*M)
    return mask * sp.log(1 + sp.expand(d / mask))
