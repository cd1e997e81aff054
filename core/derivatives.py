"""The derivative table: for every primitive of the spec language, its JVP rule, written once.

This is the only place derivative rules of primitives are written; the language's matrix functions
(``core.matrix_functions``: ``unit_lower_inverse``) keep their rule beside their definition there. Every interpreter that
differentiates a spec takes f'(a) from here: forward mode over the traced DAG
(``symbolic.fixed.evaluate.Tangent``), the running error model of floats (``core.rounding``, over
intervals), the every-size tier (``symbolic.every_size.heads`` checks that SymPy's derivative of each
head it differentiates is this table's row), and the arrays mod p of ``symbolic.modular``. A wrong
row would be trusted by all of them, so ``tests/test_derivatives.py`` holds every row against
``sympy.diff``.

A row is a function of a *field-operations object* ``F`` -- the protocol each interpreter adapts its
own numbers to -- the primitive's argument ``a``, its value ``y = f(a)`` (so a row may reuse the value
the interpreter already has: exp -> y, tanh -> 1 - y^2) and the primitive's parameter ``k`` (the
exponent of ``pow``; None otherwise). It returns the derivative factor f'(a); the interpreter
multiplies it by the argument's tangent. ``F`` provides:

    F.c(q)          the constant q (a Fraction)
    F.add(x, z)     x + z                       F.mul(x, z)   x * z
    F.neg(x)        -x                          F.inv(x)      1 / x
    F.pow(x, n)     x ** n for an int n         F.pi()        pi
    F.exp(x), F.sqrt(x), F.sin(x), F.cos(x)     the functions themselves

(an interpreter that also evaluates primitives through ``F``, as the interval field of the error
model does, adds the remaining ones: log, erf, tanh). Nothing else may be asked of ``F``: rows are
written in these operations only, so a new field needs only an adaptor.

Not rows: the nullary ops (constants, pi, algebraic constants, leaves; their tangent is 0 or the
seed) and the sum and product rules (add, neg, mul), which are the dual-number arithmetic itself and
live where each interpreter implements its arithmetic.

A kink primitive -- a derivative that is piecewise constant, which a prover handles region by region
-- is one row too, with no ``factor``: its kinks, the constant derivative on each region and the
primitive's formula there (``branches``, which ``tests/test_derivatives.py`` differentiates)::

    "step": Rule(kinks=(Fraction(0),), pieces=(Fraction(0), Fraction(0)), branches=(0, 1)),

``derivative(F, kind, a, y, region=r)`` is then F.c(pieces[r]) on the r-th region between the
kinks. Where the pieces differ, an interpreter that does not split into regions calls it with no
region and is refused; where they agree (``step``: 0 on both sides) the derivative is that constant
on every open region, whichever one the point is in. ``step`` is the language's one kink: relu is
a * step(a), and the rest of the family are sums of relus (``core.backends.KINK_FAMILY``). Its value
at the kink itself is a convention (``STEP_AT_KINK``), not a derivative: a prover proves claims on
the open regions, and the convention is checked on its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable


class MissingRule(Exception):
    """A primitive with no row in the table (or a kink row asked for outside a region): the
    interpreter must refuse, never guess a derivative."""


@dataclass(frozen=True)
class Rule:
    """One row: ``factor(F, a, y, k) -> f'(a)`` for a smooth primitive; for a kink primitive
    ``kinks`` (ascending breakpoints) and ``pieces`` (the derivative on each of the len(kinks) + 1
    regions) instead."""

    factor: Callable | None = None
    kinks: tuple = ()
    pieces: tuple = ()
    branches: tuple = ()          # the primitive on each region, as a function of a (or a constant)
    # whether ``factor`` reads y, or a function of k saying so: an interpreter may pass y = None
    # otherwise, and need not compute a value nobody else asked for (a new atom, a large power)
    uses_value: bool | Callable = False


def _pow(F, a, y, k):
    """d a^k = k a^(k-1): a polynomial for an integer k (no pole at a = 0 where there is none),
    k y / a for a rational k."""
    k = Fraction(k)
    if k == 1:
        return F.c(Fraction(1))
    if k.denominator == 1:
        return F.mul(F.c(k), F.pow(a, int(k) - 1))
    return F.mul(F.c(k), F.mul(y, F.inv(a)))


RULES: dict[str, Rule] = {
    "exp": Rule(lambda F, a, y, k: y, uses_value=True),
    "log": Rule(lambda F, a, y, k: F.inv(a)),
    "sqrt": Rule(lambda F, a, y, k: F.inv(F.mul(F.c(Fraction(2)), y)), uses_value=True),
    "erf": Rule(lambda F, a, y, k: F.mul(F.mul(F.c(Fraction(2)), F.inv(F.sqrt(F.pi()))),
                                         F.exp(F.neg(F.mul(a, a))))),
    "tanh": Rule(lambda F, a, y, k: F.add(F.c(Fraction(1)), F.neg(F.mul(y, y))), uses_value=True),
    "sin": Rule(lambda F, a, y, k: F.cos(a)),
    "cos": Rule(lambda F, a, y, k: F.neg(F.sin(a))),
    "inv": Rule(lambda F, a, y, k: F.neg(F.pow(y, 2)), uses_value=True),
    "pow": Rule(_pow, uses_value=lambda k: Fraction(k).denominator != 1),
    "step": Rule(kinks=(Fraction(0),), pieces=(Fraction(0), Fraction(0)), branches=(0, 1)),
}

# step(0): [a > 0] is 0 at the kink, so relu'(0) = step(0) = 0 -- PyTorch's convention (its relu
# backward passes the gradient where the output is > 0), and JAX's
STEP_AT_KINK = Fraction(0)
CONVENTION = "relu'(0) = step(0) = 0 (PyTorch's and JAX's: the gradient passes where a > 0)"

# ops of the traced DAG that are no primitive with a derivative factor (see the module docstring)
NULLARY = ("const", "pi", "cpow", "leaf")
STRUCTURAL = ("add", "mul", "neg")


def derivative(F, kind: str, a, y, k=None, region: int | None = None):
    """f'(a) of the primitive ``kind`` at argument ``a`` with value ``y`` (parameter ``k``), in the
    operations of ``F``. Raises ``MissingRule`` for a primitive with no row."""
    rule = RULES.get(kind)
    if rule is None:
        raise MissingRule(f"no derivative rule for {kind}")
    if rule.kinks:
        if region is None and len(set(rule.pieces)) == 1:
            return F.c(Fraction(rule.pieces[0]))        # the same on every open region
        if region is None:
            raise MissingRule(f"{kind} has kinks at {rule.kinks}: its derivative is taken region by region")
        return F.c(Fraction(rule.pieces[region]))
    return rule.factor(F, a, y, k)


def uses_value(kind: str, k=None) -> bool:
    """Whether the row of ``kind`` reads the primitive's value y (else y may be passed as None)."""
    flag = RULES[kind].uses_value
    return bool(flag(k) if callable(flag) else flag)


def missing_rows(kinds) -> list[str]:
    """The kinds among ``kinds`` that are neither a row nor a nullary or structural op."""
    return sorted({k for k in kinds if k not in RULES and k not in NULLARY and k not in STRUCTURAL})
