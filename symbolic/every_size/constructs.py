"""The constructs of the shape-polymorphic trace that reshape an array's pieces: reductions (sums,
means, ``where=`` / ``initial=``, any/all of masks), indexing (basic and strided slices, integer
indices, ``None``), building arrays (concatenate, stack, reshape), selection by masks (``np.where``,
``np.tril`` / ``np.triu``). Each follows numpy's semantics for every size, or refuses.
"""
from __future__ import annotations

import numbers

import numpy as np
import sympy as sp
from sympy import Sum

from vjpcert.core.registry import refuse
from vjpcert.symbolic.every_size.normal import Ind
from vjpcert.symbolic.every_size.sizes import Dim, _Context, _size_expr, divide_exactly, residue, same
from vjpcert.symbolic.every_size.grid import _same_maps
from vjpcert.symbolic.every_size.symarray import (CONSTRUCTS, Piece, SymArray, _axes, _axis, _no_extra, broadcast_shape,
                                                  broadcast_to, elementwise, lift, on_grid)


# ---------------------------------------------------------------------------- reductions
def masked_sum(A, axis=None, keepdims=False, where=None, initial=None) -> SymArray:
    """np.sum(A, axis, keepdims, where=mask, initial=c): the entries the mask keeps, summed, plus c.
    The mask must be built from shapes (a boolean array); c an exact constant."""
    A = lift(A)
    if where is not None:
        M = lift(where)
        if not M.boolean:
            refuse("np.sum(..., where=...) with a mask that is not built from shapes (a comparison of values)")
        shape = broadcast_shape([A._shape, M._shape])
        if len(shape) != A.ndim or not all(same(a, b) for a, b in zip(shape, A._shape)):
            refuse("np.sum(..., where=mask) with a mask that does not broadcast to the array's shape")
        A = elementwise(lambda a, m: a * m, A, broadcast_to(M, A._shape))
    out = reduce(A, axis, keepdims, "sum")
    if initial is not None:
        if isinstance(initial, (float, np.floating)) or not isinstance(initial, (numbers.Rational, SymArray)):
            refuse(f"np.sum(..., initial={initial!r}): initial must be an exact constant (an int, a Fraction "
                   f"or B.c(...))")
        out = out + lift(initial)
    return out


def masked_mean(A, axis=None, keepdims=False, where=None) -> SymArray:
    """np.mean(A, axis, keepdims, where=mask): the masked sum over the number of entries kept (numpy's
    0/0 where the mask keeps nothing is the statement's undefined point)."""
    A = lift(A)
    total = masked_sum(A, axis, keepdims, where)
    if where is None:
        count = sp.Mul(*[A._shape[a] for a in _axes(axis, A.ndim)])
        return total / SymArray.scalar(count)
    ones = SymArray.full(A._shape, lambda idx: sp.Integer(1))
    return total / masked_sum(ones, axis, keepdims, where)


def reduce(A: SymArray, axis, keepdims: bool, kind: str) -> SymArray:
    A = lift(A)
    axes = _axes(axis, A.ndim)
    if kind != "sum" and not A.boolean:
        refuse(f".{kind}() of traced values (a branch per entry); it applies to masks built from shapes")
    out = A
    for ax in sorted(axes, reverse=True):
        out = _reduce_axis(out, ax, kind)
    if keepdims:
        for ax in axes:
            out = _insert_axis(out, ax)
    return out


def _insert_axis(A: SymArray, ax: int) -> SymArray:
    pieces = [Piece(P.maps[:ax] + ((1, 0, 1),) + P.maps[ax:],
                    lambda idx, P=P: P.value(idx[:ax] + idx[ax + 1:])) for P in A.pieces]
    return SymArray(A._shape[:ax] + (1,) + A._shape[ax:], pieces, A.boolean)


