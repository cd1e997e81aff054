"""The numpy functions of the modular backend: joins, selections, reductions with masks, the structural
constructs (one gather over ``core.language.index_map``), the static linear maps (cumsum, diff,
np.add.at), products and einsum lowered to transposes, reshapes and matmul."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from vjpcert.core import language as lang
from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.modular import bound as bnd
from vjpcert.symbolic.modular import views
from vjpcert.symbolic.modular.array import ModArray, _implements, _new, _used, lift, qarray
from vjpcert.symbolic.modular.computation_ids import _desc, derive


def _F_of(values):
    for v in values:
        if isinstance(v, ModArray):
            return v.F
    raise SpecError(None, "no backend array among the arguments")


def _lift_all(values):
    F = _F_of(values)
    return F, [lift(F, v) for v in values]


def _join(fn, arrays, **kw):
    F, arrays = _lift_all(list(arrays))
    _used(*arrays)
    v = fn([a.v for a in arrays], **kw)
    t = None
    if any(a.t is not None for a in arrays):
        t = fn([np.zeros(a.shape, np.int64) if a.t is None else np.asarray(a.t) for a in arrays], **kw)
    ax = kw.get("axis", 0) % v.ndim
    placed = [_placed(a, fn, ax, v.ndim) for a in arrays]
    out = _new(F, v, t, bnd.join([b for b, _ in placed], v.ndim),
               bnd.join([tb for _, tb in placed], v.ndim), None)
    out.sid = derive(fn.__name__, _desc(kw), *arrays)
    return out


def _placed(a, fn, ax: int, ndim: int):
    """a's bounds with index arrays valid on the joined array: stacked, a new unit axis; concatenated,
    a class that varies along the axis is replaced by the product of its distinct factors along it,
    constant along the axis (a multiple of each entry's; the other pieces' entries then count factors
    they lack, which ``bnd.join``'s union accounts for)."""
    def move(b):
        if b is None or not b.cls:
            return b
        if fn is np.stack:
            return bnd.unit_axes(bnd.align(b, a.ndim), lambda x: np.expand_dims(x, ax))
        b = bnd.align(b, a.ndim)
        return bnd.Bound(b.n, b.h, bnd.along(b, a.ndim, (ax,), keepdims=True))
    return move(a.b), move(a.tb)


@_implements(np.concatenate)
def concatenate(arrays, axis=0):
    return _join(np.concatenate, arrays, axis=axis)


@_implements(np.stack)
def stack(arrays, axis=0):
    return _join(np.stack, arrays, axis=axis)


@_implements(np.where)
def _np_where(cond, a=None, b=None):
    if isinstance(cond, ModArray) or a is None or b is None:
        lang.refuse_branch()
    cond = np.asarray(cond, dtype=bool)
    F, (a, b) = _lift_all([a, b])
    _used(a, b)
    v = np.where(cond, a.v, b.v)
    t = None
    if a.t is not None or b.t is not None:
        t = np.where(cond, 0 if a.t is None else a.t, 0 if b.t is None else b.t)
    out = _new(F, v, t, bnd.join([a.b, b.b], v.ndim), bnd.join([a.tb, b.tb], v.ndim), None)
    out.sid = derive("where", _desc(cond), a, b)
    out.scalar = False                       # np.where returns an array, 0-d too
    return out


def _matmul(a: ModArray, b: ModArray) -> ModArray:
    F = a.F
    _used(a, b)
    if a.ndim == 0 or b.ndim == 0:
        refuse("matmul with a scalar operand")
    K = a.shape[-1]
    sid = derive("matmul", None, a, b)
    v = F.value(sid, lambda: F.matmul(a.v, b.v), keep=True)
    pairs = ([(a.t, b.v)] if a.t is not None else []) + ([(a.v, b.t)] if b.t is not None else [])
    t = None
    if pairs and a.ndim >= 2 and b.ndim >= 2:
        ta = np.broadcast_shapes(np.shape(a.v)[:-2], np.shape(b.v)[:-2])
        pairs = [(np.broadcast_to(x, ta + np.shape(x)[-2:]), np.broadcast_to(y, ta + np.shape(y)[-2:]))
                 for x, y in pairs]
        t = F.matmul_sum(pairs)                      # d(ab) = da b + a db in one contraction
    elif pairs:
        t = F.matmul(*pairs[0]) if len(pairs) == 1 else F.add(F.matmul(*pairs[0]), F.matmul(*pairs[1]))
    shapes = (a.ndim, b.ndim, a.shape, b.shape)
    vb = bnd.matmul(a.b, b.b, *shapes)
    tb = bnd.add(bnd.matmul(a.tb, b.b, *shapes), bnd.matmul(a.b, b.tb, *shapes), np.ndim(v))
    out = _new(F, v, t, vb, tb, None)
    out.sid = sid
    return out


# ---- reductions (the keywords are checked by ``ModArray.__array_function__`` and the methods)
@_implements(np.sum)
def _np_sum(a, axis=None, *, keepdims=False, where=None, initial=None):
    x = a if where is None else _np_where(_static_mask(where, "sum"), a, 0)
    out = x._sum(axis, keepdims)
    return out if initial is None else out + lift(a.F, initial)


@_implements(np.mean)
def _np_mean(a, axis=None, *, keepdims=False, where=None):
    if where is None:
        count = a.size if axis is None else int(np.prod([a.shape[x] for x in np.atleast_1d(axis)]))
        return a._sum(axis, keepdims) * lift(a.F, Fraction(1, count))
    mask = np.broadcast_to(_static_mask(where, "mean"), a.shape)
    count = np.sum(mask, axis=axis, keepdims=keepdims)
    if np.any(count == 0):
        refuse("np.mean(..., where=mask) over a slice where the mask selects nothing (numpy: nan)")
    inv = qarray(a.F, np.vectorize(lambda c: Fraction(1, int(c)), otypes=[object])(np.asarray(count)))
    return _np_sum(a, axis, keepdims=keepdims, where=mask) * inv


def _static_mask(mask, what: str) -> np.ndarray:
    if isinstance(mask, ModArray):
        refuse(f"np.{what}(..., where=...) with a mask computed from traced values: masks must come from "
               f"shapes or structural params")
    return np.asarray(mask, dtype=bool)


@_implements(np.prod)
def _np_prod(a, axis=None, *, keepdims=False):
    """A product of entries by halving: products of slices, so tangents and bounds come with them."""
    if axis is None:
        out = _np_prod(a.reshape(-1), 0)
        return out.reshape((1,) * a.ndim) if keepdims else out
    axes = tuple(x % a.ndim for x in np.atleast_1d(axis))
    kept = [i for i in range(a.ndim) if i not in axes]
    x = a.transpose(*kept, *axes)
    x = x.reshape(tuple(a.shape[i] for i in kept) + (-1,))
    if x.shape[-1] == 0:
        refuse("np.prod over an empty axis")
    while x.shape[-1] > 1:
        k = x.shape[-1]
        head = x[..., 0:k - k % 2:2] * x[..., 1:k:2]
        x = concatenate([head, x[..., k - 1:]], axis=-1) if k % 2 else head
    out = x[..., 0]
    out.scalar = True                        # numpy's products are scalars where they are 0-d
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(a.shape)))
    return out


