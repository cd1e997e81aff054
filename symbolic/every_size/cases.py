"""Size cases: a residual the normal form leaves with Kronecker deltas that pin a free index or a size
near the end of its range is split into cases, each normalised again.

A 7 x 7 window's edge pieces are the usual source: the backward's entry (s, t, u, v) on the first
rows reads dy[..., v + 3 - j] for the taps j that land inside the image, and which taps those are
depends on whether v is 0, 1 or 2 -- the normal form keeps ``KroneckerDelta(0, v)`` and sums whose
delta it cannot evaluate, because the pinned value lies in range only for some v. Here that index's
range [lo, hi] is cut where the deltas change: the values lo, lo + 1, ..., lo + A - 1 and
hi - B + 1, ..., hi one by one (substituted), and the middle lo + A .. hi - B as a fresh index with
that range. A size D >= 1 (a dim symbol) pinned the same way (``KroneckerDelta(1, H0)``) is cut into
D = 1, ..., A (substituted) and D = D' + A with D' >= 1 a fresh size.

Why this is exact: the cases *cover* the range whatever the sizes (the singletons and the middle
together are [lo, hi] when the middle is not empty, and more when it is: a case outside the range
only asks for more), and each case is the same expression with a symbol replaced by what it equals
in that case, so its normal form being 0 proves the identity there. A fresh symbol is a ``Dummy``:
two identities' middles never share a name, so the normaliser's cache cannot mix their ranges.
Nothing is assumed: a case that does not reach 0 (within ``MAX_DEPTH`` splits and ``MAX_CASES``
cases) leaves the identity unproved, as before.

A residual that no split brings to 0 and that holds sums over both n - 1 and n - 2 steps (a chunk of n
steps against its first n - 1 and one step more) is normalised once more with n's last step taken out of
every sum and inverse (``shifted_dims``, ``Normaliser(peel=...)``): another exact normal form, in which
both sides are written over the first n - 1 steps and the last.
"""
from __future__ import annotations

import sympy as sp
from sympy import KroneckerDelta, Sum

from vjpcert.symbolic.every_size.inverse import LowerInverse
from vjpcert.symbolic.every_size.normal import Normaliser
from vjpcert.symbolic.every_size.zero_test import rational_function_is_zero

MAX_DEPTH = 6            # splits along one path (an index, then a size, ...)
MAX_CASES = 400          # cases normalised for one identity, in all
MAX_SINGLETONS = 8       # values taken one by one at each end of a range


def by_cases(N, expr, free) -> tuple[bool, dict]:
    """``N.is_zero(expr)``, and when that fails, the same split into cases (see the module docstring).
    ``free``: the free indices of ``expr`` (their ranges are in ``N.ranges``)."""
    zero, info = N.is_zero(expr)
    if zero:
        return True, info
    state = {"cases": 0, "vacuous": 0, "splits": []}
    nf = N(expr)
    if _split(N, nf, list(free), MAX_DEPTH, state):
        return True, {"atoms": 0, "numerator_terms": 0, "cases": state["cases"],
                      "vacuous_cases": state["vacuous"], "split": state["splits"][:12]}
    for d in shifted_dims(N, nf):
        peeled = Normaliser(N.dims, N.ranges, peel={d})
        zero, shifted = peeled.is_zero(expr)
        if zero:
            return True, {**shifted, "last_step_taken_out": str(d), "with_it": peeled.stats.as_dict()}
    return False, info


def shifted_dims(N, nf) -> list:
    """The dims d over which nf holds both a sum up to d - 1 and one up to d - 2 (or an inverse of size d
    and one of size d - 1): a chunk of d steps against its first d - 1 and a step after them (a
    recurrence's one_more_step laws). In the normal form that takes d's last step out of every sum and
    inverse (``Normaliser(peel={d})``), both sides are written over the first d - 1 steps and the last,
    where they can meet."""
    ends = {sp.expand(hi + 1) for S in nf.atoms(Sum) for _, _, hi in S.limits}
    ends |= {sp.expand(a.func.size) for a in nf.atoms(LowerInverse)}
    return [d for d in sorted(N.dims, key=str) if d in ends and sp.expand(d - 1) in ends]


