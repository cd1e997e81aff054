"""Tracing a spec into an expression DAG, so one run of the spec can be evaluated in every field the
prover needs: exact polynomial rings (python-flint), integers mod p, mpmath, SymPy.

Nodes are deliberately dumb (no canonicalisation beyond constant folding): canonical forms are the
business of the field a DAG is evaluated in. Tracing also polices spec hygiene: a Python float, a
``math.*`` call, ``float()`` or a data-dependent branch on a traced value raises ``SpecError``.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from vjpcert.core.backends import exact
from vjpcert.core.errors import SpecError, refuse
from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.language import ELEMENTWISE, refuse_branch, refuse_comparison, refuse_float

# the unary kinds a field must implement are the language's ELEMENTWISE (``pi`` is a nullary one)


@dataclass(frozen=True)
class Leaf:
    """A free variable: an input entry, a parameter, a cotangent entry or a probe."""

    name: str
    role: str                 # "input" | "nondiff" | "param" | "dy" | "tangent" | "probe"
    owner: str = ""           # the input a tangent belongs to, the param name, ...
    index: tuple = ()
    positive: bool = False


class Node:
    __slots__ = ("op", "args", "value")

    def __init__(self, op: str, args: tuple = (), value=None):
        self.op, self.args, self.value = op, args, value

    # ------------------------------------------------------------ construction with folding
    @staticmethod
    def lift(v) -> "Node":
        if isinstance(v, Node):
            return v
        if isinstance(v, (bool, np.bool_)):
            return Node("const", (), Fraction(int(v)))
        if isinstance(v, numbers.Integral):
            return Node("const", (), Fraction(int(v)))      # never numpy's int64 inside: it wraps around
        if isinstance(v, Fraction):
            return Node("const", (), Fraction(int(v.numerator), int(v.denominator)))
        if isinstance(v, (float, np.floating, complex)):
            refuse(f"a float ({v!r}) reached the spec's arithmetic: write constants as "
                   f"B.c(p, q) or B.c('0.044715') so they stay exact")
        refuse(f"a {type(v).__name__} ({v!r}) reached the spec's arithmetic; use the backend B for numbers")

    def is_const(self, q=None) -> bool:
        return self.op == "const" and (q is None or self.value == q)

    @staticmethod
    def add(a, b) -> "Node":
        a, b = Node.lift(a), Node.lift(b)
        if a.op == "const" and b.op == "const":
            return Node("const", (), a.value + b.value)
        if a.is_const(0):
            return b
        if b.is_const(0):
            return a
        return Node("add", (a, b))

    @staticmethod
    def mul(a, b) -> "Node":
        a, b = Node.lift(a), Node.lift(b)
        if a.op == "const" and b.op == "const":
            return Node("const", (), a.value * b.value)
        if a.is_const(0) or b.is_const(0):
            return ZERO
        if a.is_const(1):
            return b
        if b.is_const(1):
            return a
        return Node("mul", (a, b))

    @staticmethod
    def neg(a) -> "Node":
        a = Node.lift(a)
        if a.op == "const":
            return Node("const", (), -a.value)
        if a.op == "neg":
            return a.args[0]
        return Node("neg", (a,))

    @staticmethod
    def inv(a) -> "Node":
        a = Node.lift(a)
        if a.op == "const":
            if a.value == 0:
                raise SpecError(None, "division by an exact zero")
            return Node("const", (), 1 / a.value)
        return Node("inv", (a,))

    @staticmethod
    def power(a, k) -> "Node":
        a = Node.lift(a)
        if isinstance(k, Node):
            if k.op != "const":
                refuse("x ** y with a non-constant exponent is not supported; use B.exp/B.log")
            k = k.value
        k = Fraction(k) if not isinstance(k, Fraction) else k
        if k.denominator == 1:
            k = int(k)
            if a.op == "const":
                if a.value == 0 and k < 0:
                    raise SpecError(None, "division by an exact zero")
                return Node("const", (), a.value ** k)
            if k == 0:
                return ONE
            if k == 1:
                return a
            return Node("pow", (a,), k)
        if k == Fraction(1, 2):
            return Node.unary("sqrt", a)
        if k == Fraction(-1, 2):
            return Node.inv(Node.unary("sqrt", a))
        if a.op == "const":
            if a.value <= 0:
                refuse(f"{a.value} ** {k} is not real")
            return Node("cpow", (a,), k)       # an algebraic constant such as 10000 ** (-1/3)
        refuse(f"x ** {k} is not supported; use B.sqrt or integer powers")

    @staticmethod
    def unary(kind: str, a) -> "Node":
        a = Node.lift(a)
        if a.op == "const" and a.value == 0 and kind in ("exp", "sqrt", "erf", "tanh", "sin", "cos"):
            return Node("const", (), Fraction({"exp": 1, "cos": 1}.get(kind, 0)))
        if a.op == "const" and a.value == 1 and kind in ("sqrt", "log"):
            return Node("const", (), Fraction(1 if kind == "sqrt" else 0))
        if a.op == "const" and kind == "step":
            return Node("const", (), Fraction(1) if a.value > 0 else STEP_AT_KINK)
        return Node(kind, (a,))

    # ------------------------------------------------------------ Python operators
    # An ndarray operand is left to numpy (NotImplemented), which then applies the op elementwise.
    def __add__(self, o):
        return NotImplemented if isinstance(o, np.ndarray) else Node.add(self, o)

    def __mul__(self, o):
        return NotImplemented if isinstance(o, np.ndarray) else Node.mul(self, o)

    def __neg__(self):
        return Node.neg(self)

    def __radd__(self, o):
        return Node.add(o, self)

    def __sub__(self, o):
        return NotImplemented if isinstance(o, np.ndarray) else Node.add(self, Node.neg(o))

    def __rsub__(self, o):
        return Node.add(o, Node.neg(self))

    def __rmul__(self, o):
        return Node.mul(o, self)

    def __truediv__(self, o):
        return NotImplemented if isinstance(o, np.ndarray) else Node.mul(self, Node.inv(o))

    def __rtruediv__(self, o):
        return Node.mul(o, Node.inv(self))

    def __pow__(self, k):
        return NotImplemented if isinstance(k, np.ndarray) else Node.power(self, k)

    def __pos__(self):
        return self

    def __bool__(self):
        if self.op == "const":
            return self.value != 0
        refuse_branch()

    _no_compare = staticmethod(refuse_comparison)

    # Comparisons never answer: `==` on a traced value is not "equal as numbers" (it would be object
    # identity, always False for two entries, so an np.where on it would silently take one branch).
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _no_compare
    __hash__ = object.__hash__      # identity: dicts, sets and numpy's bookkeeping keep working

    def __abs__(self):
        refuse("abs() of a traced value: |x| has a kink at 0 and the proof cannot follow it; "
               "write the op without it or declare the kink (kinks=...)")

    __float__ = __int__ = __index__ = __complex__ = refuse_float

    def __repr__(self):
        if self.op == "const":
            return f"{self.value}"
        if self.op == "leaf":
            return self.value.name
        return f"{self.op}({', '.join(map(repr, self.args))})" + (f"^{self.value}" if self.op == "pow" else "")


ZERO = Node("const", (), Fraction(0))
ONE = Node("const", (), Fraction(1))


class TraceBackend:
    """The ``B`` under which a spec builds a DAG of ``Node``s.

    ``B.max_shift`` is 0 here, as in every exact backend. With ``free_shift`` it is instead a free
    symbol per row -- one per distinct row it is called on, as in floats, where the shift is a
    function of the row's values -- so the claim ``max_shift_free`` can prove that the forward and
    the backward do not depend on it: then the proofs made with shift 0 hold for the row maximum the
    float references subtract. Nodes of a composite always run with shift 0 (each node op carries
    its own claim)."""

    name = "trace"
    dtype = object

    def __init__(self, free_shift: bool = False):
        self.pi = Node("pi")
        self.free_shift = free_shift
        self.shifts: dict = {}          # (ids of a row's entries, mask) -> its shift leaf
        self._alive: list = []          # keeps keyed rows alive, so their ids stay unique
        for kind in ELEMENTWISE:
            setattr(self, kind, self._elementwise(kind))

    @property
    def node_backend(self) -> "TraceBackend":
        return TRACE

    @staticmethod
    def _elementwise(kind):
        ufunc = np.frompyfunc(lambda a: Node.unary(kind, a), 1, 1)

        def apply(a):
            out = ufunc(a)
            return out.astype(object) if isinstance(out, np.ndarray) else out
        apply.__name__ = kind
        return apply

    def c(self, p, q=1):
        return Node("const", (), exact(p, q))

    def zeros(self, shape):
        out = np.empty(shape, dtype=object)
        out.fill(ZERO)
        return out

    def array(self, values):
        return np.array(values, dtype=object)

    def max_shift(self, x, mask=None):
        """0 in exact arithmetic (see vjpcert.core.backends.FloatBackend.max_shift), or a free
        symbol per row with ``free_shift``."""
        if not self.free_shift:
            return self.zeros(np.shape(x)[:-1] + (1,))
        x = np.asarray(x, dtype=object)
        m = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), x.shape)
        out = np.empty(x.shape[:-1] + (1,), dtype=object)
        for idx in np.ndindex(*x.shape[:-1]):
            row = x[idx]
            key = (tuple(id(v) for v in row), None if m is None else tuple(m[idx].tolist()))
            leaf = self.shifts.get(key)
            if leaf is None:
                leaf = Node("leaf", (), Leaf(f"shift{len(self.shifts)}", "shift"))
                self.shifts[key] = leaf
                self._alive.append(row)
            out[idx + (0,)] = leaf
        return out
TRACE = TraceBackend()


def leaf_array(shape: tuple, name: str, role: str, owner: str = "", positive=False) -> np.ndarray:
    """An object array of fresh leaves named like ``x[0,2]``."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        label = f"{name}[{','.join(map(str, idx))}]" if idx else name
        out[idx] = Node("leaf", (), Leaf(label, role, owner or name, idx, positive))
    return out


