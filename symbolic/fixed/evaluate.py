"""Evaluating a traced DAG in a field, and forward-mode derivatives (J·t) over it.

The derivative rules in ``Tangent`` are the prover's trusted base: the Jacobian of every op is derived
from its forward with these rules and nothing else (the hand-written backward is never consulted).
``tests/test_symbolic_core.py`` checks each rule against ``sympy.diff``.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from vjpcert.core.evaluate import Evaluator, map_array, postorder
from vjpcert.core.trace import Leaf, Node

__all__ = ["Evaluator", "Tangent", "inner"]


class Tangent:
    """Forward-mode derivative: the value of d(node) when each leaf moves along ``seeds[leaf]``.
    ``None`` stands for an exactly zero tangent (nodes that do not depend on a seeded leaf)."""

    def __init__(self, primal: Evaluator, seeds: dict[Leaf, object]):
        self.primal, self.seeds, self.field = primal, seeds, primal.field
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
        for node in postorder(root, memo):
            op, args = node.op, node.args
            ts = [memo[id(a)] for a in args]
            if op in ("const", "pi", "cpow"):
                t = None
            elif op == "leaf":
                t = self.seeds.get(node.value)
            elif all(x is None for x in ts):
                t = None
            elif op == "add":
                t = self._add(ts[0], ts[1])
            elif op == "mul":
                t = self._add(self._scale(P(args[1]), ts[0]), self._scale(P(args[0]), ts[1]))
            elif op == "neg":
                t = f.neg(ts[0])
            elif op == "inv":                       # d(1/a) = -da / a^2
                t = f.neg(self._scale(f.pow(P(node), 2), ts[0]))
            elif op == "pow":                       # d(a^k) = k a^(k-1) da
                k = node.value
                t = self._scale(f.mul(f.const(Fraction(k)), f.pow(P(args[0]), k - 1)), ts[0])
            elif op == "exp":                       # d e^a = e^a da
                t = self._scale(P(node), ts[0])
            elif op == "log":                       # d log a = da / a
                t = self._scale(f.inv(P(args[0])), ts[0])
            elif op == "sqrt":                      # d sqrt(a) = da / (2 sqrt(a))
                t = self._scale(f.inv(f.mul(f.const(Fraction(2)), P(node))), ts[0])
            elif op == "erf":                       # d erf(a) = 2/sqrt(pi) e^(-a^2) da
                a = P(args[0])
                k = f.mul(f.const(Fraction(2)), f.inv(f.sqrt(f.pi())))
                t = self._scale(f.mul(k, f.exp(f.neg(f.mul(a, a)))), ts[0])
            elif op == "tanh":                      # d tanh a = (1 - tanh^2 a) da
                v = P(node)
                t = self._scale(f.add(f.const(Fraction(1)), f.neg(f.mul(v, v))), ts[0])
            elif op == "sin":
                t = self._scale(f.cos(P(args[0])), ts[0])
            elif op == "cos":
                t = f.neg(self._scale(f.sin(P(args[0])), ts[0]))
            else:
                raise NotImplementedError(f"no derivative rule for {op}")
            if t is not None and P.share is not None and id(node) in P.shared:
                t = P.share(t)
            memo[id(node)] = t
        return memo[id(root)]

    def array(self, arr) -> np.ndarray:
        return map_array(self, arr)


def inner(field, a: np.ndarray, b: np.ndarray):
    """sum_k a_k b_k in ``field``, skipping exact-zero (None) entries."""
    total = field.const(Fraction(0))
    for x, y in zip(np.asarray(a, dtype=object).ravel(), np.asarray(b, dtype=object).ravel()):
        if x is not None and y is not None:
            total = field.add(total, field.mul(x, y))
    return total