def _reduce_axis(A: SymArray, ax: int, kind: str, gridded: bool = False) -> SymArray:
    G = A.ctx.G
    groups: list[tuple[tuple, list]] = []
    for P in A.pieces:
        _, _, z = P.maps[ax]
        rest = P.maps[:ax] + P.maps[ax + 1:]

        def part(idx, P=P, z=z):
            if z == 1:
                return P.value(idx[:ax] + (0,) + idx[ax:])
            if kind == "sum":
                k = G.index("k", z)
                return Sum(P.value(idx[:ax] + (k,) + idx[ax:]), (k, 0, z - 1))
            t = A.ctx.local(z)
            return _quantify(P.value(idx[:ax] + (t,) + idx[ax:]), t, z, kind)
        for maps, parts in groups:
            if _same_maps(maps, rest):
                parts.append(part)
                break
        else:
            groups.append((rest, [part]))
    if kind != "sum" and len(A.pieces) > 1:
        refuse(f".{kind}() of a mask made of several pieces")
    for i, (m1, _) in enumerate(groups):
        for m2, _ in groups[i + 1:]:
            if not any(_disjoint(A.ctx, x, y) for x, y in zip(m1, m2)):
                # pieces that overlap on the other axes (a pad's zero column beside a block cut into
                # rows): cut every piece along the grid of all the cut points once, then reduce that
                grid = None if gridded else on_grid(A)
                if grid is None:
                    refuse("a reduction over an axis whose pieces do not line up on the other axes")
                return _reduce_axis(grid, ax, kind, gridded=True)
    pieces = [Piece(maps, lambda idx, parts=parts: sp.Add(*[f(idx) for f in parts])) for maps, parts in groups]
    return SymArray(A._shape[:ax] + A._shape[ax + 1:], pieces, A.boolean)


def _disjoint(ctx: _Context, m1, m2) -> bool:
    """Two axis maps provably never hit the same index."""
    (a1, b1, z1), (a2, b2, z2) = m1, m2
    e1, e2 = b1 + a1 * (z1 - 1), b2 + a2 * (z2 - 1)
    if ctx.nonneg(b2 - e1 - 1) or ctx.nonneg(b1 - e2 - 1):
        return True
    return a1 == a2 and residue(b1 - b2, a1) not in (None, 0) if a1 > 1 else False


def _quantify(v, t, z, kind):
    """any/all over t in [0, z - 1] of an indicator expression: exact for a single factor Ind(+-t + r)."""
    v = sp.sympify(v)
    if v in (0, 1):
        return v
    inside = [f for f in sp.Mul.make_args(v) if t in f.free_symbols]
    outside = sp.Mul(*[f for f in sp.Mul.make_args(v) if t not in f.free_symbols])
    if len(inside) != 1 or not isinstance(inside[0], Ind):
        refuse(f"{kind}() of a mask that is not one bound on the reduced index")
    arg = sp.expand(inside[0].args[0])
    c = arg.coeff(t)
    r = sp.expand(arg - c * t)
    if c not in (1, -1) or t in r.free_symbols:
        refuse(f"{kind}() of a mask that is not one bound on the reduced index")
    # c = -1: t <= r;  c = +1: t >= -r
    if kind == "any":
        q = Ind(r) if c == -1 else Ind(z - 1 + r)
    else:
        q = Ind(r - z + 1) if c == -1 else Ind(r)
    return outside * q


# ---------------------------------------------------------------------------- indexing
def _bound(v, size, what: str):
    """A slice bound or an index as a size expression (negative ints count from the end)."""
    if isinstance(v, Dim):
        return v.expr
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        refuse(f"{what} {v!r}: only ints and dims index a symbolic-size array (no fancy indexing)")
    v = int(v)
    return sp.expand(size + v) if v < 0 else sp.Integer(v)


