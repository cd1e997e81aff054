"""Evaluating a traced DAG in a field, and derivatives over it: forward mode (J·t, ``Tangent``) and
reverse mode (J^T·w for every leaf at once, ``Adjoint``).

The derivative rules ``Tangent`` and ``Adjoint`` apply are the prover's trusted base: the Jacobian of every op is
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

__all__ = ["Adjoint", "Evaluator", "FieldOps", "Tangent", "inner"]


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


class Adjoint:
    """Reverse mode: the value of (J^T w)_leaf for every leaf in ``wrt`` at once, J the Jacobian of
    ``roots`` -- one walk of the DAG where ``Tangent`` needs one per leaf. The local factors are the
    ones ``Tangent`` takes (the sum and product rules, then the one table), and they are taken at the
    same nodes: those that depend on a leaf of ``wrt`` (a factor elsewhere, such as sqrt'(0), is
    never evaluated, as in forward mode). ``None`` stands for an exactly zero adjoint."""

    def __init__(self, primal: Evaluator):
        self.primal, self.field = primal, primal.field
        self.ops = FieldOps(primal.field)

    def leaves(self, roots: np.ndarray, weights: np.ndarray, wrt) -> dict:
        """{leaf: (J^T w)_leaf} for the leaves in ``wrt``, None where no path joins it to a root."""
        f, P = self.field, self.primal
        wanted = set(wrt)
        order: list[Node] = []
        seen: dict[int, bool] = {}
        nodes = [Node.lift(r) for r in np.asarray(roots, dtype=object).ravel().tolist()]
        for r in nodes:
            for node in postorder(r, seen):
                seen[id(node)] = True
                order.append(node)
        depends: dict[int, bool] = {}
        for node in order:              # arguments first: whether a wrt leaf lies under the node
            depends[id(node)] = (node.value in wanted) if node.op == "leaf" else \
                any(depends[id(a)] for a in node.args)
        adj: dict[int, object] = {}

        def give(node: Node, v) -> None:
            if v is None or not depends[id(node)]:
                return
            old = adj.get(id(node))
            adj[id(node)] = v if old is None else f.add(old, v)

        for r, w in zip(nodes, np.asarray(weights, dtype=object).ravel().tolist()):
            give(r, w)
        out: dict = {}
        for node in reversed(order):
            a = adj.pop(id(node), None)
            if a is None:
                continue
            op, args = node.op, node.args
            if op == "leaf":
                out[node.value] = a if node.value not in out else f.add(out[node.value], a)
            elif op in ("const", "pi", "cpow"):
                continue
            elif op == "add":
                for x in args:
                    give(x, a)
            elif op == "mul":
                give(args[0], f.mul(a, P(args[1])) if depends[id(args[0])] else None)
                give(args[1], f.mul(a, P(args[0])) if depends[id(args[1])] else None)
            elif op == "neg":
                give(args[0], f.neg(a))
            elif op in RULES:                      # d f(a) = f'(a) da, f' from the one table
                k = node.value if op == "pow" else None
                factor = derivative(self.ops, op, P(args[0]), P(node) if uses_value(op, k) else None, k)
                give(args[0], f.mul(a, factor))
            else:
                raise MissingRule(f"no derivative rule for {op}")
        return {leaf: out.get(leaf) for leaf in wrt}


def inner(field, a: np.ndarray, b: np.ndarray):
    """sum_k a_k b_k in ``field``, skipping exact-zero (None) entries. Summed pairwise: adding each
    product to one growing polynomial costs its size every time (quadratic in the terms of a residual
    of tens of thousands of them); halving the list level by level costs it log times."""
    terms = [field.mul(x, y) for x, y in zip(np.asarray(a, dtype=object).ravel(), np.asarray(b, dtype=object).ravel())
             if x is not None and y is not None]
    return pairwise(field.add, terms) if terms else field.const(Fraction(0))
