"""The atoms of the every-size normal form (``symbolic.every_size.normal``): transcendental subterms
that never rewrite themselves, mask indicators, the canonical names of sum indices, and the record of
what a normalisation did.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from vjpcert.core.derivatives import STEP_AT_KINK


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


class Step(sp.Function):
    """The language's kink, [a > 0] (``B.step``), as an atom: a free Boolean of the region, s^2 = s,
    Step(-a) = 1 - Step(a) off the kink, Step(c a) = Step(a) for c > 0 (``Normaliser.step``). Its
    derivative is 0 on every open region, so an identity proved with it holds region by region; on
    a kink no region says anything (the fixed-dims tier's claim ``at_the_kink``)."""
    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_Rational:
            return sp.Integer(1) if a > 0 else sp.Integer(STEP_AT_KINK)
        return None

    def fdiff(self, argindex=1):
        return sp.Integer(0)


OPAQUE = (Exp, Erf, Tanh, Sin, Cos, Root, Log, Ind, Step)
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
    absolute_values: int = 0
    bodies_joined: int = 0          # groups of same-range sums whose joined body cancelled
    ranges_narrowed: int = 0        # summation ranges cut to the bound a mask puts on their index
    leading_blocks: int = 0         # inverses read as their leading block's
    last_steps_taken: int = 0       # sums over a peeled dim split into the steps before the last, and it
    last_rows_substituted: int = 0  # an inverse's last row written by forward substitution

    def as_dict(self) -> dict:
        joined = {"sums_joined": self.bodies_joined} if self.bodies_joined else {}
        shifts = {k: v for k, v in (("ranges_narrowed", self.ranges_narrowed),
                                    ("leading_blocks", self.leading_blocks),
                                    ("last_steps_taken", self.last_steps_taken),
                                    ("last_rows_substituted", self.last_rows_substituted)) if v}
        return {**joined, **shifts, "sums_normalised": self.sums_seen, "deltas_evaluated": self.deltas_evaluated,
                "deltas_zero": self.deltas_zero, "sums_flattened": self.sums_flattened,
                "sums_split": self.sums_split, "relation_reductions": self.relation_reductions,
                "sums_written_out": self.sums_written_out, "absolute_values": self.absolute_values}
