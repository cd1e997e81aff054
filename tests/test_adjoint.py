"""Reverse mode (``Adjoint``) against forward mode (``Tangent``, one walk per input entry): the witnesses'
per-component J^T dy must be the same numbers whichever way it is taken -- exactly in the rationals,
to the digits in mpmath -- and reverse mode must read the one derivative table and nothing else."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from vjpcert.core.derivatives import RULES, Rule
from vjpcert.core.evaluate import MpField, NotRational, QField
from vjpcert.core.trace import Leaf, Node
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.fixed.claims import trace_claim
from vjpcert.symbolic.fixed.evaluate import Adjoint, Evaluator, Tangent, inner
from vjpcert.symbolic.fixed.strategies import random_point

# every primitive of the table and the structural ops, shared intermediates and kinks among them
CASES = [
    ("softmax", "vjp[x]", {"rows": 2, "n": 3}),                  # exp, inv, a shift
    ("layernorm", "vjp[x]", {"rows": 2, "n": 3}),                # sqrt, rational powers, means
    ("gelu_erf", "vjp[x]", {"rows": 1, "n": 3}),                 # erf
    ("gelu_tanh", "vjp[x]", {"rows": 1, "n": 3}),                # tanh
    ("rope_half", "vjp[x]", {"rows": 2, "d": 4}),                 # sin, cos
    ("relu", "vjp[x]", {"rows": 2, "n": 3}),                     # step
    ("max_pool2d", "vjp[x]", {"N": 1, "C": 1, "Ho": 2, "Wo": 2}),  # steps on ties
    ("conv2d", "vjp[w]", {}),                                    # + and * only: exact rationals
    ("attention", "vjp[K]", {"m": 2, "d": 2}),                   # a wide shared DAG
    ("elman_rnn", "vjp[W]", {}),                                 # a recurrence: one node, many uses
]


def _forward_mode(claim, F):
    """The per-column reference: (J^T dy)_j = <dy, J e_j>, one forward walk per input entry."""
    E = Evaluator(F)
    dy = E.array(claim.dy)
    one = F.const(Fraction(1))
    return [inner(F, dy, Tangent(E, {leaf.value: one}).array(claim.y)) for leaf in claim.inputs.ravel()]


def _reverse_mode(claim, F):
    return [b for _, b in claim.components(F, max_entries=10**6)]


def _point(claim, seed):
    return random_point(claim.leaves(), random.Random(seed))


def _traced(name, claim, dims):
    op = builtin_ops()[name]
    return trace_claim(op, claim, dims or op.dims[0])


@pytest.mark.parametrize("name,claim,dims", CASES, ids=[c[0] for c in CASES])
def test_reverse_mode_is_forward_mode_entry_by_entry(name, claim, dims):
    traced = _traced(name, claim, dims)
    compared = 0
    for seed in range(3):
        point = _point(traced, seed)
        try:                                        # exactly, where the claim is rational
            assert _reverse_mode(traced, QField(point)) == _forward_mode(traced, QField(point))
            compared += 1
            continue
        except NotRational:
            pass
        except ZeroDivisionError:                   # a pole at this point: both modes see it
            with pytest.raises(ZeroDivisionError):
                _forward_mode(traced, QField(point))
            continue
        F = MpField(60, point)
        rev, fwd = _reverse_mode(traced, F), _forward_mode(traced, F)
        assert len(rev) == len(fwd) == traced.inputs.size
        scale = max([abs(v) for v in fwd] + [F.ctx.mpf(1)])
        assert all(abs(a - b) <= scale * F.ctx.mpf(10) ** -50 for a, b in zip(rev, fwd)), (name, seed)
        compared += 1
    assert compared >= 2


def test_the_comparison_sees_a_changed_cotangent():
    """Negative control of the test above: with one entry of dy moved, reverse mode no longer agrees."""
    traced = _traced("conv2d", "vjp[w]", {})
    point = _point(traced, 0)
    F = QField(point)
    E = Evaluator(F)
    weights = E.array(traced.dy).ravel().copy()
    weights[0] = F.add(weights[0], F.const(Fraction(1)))
    leaves = [leaf.value for leaf in traced.inputs.ravel()]
    moved = Adjoint(E).leaves(traced.y, weights, leaves)
    zero = F.const(Fraction(0))
    assert [zero if moved[v] is None else moved[v] for v in leaves] != _forward_mode(traced, F)


def test_reverse_mode_reads_the_derivative_table(monkeypatch):
    traced = _traced("gelu_tanh", "vjp[x]", {"rows": 1, "n": 2})
    point = _point(traced, 0)
    good = _reverse_mode(traced, MpField(50, point))
    monkeypatch.setitem(RULES, "tanh", Rule(lambda F, a, y, k: F.add(F.c(Fraction(1)), F.mul(y, y)),
                                            uses_value=True))           # 1 + y^2: wrong
    bad = _reverse_mode(traced, MpField(50, point))
    assert all(abs(a - b) > 1e-6 for a, b in zip(good, bad))


def test_no_factor_is_taken_where_the_input_does_not_reach():
    """y = x * sqrt(w) at w = 0: sqrt'(0) is a pole, but dy/dx = sqrt(w) = 0 needs no sqrt'. Forward
    mode seeded at x never takes that factor; reverse mode must not either (nor fail the point)."""
    x, w = Leaf("x", "input"), Leaf("w", "input")
    y = Node("mul", (Node("leaf", (), x), Node("sqrt", (Node("leaf", (), w),))))
    F = MpField(50, {x: Fraction(3, 2), w: Fraction(0)})
    out = Adjoint(Evaluator(F)).leaves(np.array([y], dtype=object), [F.const(Fraction(2))], [x])
    assert out[x] == 0
    with pytest.raises(ZeroDivisionError):          # with respect to w the pole is real
        Adjoint(Evaluator(F)).leaves(np.array([y], dtype=object), [F.const(Fraction(2))], [w])