def _split(N, nf, free, depth: int, state: dict) -> bool:
    """Every case of the plan for nf is 0."""
    plan = _plan(N, nf, free)
    if plan is None or depth == 0:
        return False
    state["splits"].append(plan["shown"])
    for case in plan["cases"]:
        if case is None:                    # a value outside its range at every allowed size
            state["vacuous"] += 1
            continue
        N2, e, free2 = case(nf)
        state["cases"] += 1
        if state["cases"] > MAX_CASES:
            return False
        nf2 = N2(e)
        if not _zero(N2, nf2) and not _split(N2, nf2, free2, depth - 1, state):
            return False
    return True


def _zero(N, nf) -> bool:
    """The zero test of ``N.is_zero``, tried first without joining adjacent sum ranges (the join is the
    costly part). Measured on the 7 x 7 depthwise dx's interior piece: 15 of its 92 cases cancel
    without the join; the rest run the flint test twice, which costs little beside the join."""
    return rational_function_is_zero(N.atomise(nf)) or N.is_zero(nf)[0]


# ---------------------------------------------------------------------- where the deltas change
def _deltas(e, bound=None):
    """Every KroneckerDelta of e with the ranges of the sum indices around it."""
    bound = bound or {}
    if isinstance(e, KroneckerDelta):
        yield e, bound
    elif isinstance(e, Sum):
        inner = {**bound, **{v: (lo, hi) for v, lo, hi in e.limits}}
        yield from _deltas(e.function, inner)
    else:
        for a in e.args:
            yield from _deltas(a, bound)


def _cuts(N, nf, target) -> list:
    """Points c where a delta of nf can change as ``target`` crosses from c - 1 to c: where the delta
    pins target itself, and where a sum index the delta pins enters or leaves its sum's range."""
    out = []
    for d, bound in _deltas(nf):
        aff = N._affine(d.args[0] - d.args[1])
        if aff is None:
            continue
        coeffs, const = aff
        if abs(coeffs.get(target, 0)) == 1:                # target = e: cut at e's bounds
            c = coeffs[target]
            rest = {s: -k * c for s, k in coeffs.items() if s != target}
            b = N._bounds(rest, -const * c, bound)
            if b is not None:
                out += [b[0], b[1] + 1]
        for s, (lo, hi) in bound.items():                  # a sum index pinned to e_s: lo <= e_s <= hi
            if abs(coeffs.get(s, 0)) != 1:
                continue
            c = coeffs[s]
            e_s = sp.expand(-sum((k * c * v for v, k in coeffs.items() if v != s), sp.Integer(0)) - const * c)
            for g in (sp.expand(e_s - lo), sp.expand(hi - e_s)):     # g >= 0 where the pin is in range
                cut = _boundary(g, target, N.dims)
                if cut is not None:
                    out.append(cut)
    return out


def _boundary(g, target, dims):
    """For g = +-target + r >= 0 with r in the dims only: the first value on the side where g changes
    (target >= -r: -r; target <= r: r + 1). None otherwise."""
    c = g.coeff(target)
    if c not in (1, -1):
        return None
    r = sp.expand(g - c * target)
    if r.free_symbols - set(dims):
        return None
    return sp.expand(-r) if c == 1 else sp.expand(r + 1)


def _offsets(points, base, sign: int) -> list[int]:
    out = []
    for p in points:
        k = sp.expand(sign * (p - base))
        if k.is_Integer and 1 <= k <= MAX_SINGLETONS:
            out.append(int(k))
    return out


# ---------------------------------------------------------------------- the cases
def _plan(N, nf, free):
    symbols = nf.free_symbols
    for v in [v for v in free if v in symbols]:
        lo, hi = N.ranges[v]
        cuts = _cuts(N, nf, v)
        A, B = max(_offsets(cuts, lo, 1), default=0), max(_offsets(cuts, hi + 1, -1), default=0)
        if A or B:
            return _index_cases(N, v, lo, hi, A, B, free)
    for D in sorted(N.dims & symbols, key=str):
        A = max((c - 1 for c in _offsets(_cuts(N, nf, D), 0, 1) if c >= 2), default=0)
        if A:
            return _size_cases(N, D, A, free)
    return None


