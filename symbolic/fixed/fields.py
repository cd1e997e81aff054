"""The fields a traced claim is evaluated in.

``RingField``   exact: polynomials over Q (python-flint) in the leaves and in *atoms*. Each distinct
                transcendental subterm becomes one atom (exp(x_i) -> e_i), keyed by the canonical
                polynomial of its argument, and each non-constant denominator a reciprocal atom
                (1/Z -> w). If the residual is the zero polynomial in independent atoms it is zero for
                the true values too: that is a proof. A non-zero polynomial is *not* a disproof, because
                atoms may be related (w*Z = 1, r^2 = arg, sin^2 + cos^2 = 1); ``reduce_relations``
                eliminates the atoms through their defining relations, which is again sound.
``ModPField``   the same atoms, at random points of GF(p) (``modp_field``).
``MpField``     mpmath at a chosen precision: witnesses for `failed`, and the numeric last resort.
``SizeField`` (a forecast of the ring's size) and ``SympyField`` (for display) decide nothing: they are
in ``size_and_display``.
"""
from __future__ import annotations

from fractions import Fraction

import flint

from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.evaluate import MpField, _OperatorField  # noqa: F401  (MpField: re-exported for the ladder)


class AtomPoolExhausted(Exception):
    pass


def _fmpq(q: Fraction):
    return flint.fmpq(q.numerator, q.denominator)


def _frac(q) -> Fraction:
    q = flint.fmpq(q)
    return Fraction(int(q.p), int(q.q))


def _sqrt_rational(q: Fraction):
    """The exact rational square root of q, or None."""
    if q < 0:
        return None
    n, rn = flint.fmpz(q.numerator).sqrtrem()
    d, rd = flint.fmpz(q.denominator).sqrtrem()
    return Fraction(int(n), int(d)) if rn == 0 and rd == 0 else None


MAX_STEP_SPLITS = 6     # Booleans a step's argument may hold and still be split on (2^6 branches at most)


