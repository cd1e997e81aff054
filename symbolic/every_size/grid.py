"""Where the pieces of symbolic-size arrays meet: finding the piece of an array that holds a box of
indices (``locate``) and cutting several arrays into one common set of boxes (``align``), so that an
elementwise operation reads each operand at the same global index. Arrays cut differently -- by a
pad, a concatenation, an interleave or a strided slice -- are refined cell by cell: per axis, the cut
points of every piece in an order that holds for every size, per residue class when pieces are
strided. Only the pieces' index maps are read here; the arrays themselves are built in
``symbolic.every_size.symarray``.
"""
from __future__ import annotations

import itertools
import math

import sympy as sp

from vjpcert.core.registry import refuse
from vjpcert.symbolic.every_size.sizes import _Context, _ctx, divide_exactly, residue, same


def _same_maps(m1, m2) -> bool:
    return all(a1 == a2 and same(b1, b2) and same(z1, z2) for (a1, b1, z1), (a2, b2, z2) in zip(m1, m2))


def locate(ctx: _Context, maps, A):
    """A function from the local indices of a box (``maps``) to A's entry at the same global index,
    when one piece of A provably contains the whole box; else None."""
    locals_ = [ctx.local(z) for _, _, z in maps]
    for Q in A.pieces:
        solved = []
        for (a, b, z), (aq, bq, zq), p in zip(maps, Q.maps, locals_):
            j = a * p + b if z != 1 else b
            if zq == 1:
                if not same(j, bq):
                    break
                solved.append(sp.Integer(0))
                continue
            q = divide_exactly(j - bq, aq)
            if q is None or not (ctx.nonneg(q) and ctx.nonneg(zq - 1 - q)):
                break
            solved.append(q)
        else:
            def at(idx, Q=Q, solved=tuple(solved), locals_=tuple(locals_)):
                m = dict(zip(locals_, idx))
                return Q.value(tuple(sp.expand(q.xreplace(m)) for q in solved))
            return at
    return None


def align(arrays: list):
    """A common piece structure for arrays of one shape: (maps of each box, [entry function per array])."""
    if all(len(A.pieces) == 1 for A in arrays) and all(_same_maps(A.pieces[0].maps, arrays[0].pieces[0].maps)
                                                       for A in arrays):
        return [(arrays[0].pieces[0].maps, [A.pieces[0].value for A in arrays])]
    ctx = _ctx()
    for g in sorted(range(len(arrays)), key=lambda k: -len(arrays[k].pieces)):
        out = []
        for P in arrays[g].pieces:
            row = []
            for k, A in enumerate(arrays):
                at = P.value if k == g else locate(ctx, P.maps, A)
                if at is None:
                    break
                row.append(at)
            else:
                out.append((P.maps, row))
                continue
            break
        else:
            return out
    out = _refine(ctx, arrays)
    if out is not None:
        return out
    refuse("the spec combines arrays whose layouts (a concatenation, an interleave) cannot be aligned "
           "for every size")


def _order_cuts(ctx: _Context, cuts):
    """Cut points sorted in an order that holds for every size, duplicates dropped; None when two
    compare differently at different sizes."""
    ordered: list = []
    for c in cuts:
        if any(same(c, d) for d in ordered):
            continue
        pos = None
        for i, d in enumerate(ordered):
            if ctx.nonneg(d - c):
                pos = i
                break
            if not ctx.nonneg(c - d):
                return None
        ordered.insert(len(ordered) if pos is None else pos, c)
    if not all(ctx.nonneg(d - c) for c, d in zip(ordered, ordered[1:])):
        return None
    return ordered


def _class_span(a: int, b, z, L: int, r: int):
    """The entries j = a p + b (p < z) of one piece with j = r mod L, as a run q in [lo, hi) of
    j = L q + r; () when none, None when the run's ends are not the same expression at every size."""
    b, z = sp.sympify(b), sp.sympify(z)
    b0 = residue(b, L)
    if z == 1 or a == 0:
        if b0 is None:
            return None
        return ((sp.expand((b - r) / L), sp.expand((b - r) / L + 1)),) if b0 == r else ()
    if b0 is None or L % a:
        return None
    period = L // a                                    # p's that land in one class are period apart
    starts = [p0 for p0 in range(period) if (a * p0 + b0) % L == r]
    if not starts:
        return ()
    p0 = starts[0]
    z0 = residue(z - p0, period)
    if z0 is None:
        return None
    count = sp.expand((z - p0 - z0) / period + (1 if z0 else 0))   # ceil((z - p0) / period)
    lo = sp.expand((a * p0 + b - r) / L)
    return ((lo, sp.expand(lo + count)),)


def _axis_cells(ctx: _Context, arrays, k: int, size):
    """Cells (a, b, z) partitioning axis k such that every piece of every array starts and ends at cell
    boundaries: runs of stride 1 cut at every piece's ends, or, when pieces are strided (an interleave,
    a strided slice's transpose), runs of stride L (the strides' lcm), one set per residue class mod L.
    None when the cut points cannot be ordered for every size."""
    spans = [P.maps[k] for A in arrays for P in A.pieces]
    L = 1
    for a, _, z in spans:
        if z != 1:
            L = math.lcm(L, int(a))
    if L == 1:
        cuts = _order_cuts(ctx, [sp.Integer(0), sp.expand(size)] + [c for _, b, z in spans for c in (b, b + z)])
        return None if cuts is None else [(1, c, sp.expand(d - c)) for c, d in zip(cuts, cuts[1:])]
    if residue(size, L) is None:
        return None
    cells = []
    for r in range(L):
        ends = _class_span(1, 0, size, L, r)
        if ends is None:
            return None
        cuts = [c for run in ends for c in run]
        for a, b, z in spans:
            run = _class_span(int(a), b, z, L, r)
            if run is None:
                return None
            cuts += [c for span in run for c in span]
        cuts = _order_cuts(ctx, cuts)
        if cuts is None:
            return None
        cells += [(L, sp.expand(L * c + r), sp.expand(d - c)) for c, d in zip(cuts, cuts[1:])]
    return cells


def _refine(ctx: _Context, arrays):
    """The common refinement of the arrays' pieces: the grid of the cells of every axis, each cell
    located in one piece of every array; None when an axis cannot be cut for every size or a cell
    straddles a piece (then nothing is aligned)."""
    shape = arrays[0]._shape
    per_axis = []
    for k, size in enumerate(shape):
        cells = _axis_cells(ctx, arrays, k, size)
        if cells is None:
            return None
        per_axis.append(cells)
    out = []
    for maps in itertools.product(*per_axis):
        row = [locate(ctx, maps, A) for A in arrays]
        if any(at is None for at in row):
            return None
        out.append((tuple(maps), row))
    return out