def _index_cases(N, v, lo, hi, A: int, B: int, free):
    """v = lo, ..., lo + A - 1 and hi - B + 1, ..., hi one by one, and lo + A .. hi - B (a fresh index).
    Each case is needed only where its value lies in v's range and in no case before it: lo + k where
    hi >= lo + k, hi - k where hi - k >= lo + A (the first values are taken already), the middle where
    hi - B >= lo + A. That is a least size, and the case is proved from there on. Together the cases
    still cover every v in lo..hi at every size: below lo + A, above hi - B, or in between."""
    rest = [s for s in free if s != v]
    mid = sp.Dummy(f"{v.name}'", integer=True)
    cases = [_within(N, {v: sp.expand(lo + k)}, sp.expand(hi - lo - k), rest) for k in range(A)]
    cases += [_within(N, {v: sp.expand(hi - k)}, sp.expand(hi - k - lo - A), rest) for k in range(B)]
    cases.append(_within(N, {v: mid}, sp.expand(hi - lo - A - B), rest + [mid],
                         {mid: (sp.expand(lo + A), sp.expand(hi - B))}))
    values = [*(lo + k for k in range(A)), *(hi - k for k in range(B))]
    return {"cases": cases, "shown": f"{v}: {', '.join(map(str, values))} one by one, and {lo + A}..{hi - B}"}


def _within(N, sub: dict, guard, free, new_ranges=None):
    """The case ``sub`` where ``guard`` >= 0. A guard D + c in one size D asks for D >= -c: the size is
    shifted, D = D' + (-c - 1) with D' >= 1 (nothing below is proved, nor needed). A guard that no
    allowed size meets makes the case vacuous (None); one of another form is left: the case is then
    proved for every size, which asks for more."""
    if guard.is_Integer:
        if guard < 0:
            return None
        return lambda nf: _substituted(N, nf, sub, {}, free, new_ranges)
    D = next((d for d in N.dims if guard.coeff(d) == 1), None)
    c = sp.expand(guard - D) if D is not None else None
    if c is None or not c.is_Integer or -c <= 1:
        return lambda nf: _substituted(N, nf, sub, {}, free, new_ranges)
    bigger = sp.Dummy(f"{D.name}'", integer=True, positive=True)
    return lambda nf: _substituted(N, nf, sub, {D: bigger + (-c - 1)}, free, new_ranges)


def _size_cases(N, D, A: int, free):
    """D = 1, ..., A one by one, and D = D' + A with D' >= 1."""
    bigger = sp.Dummy(f"{D.name}'", integer=True, positive=True)
    cases = [lambda nf, k=k: _substituted(N, nf, {}, {D: sp.Integer(k)}, free) for k in range(1, A + 1)]
    cases.append(lambda nf: _substituted(N, nf, {}, {D: bigger + A}, free))
    return {"cases": cases, "shown": f"{D}: {', '.join(map(str, range(1, A + 1)))} one by one, and {D}' + {A}"}


def _substituted(N, nf, sub: dict, sizes: dict, free, new_ranges=None):
    """(normaliser, expression, free indices) of a case: indices replaced by ``sub``; sizes by
    ``sizes``, in a new normaliser whose dims and ranges say so (its cache holds only what is true at
    those sizes)."""
    ranges = {**{s: N.ranges[s] for s in free if s in N.ranges}, **(new_ranges or {})}
    if sizes:
        dims = (N.dims - set(sizes)) | {s for x in sizes.values() for s in x.free_symbols}
        ranges = {s: tuple(sp.expand(sp.sympify(x).xreplace(sizes)) for x in r) for s, r in ranges.items()}
        N = Normaliser(dims, ranges)
    else:
        N.ranges.update(new_ranges or {})
    return N, nf.xreplace(sub).xreplace(sizes), free