def leaves_of(arrays) -> list[Leaf]:
    """The distinct leaves reachable from some nodes, in first-seen order."""
    seen, out, stack = set(), [], []
    for a in arrays:
        stack.extend(np.asarray(a, dtype=object).ravel().tolist())
    visited = set()
    while stack:
        n = stack.pop()
        if not isinstance(n, Node) or id(n) in visited:
            continue
        visited.add(id(n))
        if n.op == "leaf" and n.value not in seen:
            seen.add(n.value)
            out.append(n.value)
        stack.extend(n.args)
    return out


def shared_nodes(arrays) -> set[int]:
    """ids of the nodes used by two or more parents: the shared intermediates (a row mean, a softmax
    denominator) that the ring may keep as atoms instead of expanding at every use."""
    parents: dict[int, int] = {}
    stack, visited = [], set()
    for a in arrays:
        stack.extend(np.asarray(a, dtype=object).ravel().tolist())
    while stack:
        n = stack.pop()
        if not isinstance(n, Node) or id(n) in visited:
            continue
        visited.add(id(n))
        for a in n.args:
            parents[id(a)] = parents.get(id(a), 0) + 1
            stack.append(a)
    return {k for k, v in parents.items() if v >= 2}


def dag_size(arrays) -> int:
    stack, visited = [], set()
    for a in arrays:
        stack.extend(np.asarray(a, dtype=object).ravel().tolist())
    while stack:
        n = stack.pop()
        if isinstance(n, Node) and id(n) not in visited:
            visited.add(id(n))
            stack.extend(n.args)
    return len(visited)