# ---- structural: numpy's own function moves the entries (``ModArray._map``)
def _struct(a, name, fn, args, kind=None):
    return a._map(fn, (name, _desc(args)), kind)


@_implements(np.transpose)
def _np_transpose(a, axes=None):
    return a.transpose(*(axes or ()))


@_implements(np.swapaxes)
def _np_swapaxes(a, i, j):
    return a.swapaxes(i, j)


@_implements(np.reshape)
def _np_reshape(a, shape, order="C"):
    return a.reshape(shape, order=order)


@_implements(np.ravel)
def _np_ravel(a, order="C"):
    return a.ravel(order)


@_implements(np.copy)
def _np_copy(a):
    return a.copy()


@_implements(np.expand_dims)
def _np_expand_dims(a, axis):
    return _struct(a, "expand_dims", lambda x: np.expand_dims(x, axis), axis, views.VIEW)


@_implements(np.squeeze)
def _np_squeeze(a, axis=None):
    return a.squeeze(axis)


@_implements(np.moveaxis)
def _np_moveaxis(a, source, destination):
    return _struct(a, "moveaxis", lambda x: np.moveaxis(x, source, destination), (source, destination),
                   views.VIEW)


@_implements(np.broadcast_to)
def _np_broadcast_to(a, shape):
    shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    return _struct(a, "broadcast_to", lambda x: np.broadcast_to(x, shape), shape, views.VIEW)