class RingField(_OperatorField):
    """Polynomials over Q in leaves and atoms. ``split_exp`` writes exp(a + 2b) as E(a) E(b)^2, which
    exposes exp's additivity to the relation step (and costs variables, so the fast path keeps it off)."""

    ODD = ("erf", "tanh", "sin")
    sums_pairwise = True      # a row sum's partial sums grow: add them level by level (core.evaluate)

    def __init__(self, leaves, n_atoms: int, *, split_exp: bool = False, lin_min_terms: int | None = None):
        self.leaves = list(leaves)
        self.lin_min_terms = lin_min_terms
        self.n_atoms = n_atoms
        self.ctx = flint.fmpq_mpoly_ctx.get(("v", len(self.leaves) + n_atoms), "degrevlex")
        self.gens = self.ctx.gens()
        self.leaf_index = {leaf: i for i, leaf in enumerate(self.leaves)}
        self.split_exp = split_exp
        self.atoms: dict[tuple, int] = {}            # key -> variable index
        self.defs: list[tuple[int, str, object]] = []  # (variable, kind, argument) in creation order
        self.recip_of: dict[int, object] = {}         # reciprocal atom -> the polynomial it inverts
        self.const_sqrt: dict[int, Fraction] = {}     # atom sqrt(c), c a rational -> c
        # a shared linear intermediate by its monic definition: str(v / lc) -> (its atom, lc), so the
        # inverse of that sum is one atom whichever way it is reached (through the atom, or expanded)
        self.lin_of: dict[str, tuple[int, object]] = {}
        self.zero, self.one = self.ctx.constant(0), self.ctx.constant(1)
        self._inv_memo: dict[int, tuple] = {}        # id(a) -> (a, 1/a): see inv
        # variables known to be >= 0 at every point: sqrt(u v) = sqrt(u) sqrt(v) may split over them
        self.nonneg = {i for i, leaf in enumerate(self.leaves) if leaf.positive}
        # B.max_shift's free symbols (claim max_shift_free): always split off exp's argument, so
        # exp(x - c) = E(x) / E(c) and the shift can cancel in the ring itself
        self.shift_vars = {i for i, leaf in enumerate(self.leaves) if leaf.role == "shift"}

    # -------------------------------------------------------------- atoms
    def _atom(self, kind: str, arg, key_arg=None):
        if key_arg is None and kind != "lin" and self.const_sqrt:
            arg = self._normalise_arg(arg)
        key = (kind, str(arg) if key_arg is None else key_arg)
        var = self.atoms.get(key)
        if var is None:
            var = len(self.leaves) + len(self.defs)
            if var >= len(self.gens):
                raise AtomPoolExhausted(f"more than {self.n_atoms} atoms")
            self.atoms[key] = var
            self.defs.append((var, kind, arg))
            if kind == "inv":
                self.recip_of[var] = arg
            if kind == "sqrt" and arg.is_constant():
                self.const_sqrt[var] = _frac(arg.leading_coefficient())
            if kind in ("exp", "sqrt", "pi", "cpow") or (kind == "inv" and self._nonneg_var(arg)):
                self.nonneg.add(var)
        return self.gens[var]

    def _nonneg_var(self, poly) -> bool:
        if len(poly) != 1 or poly.total_degree() != 1:
            return False
        exps, c = next(iter(poly.terms()))
        return c > 0 and exps.index(1) in self.nonneg

    def share(self, v):
        """A shared intermediate that is a long linear form (a row mean, a softmax denominator)
        becomes an atom l with the linear relation l = v, instead of being expanded at every use:
        LayerNorm's residual at n = 32 shrinks from ~500k terms to a few thousand."""
        if self.lin_min_terms and len(v) >= self.lin_min_terms and v.total_degree() == 1:
            atom = self._atom("lin", v)
            lc = v.leading_coefficient()
            self.lin_of.setdefault(str(v / lc), (self._var_of(atom), lc))
            return atom
        return v

    def linear_relations(self) -> list:
        return [self.gens[var] - arg for var, kind, arg in self.defs if kind == "lin"]

    def reduce_linear(self, poly):
        """poly modulo the linear relations of the shared intermediates (sound: a zero remainder
        means poly is in the ideal they generate, so it vanishes at the true values)."""
        for g in self.linear_relations():
            if poly.is_zero():
                break
            _, poly = divmod(poly, g)
        return poly

    def atom_kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, kind, _ in self.defs:
            out[kind] = out.get(kind, 0) + 1
        return out

    # -------------------------------------------------------------- field operations
    def const(self, q):
        return self.ctx.constant(_fmpq(Fraction(q)))

    def leaf(self, leaf):
        return self.gens[self.leaf_index[leaf]]

    def pow(self, a, k: int):
        return a ** k if k >= 0 else self.inv(a) ** (-k)

    def _inv_var(self, var: int):
        if var in self.recip_of:           # 1 / (1/Z) = Z
            return self.recip_of[var]
        c = self.const_sqrt.get(var)
        if c is not None:                  # 1 / sqrt(c) = sqrt(c) / c
            return self.gens[var] * self.ctx.constant(_fmpq(1 / c))
        d = self._def_of(var)
        if d is not None and d[1] == "lin":   # 1 / l for l = lc * m (m monic): the atom 1/m where one is
            lc = d[2].leading_coefficient()   # already made from the expanded sum
            known = self.atoms.get(("inv", str(d[2] / lc)))
            if known is not None:
                return self.gens[known] * self.ctx.constant(1 / flint.fmpq(lc))
        return self._atom("inv", self.gens[var])

    def _normalise_arg(self, a):
        """Reduce sqrt(c)^2 -> c for constants c inside an atom's argument, so exp(-x^2 (1/sqrt 2)^2)
        and exp(-x^2/2) are one atom."""
        degs = a.degrees()
        for var, c in self.const_sqrt.items():
            if degs[var] >= 2:
                a = sum((coef * self.const(c ** (k // 2)) * self.gens[var] ** (k % 2)
                         for k, coef in self._by_power(a, var).items()), self.zero)
        return a

    def _inv_monomial(self, exps):
        out = self.one
        for var, e in enumerate(exps):
            if e:
                out = out * self._inv_var(var) ** e
        return out

    def inv(self, a):
        """1/a as a polynomial in the atoms. Remembered by the polynomial object (kept alive with its
        inverse, so its id is never reused; python-flint's polynomials are immutable): a softmax divides
        every entry of a row by the same sum, and keying that sum's atom costs a print of the sum."""
        hit = self._inv_memo.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        out = self._inverse(a)
        self._inv_memo[id(a)] = (a, out)
        return out

    def _inverse(self, a):
        if a.is_zero():
            raise ZeroDivisionError("division by a polynomial that is identically zero")
        if a.is_constant():
            return self.ctx.constant(1 / a.leading_coefficient())
        if len(a) == 1:
            exps, c = next(iter(a.terms()))
            return self._inv_monomial(exps) * self.ctx.constant(1 / flint.fmpq(c))
        content = a.term_content()
        factor = self.one
        if not content.is_one():
            a, rem = divmod(a, content)
            assert rem.is_zero()
            factor = self._inv_monomial(content.monoms()[0])
        lc = a.leading_coefficient()
        shared = self.lin_of.get(str(a / lc))
        if shared is not None:            # a / lc is (1/lc_l) l for a shared sum l: 1/a = lc_l / (lc a) * 1/l
            var, lc_l = shared
            return factor * self._inv_var(var) * self.ctx.constant(flint.fmpq(lc_l) / flint.fmpq(lc))
        return factor * self._atom("inv", a / lc) * self.ctx.constant(1 / flint.fmpq(lc))

    def _normalise_sign(self, kind, a):
        """erf, tanh, sin are odd and cos is even: key the atom on the argument with a positive
        leading coefficient, so f(-a) and f(a) share one atom."""
        if a.leading_coefficient() < 0:
            return -a, (-1 if kind in self.ODD else 1)
        return a, 1

    def _split_shifts(self, a):
        """(rest, factor): exp(a) = exp(rest) * factor, with every term k * shift (k an integer) of
        a taken out as E(shift)^k -- exp(x + y) = exp(x) exp(y) is exact for real arguments."""
        factor, rest = self.one, a
        for exps, c in a.terms():
            nz = [i for i, e in enumerate(exps) if e]
            if len(nz) == 1 and nz[0] in self.shift_vars and exps[nz[0]] == 1:
                c = _frac(c)
                if c.denominator != 1:
                    continue
                var = nz[0]
                e = self._atom("exp", self.gens[var])
                factor = factor * (e ** c.numerator if c > 0 else self.inv(e) ** (-c.numerator))
                rest = rest - self.ctx.constant(_fmpq(c)) * self.gens[var]
        return rest, factor

    def _split_logs(self, a):
        """(rest, factor): exp(a) = exp(rest) * factor, with every term k * log(P) of a (k an integer,
        log(P) an atom) taken out as P^k: exp(log P) = P wherever log P is real, i.e. P > 0."""
        factor, rest = self.one, a
        for exps, c in a.terms():
            nz = [i for i, e in enumerate(exps) if e]
            if len(nz) != 1 or exps[nz[0]] != 1:
                continue
            d = self._def_of(nz[0])
            c = _frac(c)
            if d is None or d[1] != "log" or c.denominator != 1:
                continue
            factor = factor * self.pow(d[2], c.numerator)
            rest = rest - self.ctx.constant(_fmpq(c)) * self.gens[nz[0]]
        return rest, factor

    def exp(self, a):
        if a.is_zero():
            return self.one
        rest, factor = self._split_logs(a)
        if not factor.is_one():
            return factor * self.exp(rest)
        if self.shift_vars and not self.split_exp:
            rest, factor = self._split_shifts(a)
            if not factor.is_one():
                return factor * (self._atom("exp", rest) if not rest.is_zero() else self.one)
        if not self.split_exp:
            return self._atom("exp", a)
        out = self.one
        for exps, c in a.terms():
            c = _frac(c)
            mono = self.ctx.from_dict({exps: 1})
            if c.denominator == 1 and not mono.is_one():
                e = self._atom("exp", mono)
                out = out * (e ** c.numerator if c > 0 else self.inv(e) ** (-c.numerator))
            else:
                out = out * self._atom("exp", self.ctx.from_dict({exps: _fmpq(c)}))
        return out

    def log(self, a):
        """log(E(t)^k * w^j * P) = k t - j s + log(P) for exp atoms E(t) and reciprocals w = 1/E(s)
        of exp atoms (all positive, so log of the product is the sum of logs); the rest one atom."""
        if not a.is_zero() and not a.is_constant():
            content = a.term_content()
            exps = content.monoms()[0]
            if any(exps):
                linear, keep = self.zero, True
                for var, e in enumerate(exps):
                    if not e:
                        continue
                    d = self._def_of(var)
                    if d and d[1] == "exp":
                        linear = linear + e * d[2]
                    elif var in self.recip_of and self._is_exp_atom(self.recip_of[var]):
                        linear = linear - e * self._def_of(self._var_of(self.recip_of[var]))[2]
                    else:
                        keep = False
                        break
                if keep:
                    rest, rem = divmod(a, content)
                    assert rem.is_zero()
                    return linear + (self._atom("log", rest) if not rest.is_one() else self.zero)
        return self._atom("log", a)

    def _def_of(self, var):
        k = var - len(self.leaves)            # atoms are numbered in creation order after the leaves
        return self.defs[k] if 0 <= k < len(self.defs) else None

    def _var_of(self, poly):
        exps = poly.monoms()[0]
        return exps.index(1)

    def _is_exp_atom(self, poly) -> bool:
        if len(poly) != 1 or poly.total_degree() != 1 or not poly.leading_coefficient() == 1:
            return False
        d = self._def_of(self._var_of(poly))
        return bool(d) and d[1] == "exp"

    def _sqrt_const(self, q: Fraction):
        """sqrt(p/q) = s/q * prod sqrt(prime): one atom per prime, so sqrt(2 pi) = sqrt(2) sqrt(pi)."""
        if q < 0:
            return None
        out = self.const(Fraction(1, q.denominator))
        for prime, e in flint.fmpz(q.numerator * q.denominator).factor():
            out = out * self.const(Fraction(int(prime)) ** (e // 2))
            if e % 2:
                out = out * self._atom("sqrt", self.const(Fraction(int(prime))))
        return out

    def sqrt(self, a):
        if a.is_zero():
            return self.zero
        if a.is_constant():
            root = self._sqrt_const(_frac(a.leading_coefficient()))
            if root is not None:
                return root
        elif len(a) == 1:                     # c * prod v^e: split off what is known to be >= 0
            exps, c = next(iter(a.terms()))
            if c > 0:
                out, inner = self._sqrt_const(_frac(c)), {}
                for var, e in enumerate(exps):
                    if e and var in self.nonneg:
                        out = out * self.gens[var] ** (e // 2)
                        if e % 2:
                            out = out * self._atom("sqrt", self.gens[var])
                    elif e:
                        inner[var] = e
                if inner:
                    mono = [0] * len(exps)
                    for var, e in inner.items():
                        mono[var] = e
                    out = out * self._atom("sqrt", self.ctx.from_dict({tuple(mono): 1}))
                return out
        return self._atom("sqrt", a)

    def _odd_even(self, kind, a):
        if a.is_zero():
            return self.one if kind == "cos" else self.zero
        a, sign = self._normalise_sign(kind, a)
        v = self._atom(kind, a)
        return v if sign > 0 else -v

    def erf(self, a):
        return self._odd_even("erf", a)

    def tanh(self, a):
        return self._odd_even("tanh", a)

    def sin(self, a):
        return self._odd_even("sin", a)

    def cos(self, a):
        return self._odd_even("cos", a)

    def step(self, a):
        """[a > 0] on an open region: a Boolean atom S per argument up to a positive factor, with
        S(-a) = 1 - S(a). The region's sign pattern is left free, so an identity in these atoms holds
        on every region at once; s^2 = s is among the relations (``relations``)."""
        if a.is_zero():
            return self.const(STEP_AT_KINK)
        lc = a.leading_coefficient()
        if a.is_constant():
            return self.one if lc > 0 else self.const(STEP_AT_KINK)
        if STEP_AT_KINK == 0:             # step(s b) = s step(b) for a Boolean s (s = 0: step(0) = 0)
            degrees = a.term_content().degrees()
            bools = [v for v, d in enumerate(degrees) if d and (self._def_of(v) or (0, ""))[1] == "step"]
            if bools:
                rest, factor = a, self.one
                for v in bools:
                    rest, rem = divmod(rest, self.gens[v] ** degrees[v])
                    factor = factor * self.gens[v]
                return factor * self.step(rest)
        # a kink of a kink (relu6 as min(relu(x), 6), a clamp of a clamp): the argument holds a Boolean
        # s, so step(a) = s step(a|s=1) + (1 - s) step(a|s=0), exact for s in {0, 1}
        inner = [v for v, d in enumerate(a.degrees()) if d and (self._def_of(v) or (0, ""))[1] == "step"]
        if 0 < len(inner) <= MAX_STEP_SPLITS:
            v = inner[-1]
            return self.gens[v] * self.step(a.subs({v: 1})) + (self.one - self.gens[v]) * self.step(a.subs({v: 0}))
        s = self._atom("step", a * (1 / lc), key_arg=str(a * (1 / lc)))
        return s if lc > 0 else self.one - s

    def pi(self):
        return self._atom("pi", None, key_arg="pi")

    def cpow(self, base: Fraction, k: Fraction):
        return self._atom("cpow", (base, k), key_arg=f"{base}^{k}")

    # -------------------------------------------------------------- relations
    def relations(self):
        """Defining relations of the atoms, latest atom first: ("recip", var, b) for var*b = 1 and
        ("root", var, q, rhs) for var^q = rhs."""
        cos_of = {str(arg): var for var, kind, arg in self.defs if kind == "cos"}
        out = []
        for var, kind, arg in reversed(self.defs):
            if kind == "inv":
                out.append(("recip", var, arg))
            elif kind == "sqrt":
                out.append(("root", var, 2, arg))
            elif kind == "sin" and str(arg) in cos_of:
                c = self.gens[cos_of[str(arg)]]
                out.append(("root", var, 2, self.one - c * c))
            elif kind == "cpow":
                base, k = arg
                out.append(("root", var, k.denominator, self.const(base ** k.numerator)))
            elif kind == "step":
                out.append(("bool", var))
        return out

    def step_implications(self) -> list:
        """s_v s_u - s_v for the Boolean atoms of arguments a - c and a (c > 0): a - c > 0 implies
        a > 0, so a sign pattern with s_v = 1 and s_u = 0 is no region at all (relu6's two kinks). The
        polynomials vanish on every region there is: dividing by them is sound."""
        groups: dict[str, list] = {}
        for var, kind, arg in self.defs:
            if kind == "step":
                c = next((_frac(k) for exps, k in arg.terms() if not any(exps)), Fraction(0))
                groups.setdefault(str(arg - self.const(c)), []).append((c, var))
        out = []
        for atoms in groups.values():
            atoms.sort()
            for i, (c_lo, lo) in enumerate(atoms):      # a + c_lo > 0 implies a + c_hi > 0
                out += [self.gens[lo] * self.gens[hi] - self.gens[lo] for c_hi, hi in atoms[i + 1:] if c_lo < c_hi]
        return out

    def _split_bool(self, poly, var) -> list:
        """poly = c_0 + sum_k c_k s^k for a Boolean atom s vanishes at s = 0 and at s = 1 exactly when
        c_0 and sum_k c_k (k >= 1) do: the two polynomials, free of s."""
        parts = self._by_power(poly, var)
        rest = sum((c for k, c in parts.items() if k), self.zero)
        return [p for p in (parts.get(0, self.zero), rest) if not p.is_zero()]

    def _by_power(self, poly, var):
        """poly = sum_k coeff_k * v^k, as {k: coeff_k} with coeff_k free of v (in flint's C code:
        coeff_0 = poly at v = 0, then divide the rest by v exactly, and repeat)."""
        name, v = self.ctx.names()[var], self.gens[var]
        parts, k = {}, 0
        while not poly.is_zero():
            c0 = poly.subs({name: 0})
            if not c0.is_zero():
                parts[k] = c0
                poly = poly - c0
            poly, rem = divmod(poly, v)
            assert rem.is_zero()
            k += 1
        return parts

    def _reduce_by(self, poly, relations):
        for g in relations:
            if poly.is_zero():
                break
            _, poly = divmod(poly, g)
        return poly

    def normal_form(self, poly) -> list:
        """The cheap part of ``reduce_relations``: poly split by the root relations, then divided by
        the reciprocal and linear relations; [] proves poly = 0 (as there)."""
        if poly.is_zero():
            return []
        rels = self.relations()
        roots = [r for r in rels if r[0] == "root"]
        # shortest first: w E(s) - 1 (a shift's reciprocal) cancels at once, while dividing by the
        # reciprocal relation of a long sum first rewrites every term it touches into that many terms
        divisors = sorted([self.gens[r[1]] * r[2] - 1 for r in rels if r[0] == "recip"], key=len) \
            + self.linear_relations()
        polys = self._split_roots([self._reduce_by(poly, self.step_implications())], roots)
        for r in rels:
            if r[0] == "bool":
                polys = [q for p in polys for q in (self._split_bool(p, r[1]) if p.degrees()[r[1]] else [p])]
        return [p for p in (self._reduce_by(p, divisors) for p in polys) if not p.is_zero()]

    def reduce_relations(self, poly, cheap_first: bool = True) -> list:
        """Polynomials, free of related atoms, whose joint vanishing implies poly = 0 at the true atom
        values. An empty list is a proof that poly vanishes (every step keeps poly in the ideal of
        true relations, so the proof is sound whatever the order of the steps).

        First the cheap normal form: split by the root relations (v^q = rhs), then divide by the
        reciprocal relations w*b - 1 and the linear ones (row-disjoint, so dividing one after the other
        gives a normal form without expanding any product). If that leaves something, eliminate the
        reciprocals by clearing denominators instead, which is complete but multiplies terms.
        ``cheap_first=False`` skips the normal form (for a poly whose normal form is known nonzero)."""
        if cheap_first and not self.normal_form(poly):
            return []
        return self._eliminate(poly, self.relations())

    def _split_roots(self, polys, roots):
        for rel in roots:
            var, q, rhs = rel[1], rel[2], rel[3]
            nxt = []
            for p in polys:
                if p.degrees()[var] == 0:
                    nxt.append(p)
                    continue
                split: dict[int, object] = {}
                for k, c in self._by_power(p, var).items():     # v^(qk+j) = rhs^k v^j
                    split[k % q] = split.get(k % q, self.zero) + c * rhs ** (k // q)
                nxt.extend(split.values())
            polys = [p for p in nxt if not p.is_zero()]
        return polys

    def _eliminate(self, poly, rels) -> list:
        polys = [self._reduce_by(poly, self.step_implications())]
        for rel in rels:
            var = rel[1]
            nxt = []
            for p in polys:
                if p.degrees()[var] == 0:
                    nxt.append(p)
                    continue
                if rel[0] == "recip":                 # multiply through by b^D, substitute v = 1/b
                    parts = self._by_power(p, var)
                    b, top = rel[2], max(parts)
                    nxt.append(sum((c * b ** (top - k) for k, c in parts.items()), self.zero))
                elif rel[0] == "bool":
                    nxt.extend(self._split_bool(p, var))
                else:
                    nxt.extend(self._split_roots([p], [rel]))
            polys = [p for p in nxt if not p.is_zero()]
            if not polys:
                break
        # linear intermediates last: substituting them early multiplies the terms (5k -> 38k for
        # LayerNorm at n = 32) that the eliminations above then have to walk
        return [p for p in (self.reduce_linear(p) for p in polys) if not p.is_zero()]
