"""The prover's trusted base, tested on its own: derivative rules against sympy.diff, atom
canonical forms, relation reduction, and soundness guards (false identities are never proved)."""
import random
from fractions import Fraction

import numpy as np
import pytest
import sympy

from vjpcert.symbolic.fixed.evaluate import Evaluator, Tangent
from vjpcert.symbolic.fixed.fields import ModPField, RingField, SympyField
from vjpcert.core.trace import TRACE, Leaf, Node, leaf_array, leaves_of

X = Node("leaf", (), Leaf("x", "input"))


@pytest.mark.parametrize("kind", ["exp", "log", "sqrt", "erf", "tanh", "sin", "cos"])
def test_tangent_rule_matches_sympy_diff(kind):
    node = getattr(TRACE, kind)(X * X + 1)
    S = SympyField()
    E = Evaluator(S)
    x = S.leaf(X.value)
    ours = Tangent(E, {X.value: S.const(1)})(node)
    theirs = sympy.diff(getattr(sympy, kind)(x * x + 1), x)
    assert sympy.simplify(ours - theirs) == 0


@pytest.mark.parametrize("k", [-3, -1, 2, 5])
def test_power_and_inverse_rules(k):
    S = SympyField()
    E = Evaluator(S)
    x = S.leaf(X.value)
    for node, expr in [((X + 2) ** k, (x + 2) ** k), (1 / (X + 2), 1 / (x + 2))]:
        assert sympy.simplify(Tangent(E, {X.value: S.const(1)})(node) - sympy.diff(expr, x)) == 0


def _ring(*nodes):
    leaves = leaves_of([np.array(nodes, dtype=object)])
    F = RingField(leaves, 64)
    E = Evaluator(F)
    return F, [E(n) for n in nodes]


def test_odd_and_even_functions_share_atoms():
    F, (a, b, c, d) = _ring(TRACE.sin(-X), TRACE.sin(X), TRACE.cos(-X), TRACE.cos(X))
    assert (a + b).is_zero() and (c - d).is_zero()


def test_sqrt_of_positive_constants_splits_into_primes():
    F, (a, b) = _ring(TRACE.sqrt(2 * TRACE.pi), TRACE.sqrt(TRACE.c(2)) * TRACE.sqrt(TRACE.pi))
    assert (a - b).is_zero()
    F, (c,) = _ring(TRACE.sqrt(TRACE.c(9, 4)))
    assert c == F.const(Fraction(3, 2))


def test_sqrt_of_a_square_is_not_simplified_to_the_root():
    """sqrt(x^2) = |x|, not x: the ring must not prove sqrt(x^2) - x = 0 (x is not known >= 0)."""
    F, (r,) = _ring(TRACE.sqrt(X * X) - X)
    assert not r.is_zero()
    assert F.reduce_relations(r) != []


def test_relations_prove_pythagoras_but_not_a_false_variant():
    F, (good, bad) = _ring(TRACE.sin(X) ** 2 + TRACE.cos(X) ** 2 - 1,
                           TRACE.sin(X) ** 2 - TRACE.cos(X) ** 2 - 1)
    assert F.reduce_relations(good) == []
    assert F.reduce_relations(bad) != []


def test_reciprocal_relation_is_used_soundly():
    Z = X + 3
    F, (one, two) = _ring(Z * (1 / Z) - 1, Z * (1 / Z) - 2)
    assert F.reduce_relations(one) == [] and F.reduce_relations(two) != []


def test_modp_field_is_a_field():
    F = ModPField(random.Random(1))
    a = F.leaf(X.value)
    assert F.mul(a, F.inv(a)) == 1
    assert F.const(Fraction(1, 3)) * 3 % F.p == 1


def test_float_literals_and_math_calls_are_spec_errors():
    import math

    from vjpcert.core.registry import SpecError
    x = leaf_array((2,), "x", "input")
    with pytest.raises(SpecError, match="float"):
        x * 0.5
    with pytest.raises(SpecError, match="math"):
        math.exp(x[0])
    with pytest.raises(SpecError, match="branch"):
        if x[0] > 0:
            pass
