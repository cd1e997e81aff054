"""The prover's trusted base, tested on its own: derivative rules against sympy.diff, atom
canonical forms, relation reduction, and soundness guards (false identities are never proved)."""
import random
from fractions import Fraction

import numpy as np
import pytest
import sympy

from vjpcert.symbolic.fixed.evaluate import Evaluator, Tangent
from vjpcert.symbolic.fixed.fields import RingField
from vjpcert.symbolic.fixed.modp_field import ModPField
from vjpcert.symbolic.fixed.size_and_display import SympyField
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


# ---------------------------------------------------------------- sums read as one sum
class _OneByOne(RingField):
    """The same ring, adding a chain's terms one at a time (the evaluation the pairwise sums replace)."""
    sums_pairwise = False


def _row_sum_dag(n: int):
    xs = leaf_array((n,), "x", "input")
    s = np.sum(xs * xs)                        # a left fold: ((x0^2 + x1^2) + x2^2) + ...
    partial = np.cumsum(xs)                    # every partial sum a value of its own
    return xs, [s, s * s + partial[n // 2], partial[-1] * TRACE.exp(s), *partial]


@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_pairwise_sums_give_the_same_polynomials(n):
    from vjpcert.core.evaluate import SumPlan
    xs, roots = _row_sum_dag(n)
    leaves = leaves_of([np.array(roots, dtype=object)])
    for shared in (None, {id(roots[0])}):
        F, G = RingField(leaves, 8), _OneByOne(leaves, 8)
        folded = Evaluator(F, shared=shared).array(np.array(roots, dtype=object))
        plain = Evaluator(G, shared=shared).array(np.array(roots, dtype=object))
        assert [str(a) for a in folded] == [str(b) for b in plain]
        t = Tangent(Evaluator(F, shared=shared), {x.value: F.const(1) for x in xs.ravel()})
        u = Tangent(Evaluator(G, shared=shared), {x.value: G.const(1) for x in xs.ravel()})
        assert [str(t(r)) for r in roots] == [str(u(r)) for r in roots]
    plan = SumPlan([roots[0]], {}, set())
    assert len(plan.inside) == max(n - 2, 0)
    if n > 1:                                   # (one term: the sum is that term, no add at all)
        assert len(plan.terms(roots[0])) == n
    # a partial sum that is also a value of its own (a root, or a node with a second parent) stays a
    # node: it is never folded into the chain above it
    plan = SumPlan(roots[3:], {}, set())
    assert not plan.inside


def test_a_chain_that_loses_a_summand_is_seen():
    """The negative control of the comparison above: a plan that drops one term of a sum changes the
    polynomial, and the comparison says so."""
    from vjpcert.core import evaluate
    xs, roots = _row_sum_dag(5)
    leaves = leaves_of([np.array(roots, dtype=object)])
    real = evaluate.SumPlan.terms
    try:
        evaluate.SumPlan.terms = lambda self, node: real(self, node)[1:]
        dropped = Evaluator(RingField(leaves, 8))(roots[0])
    finally:
        evaluate.SumPlan.terms = real
    assert str(dropped) != str(Evaluator(_OneByOne(leaves, 8))(roots[0]))
