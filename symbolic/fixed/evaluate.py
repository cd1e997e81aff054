"""Evaluating a traced DAG in a field, and forward-mode derivatives (J·t) over it.

The derivative rules ``Tangent`` applies are the prover's trusted base: the Jacobian of every op is
derived from its forward with them and nothing else (the hand-written backward is never consulted).
Those of the primitives come from the one table, ``core.derivatives`` (``tests/test_derivatives.py``
holds each row against ``sympy.diff``); the sum and product rules are here.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from vjpcert.core.derivatives import RULES, MissingRule, derivative, uses_value
from vjpcert.core.evaluate import Evaluator, SumPlan, node_args, map_array, pairwise, postorder
from vjpcert.core.trace import Leaf, Node

__all__ = ["Evaluator", "FieldOps", "Tangent", "inner"]


class FieldOps:
    """A field of ``core.evaluate`` / ``symbolic.fixed.fields`` as the operations the derivative table
    is written in (``core.derivatives``): the same numbers, ``c`` for the field's ``const``."""

    __slots__ = ("f",)

    def __init__(self, field):
        self.f = field

    def c(self, q):
        return self.f.const(q)

    def add(self, a, b):
        return self.f.add(a, b)

    def mul(self, a, b):
        return self.f.mul(a, b)

    def neg(self, a):
        return self.f.neg(a)

    def inv(self, a):
        return self.f.inv(a)

    def pow(self, a, k: int):
        return self.f.pow(a, k)

    def exp(self, a):
        return self.f.exp(a)

    def sqrt(self, a):
        return self.f.sqrt(a)

    def sin(self, a):
        return self.f.sin(a)

    def cos(self, a):
        return self.f.cos(a)

    def pi(self):
        return self.f.pi()


class Tangent:
    """Forward-mode derivative: the value of d(node) when each leaf moves along ``seeds[leaf]``.
    ``None`` stands for an exactly zero tangent (nodes that do not depend on a seeded leaf)."""

    def __init__(self, primal: Evaluator, seeds: dict[Leaf, object]):
        self.primal, self.seeds, self.field = primal, seeds, primal.field
        self.ops = FieldOps(primal.field)
        self.memo: dict[int, object] = {}

    def _add(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        return self.field.add(a, b)

    def _scale(self, factor, t):
        return None if t is None else self.field.mul(factor, t)

    def __call__(self, root: Node):
        memo, f, P = self.memo, self.field, self.primal
        if not isinstance(root, Node):
            return None
        if id(root) in memo:
            return memo[id(root)]
        if getattr(f, "sums_pairwise", False):
            P(root)        # the primal values this walk reads, in one walk rather than one per node
            plan = SumPlan([root], memo, P.shared if P.share is not None else set())
            nodes, inside, terms = plan.order, plan.inside, plan.terms
        else:
            nodes, inside, terms = postorder(root, memo), (), node_args
        for node in nodes:
            if id(node) in inside:
                continue
            op, args = node.op, node.args
            if op == "add":                        # a chain's summands, added pairwise
                ts = [x for x in (memo[id(a)] for a in terms(node)) if x is not None]
                memo[id(node)] = t = pairwise(f.add, ts) if ts else None
                if t is not None and P.share is not None and id(node) in P.shared:
                    memo[id(node)] = P.share(t)
                continue
            ts = [memo[id(a)] for a in args]
            if op in ("const", "pi", "cpow"):
                t = None
            elif op == "leaf":
                t = self.seeds.get(node.value)
            elif all(x is None for x in ts):
                t = None
            elif op == "mul":
                t = self._add(self._scale(P(args[1]), ts[0]), self._scale(P(args[0]), ts[1]))
            elif op == "neg":
                t = f.neg(ts[0])
            elif op in RULES:                      # d f(a) = f'(a) da, f' from the one table
                k = node.value if op == "pow" else None
                factor = derivative(self.ops, op, P(args[0]), P(node) if uses_value(op, k) else None, k)
                t = self._scale(factor, ts[0])
            else:
                raise MissingRule(f"no derivative rule for {op}")
            if t is not None and P.share is not None and id(node) in P.shared:
                t = P.share(t)
            memo[id(node)] = t
        return memo[id(root)]

    def array(self, arr) -> np.ndarray:
        return map_array(self, arr)


def inner(field, a: np.ndarray, b: np.ndarray):
    """sum_k a_k b_k in ``field``, skipping exact-zero (None) entries. Summed pairwise: adding each
    product to one growing polynomial costs its size every time (quadratic in the terms of a residual
    of tens of thousands of them); halving the list level by level costs it log times."""
    terms = [field.mul(x, y) for x, y in zip(np.asarray(a, dtype=object).ravel(), np.asarray(b, dtype=object).ravel())
             if x is not None and y is not None]
    return pairwise(field.add, terms) if terms else field.const(Fraction(0))