@_implements(np.flip)
def _np_flip(a, axis=None):
    return _struct(a, "flip", lambda x: np.flip(x, axis), axis, views.VIEW)


@_implements(np.repeat)
def _np_repeat(a, repeats, axis=None):
    return _struct(a, "repeat", lambda x: np.repeat(x, repeats, axis), (repeats, axis))


@_implements(np.tile)
def _np_tile(a, reps):
    return _struct(a, "tile", lambda x: np.tile(x, reps), reps)


@_implements(np.roll)
def _np_roll(a, shift, axis=None):
    return _struct(a, "roll", lambda x: np.roll(x, shift, axis), (shift, axis))


@_implements(np.pad)
def _np_pad(a, pad_width, mode="constant", constant_values=0):
    lang.check_call("pad", {"mode": mode, "constant_values": constant_values})    # given by position too
    return _struct(a, "pad", lambda x: np.pad(x, pad_width), pad_width)       # zeros (``language``)


def _static(indices, what):
    if isinstance(indices, ModArray):
        refuse(f"np.{what} at traced indices: indices must come from shapes or structural params")
    return np.asarray(indices)


@_implements(np.take)
def _np_take(a, indices, axis=None):
    indices = _static(indices, "take")
    return _struct(a, "take", lambda x: np.take(x, indices, axis), (indices, axis))


@_implements(np.take_along_axis)
def _np_take_along_axis(a, indices, axis):
    indices = _static(indices, "take_along_axis")
    return _struct(a, "take_along_axis", lambda x: np.take_along_axis(x, indices, axis), (indices, axis))


@_implements(np.tril)
def _np_tril(a, k=0):
    return _struct(a, "tril", lambda x: np.tril(x, k), k)


@_implements(np.triu)
def _np_triu(a, k=0):
    return _struct(a, "triu", lambda x: np.triu(x, k), k)


@_implements(np.split)
def _np_split(a, indices_or_sections, axis=0):
    n = len(np.split(np.empty(a.shape[axis]), indices_or_sections))
    return [_struct(a, "split", lambda x, i=i: np.split(x, indices_or_sections, axis)[i],
                    (indices_or_sections, axis, i), views.VIEW) for i in range(n)]


@_implements(np.shape)
def _np_shape(a):
    return a.shape


@_implements(np.ndim)
def _np_ndim(a):
    return a.ndim


@_implements(np.size)
def _np_size(a):
    return a.size


@_implements(np.zeros_like)
def _np_zeros_like(a):
    out = _new(a.F, np.zeros(a.shape, np.int64), None, None, None)
    out.sid = derive("zeros", _desc(a.shape))
    out.scalar = False
    return out


# ---- static linear maps, exact mod p
@_implements(np.cumsum)
def _np_cumsum(a, axis=None):
    """Running sums by doubling (log2 n vectorised additions); every partial sum is bounded by the
    whole sum along the axis."""
    if axis is None:
        return _np_cumsum(a.reshape(-1), 0)
    F, axis = a.F, axis % a.ndim
    _used(a)

    def scan(x):
        x = np.moveaxis(np.array(x, dtype=np.int64), axis, 0)
        shift = 1
        while shift < x.shape[0]:
            x = np.concatenate([x[:shift], F.add(x[shift:], x[:-shift])])
            shift *= 2
        return np.moveaxis(x, 0, axis)

    out = _new(F, scan(a.v), None if a.t is None else scan(a.t),
               bnd.sum_axes(a.b, a.shape, (axis,), True), bnd.sum_axes(a.tb, a.shape, (axis,), True))
    out.sid = derive("cumsum", axis, a)
    return out