def getitem(A: SymArray, key) -> SymArray:
    """numpy's ``A[key]``. Static integer arrays and boolean masks (advanced indexing) are numpy's
    basic indices one entry at a time (``gathers``); a negative step reads the axis reversed."""
    key = key if isinstance(key, tuple) else (key,)
    if CONSTRUCTS["advanced"](key):
        return CONSTRUCTS["gather"](A, key)
    A, key, _ = positive_steps(A, key)
    plan, shape = index_plan(A, key)
    pieces = []
    for P in A.pieces:
        new = _select(A.ctx, P, plan)
        if new is not None:
            pieces.append(new)
    if not pieces:
        refuse("an index that selects nothing")
    return SymArray(shape, pieces, A.boolean)


def _expanded(ndim: int, key: tuple) -> list:
    """The key with its Ellipsis (or the missing trailing axes) written out as full slices."""
    if sum(k is Ellipsis for k in key) > 1:
        refuse("two Ellipses in one index")
    real = [k for k in key if k is not None and k is not Ellipsis]
    if len(real) > ndim:
        refuse(f"{len(real)} indices into a {ndim}-d array")
    items = []
    for k in key:
        items += [slice(None)] * (ndim - len(real)) if k is Ellipsis else [k]
    if not any(k is Ellipsis for k in key):
        items += [slice(None)] * (ndim - len(real))
    return items


def positive_steps(A: SymArray, key: tuple):
    """(A', key', the reversed axes): every negative-step slice of key read on the reversed axis: entry j of the axis is entry
    n - 1 - j of the flipped one, so ``start:stop:-s`` is a positive slice of ``np.flip``. Along an
    axis of symbolic size only ``::-s`` is followed (numpy clips other bounds by the size)."""
    items = _expanded(A.ndim, key)
    flipped, out, ax = [], [], 0
    for k in items:
        if k is None:
            out.append(k)
            continue
        step = k.step if isinstance(k, slice) else None
        if isinstance(step, numbers.Integral) and not isinstance(step, (bool, np.bool_)) and step < 0:
            n, s = A._shape[ax], -int(step)
            if n.is_Integer:
                r = range(*k.indices(int(n)))
                if not r:
                    refuse("an index that selects nothing")
                k = slice(int(n) - 1 - r.start, int(n) - 1 - r.start + s * (len(r) - 1) + 1, s)
            elif k.start is None and k.stop is None:
                k = slice(None, None, s)
            else:
                refuse(f"slice step {step!r} with bounds along an axis of symbolic size {n}: only ::{step} "
                       f"is followed there (numpy clips the bounds by the size)")
            flipped.append(ax)
        out.append(k)
        ax += 1
    if not flipped:
        return A, tuple(items), ()
    return CONSTRUCTS["flip"](A, tuple(flipped)), tuple(out), tuple(flipped)


def index_plan(A: SymArray, key: tuple):
    """(plan, shape) of a basic index with positive steps: per item ("new",) | ("at", axis, c) |
    ("slice", axis, start, stop, step, length), each bound checked once for every size."""
    ctx = A.ctx
    plan, ax, shape = [], 0, []
    for k in _expanded(A.ndim, key):
        if k is None:
            plan.append(("new",))
            shape.append(sp.Integer(1))
            continue
        S = A._shape[ax]
        if isinstance(k, slice):
            step = 1 if k.step is None else k.step
            if isinstance(step, (bool, np.bool_)) or not isinstance(step, numbers.Integral) or step < 1:
                refuse(f"slice step {step!r}: only positive int steps are followed")
            step = int(step)
            start = sp.Integer(0) if k.start is None else _bound(k.start, S, "slice start")
            stop = S if k.stop is None else _bound(k.stop, S, "slice stop")
            if not (ctx.nonneg(start) and ctx.nonneg(stop - start) and ctx.nonneg(S - stop)):
                refuse(f"the slice {start}:{stop} is not provably inside every size of an axis of size {S} "
                       f"(numpy would clip it, so its length would depend on the size)")
            span = sp.expand(stop - start + step - 1)          # L = floor(span / step), exactly
            r = 0 if step == 1 else residue(span, step)
            L = None if r is None else divide_exactly(span - r, step)
            if L is None:
                refuse(f"the slice {start}:{stop}:{step} has a length that is not a polynomial in the sizes")
            plan.append(("slice", ax, start, stop, step, L))
            shape.append(L)
        else:
            c = _bound(k, S, "index")
            if not (ctx.nonneg(c) and ctx.nonneg(S - 1 - c)):
                refuse(f"the index {c} is not provably inside every size of an axis of size {S}")
            plan.append(("at", ax, c))
        ax += 1
    return plan, shape


