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

An absolute value |a| (SymPy's spelling of sqrt(a^2) for real a) is the radical atom sqrt(a^2) with its
relation u^2 = a^2, and sign(a) -- its derivative -- is a / sqrt(a^2), equal wherever a != 0 (at a = 0
|a| has a kink and no derivative; as for every denominator, the identity is claimed where it is
defined). So sqrt(x^2) is never x: x - sqrt(x^2) is a nonzero polynomial in the atom.

The parts: ``atoms`` (the opaque atoms, ``Stats``), ``sums`` (the normal form of sums, a mixin),
``zero_test`` (the flint zero test, instantiation at concrete sizes) and this module (``Normaliser``).
"""
from __future__ import annotations

import math

import sympy as sp
from sympy import Indexed, KroneckerDelta, Sum

from vjpcert.symbolic.every_size.atoms import (OPAQUE, SIGMA, Cos, Erf, Exp, Ind, Log, NormalFormError,  # noqa: F401
                                               Root, Sin, Stats, Step, Tanh, _EVEN, _ODD, _SIGN, canonical_index)
from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.symbolic.every_size import inverse
from vjpcert.symbolic.every_size.inverse import LowerInverse
from vjpcert.symbolic.every_size.sums import MAX_WRITTEN_OUT, SumForms  # noqa: F401
from vjpcert.symbolic.every_size.zero_test import expand_sums, plainly_zero, rational_function_is_zero  # noqa: F401


class Normaliser(SumForms):
    """Normal forms relative to known index ranges.

    ``dims``: the dimension symbols (integers >= 1). ``ranges``: free index symbol -> (lo, hi), both
    inclusive, in terms of the dims. Summation indices get their ranges from their ``Sum``.
    """

    def __init__(self, dims=(), ranges=None, peel=()):
        self.dims = set(dims)
        # dims d whose last step the normal form takes out of every sum over ..d - 1 (``SumForms.norm_sum``)
        # and out of every inverse of size d (``inverse_entry``): the form in which a chunk of d steps
        # meets its first d - 1 and a step after them
        self.peel = frozenset(peel)
        self.ranges: dict[sp.Symbol, tuple] = dict(ranges or {})
        self.stats = Stats()
        self._fresh = 0
        self._atoms: dict[sp.Expr, sp.Dummy] = {}
        self._back: dict[sp.Dummy, sp.Expr] = {}
        # norm() is deterministic for a given expression (ranges never change for a symbol, and
        # the fresh indices of a sum never survive its normal form), so its results are cached
        self._memo: dict = {}
        self._blocks: dict = {}         # (inverse's class, m) -> its leading block's class

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
        nf = self(expr) if self.peel else self.merge_ranges(self(expr))
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
        if num != 0:
            num = self.merge_bodies(num)
        if num != 0 and self._merges_once_expanded(nf):
            info["numerator_terms_after_relations"] = 0
            return True, info
        info["numerator_terms_after_relations"] = len(sp.Add.make_args(num)) if num != 0 else 0
        info["remaining_atoms"] = sorted({str(self._back.get(s, s))[:80] for s in num.free_symbols})[:12]
        return num == 0, info

    def _merges_once_expanded(self, nf) -> bool:
        """The range join again on the expanded normal form: a sum a factor of a product of sums (a
        chunk's state scaled by gamma, gamma (S + sum_(j < n - 1) ...), against the chunk one step longer)
        meets its edge term only once the product is multiplied out. Tried only where the first test
        failed, so what it already proves costs nothing more."""
        expanded = self.expand(nf)
        if expanded == nf or self.peel:
            return False
        merged = self.merge_ranges(expanded)
        return merged != expanded and rational_function_is_zero(self.atomise(merged))

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
        if isinstance(e, (sp.Symbol, Indexed, Sum, KroneckerDelta, sp.Pow, sp.NumberSymbol, LowerInverse) + OPAQUE):
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
        """Ind^k = Ind, delta^k = delta and Step^k = Step for k >= 1 (each is 0 or 1). Exact."""
        for s in sorted(num.free_symbols, key=str):
            if isinstance(self._back.get(s), (Ind, KroneckerDelta, Step)):
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
        if isinstance(e, LowerInverse):                     # an entry of unit_lower_inverse: its indices
            return self.inverse_entry(e.func, e.args[0], [sp.expand(self.norm(i)) for i in e.args[1:]])
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
        if isinstance(e, sp.Abs):                           # |a| = sqrt(a^2), a real
            self.stats.absolute_values += 1
            a = self.norm(e.args[0])
            return self.power(self.expand(a * a), sp.Rational(1, 2))
        if isinstance(e, sp.sign):                          # sign(a) = a / sqrt(a^2) where a != 0
            a = self.norm(e.args[0])
            return a * self.power(self.expand(a * a), sp.Rational(-1, 2))
        for f, atom in {**_ODD, **_EVEN}.items():
            if isinstance(e, f):
                return self.odd_even(atom, self.norm(e.args[0]))
        if isinstance(e, Root):
            return self.root(self.norm(e.args[0]), int(e.args[1]))
        if isinstance(e, Ind):
            return self.indicator(self.norm(e.args[0]))
        if isinstance(e, Step):
            return self.step(self.norm(e.args[0]))
        if isinstance(e, sp.Heaviside):                     # the SymPy backend's spelling of B.step
            if len(e.args) != 2 or e.args[1] != STEP_AT_KINK:
                raise NormalFormError(f"a Heaviside with another value at 0 than the language's: {e}")
            return self.step(self.norm(e.args[0]))
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
        # a positive param to a symbolic power (a decay gamma^(i - j)): e^((i - j) log gamma), so that
        # gamma^n meets gamma^(n - 1) gamma and the exps' relations decide it
        if base.is_Symbol and base.is_positive:
            return self.exp(self.expand(ex * self.log(base)))
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
        num, den = self._radicand(base)
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

    def _radicand(self, base) -> tuple:
        """(numerator, denominator) of a radicand, expanded and without a common factor. A polynomial
        in its atoms (numbers as its only denominators: a variance, the usual case) is only expanded:
        its content split below does what cancelling it would (the same roots on every every-size
        proof of the built-in ops), and putting it over one denominator and cancelling cost most of
        a LayerNorm law's cross-check."""
        a = self.atomise(base)
        if a.is_polynomial(*a.free_symbols):
            return sp.expand(a), sp.Integer(1)
        num, den = sp.fraction(sp.cancel(sp.together(a)))
        return sp.expand(num), sp.expand(den)

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

    def step(self, arg):
        """Step(arg) with the argument made canonical up to a positive factor: divided by the absolute
        coefficient of its least term (in SymPy's sort order, which ignores coefficients), and
        1 - Step(-arg) when that coefficient is negative -- so equal kinks are one atom however the
        spec scaled or negated them."""
        arg = self.expand(arg)
        if arg.is_Rational:
            return Step(arg)
        terms = arg.as_coefficients_dict()
        lead = min(terms, key=sp.default_sort_key)
        c = terms[lead]
        if not c.is_Rational:
            raise NormalFormError(f"a kink whose argument has a non-rational coefficient: {arg}")
        unit = self.expand(arg / abs(c))
        return Step(unit) if c > 0 else 1 - Step(self.expand(-unit))

    def odd_even(self, atom, arg):
        arg = self.expand(arg)
        if arg.could_extract_minus_sign():
            return _SIGN[atom] * atom(self.expand(-arg))
        return atom(arg)

    def inverse_entry(self, cls, bases, idx):
        """An entry of a unit lower triangular inverse: 0 where its row is provably above its column, 1 on
        the diagonal, and, where its row and column are bounded by an m below its size - 1, the entry of
        the inverse of A's leading block (``inverse.leading_block``): so the inverse over the first n - 1
        steps of a chunk meets the one over all n there."""
        i, j = idx[-2:]
        if i == j:
            return sp.Integer(1)
        if self.peel and sp.expand(i - cls.size + 1) == 0 and cls.size in self.peel:
            # the last row, by forward substitution against the rows above it (where T is the leading
            # block's): T[d - 1, j] = -sum_(k <= d - 2) L[d - 1, k] T[k, j], for j <= d - 2
            aff = self._affine(j)
            bounds = aff and self._bounds(*aff)
            if bounds and self._nonneg(cls.size - 2 - bounds[1]):
                k, batch = sp.Dummy("k", integer=True), idx[:-2]
                self.stats.last_rows_substituted += 1
                return self.norm(-Sum(cls.matrix_entry(batch, i, k) * cls(bases, *batch, k, j), (k, 0, cls.size - 2)))
        below = self._affine(i - j)
        bounds = below and self._bounds(*below)
        if bounds and self._neg(bounds[1]):
            return sp.Integer(0)
        bounds = [self._bounds(*aff) for aff in (self._affine(i), self._affine(j))
                  if aff is not None]
        if len(bounds) == 2 and None not in bounds:
            (_, hi_i), (_, hi_j) = bounds
            m = hi_i if self._nonneg(hi_i - hi_j) else hi_j if self._nonneg(hi_j - hi_i) else None
            if m is not None and self._pos(cls.size - 1 - m):
                block = self._blocks.get((cls, m))
                if block is None:
                    block = self._blocks[(cls, m)] = inverse.leading_block(
                        cls, m, lambda body, ranges: Normaliser(self.dims, ranges)(body))
                    self.stats.leading_blocks += 1
                cls = block
        return cls(bases, *idx)

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