@_implements(np.diff)
def _np_diff(a, n=1, axis=-1):
    axis = axis % a.ndim
    for _ in range(n):
        hi = tuple(slice(1, None) if i == axis else slice(None) for i in range(a.ndim))
        lo = tuple(slice(None, -1) if i == axis else slice(None) for i in range(a.ndim))
        a = a[hi] - a[lo]
    return a


# ---- contractions
@_implements(np.matmul)
def _np_matmul(a, b):
    F, (a, b) = _lift_all([a, b])
    return _matmul(a, b)


@_implements(np.dot)
def _np_dot(a, b):
    F, (a, b) = _lift_all([a, b])
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim == 1 and b.ndim == 1:
        return (a * b).sum()
    if b.ndim == 1 or (a.ndim <= 2 and b.ndim <= 2):
        return _matmul(a, b)
    refuse("np.dot of arrays of more than two axes (it is not matmul there): use np.einsum or @")


@_implements(np.outer)
def _np_outer(a, b):
    F, (a, b) = _lift_all([a, b])
    return a.reshape(-1)[:, None] * b.reshape(-1)[None, :]


@_implements(np.einsum)
def _np_einsum(subscripts, *operands):
    """np.einsum lowered to sums, transposes, reshapes and batched matmuls, two operands at a time."""
    if not isinstance(subscripts, str):
        refuse("np.einsum with subscripts as a string only")
    spec = subscripts.replace(" ", "")
    ins, _, out = spec.partition("->")
    ins = ins.split(",")
    letters = "".join(ins)
    if "." in spec or not all(c.isalpha() for c in letters + out) or len(ins) != len(operands):
        refuse(f"np.einsum({subscripts!r}): the modular backend lowers subscripts of letters, one per axis "
               f"(no '...')")
    if "->" not in spec:
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    F, arrays = _lift_all(list(operands))
    sizes = {}
    for term, x in zip(ins, arrays):
        if len(set(term)) != len(term) or len(term) != x.ndim:
            refuse(f"np.einsum({subscripts!r}): a repeated index within one operand (a diagonal) or a "
                   f"subscript that does not match the operand's axes cannot be lowered")
        for c, s in zip(term, x.shape):
            if sizes.setdefault(c, s) != s:
                refuse(f"np.einsum({subscripts!r}): index {c} has sizes {sizes[c]} and {s}")
    if len(set(out)) != len(out) or not set(out) <= set(letters):
        refuse(f"np.einsum({subscripts!r}): output indices must be distinct indices of the operands")
    terms = list(zip(arrays, [list(t) for t in ins]))
    terms = [_sum_out(x, t, set(out) | {c for j, (_, u) in enumerate(terms) if j != i for c in u})
             for i, (x, t) in enumerate(terms)]
    while len(terms) > 1:
        (a, la), (b, lb) = terms[0], terms[1]
        needed = set(out) | {c for _, u in terms[2:] for c in u}
        batch = [c for c in la if c in lb and c in needed]
        contract = [c for c in la if c in lb and c not in needed]
        left = [c for c in la if c not in lb]
        right = [c for c in lb if c not in la]
        size = lambda cs: int(np.prod([sizes[c] for c in cs], dtype=np.int64))    # noqa: E731
        A = a.transpose(*[la.index(c) for c in batch + left + contract]).reshape(
            size(batch), size(left), size(contract))
        Bm = b.transpose(*[lb.index(c) for c in batch + contract + right]).reshape(
            size(batch), size(contract), size(right))
        C = _matmul(A, Bm).reshape(tuple(sizes[c] for c in batch + left + right))
        terms = [_sum_out(C, batch + left + right, needed)] + terms[2:]
    x, lx = _sum_out(*terms[0], set(out))
    return x.transpose(*[lx.index(c) for c in out]) if lx else x


def _sum_out(x, letters, keep):
    axes = tuple(i for i, c in enumerate(letters) if c not in keep)
    if not axes:
        return x, letters
    return x._sum(axes, False), [c for c in letters if c in keep]
