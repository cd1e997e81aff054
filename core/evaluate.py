"""Evaluating a traced DAG (``core.trace``) in a field: the shared machinery of every checker that
looks at the *traced* spec -- the prover's exact fields (``vjpcert.symbolic.fixed.fields``), and the
numeric tier's reference claim, which compares every backend with the function that was proved.

Fields here: ``MpField`` (mpmath at a chosen precision) and ``QField`` (exact rationals, for exact
witnesses: a rational point where backward and J^T dy differ is a disproof, however small the
difference). A field supplies const, leaf, add, mul, neg, inv, pow and the transcendental kinds.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.trace import Node


def postorder(root: Node, memo: dict):
    """Nodes under root not yet in memo, each after all its arguments (iterative: DAGs of attention
    or a ViT block are far deeper than Python's recursion limit)."""
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((a, False) for a in node.args if id(a) not in memo)
            continue
        yield node


def map_array(fn, arr) -> np.ndarray:
    arr = np.asarray(arr, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    for idx in np.ndindex(*arr.shape):
        out[idx] = fn(arr[idx])
    return out


def pairwise(add, values: list):
    """values[0] + values[1] + ... added level by level: a sum of k growing polynomials costs the
    size of the result log k times, where adding each to a running total costs it k times."""
    while len(values) > 1:
        values = [add(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


class SumPlan:
    """The nodes under some roots not yet evaluated, in postorder, with the sums written as chains of
    binary adds (``np.sum`` over an object array is a left fold: ((a + b) + c) + ...) read as one sum.

    An add node is *inside* a chain when its one parent among these nodes is an add, it is not one of
    the roots and not ``keep`` (a shared intermediate a field turns into an atom); an evaluator skips
    it and adds the chain's terms pairwise at the chain's top add. The value is the same sum, so this
    changes only the cost. Fields whose numbers grow with a sum (polynomials) ask for it with
    ``sums_pairwise = True``; for numbers of a fixed size the extra walk costs more than it saves."""

    __slots__ = ("order", "inside")

    def __init__(self, roots, memo: dict, keep: set[int]):
        # one iterative depth-first walk: postorder, and each node's parents among the new nodes (a
        # node is marked on first visit; a DAG has no cycle, so nothing later in its own walk needs it)
        order: list[Node] = []
        seen: set[int] = set()
        add_parents: dict[int, int] = {}   # add nodes: how many parents, all of them adds
        other_parent: set[int] = set()     # add nodes with a parent that is not an add
        for root in roots:
            stack = [(root, False)]
            while stack:
                node, ready = stack.pop()
                if ready:
                    order.append(node)
                    continue
                i = id(node)
                if i in seen or i in memo:
                    continue
                seen.add(i)
                stack.append((node, True))
                is_add = node.op == "add"
                for a in node.args:
                    j = id(a)
                    if a.op == "add":
                        if is_add:
                            add_parents[j] = add_parents.get(j, 0) + 1
                        else:
                            other_parent.add(j)
                    if j not in seen and j not in memo:
                        stack.append((a, False))
        self.order = order
        tops = {id(r) for r in roots}
        self.inside = {j for j, k in add_parents.items()
                       if k == 1 and j not in other_parent and j not in tops and j not in keep}

    def terms(self, node: Node) -> list[Node]:
        """The summands of the chain whose top is ``node``, left to right."""
        out, stack = [], [node]
        while stack:
            n = stack.pop()
            if n is node or id(n) in self.inside:
                stack.extend(reversed(n.args))
            else:
                out.append(n)
        return out


def node_args(node: Node):
    return node.args


class Evaluator:
    """Memoised, iterative (no recursion limit) evaluation of nodes in ``field``."""

    def __init__(self, field, leaf_value=None, shared: set[int] | None = None):
        self.field = field
        self.leaf_value = leaf_value or field.leaf
        self.share = getattr(field, "share", None) if shared else None
        self.shared = shared or set()
        self.memo: dict[int, object] = {}
        self._keep: list[Node] = []       # keeps evaluated nodes alive, so their ids stay unique

    def __call__(self, root: Node):
        if not isinstance(root, Node):
            root = Node.lift(root)
        if id(root) not in self.memo:
            self._evaluate([root])
        return self.memo[id(root)]

    def _evaluate(self, roots) -> None:
        memo, f = self.memo, self.field
        if getattr(f, "sums_pairwise", False):
            plan = SumPlan(roots, memo, self.shared)
            nodes, inside, terms = plan.order, plan.inside, plan.terms
        else:   # numbers of a fixed size (mod p, digits): a chain costs what its adds cost
            nodes, inside, terms = (n for r in roots for n in postorder(r, memo)), (), node_args
        for node in nodes:
            if id(node) in inside:
                continue
            args = [memo[id(a)] for a in node.args] if node.op != "add" else None
            op = node.op
            if op == "const":
                v = f.const(node.value)
            elif op == "leaf":
                v = self.leaf_value(node.value)
            elif op == "add":
                v = pairwise(f.add, [memo[id(t)] for t in terms(node)])
            elif op == "mul":
                v = f.mul(*args)
            elif op == "neg":
                v = f.neg(args[0])
            elif op == "inv":
                v = f.inv(args[0])
            elif op == "pow":
                v = f.pow(args[0], node.value)
            elif op == "pi":
                v = f.pi()
            elif op == "cpow":
                v = f.cpow(node.args[0].value, node.value)
            else:
                v = getattr(f, op)(args[0])
            if self.share is not None and id(node) in self.shared:
                v = self.share(v)
            memo[id(node)] = v
            self._keep.append(node)

    def array(self, arr) -> np.ndarray:
        arr = np.asarray(arr, dtype=object)
        roots = [Node.lift(x) if not isinstance(x, Node) else x for x in arr.ravel().tolist()]
        self._evaluate([r for r in roots if id(r) not in self.memo])
        out = np.empty(arr.shape, dtype=object)
        for idx, r in zip(np.ndindex(*arr.shape), roots):
            out[idx] = self.memo[id(r)]
        return out



class NotRational(Exception):
    """The value is not a rational number (a transcendental or an irrational constant)."""


class _OperatorField:
    """Fields whose numbers already have the arithmetic operators (mpmath numbers, exact rationals,
    SymPy expressions); subclasses give constants, leaves and the functions."""

    def add(self, a, b):
        return a + b

    def mul(self, a, b):
        return a * b

    def neg(self, a):
        return -a

    def inv(self, a):
        if a == 0:
            raise ZeroDivisionError("division by zero at the sampled point")
        return 1 / a

    def pow(self, a, k):
        return a ** k

    def cpow(self, base, k):
        return self.const(base) ** self.const(k)


class SignUndecided(ArithmeticError):
    """A step's argument is within rounding of 0 at this precision, so its sign -- which region the
    point is in -- is not known: a comparison of a value with itself (JAX's eq(x, max(x, c))) is 0
    in the reals and a rounding residue of either sign in mpmath. The point decides nothing."""


class MpField(_OperatorField):
    """mpmath numbers in a private context at ``dps`` digits; leaves take the values given."""

    def __init__(self, dps: int, values: dict):
        from vjpcert.core.backends import mp_context
        self.ctx = mp_context(dps)
        self.values = values

    def const(self, q):
        q = Fraction(q)
        return self.ctx.mpf(q.numerator) / q.denominator

    def leaf(self, leaf):
        return self.const(self.values[leaf])

    def exp(self, a):
        return self.ctx.exp(a)

    def log(self, a):
        return self.ctx.log(a)

    def sqrt(self, a):
        return self.ctx.sqrt(a)

    def erf(self, a):
        return self.ctx.erf(a)

    def tanh(self, a):
        return self.ctx.tanh(a)

    def sin(self, a):
        return self.ctx.sin(a)

    def cos(self, a):
        return self.ctx.cos(a)

    def step(self, a):
        """[a > 0] at the real point; ``SignUndecided`` where |a| is below the square root of the
        working precision (an argument that is 0 in the reals comes out as a residue of about eps)."""
        if abs(a) <= self.ctx.mpf(10) ** (-(self.ctx.dps // 2)):
            raise SignUndecided(f"a step's argument is {self.ctx.nstr(a, 3)} at {self.ctx.dps} digits")
        return self.ctx.mpf(1) if a > 0 else self.const(STEP_AT_KINK)

    def pi(self):
        return +self.ctx.pi


class QField(_OperatorField):
    """Exact rationals; leaves take the Fractions given. A transcendental raises NotRational, so only
    claims built from + - * / and integer powers evaluate here."""

    def __init__(self, values: dict):
        self.values = values

    def const(self, q):
        q = Fraction(q)
        return Fraction(int(q.numerator), int(q.denominator))

    def leaf(self, leaf):
        return Fraction(self.values[leaf])

    def pow(self, a, k):
        if a == 0 and k < 0:
            raise ZeroDivisionError("division by zero at the sampled point")
        return a ** k

    def cpow(self, base, k):
        raise NotRational(f"{base}^{k}")

    def pi(self):
        raise NotRational("pi")

    def step(self, a):
        """[a > 0] at the rational point (exact: the sign of a rational), the convention at the kink."""
        return Fraction(1) if a > 0 else STEP_AT_KINK

    def __getattr__(self, kind):       # exp, log, sqrt, erf, tanh, sin, cos
        if kind.startswith("_"):
            raise AttributeError(kind)

        def transcendental(a):
            if kind == "sqrt":
                root = _sqrt_fraction(a)
                if root is not None:
                    return root
            raise NotRational(kind)
        return transcendental


def _sqrt_fraction(q: Fraction):
    """The exact square root of a non-negative rational, or None."""
    import math
    if q < 0:
        return None
    n, d = math.isqrt(q.numerator), math.isqrt(q.denominator)
    return Fraction(n, d) if n * n == q.numerator and d * d == q.denominator else None