def _select(ctx: _Context, P: Piece, plan):
    """The part of piece P that the index plan keeps, as a piece of the result (None: nothing)."""
    maps = []                       # the new piece's axis maps
    fixed: dict[int, sp.Expr] = {}  # old axis -> its old local index as an expression of new locals
    out_axis = 0
    for item in plan:
        if item[0] == "new":
            maps.append((1, 0, 1))
            out_axis += 1
            continue
        ax = item[1]
        a, b, z = P.maps[ax]
        if item[0] == "at":
            c = item[2]
            if z == 1:
                if same(c, b):
                    fixed[ax] = sp.Integer(0)
                    continue
                if ctx.never_equal(c, b):
                    return None
                refuse(f"cannot tell for every size whether index {c} falls in a part of the array at {b}")
            p = divide_exactly(c - b, a)
            if p is None:
                if residue(c - b, a) not in (None, 0):
                    return None
                refuse(f"cannot tell for every size which part of the array index {c} falls in")
            if ctx.nonneg(p) and ctx.nonneg(z - 1 - p):
                fixed[ax] = p
                continue
            if ctx.nonneg(-p - 1) or ctx.nonneg(p - z):
                return None
            refuse(f"cannot tell for every size which part of the array index {c} falls in")
        _, _, start, stop, step, L = item
        u = sp.Dummy("u", integer=True)          # the new local index of this axis
        res = _slice_piece(ctx, a, b, z, start, stop, step, L, u)
        if res is None:
            return None
        new_map, old_local = res
        maps.append(new_map)
        fixed[ax] = ("slice", u, old_local, out_axis)
        out_axis += 1

    def fn(idx, P=P, fixed=dict(fixed)):
        local = []
        for ax in range(len(P.maps)):
            f = fixed[ax]
            if isinstance(f, tuple):
                _, u, old, pos = f
                local.append(sp.expand(old.xreplace({u: idx[pos]})))
            else:
                local.append(f)
        return P.value(tuple(local))
    return Piece(maps, fn)


