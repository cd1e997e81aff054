"""An exact normal form for expressions with symbolic dimensions (``IndexedBase``, ``Sum``,
``KroneckerDelta``), and the zero test built on it.

Plain ``simplify`` fails or raises on these expressions (measured on the every-size statements of
softmax and the norms). What works, and is sound:

* every ``Sum`` is expanded by linearity: its body is split into monomials, factors that do not depend
  on the summation indices are pulled out, nested sums over a product are flattened into one
  multi-index sum (Fubini: the ranges are constants), and a multi-sum whose indices fall into
  independent groups is split into a product of sums;
* a ``KroneckerDelta`` in a sum body is *evaluated* -- sum_k f(k) delta(k, e) = f(e) -- only when the
  index bounds prove that e lies inside k's range for every value of the other indices; a delta
  whose two sides provably differ (interval or parity argument) is 0;
* what is left of each sum is an *atom*: the indices are renamed canonically (by nesting height, and
  the order is chosen as the least among all orderings), so equal sums are syntactically equal;
* transcendental subterms become opaque atoms too (``Exp``, ``Erf``, ``Tanh``, ``Sin``, ``Cos``,
  ``Root``): SymPy would silently rewrite exp(a)**2 as exp(2a) and sqrt(s)**-3 as s**(-3/2), so an
  atom must not be a SymPy function that evaluates itself;
* the result is a rational function in the atoms. It is zero when the numerator expands to 0 --
  after reducing each radical atom u = b^(1/q) by its defining relation u^q = b, which is also exact.

Every step replaces an expression by an equal one (given: dims are integers >= 1, index ranges as
declared, inputs real, denominators nonzero), so ``is_zero`` returning True is a proof. False is *not*
a disproof: atoms may be related in ways the normal form does not see; the caller then looks for a
numeric witness.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy as sp
from sympy import Indexed, KroneckerDelta, Sum

MAX_PERMUTATIONS_VARS = 6       # canonical naming tries every order of a sum's indices up to this many
MAX_WRITTEN_OUT = 8             # a sum over a range of constant length up to this is written out term by term


class NormalFormError(Exception):
    """The expression holds a construct the normaliser does not treat (a float, a Piecewise, an
    unevaluated derivative): the claim is `inconclusive`, never `proved`."""


# ----------------------------------------------------------------------------- opaque atoms
class Exp(sp.Function):
    """exp as an atom that never rewrites itself (SymPy turns exp(a)**2 into exp(2a))."""
    nargs = 1


class Erf(sp.Function):
    nargs = 1


class Tanh(sp.Function):
    nargs = 1


class Sin(sp.Function):
    nargs = 1


class Cos(sp.Function):
    nargs = 1


class Root(sp.Function):
    """Root(b, q) = b**(1/q), principal branch, as an atom; its relation Root(b, q)**q = b is used
    by the zero test. (SymPy would fold sqrt(s)**-3 into s**(-3/2) and lose the atom.)"""
    nargs = 2


class Log(sp.Function):
    """log as an atom (its argument is positive wherever the spec is defined): exp(k log u) = u^k."""
    nargs = 1


class Ind(sp.Function):
    """Ind(e) = 1 when the integer e >= 0, else 0: a mask built from shapes (np.tril, np.where), with e
    affine in indices and dims. Evaluated only where the index bounds decide it."""
    nargs = 1

    @classmethod
    def eval(cls, e):
        if e.is_Integer:
            return sp.Integer(1 if e >= 0 else 0)
        return None


OPAQUE = (Exp, Erf, Tanh, Sin, Cos, Root, Log, Ind)
_ODD = {sp.erf: Erf, sp.tanh: Tanh, sp.sin: Sin}
_EVEN = {sp.cos: Cos}
_SIGN = {Erf: -1, Tanh: -1, Sin: -1, Cos: 1}   # f(-a) = sign * f(a)
SIGMA = "σ"                                      # canonical sum indices are σ{height}_{position}


def canonical_index(height: int, pos: int) -> sp.Symbol:
    return sp.Symbol(f"{SIGMA}{height}_{pos}", integer=True)


def _height_of(sym: sp.Symbol) -> int:
    name = sym.name
    if not name.startswith(SIGMA):
        return -1
    try:
        return int(name[len(SIGMA):].split("_")[0])
    except ValueError:
        return -1


@dataclass
class Stats:
    """What the normalisation did, for the certificate."""
    sums_seen: int = 0
    deltas_evaluated: int = 0
    deltas_zero: int = 0
    sums_flattened: int = 0
    sums_split: int = 0
    relation_reductions: int = 0
    sums_written_out: int = 0

    def as_dict(self) -> dict:
        return {"sums_normalised": self.sums_seen, "deltas_evaluated": self.deltas_evaluated,
                "deltas_zero": self.deltas_zero, "sums_flattened": self.sums_flattened,
                "sums_split": self.sums_split, "relation_reductions": self.relation_reductions,
                "sums_written_out": self.sums_written_out}


class Normaliser:
    """Normal forms relative to known index ranges.

    ``dims``: the dimension symbols (integers >= 1). ``ranges``: free index symbol -> (lo, hi), both
    inclusive, in terms of the dims. Summation indices get their ranges from their ``Sum``.
    """

    def __init__(self, dims=(), ranges=None):
        self.dims = set(dims)
        self.ranges: dict[sp.Symbol, tuple] = dict(ranges or {})
        self.stats = Stats()
        self._fresh = 0
        self._atoms: dict[sp.Expr, sp.Dummy] = {}
        self._back: dict[sp.Dummy, sp.Expr] = {}
        # norm() is deterministic for a given expression (ranges never change for a symbol, and
        # the fresh indices of a sum never survive its normal form), so its results are cached
        self._memo: dict = {}

    # ------------------------------------------------------------------ public
    def __call__(self, expr, max_rounds: int = 6):
        """The normal form: ``norm`` repeated until it no longer changes the expression."""
        e = sp.sympify(expr)
        for _ in range(max_rounds):
            new = self.norm(e)
            if new == e:
                return new
            e = new
        return e

    def is_zero(self, expr) -> tuple[bool, dict]:
        """(True, info) when the normal form of ``expr`` is the zero rational function in its atoms
        (after radical relations); (False, info) otherwise -- not a disproof."""
        nf = self(expr)
        a = self.atomise(nf)
        info = {"atoms": len(a.free_symbols)}
        if rational_function_is_zero(a):            # fast and exact (python-flint)
            info["numerator_terms"] = 0
            return True, info
        num = self._numerator(a)
        info["numerator_terms"] = len(sp.Add.make_args(num)) if num != 0 else 0
        if num == 0:
            return True, info
        num = self._reduce_indicators(self._reduce_trig(self._reduce_radicals(num)))
        info["numerator_terms_after_relations"] = len(sp.Add.make_args(num)) if num != 0 else 0
        info["remaining_atoms"] = sorted({str(self._back.get(s, s))[:80] for s in num.free_symbols})[:12]
        return num == 0, info

    # ------------------------------------------------------------------ atoms <-> symbols
    def atom(self, e) -> sp.Dummy:
        d = self._atoms.get(e)
        if d is None:
            d = self._atoms[e] = sp.Dummy(f"a{len(self._atoms)}")
            self._back[d] = e
        return d

    def atomise(self, e):
        """Replace every atom by a dummy symbol: what is left is built from + * and integer powers,
        so SymPy's polynomial arithmetic can never reach inside a Sum or rewrite an atom."""
        if e.is_Rational:
            return e
        if e.is_Number:
            raise NormalFormError(f"inexact number {e} (a float cannot be proved; use exact constants)")
        if isinstance(e, sp.Add):
            return sp.Add(*[self.atomise(a) for a in e.args])
        if isinstance(e, sp.Mul):
            return sp.Mul(*[self.atomise(a) for a in e.args])
        if isinstance(e, sp.Pow) and e.exp.is_Integer:
            return self.atomise(e.base) ** e.exp
        if isinstance(e, (sp.Symbol, Indexed, Sum, KroneckerDelta, sp.Pow, sp.NumberSymbol) + OPAQUE):
            return self.atom(e)
        raise NormalFormError(f"cannot treat {type(e).__name__} {str(e)[:80]} as an atom")

    def restore(self, e):
        return e.xreplace(self._back) if self._back else e

    def _radical(self, atom):
        """(q, atom**q) for a radical atom, else None."""
        if isinstance(atom, Root):
            return int(atom.args[1]), atom.args[0]
        if isinstance(atom, sp.Pow) and atom.exp.is_Rational and not atom.exp.is_Integer:
            return int(atom.exp.q), atom.base ** atom.exp.p
        return None

    def _reduce_radicals(self, num, rounds: int = 8):
        """Reduce each radical atom u with u^q = b: u^e -> u^(e mod q) b^(e div q). Exact."""
        for _ in range(rounds):
            changed = False
            for s in sorted(num.free_symbols, key=str):
                rad = self._radical(self._back.get(s))
                if rad is None:
                    continue
                q, val = rad
                poly = sp.Poly(num, s)
                if poly.degree() < q:
                    continue
                v = self.atomise(self.norm(val))
                num = self._numerator(sp.Add(*[c * s ** (e % q) * v ** (e // q) for (e,), c in poly.terms()]))
                self.stats.relation_reductions += 1
                changed = True
                if num == 0:
                    return num
            if not changed:
                break
        return num

    def _reduce_indicators(self, num):
        """Ind^k = Ind and delta^k = delta for k >= 1 (each is 0 or 1). Exact."""
        for s in sorted(num.free_symbols, key=str):
            if isinstance(self._back.get(s), (Ind, KroneckerDelta)):
                poly = sp.Poly(num, s)
                if poly.degree() > 1:
                    num = sp.expand(sp.Add(*[c * (s if e >= 1 else 1) for (e,), c in poly.terms()]))
                    self.stats.relation_reductions += 1
        return num

    def _reduce_trig(self, num):
        """sin^2 a = 1 - cos^2 a for every Sin atom: the sine's degree drops below 2. Exact."""
        for s in sorted(num.free_symbols, key=str):
            atom = self._back.get(s)
            if not isinstance(atom, Sin):
                continue
            poly = sp.Poly(num, s)
            if poly.degree() < 2:
                continue
            c = self.atom(Cos(atom.args[0]))
            num = self._numerator(sp.Add(*[k * s ** (e % 2) * (1 - c ** 2) ** (e // 2) for (e,), k in poly.terms()]))
            self.stats.relation_reductions += 1
            if num == 0:
                return num
        return num

    @staticmethod
    def _numerator(a):
        num, _den = sp.fraction(sp.together(a))
        return sp.expand(num)

    def expand(self, e):
        """``sympy.expand`` that does not look inside atoms."""
        return self.restore(sp.expand(self.atomise(e)))

    # ------------------------------------------------------------------ the recursion
    def norm(self, e):
        hit = self._memo.get(e)
        if hit is None:
            hit = self._memo[e] = self._norm(e)
        return hit

    def _norm(self, e):
        if e.is_Number or isinstance(e, sp.NumberSymbol):
            if e.is_Number and not e.is_Rational:
                raise NormalFormError(f"inexact number {e}")
            return e
        if isinstance(e, sp.Symbol):
            return e
        if isinstance(e, Indexed):
            return e.func(e.base, *[sp.expand(i) for i in e.indices])
        if isinstance(e, Sum):
            return self.norm_sum(e)
        if isinstance(e, KroneckerDelta):
            return self.delta(self.norm(e.args[0]), self.norm(e.args[1]))
        if isinstance(e, sp.Add):
            return sp.Add(*[self.norm(a) for a in e.args])
        if isinstance(e, sp.Mul):
            return sp.Mul(*[self.norm(a) for a in e.args])
        if isinstance(e, sp.Pow):
            return self.power(self.norm(e.base), self.norm(e.exp))
        if isinstance(e, sp.exp):
            return self.exp(self.norm(e.args[0]))
        for f, atom in {**_ODD, **_EVEN}.items():
            if isinstance(e, f):
                return self.odd_even(atom, self.norm(e.args[0]))
        if isinstance(e, Root):
            return self.root(self.norm(e.args[0]), int(e.args[1]))
        if isinstance(e, Ind):
            return self.indicator(self.norm(e.args[0]))
        if isinstance(e, (sp.log, Log)):
            return self.log(self.norm(e.args[0]))
        if isinstance(e, Exp):
            return self.exp(self.norm(e.args[0]))
        if isinstance(e, (Erf, Tanh, Sin, Cos)):
            return self.odd_even(type(e), self.norm(e.args[0]))
        raise NormalFormError(f"cannot normalise {type(e).__name__}: {str(e)[:80]}")

    # ------------------------------------------------------------------ powers and functions
    def power(self, base, ex):
        if isinstance(base, Ind):                           # Ind^k = Ind (k >= 1): it is 0 or 1
            if ex.is_Integer and ex >= 1:
                return base
            raise NormalFormError(f"an indicator to the power {ex} (a division by a mask)")
        if ex.is_Integer:
            return base ** ex
        if ex.is_Rational:                                  # p/q, not an integer
            p, q = int(ex.p), int(ex.q)
            if base.is_Rational and base > 0:               # SymPy's own radicals are canonical
                return base ** ex
            if isinstance(base, Exp):                       # (e^a)^(p/q) = e^(p a / q), a real
                return self.exp(self.expand(base.args[0] * ex))
            if base == 1:
                return sp.Integer(1)
            return self.root(base, q) ** p
        # a symbolic exponent (RoPE's base^(-2i/d)): an atom when the base is a positive constant
        if base.is_Rational and base > 0:
            return sp.Pow(base, self.expand(ex))
        raise NormalFormError(f"symbolic power of a non-constant base: ({base})**({ex})")

    def root(self, base, q: int):
        """Root(base, q) with the radicand in a canonical form: cancelled, positive rational content
        and positive symbols in the denominator split off (valid: they are > 0)."""
        if q == 1:
            return base
        if base.is_Rational:
            if base >= 0:
                return base ** sp.Rational(1, q)
            raise NormalFormError(f"root of a negative constant {base}")
        a = sp.cancel(sp.together(self.atomise(base)))
        num, den = sp.fraction(a)
        num, den = sp.expand(num), sp.expand(den)
        c_num, num = num.as_content_primitive()
        c_den, den = den.as_content_primitive()
        c = sp.Rational(c_num) / sp.Rational(c_den)
        if c < 0:
            c, num = -c, sp.expand(-num)
        out = c ** sp.Rational(1, q)
        # a denominator that is a monomial in positive symbols (dims, eps, pi) splits off:
        # (p / m)^(1/q) = p^(1/q) / m^(1/q) because m > 0
        if den != 1 and len(sp.Add.make_args(den)) == 1 \
                and all(self._positive(self.restore(s)) for s in den.free_symbols):
            for b, k in den.as_powers_dict().items():
                out *= Root(self.restore(b), q) ** (-int(k))
            den = sp.Integer(1)
        rad = self.restore(num / den)
        return out * (Root(rad, q) if rad != 1 else 1)

    def _positive(self, s) -> bool:
        return bool(getattr(s, "is_positive", False)) and isinstance(s, (sp.Symbol, sp.NumberSymbol))

    def exp(self, arg):
        """exp(sum c_t t) = prod Exp(t / q_t)^p_t with c_t = p_t / q_t: a canonical product of atoms."""
        out = sp.Integer(1)
        for term in sp.Add.make_args(self.expand(arg)):
            coeff, rest = term.as_coeff_Mul()
            if not coeff.is_Rational:
                raise NormalFormError(f"inexact coefficient {coeff} in exp")
            if rest == 1:
                out *= Exp(coeff)
            elif isinstance(rest, Log):                     # exp(k log u) = u^k, u > 0
                out *= self.power(rest.args[0], coeff)
            else:
                out *= Exp(rest / coeff.q) ** coeff.p
        return out

    def log(self, arg):
        """log of a product of Exp atoms is their exponent (real arguments); anything else an atom."""
        parts = sp.Mul.make_args(arg)
        if all(isinstance(b, Exp) for f in parts for b in [f.as_base_exp()[0]]) and arg != 1:
            return self.expand(sp.Add(*[f.as_base_exp()[1] * f.as_base_exp()[0].args[0] for f in parts]))
        if arg == 1:
            return sp.Integer(0)
        return Log(arg)

    def indicator(self, arg):
        """Ind(arg) decided by the index bounds where they decide it (1 when arg >= 0 for every value of
        the indices in range, 0 when arg < 0 for every value), else kept as an atom."""
        arg = sp.expand(arg)
        if arg.is_Integer:
            return sp.Integer(1 if arg >= 0 else 0)
        aff = self._affine(arg)
        if aff is None:
            raise NormalFormError(f"a mask whose bound {arg} is not affine in the indices")
        bounds = self._bounds(*aff)
        if bounds is not None:
            lo, hi = bounds
            if self._nonneg(lo):
                return sp.Integer(1)
            if self._neg(hi):
                return sp.Integer(0)
            if sp.expand(hi) == 0:                          # arg <= 0 always: arg >= 0 iff arg = 0
                return self.delta(arg, sp.Integer(0))
            if sp.expand(lo) == -1:                         # arg >= -1 always: arg >= 0 iff arg != -1
                return 1 - self.delta(arg, sp.Integer(-1))
        return Ind(arg)

    def odd_even(self, atom, arg):
        arg = self.expand(arg)
        if arg.could_extract_minus_sign():
            return _SIGN[atom] * atom(self.expand(-arg))
        return atom(arg)

    # ------------------------------------------------------------------ Kronecker deltas
    def _affine(self, e):
        """e as {symbol: int coefficient} + integer constant, or None if it is not affine in
        symbols with integer coefficients."""
        e = sp.expand(e)
        coeffs, const = {}, sp.Integer(0)
        for term in sp.Add.make_args(e):
            c, rest = term.as_coeff_Mul()
            if not c.is_Integer:
                return None
            if rest == 1:
                const += c
            elif isinstance(rest, sp.Symbol):
                coeffs[rest] = coeffs.get(rest, 0) + int(c)
            else:
                return None
        return {s: c for s, c in coeffs.items() if c}, int(const)

    def _bounds(self, coeffs: dict, const: int, extra: dict | None = None):
        """Interval [lo, hi] of sum c_s s + const over the known index ranges (dims stay symbolic);
        None when a symbol is neither a dim nor an index with a range."""
        ranges = {**self.ranges, **(extra or {})}
        lo = hi = sp.Integer(const)
        for s, c in coeffs.items():
            if s in self.dims:
                lo, hi = lo + c * s, hi + c * s
            elif s in ranges:
                a, b = ranges[s]
                lo, hi = (lo + c * a, hi + c * b) if c > 0 else (lo + c * b, hi + c * a)
            else:
                return None
        return sp.expand(lo), sp.expand(hi)

    def _never_equal(self, a, b, extra=None) -> bool:
        aff = self._affine(a - b)
        if aff is None:
            return False
        coeffs, const = aff
        idx = {s: c for s, c in coeffs.items() if s not in self.dims}
        dimc = {s: c for s, c in coeffs.items() if s in self.dims}
        if idx:                                          # parity: g | every index coeff but not the rest
            g = math.gcd(*idx.values())
            if g > 1 and all(c % g == 0 for c in dimc.values()) and const % g != 0:
                return True
        bounds = self._bounds(coeffs, const, extra)
        if bounds is None:
            return False
        lo, hi = bounds
        return self._neg(hi) or self._pos(lo)

    def _coeffs_over_dims(self, e):
        """The coefficients of e as a polynomial in d' = d - 1 >= 0 for every dim d (constant term
        first), or None. All >= 0 means e >= 0 for every allowed size."""
        e = sp.expand(e)
        if e.is_Number:
            return [e]
        shifted = sp.expand(e.xreplace({d: d + 1 for d in self.dims}))
        if shifted.free_symbols - self.dims:
            return None
        poly = sp.Poly(shifted, *sorted(self.dims, key=str))
        terms = dict(poly.terms())
        const = terms.pop((0,) * len(poly.gens), sp.Integer(0))
        return [const, *terms.values()]

    def _nonneg(self, e) -> bool:
        cs = self._coeffs_over_dims(e)
        return cs is not None and all(c >= 0 for c in cs)

    def _pos(self, e) -> bool:
        cs = self._coeffs_over_dims(e)
        return cs is not None and cs[0] > 0 and all(c >= 0 for c in cs)

    def _neg(self, e) -> bool:
        return self._pos(-e)

    def delta(self, a, b):
        if a == b:
            return sp.Integer(1)
        if self._never_equal(a, b):
            self.stats.deltas_zero += 1
            return sp.Integer(0)
        aff = self._affine(a - b)
        if aff is None:
            return KroneckerDelta(a, b)
        coeffs, const = aff
        if not coeffs:
            return sp.Integer(1 if const == 0 else 0)
        g = math.gcd(*coeffs.values(), const) if coeffs else 1
        if g > 1:                                        # delta(2p, 2q) = delta(p, q)
            coeffs, const = {s: c // g for s, c in coeffs.items()}, const // g
        first = min(coeffs, key=str)
        sign = 1 if coeffs[first] > 0 else -1
        pos = sum((c * sign * s for s, c in coeffs.items() if c * sign > 0), sp.Integer(0))
        neg = sum((-c * sign * s for s, c in coeffs.items() if c * sign < 0), sp.Integer(0))
        if const * sign > 0:
            pos += const * sign
        else:
            neg -= const * sign
        return KroneckerDelta(pos, neg)

    # ------------------------------------------------------------------ sums
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
                terms = [e.function.xreplace({v: sp.expand(self.norm(lo) + k)}) for k in range(int(size))]
                self.stats.sums_written_out += 1
                return self.norm(sp.Add(*[Sum(t, *rest) if rest else t for t in terms]))
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
                new = []
                for g, e in factors:
                    if v in g.free_symbols:
                        g = self.norm(g.xreplace({v: value}))
                        if g == 0:
                            if e < 0:
                                raise NormalFormError("a denominator is 0 once a delta is evaluated")
                            return sp.Integer(0)
                        for h in sp.Mul.make_args(g):   # a factor may now be a product
                            b, e2 = h.as_base_exp()
                            if b.is_Number:
                                coeff *= h ** e
                            else:
                                new.append((b, e2 * e))
                    else:
                        new.append((g, e))
                factors = self._flatten(new, V)
                progress = True
                break
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
        inside it, then the order of indices that gives the least printed form."""
        height = 0
        for f, _ in factors:
            for s in f.atoms(Sum):
                for v, _, _ in s.limits:
                    height = max(height, _height_of(v) + 1)
        body = sp.Mul(*[f ** k for f, k in factors])
        orders = itertools.permutations(V) if len(V) <= MAX_PERMUTATIONS_VARS else [sorted(V, key=str)]
        best, best_key = None, None
        for order in orders:
            names = {v: canonical_index(height, t) for t, v in enumerate(order)}
            limits = [(names[v], *self.ranges[v]) for v in sorted(V, key=lambda v: names[v].name)]
            cand = Sum(body.xreplace(names), *limits)
            key = sp.srepr(cand)
            if best_key is None or key < best_key:
                best, best_key = cand, key
        return best


# ----------------------------------------------------------------------------- the zero test
def rational_function_is_zero(a, opaque: bool = False) -> bool:
    """Whether an expression built from + * and integer powers of symbols and rationals is the zero
    rational function: evaluated as (numerator, denominator) polynomials in python-flint, exactly.
    (SymPy's ``together`` is the same test, two orders of magnitude slower on large cross-checks.)
    With ``opaque``, every other subterm (exp(...), sqrt(...)) is a variable of its own, keyed by the
    subterm as SymPy built it."""
    import flint
    a = sp.sympify(a)
    variables: dict = {}
    memo: dict = {}

    def var(e):
        if e not in variables:
            variables[e] = len(variables)

    # first pass: which subterms are variables (a symbol, or an opaque subterm)
    seen: set = set()

    def scan(e):
        if e.is_Rational or e in seen:
            return
        seen.add(e)
        if isinstance(e, (sp.Add, sp.Mul)):
            for t in e.args:
                scan(t)
            return
        if isinstance(e, sp.Pow) and e.exp.is_Integer:
            scan(e.base)
            return
        if e.is_Number:
            raise NormalFormError(f"inexact number {e}")
        if not (opaque or isinstance(e, sp.Symbol)):
            raise NormalFormError(f"not a rational function of atoms: {type(e).__name__}")
        var(e)
    scan(a)
    if not variables:
        return a == 0
    ctx = flint.fmpq_mpoly_ctx.get(("a", len(variables)), "degrevlex")
    gens = ctx.gens()
    one = ctx.constant(1)

    def ev(e):
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Rational:
            out = (ctx.constant(flint.fmpq(int(e.p), int(e.q))), one)
        elif isinstance(e, sp.Add):
            n, d = ev(e.args[0])
            for t in e.args[1:]:
                n2, d2 = ev(t)
                n, d = (n + n2, d) if d == d2 else (n * d2 + n2 * d, d * d2)
            out = (n, d)
        elif isinstance(e, sp.Mul):
            n, d = one, one
            for t in e.args:
                n2, d2 = ev(t)
                n, d = n * n2, d * d2
            out = (n, d)
        elif isinstance(e, sp.Pow) and e.exp.is_Integer:
            n, d = ev(e.base)
            k = int(e.exp)
            if k < 0:
                if n == 0:
                    raise NormalFormError("a power of 0 with a negative exponent")
                n, d, k = d, n, -k
            out = (n ** k, d ** k)
        else:
            out = (gens[variables[e]], one)
        memo[e] = out
        return out
    return ev(a)[0] == 0


def plainly_zero(expr) -> bool:
    """True when ``expr`` is 0 as a rational function of its non-rational subterms, each taken as it
    is (exp(...), sqrt(...), erf(...) as opaque atoms, equal only when SymPy builds them equal). Exact
    but not complete: False says nothing (``Normaliser.is_zero`` relates the atoms). Cheap: two
    evaluations of one spec built by the same operations are usually this close."""
    try:
        return rational_function_is_zero(expr, opaque=True)
    except NormalFormError:
        return False


# ----------------------------------------------------------------------------- instantiation
def expand_sums(e, values: dict, memo: dict | None = None, arrays: dict | None = None):
    """e with the dims (and any other symbols in ``values``) replaced by integers and every Sum
    written out term by term (innermost last): the general statement at one concrete size. With
    ``arrays`` (name -> numpy array) every entry x[i, j] at concrete indices becomes the array's
    entry. ``memo`` may be shared by the entries of one array: the same inner sum (a row mean, a
    softmax denominator) recurs in every entry of a row."""
    e = e.xreplace(values)
    memo = {} if memo is None else memo

    def walk(x):
        if not x.args:
            return x
        hit = memo.get(x)
        if hit is not None:
            return hit
        if isinstance(x, Sum):
            terms = [x.function]
            for v, lo, hi in x.limits:
                lo, hi = walk(lo), walk(hi)
                if not (lo.is_Integer and hi.is_Integer):
                    raise NormalFormError(f"sum bounds {lo}..{hi} are not concrete")
                terms = [t.xreplace({v: sp.Integer(k)}) for t in terms for k in range(int(lo), int(hi) + 1)]
            out = sp.Add(*[walk(t) for t in terms])
        elif isinstance(x, Indexed) and arrays is not None:
            idx = tuple(walk(i) for i in x.indices)
            if not all(i.is_Integer for i in idx):
                raise NormalFormError(f"{x}: index not concrete after instantiation")
            arr = arrays[x.base.label.name]
            idx = tuple(int(i) for i in idx)
            if len(idx) != arr.ndim or any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
                raise NormalFormError(f"{x} is outside the array {x.base.label.name} of shape {arr.shape}")
            out = sp.sympify(arr[idx])
        else:
            args = [walk(a) for a in x.args]
            out = x if all(a is b for a, b in zip(args, x.args)) else x.func(*args)
        memo[x] = out
        return out
    return walk(e)
