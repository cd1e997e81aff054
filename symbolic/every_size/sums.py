"""Sums in the every-size normal form: expanded by linearity, flattened (Fubini over constant
ranges), split into independent groups, Kronecker deltas evaluated where the index bounds prove the
value in range, and the indices of what is left renamed canonically; ``merge_ranges`` joins two
terms that are adjacent ranges of one sum (a piecewise array's cells summed apart) back into one. A mixin of
``symbolic.every_size.normal.Normaliser``, whose ranges, atoms and interval arithmetic it uses.
"""
from __future__ import annotations

import itertools
import math

import sympy as sp
from sympy import KroneckerDelta, Sum

from vjpcert.symbolic.every_size.atoms import Ind, NormalFormError, _height_of, canonical_index
from vjpcert.symbolic.every_size.inverse import LowerInverse
from vjpcert.symbolic.every_size.zero_test import rational_function_is_zero

MAX_TIED_ORDERS = 720           # canonical naming tries every order its indices' classes leave up to this many
MAX_WRITTEN_OUT = 8             # a sum over a range of constant length up to this is written out term by term


class SumForms:
    """The normal form of sums (see the module docstring)."""

    def fresh(self, lo, hi) -> sp.Symbol:
        self._fresh += 1
        s = sp.Symbol(f"ι{self._fresh}", integer=True)
        self.ranges[s] = (lo, hi)
        return s

    def norm_sum(self, e: Sum):
        self.stats.sums_seen += 1
        for pos, (v, lo, hi) in enumerate(e.limits):        # a range of constant length: written out
            size = sp.expand(self.norm(hi) - self.norm(lo) + 1)
            if size.is_Integer and 0 <= size <= MAX_WRITTEN_OUT:
                rest = e.limits[:pos] + e.limits[pos + 1:]
                terms = [self._at(e, v, sp.expand(self.norm(lo) + k)) for k in range(int(size))]
                self.stats.sums_written_out += 1
                return self.norm(sp.Add(*[Sum(t, *rest) if rest else t for t in terms]))
        peelable = self.peel and all(not ((self.norm(lo).free_symbols | self.norm(hi).free_symbols) - self.dims)
                                     for _, lo, hi in e.limits)
        for pos, (v, lo, hi) in enumerate(e.limits if peelable else ()):   # a peeled dim's last step: a term of its own
            lo, hi = self.norm(lo), self.norm(hi)
            if sp.expand(hi + 1) in self.peel and self._nonneg(hi - lo):
                rest = e.limits[:pos] + e.limits[pos + 1:]
                last = self._at(e, v, hi)
                self.stats.last_steps_taken += 1
                return self.norm(Sum(e.function, *e.limits[:pos], (v, lo, hi - 1), *e.limits[pos + 1:])
                                 + (Sum(last, *rest) if rest else last))
        body, rename, V = e.function, {}, []
        for v, lo, hi in e.limits:
            lo, hi = self.norm(lo), self.norm(hi)
            if (lo.free_symbols | hi.free_symbols) - self.dims:
                raise NormalFormError(f"sum limits must depend on dims only: {lo}..{hi}")
            if not self._nonneg(hi - lo + 1):
                raise NormalFormError(f"cannot show the range {lo}..{hi} is not reversed")
            f = self.fresh(lo, hi)
            rename[v] = f
            V.append(f)
        body = self.norm(body.xreplace(rename))
        return self.sum_terms(body, V)

    @staticmethod
    def _at(e: Sum, v, value):
        """e's body at v = value: a term of the sum written out. A sum inside it that binds v again would
        have its own index replaced too, so that is refused (the trace names every index apart)."""
        if any(v in {w for w, _, _ in inner.limits} for inner in e.function.atoms(Sum)):
            raise NormalFormError(f"the sum index {v} is bound again inside its own sum")
        return e.function.xreplace({v: value})

    def terms(self, body):
        """body as a list of (coefficient, [(factor, power)]): expanded term by term, each term
        keeping its own denominator (a common denominator would put Z / Z^2 into one term and hide
        that the Z cancels)."""
        out = []
        for term in sp.Add.make_args(sp.expand(self.atomise(body))):
            if term == 0:
                continue
            coeff, mono = term.as_coeff_Mul()
            factors = [(self.restore(b), k) for b, k in mono.as_powers_dict().items() if b != 1]
            factors = [(b, 1 if isinstance(b, (Ind, KroneckerDelta)) and k >= 1 else k) for b, k in factors]
            out.append((coeff, factors))
        return out

    def sum_terms(self, body, V):
        return sp.Add(*[self.sum_monomial(c, f, list(V)) for c, f in self.terms(body)])

    def _flatten(self, factors, V):
        """Merge every Sum factor that depends on V (with a positive power) into this sum."""
        changed = True
        while changed:
            changed = False
            for pos, (f, k) in enumerate(factors):
                if isinstance(f, Sum) and k >= 1 and f.free_symbols & set(V):
                    factors.pop(pos)
                    for _ in range(int(k)):
                        rename = {}
                        for v, lo, hi in f.limits:
                            rename[v] = self.fresh(lo, hi)
                            V.append(rename[v])
                        body = f.function.xreplace(rename)
                        for g in sp.Mul.make_args(body):
                            b, e = g.as_base_exp()
                            factors.append((b, e))
                    self.stats.sums_flattened += 1
                    changed = True
                    break
        return factors

    def _solve_delta(self, d, V):
        """(v, value) when delta d pins a summation index v in V to a value that provably stays in
        v's range for every value of the other indices; None otherwise."""
        aff = self._affine(d.args[0] - d.args[1])
        if aff is None:
            return None
        coeffs, const = aff
        for v in sorted((s for s in coeffs if s in V), key=lambda s: s.name):
            c = coeffs[v]
            if abs(c) != 1:
                continue
            rest = {s: -c * k for s, k in coeffs.items() if s != v}     # v = sum rest + (-c) const
            value = sum((k * s for s, k in rest.items()), sp.Integer(-c * const))
            bounds = self._bounds(rest, -c * const)
            if bounds is None:
                continue
            lo_v, hi_v = self.ranges[v]
            if self._nonneg(bounds[0] - lo_v) and self._nonneg(hi_v - bounds[1]):
                return v, value
        return None

    def sum_monomial(self, coeff, factors, V):
        factors = self._flatten(list(factors), V)
        # evaluate deltas against the summation indices, until none is left to evaluate
        progress = True
        while progress:
            progress = False
            for pos, (f, k) in enumerate(factors):
                if not (isinstance(f, KroneckerDelta) and f.free_symbols & set(V)):
                    continue
                if k < 1:
                    raise NormalFormError("a Kronecker delta in a denominator")
                if self._never_equal(*f.args):
                    self.stats.deltas_zero += 1
                    return sp.Integer(0)
                sol = self._solve_delta(f, V)
                if sol is None:
                    continue
                v, value = sol
                self.stats.deltas_evaluated += 1
                factors.pop(pos)
                V.remove(v)
                scale, factors = self._substituted(factors, v, value, "once a delta is evaluated")
                if scale == 0:
                    return sp.Integer(0)
                coeff *= scale
                factors = self._flatten(factors, V)
                progress = True
                break
        scale, factors = self._narrow(factors, V)
        if scale == 0:
            return sp.Integer(0)
        coeff *= scale
        # what does not depend on the summation indices leaves the sum
        Vs = set(V)
        outside = [f ** k for f, k in factors if not (f.free_symbols & Vs)]
        inside = [(f, k) for f, k in factors if f.free_symbols & Vs]
        result = coeff * sp.Mul(*outside)
        used = set().union(*(f.free_symbols for f, _ in inside)) if inside else set()
        for v in V:
            if v not in used:                             # sum_v 1 = the size of v's range
                lo, hi = self.ranges[v]
                result *= (hi - lo + 1)
        V = [v for v in V if v in used]
        if not V:
            return result
        for comp_vars, comp_factors in self._components(V, inside):
            result *= self.canonical_sum(comp_vars, comp_factors)
        return result

    def _substituted(self, factors, v, value, why: str):
        """(scale, factors) with v := value in each factor, normalised again (a factor may turn into a
        number, which goes to ``scale``, or a product); scale 0 when a factor turns 0."""
        scale, new = sp.Integer(1), []
        for g, e in factors:
            if v not in g.free_symbols:
                new.append((g, e))
                continue
            g = self.norm(g.xreplace({v: value}))
            if g == 0:
                if e < 0:
                    raise NormalFormError(f"a denominator is 0 {why}")
                return sp.Integer(0), []
            for h in sp.Mul.make_args(g):               # a factor may now be a product
                b, e2 = h.as_base_exp()
                if b.is_Number:
                    scale *= h ** e
                else:
                    new.append((b, e2 * e))
        return scale, new

    @staticmethod
    def _nonzero_only_where(f) -> list:
        """Affine expressions that are >= 0 wherever the factor f is not 0: a mask's bound, and a unit
        lower triangular inverse's row minus its column (its entries above the diagonal are 0)."""
        if isinstance(f, Ind):
            return [f.args[0]]
        if isinstance(f, LowerInverse):
            return [f.args[-2] - f.args[-1]]
        return []

    def _narrow(self, factors, V):
        """(scale, factors) with each summation index's range cut to the bound that a factor which is 0
        outside it puts on the index (sum_(v <= n - 1) Ind(s - v) f(v) with s <= n - 2 is the sum over
        v <= n - 2): the terms cut off are 0, so this is exact. A cut index is a fresh one over the
        narrower range, and the factors that read it are normalised again, where its new bound may
        decide more (a mask inside a decay's product, an inverse read as its leading block's). Repeated
        until no range narrows: a bound may follow from another index's narrowed range."""
        scale, narrowed = sp.Integer(1), True
        while narrowed:
            narrowed = False
            for v in list(V):
                lo, hi = self.ranges[v]
                for f, k in factors:
                    if k < 1:
                        continue
                    for cond in self._nonzero_only_where(f):
                        lo, hi = self._cut(v, cond, lo, hi)
                if (lo, hi) == self.ranges[v]:
                    continue
                w = self.fresh(lo, hi)
                V[V.index(v)] = w
                self.stats.ranges_narrowed += 1
                more, factors = self._substituted(factors, v, w, "once a range is narrowed")
                if more == 0:
                    return sp.Integer(0), []
                scale *= more
                narrowed = True
                break
        return scale, factors

    def _cut(self, v, cond, lo, hi):
        """v's range [lo, hi] cut by cond >= 0 where cond = +-v + rest is affine: the bound rest puts on
        v over the other indices' ranges, where it is provably inside [lo, hi] and leaves a range that
        is not reversed (it may be empty; else the range stays as it is)."""
        aff = self._affine(cond)
        if aff is None or aff[0].get(v) not in (1, -1):
            return lo, hi
        coeffs, const = aff
        c = coeffs[v]
        rest = {s: -c * x for s, x in coeffs.items() if s != v}
        bounds = self._bounds(rest, -c * const)          # c = -1: v <= rest; c = 1: v >= -rest
        if bounds is None:
            return lo, hi
        if c == -1:
            b = bounds[1]
            if b != hi and self._nonneg(hi - b) and self._nonneg(b - lo + 1):
                return lo, b
        else:
            b = bounds[0]
            if b != lo and self._nonneg(b - lo) and self._nonneg(hi - b + 1):
                return b, hi
        return lo, hi

    def _components(self, V, factors):
        parent = {v: v for v in V}

        def find(v):
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v
        for f, _ in factors:
            vs = [v for v in V if v in f.free_symbols]
            for a, b in zip(vs, vs[1:]):
                parent[find(a)] = find(b)
        groups: dict = {}
        for v in V:
            groups.setdefault(find(v), []).append(v)
        if len(groups) > 1:
            self.stats.sums_split += 1
        out = []
        for vs in groups.values():
            s = set(vs)
            out.append((vs, [(f, k) for f, k in factors if f.free_symbols & s]))
        return out

    def canonical_sum(self, V, factors):
        """The sum over V of prod f^k, with its indices named canonically: height above every sum
        inside it, then, of the orders ``_refined_orders`` leaves, the one that gives the least printed
        form (every order of every index would cost 720 printed forms of a sum of six indices)."""
        height = 0
        for f, _ in factors:
            for s in f.atoms(Sum):
                for v, _, _ in s.limits:
                    height = max(height, _height_of(v) + 1)
        body = sp.Mul(*[f ** k for f, k in factors])
        orders = self._refined_orders(V, factors)
        best, best_key = None, None
        for order in orders:
            names = {v: canonical_index(height, t) for t, v in enumerate(order)}
            limits = [(names[v], *self.ranges[v]) for v in sorted(V, key=lambda v: names[v].name)]
            cand = Sum(body.xreplace(names), *limits)
            key = sp.srepr(cand)
            if best_key is None or key < best_key:
                best, best_key = cand, key
        return best

    def _refined_orders(self, V, factors):
        """The orders of many indices to try: by a class that does not depend on their names, then every
        order within each class. An index's class starts from its range and is refined, round by round,
        by each factor it occurs in with it marked and every other index of the sum written as its
        class (colour refinement), until the classes stop splitting. The set of orders is the same for
        two sums that differ only by their indices' names, so the least form over it is canonical.
        Ties beyond ``MAX_TIED_ORDERS`` orders fall back to one order: a sum then may not meet its
        equal, which leaves a claim unproved, never proves one."""
        mark = sp.Symbol("⋆", integer=True)
        occurs = {v: [(f, k) for f, k in factors if v in f.free_symbols] for v in V}
        cls = {v: sp.srepr(self.ranges[v][1] - self.ranges[v][0]) for v in V}
        for _ in range(len(V)):
            seen = {w: sp.Symbol(f"∘{cls[w]}", integer=True) for w in V}
            sig = {v: (cls[v], tuple(sorted(f"{sp.srepr(f.xreplace({**seen, v: mark}))}^{k}" for f, k in occurs[v])))
                   for v in V}
            rank = {x: str(r) for r, x in enumerate(sorted(set(sig.values())))}
            new = {v: rank[sig[v]] for v in V}
            settled = len(set(new.values())) == len(set(cls.values()))
            cls = new
            if settled:
                break
        groups: dict = {}
        for v in sorted(V, key=str):
            groups.setdefault(int(cls[v]), []).append(v)
        tied = [groups[k] for k in sorted(groups)]
        if math.prod(math.factorial(len(g)) for g in tied) > MAX_TIED_ORDERS:
            return [[v for g in tied for v in g]]
        return [[v for part in parts for v in part]
                for parts in itertools.product(*[itertools.permutations(g) for g in tied])]

    def merge_ranges(self, e, max_merges: int = 64):
        """Two terms that are adjacent ranges of one sum, joined back (a piecewise array's cells -- a
        pad's first row and the rest -- summed apart on one side of an identity and whole on the other):
        c Sum(B, (v, lo, hi), R) + c Sum(B[v := hi + 1], R) = c Sum(B, (v, lo, hi + 1), R), and
        c Sum(B, (v, lo, hi), R) + c Sum(B[v := lo - 1], R) = c Sum(B[v := v - 1], (v, lo, hi + 1), R).
        Exact whenever hi - lo + 1 >= 0, which ``norm_sum`` proved of every range it kept; the terms are
        matched by their normal forms, so nothing is merged that is not literally that sum."""
        for _ in range(max_merges):
            terms = list(sp.Add.make_args(e))
            merged = self._merge_once(terms)
            if merged is None:
                return e
            e = merged
        return e

    def _merge_once(self, terms):
        for pos, t in enumerate(terms):
            factors = sp.Mul.make_args(t)
            for i, S in enumerate(factors):
                if isinstance(S, Sum):
                    merged = self._merge_at(terms, pos, sp.Mul(*(factors[:i] + factors[i + 1:])), S)
                    if merged is not None:
                        return merged
        return None

    def _merge_at(self, terms, pos, c, S):
        """Term ``pos`` = c * S (c free of S's indices) joined with the terms that extend one of S's
        ranges by one at either end; None when no such terms are there."""
        for k, (v, lo, hi) in enumerate(S.limits):
            rest = S.limits[:k] + S.limits[k + 1:]
            for at, body in ((hi + 1, S.function), (lo - 1, S.function.xreplace({v: v - 1}))):
                # the edge lies outside v's range, where the body may be undefined (a 1/0 of a
                # mask): then nothing is merged at that edge
                edge = S.function.xreplace({v: at})
                if edge.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
                    continue
                try:
                    want = self(c * (Sum(edge, *rest) if rest else edge))
                except (NormalFormError, ZeroDivisionError):
                    continue
                if want.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
                    continue
                others = terms[:pos] + terms[pos + 1:]
                whole = Sum(body, *(S.limits[:k] + ((v, lo, hi + 1),) + S.limits[k + 1:]))
                if want == 0:
                    # an edge that is 0 (a causal mask past the last row) extends the range by itself,
                    # where another term holds the sum over the extended range (else no end to it)
                    joined = self(c * whole)
                    longer = [f for f in sp.Mul.make_args(joined) if isinstance(f, Sum)]
                    if longer and any(longer[0] in sp.Mul.make_args(o) for o in others):
                        return sp.Add(joined, *others)
                    continue
                for w in sp.Add.make_args(want):
                    if w not in others:
                        break
                    others.remove(w)
                else:
                    return sp.Add(self(c * whole), *others)
        return None


    def merge_bodies(self, num):
        """Linearity read backwards, for a numerator the termwise normal form left nonzero: the terms
        c_t M_t Sum(B_t, L) that hold one sum over the same limits L (and M_t free of L's indices) are
        one sum, Sum(sum_t c_t M_t B_t, L), and a group whose joined body is the zero rational function
        of its atoms is 0. This is where sums of the same rational function written in two forms meet
        (a sigmoid's 1 - 1/(1 + u) against u/(1 + u)): each monomial of a body is its own atom, so the
        termwise form cannot see that the bodies' sum cancels. Exact: the ranges are equal, and the
        joined body is tested as a rational function (where its denominators are nonzero, as
        everywhere in this normal form). ``num`` is a polynomial in the atoms' symbols."""
        groups: dict = {}
        kept = []
        for term in sp.Add.make_args(num):
            powers = sp.Mul.make_args(term)
            sums = [f for f in powers if isinstance(self._back.get(f), Sum)]
            if len(sums) != 1:
                kept.append(term)
                continue
            S = self._back[sums[0]]
            rest = self.restore(term / sums[0])
            bound = {v for v, _, _ in S.limits}
            if rest.free_symbols & bound:
                kept.append(term)
                continue
            groups.setdefault(S.limits, []).append((term, rest * S.function))
        for limits, members in groups.items():
            if len(members) < 2 or not rational_function_is_zero(self.atomise(sp.Add(*[b for _, b in members]))):
                kept.extend(term for term, _ in members)
            else:
                self.stats.bodies_joined += 1
        return sp.Add(*kept)