def _constant_cut(a: int, b: int, z: int, start: int, stop: int, step: int, u):
    """``_slice_piece`` where every number is known: the piece's entries j = a p + b that the slice
    keeps are an arithmetic progression in p (p = p0 + d v), and so are their places in the result."""
    kept = [p for p in range(z) if start <= a * p + b < stop and (a * p + b - start) % step == 0]
    if not kept:
        return None
    p0 = kept[0]
    d = kept[1] - kept[0] if len(kept) > 1 else 1
    u0 = (a * p0 + b - start) // step
    return (a * d // step, u0, len(kept)), p0 + d * u


def _slice_piece(ctx: _Context, a, b, z, start, stop, step, L, u):
    """(new axis map, old local index as a function of the new local u) of a piece axis (a, b, z)
    under the slice start:stop:step; None when the piece lies outside the slice."""
    last = b + a * (z - 1)
    if ctx.nonneg(start - last - 1) or ctx.nonneg(b - stop):
        return None                                                   # entirely outside
    if all(sp.sympify(v).is_Integer for v in (b, z, start, stop)):
        return _constant_cut(a, int(b), int(z), int(start), int(stop), step, u)
    if z == 1:
        q = divide_exactly(b - start, step)
        if q is None:
            if residue(b - start, step) not in (None, 0):
                return None
            refuse("cannot tell for every size whether a strided slice hits a part of the array")
        if ctx.nonneg(b - start) and ctx.nonneg(stop - 1 - b):
            return (1, q, 1), sp.Integer(0)
        refuse("cannot tell for every size whether a slice hits a part of the array")
    if a % step == 0:
        q = divide_exactly(b - start, step)
        if q is None:
            if residue(b - start, step) not in (None, 0):
                return None
            refuse("cannot tell for every size which entries of a part of the array a strided slice keeps")
        if ctx.nonneg(b - start) and ctx.nonneg(stop - 1 - last):
            return (a // step, q, z), u                               # contained
        if a == 1 and step == 1:
            if ctx.nonneg(start - b) and ctx.nonneg(last - stop + 1):     # the piece covers the slice
                return (1, 0, L), u + start - b
            if ctx.nonneg(start - b) and ctx.nonneg(stop - 1 - last) and ctx.nonneg(last - start + 1):
                return (1, 0, last - start + 1), u + start - b                # overlaps its left end
            if ctx.nonneg(b - start) and ctx.nonneg(last - stop + 1) and ctx.nonneg(stop - b):
                return (1, b - start, stop - b), u                            # overlaps its right end
            return CONSTRUCTS["strided_cut"](ctx, b, z, start, stop, step, L, u)
        refuse("a slice cuts a part of the array where the cut is not known for every size")
    if a == 1 and ctx.nonneg(start - b) and ctx.nonneg(last - stop + 1):
        return (1, 0, L), start - b + step * u                        # a strided slice of a contiguous part
    if a == 1:                                                        # ... that it overlaps at an end
        return CONSTRUCTS["strided_cut"](ctx, b, z, start, stop, step, L, u)
    refuse("a strided slice of a part of the array whose layout does not line up for every size")


# ---------------------------------------------------------------------------- building arrays
def concatenate(arrays, axis=0, **kw):
    _no_extra(kw, "concatenate")
    arrays = [lift(a) for a in arrays]
    if not arrays:
        refuse("np.concatenate of nothing")
    nd = arrays[0].ndim
    if nd == 0 or any(A.ndim != nd for A in arrays):
        refuse("np.concatenate of arrays of different ranks (or 0-d)")
    ax = _axis(axis if axis is not None else 0, nd)
    for A in arrays[1:]:
        for k in range(nd):
            if k != ax and not same(A._shape[k], arrays[0]._shape[k]):
                refuse(f"np.concatenate of arrays whose sizes {A._shape[k]} and {arrays[0]._shape[k]} differ")
    pieces, offset = [], sp.Integer(0)
    for A in arrays:
        for P in A.pieces:
            maps = list(P.maps)
            a, b, z = maps[ax]
            maps[ax] = (a, b + offset, z)
            pieces.append(Piece(maps, P.value))
        offset += A._shape[ax]
    shape = list(arrays[0]._shape)
    shape[ax] = offset
    return SymArray(shape, pieces, all(A.boolean for A in arrays))


def stack(arrays, axis=0, **kw):
    _no_extra(kw, "stack")
    arrays = [lift(a) for a in arrays]
    if not arrays:
        refuse("np.stack of nothing")
    shape = arrays[0]._shape
    if any(len(A._shape) != len(shape) or not all(same(x, y) for x, y in zip(A._shape, shape)) for A in arrays):
        refuse("np.stack of arrays of different shapes")
    ax = _axis(axis, len(shape) + 1)
    return concatenate([_insert_axis(A, ax) for A in arrays], ax)


def reshape(A: SymArray, shape) -> SymArray:
    A = lift(A)
    target = [_size_expr(s) if not (isinstance(s, numbers.Integral) and s == -1) else None for s in shape]
    if target.count(None) > 1:
        refuse("reshape with two -1 entries")
    if None in target:
        known = sp.Mul(*[t for t in target if t is not None])
        q = sp.cancel(sp.Mul(*A._shape) / known)
        if not q.is_polynomial() or divide_exactly(sp.expand(q), 1) is None:
            refuse("reshape's -1 is not a size for every size")
        target[target.index(None)] = sp.expand(q)
    old = list(A._shape)
    out, i, j, pos = A, 0, 0, 0          # i: old axis, j: target axis, pos: axis of ``out``
    while i < len(old) or j < len(target):
        o = old[i] if i < len(old) else None
        t = target[j] if j < len(target) else None
        if o is not None and t is not None and same(o, t):
            i, j, pos = i + 1, j + 1, pos + 1
        elif o is not None and o == 1:
            out = _drop_unit(out, pos)
            i += 1
        elif t is not None and t == 1:
            out = _insert_axis(out, pos)
            j, pos = j + 1, pos + 1
        elif o is not None and t is not None and _constant_factor(o, t) is not None:
            c = _constant_factor(o, t)                   # C order: axis o is (t, c), t the slower
            out = _split(out, pos, c)
            old[i:i + 1] = [t, sp.Integer(c)]
        elif o is not None and i + 1 < len(old) and old[i + 1].is_Integer:
            out = _merge(out, pos, int(old[i + 1]))      # axes (o, c) read as one, c the faster
            old[i:i + 2] = [sp.expand(o * old[i + 1])]
        elif o is not None and t is not None and t.is_Integer and j + 1 < len(target) \
                and _constant_factor(o, target[j + 1]) == t:
            # C order: axis o = c n is (c, n), c the slower: its c consecutive runs of n, stacked
            n = target[j + 1]
            out = stack([_along(out, pos, slice(Dim(k * n), Dim((k + 1) * n))) for k in range(int(t))], axis=pos)
            old[i:i + 1] = [t, n]
        elif o is not None and o.is_Integer and i + 1 < len(old) and t is not None and same(t, o * old[i + 1]):
            # axes (c, n) read as one, c the slower: the c runs of n one after another
            out = concatenate([_along(out, pos, k) for k in range(int(o))], axis=pos)
            old[i:i + 2] = [t]
        else:
            refuse(f"reshape from {tuple(map(str, A._shape))} to {tuple(map(str, target))} is not followed by "
                   f"the every-size trace (it splits an axis into a constant number of runs or runs of a constant "
                   f"length, merges an axis with a neighbour of constant size, and adds or drops axes of size 1)")
    return out


def _along(A: SymArray, ax: int, key) -> SymArray:
    """A[..., key, ...] with ``key`` (an index or a slice) on axis ``ax``: numpy's own indexing."""
    return getitem(A, (slice(None),) * ax + (key,))


def _constant_factor(o, t):
    """o / t when it is a whole number above 1 at every size (o = t c), else None."""
    q = sp.cancel(sp.sympify(o) / t)
    return int(q) if q.is_Integer and q > 1 else None


def _drop_unit(A: SymArray, ax: int) -> SymArray:
    pieces = [Piece(P.maps[:ax] + P.maps[ax + 1:], lambda idx, P=P: P.value(idx[:ax] + (0,) + idx[ax:]))
              for P in A.pieces]
    return SymArray(A._shape[:ax] + A._shape[ax + 1:], pieces, A.boolean)


def _merge(A: SymArray, ax: int, c: int) -> SymArray:
    """Axes ax and ax + 1 (of constant size c) as one axis j = c * j_ax + j_next."""
    pieces = []
    for P in A.pieces:
        (a, b, z), (av, bv, zv) = P.maps[ax], P.maps[ax + 1]
        if zv == 1:
            splits = [(sp.Integer(0), bv)]
        elif zv == c and av == 1 and same(bv, 0):
            splits = [(sp.Integer(t), sp.Integer(t)) for t in range(c)]
        else:
            refuse("reshape merges an axis that is split into parts")
        for local_v, jv in splits:
            maps = P.maps[:ax] + ((c * a, c * b + jv, z),) + P.maps[ax + 2:]
            pieces.append(Piece(maps, lambda idx, P=P, lv=local_v: P.value(idx[:ax + 1] + (lv,) + idx[ax + 1:])))
    shape = A._shape[:ax] + (A._shape[ax] * c,) + A._shape[ax + 2:]
    return SymArray(shape, pieces, A.boolean)


def _split(A: SymArray, ax: int, c: int) -> SymArray:
    """Axis ax (of size n c) as two axes (n, c): global j = c q + r. A piece keeps one box when its
    stride is a multiple of c (r is fixed) or it runs with stride 1 over whole groups of c; a piece of
    constant length is cut into its entries; anything else is refused."""
    pieces = []
    for P in A.pieces:
        a, b, z = P.maps[ax]
        r0 = residue(b, c)
        before, after = P.maps[:ax], P.maps[ax + 1:]
        if r0 is not None and a % c == 0:                      # every entry in one residue class
            maps = before + ((a // c, (b - r0) / c, z), (1, r0, 1)) + after
            pieces.append(Piece(maps, lambda idx, P=P: P.value(idx[:ax + 1] + idx[ax + 2:])))
        elif r0 == 0 and a == 1 and divide_exactly(z, c) is not None:    # whole groups, in order
            maps = before + ((1, b / c, divide_exactly(z, c)), (1, 0, c)) + after
            pieces.append(Piece(maps, lambda idx, P=P: P.value(
                idx[:ax] + (c * idx[ax] + idx[ax + 1],) + idx[ax + 2:])))
        elif z.is_Integer and r0 is not None:                  # a few entries: one piece each
            for p in range(int(z)):
                r = (a * p + r0) % c
                maps = before + ((1, (a * p + b - r) / c, 1), (1, r, 1)) + after
                pieces.append(Piece(maps, lambda idx, P=P, p=p: P.value(idx[:ax] + (p,) + idx[ax + 2:])))
        else:
            refuse(f"reshape splits an axis of size {A._shape[ax]} into groups of {c} that a part of the array "
                   f"(an entry every {a}, from {b}) does not line up with for every size")
    shape = A._shape[:ax] + (sp.expand(A._shape[ax] / c), sp.Integer(c)) + A._shape[ax + 1:]
    return SymArray(shape, pieces, A.boolean)


def where(cond, a=None, b=None):
    if a is None or b is None:
        refuse("np.where with one argument (the indices of a mask)")
    C = lift(cond)
    if not C.boolean:
        refuse("np.where on a condition that is not a mask built from shapes (a comparison of values)")

    def pick(m, x, y):
        if m == 1:
            return x
        if m == 0:
            return y
        return m * x + (1 - m) * y
    return elementwise(pick, C, a, b, boolean=lift(a).boolean and lift(b).boolean)


def _band(A, k, lower: bool):
    A = lift(A)
    if A.ndim < 2:
        refuse("np.tril/np.triu of an array of rank < 2")
    if isinstance(k, Dim):
        k = k.expr
    elif isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_)):
        k = sp.Integer(int(k))
    else:
        refuse(f"a diagonal offset {k!r} that is neither an int nor a dim")
    pieces = []
    for P in A.pieces:
        (ai, bi, _), (aj, bj, _) = P.maps[-2], P.maps[-1]

        def fn(idx, P=P, ai=ai, bi=bi, aj=aj, bj=bj):
            i, j = ai * idx[-2] + bi, aj * idx[-1] + bj
            return P.value(idx) * (Ind(i + k - j) if lower else Ind(j - i - k))
        pieces.append(Piece(P.maps, fn))
    return SymArray(A._shape, pieces, A.boolean)


def _shape_of(a):
    return lift(a).shape


CONSTRUCTS.update(reduce=reduce, sum=masked_sum, mean=masked_mean, getitem=getitem, reshape=reshape, stack=stack)

