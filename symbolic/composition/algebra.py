"""The algebra the wiring proof (``symbolic.composition.wiring``) works in.

Primal values are ``Tag``s: hash-consed names (an input entry, a parameter, entry k of a node call's
output, a sum, a constant multiple), so the same computation done twice is the same tag. Cotangent
entries are ``Lin``s: sums of coef * (entry k of a linear expression). A linear expression (``Expr``)
is a sum of ``Term``s, each a coefficient times a word ``S0 J1 S1 ... Jk Sk`` applied to a base vector
(dy, or an input's tangent): ``J`` is one node call's Jacobian block (or its transpose), opaque, and
``SMat`` an exact integer sparse matrix. ``canonical`` gives words a canonical form: equal forms are
equal linear maps for every value of every J. The ``Tape`` holds the tags, the node calls, the
expressions, and derives tangents (forward mode) through the calls.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import gcd

import numpy as np
import scipy.sparse as sps

from vjpcert.core.registry import Op


class Unsupported(Exception):
    """The composite's own code is not linear wiring (a product of values, a transcendental)."""


# ============================================================================ primal tags
class Tag:
    """A hash-consed name of one primal value (see the module docstring)."""

    __slots__ = ("id", "kind", "args", "tape")

    def __init__(self, id_, kind, args, tape):
        self.id, self.kind, self.args, self.tape = id_, kind, args, tape

    @property
    def const(self):
        return self.args[0] if self.kind == "const" else None

    # arithmetic: linear only
    def __add__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        if isinstance(o, Lin):
            raise Unsupported("a value added to a cotangent")
        return self.tape.add(self, self.tape.lift(o))

    __radd__ = __add__

    def __neg__(self):
        return self.tape.scale(Fraction(-1), self)

    def __pos__(self):
        return self

    def __sub__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        return self + (-self.tape.lift(o))

    def __rsub__(self, o):
        return self.tape.lift(o) + (-self)

    def __mul__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        if isinstance(o, Lin):
            return o * self
        o = self.tape.lift(o)
        if o.const is not None:
            return self.tape.scale(o.const, self)
        if self.const is not None:
            return self.tape.scale(self.const, o)
        raise Unsupported("the composite's own code multiplies two values (not linear wiring)")

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        o = self.tape.lift(o)
        if o.const is None or o.const == 0:
            raise Unsupported("the composite's own code divides by a value")
        return self.tape.scale(1 / o.const, self)

    def __rtruediv__(self, o):
        if self.const is None or self.const == 0:
            raise Unsupported("the composite's own code divides by a value")
        return self.tape.scale(1 / self.const, self.tape.lift(o))

    def __pow__(self, k):
        if self.const is not None and isinstance(k, int):
            return self.tape.const(self.const ** k)
        raise Unsupported("a power in the composite's own code")

    def __bool__(self):
        if self.const is not None:
            return self.const != 0
        raise Unsupported("a branch on a value in the composite's own code")

    def __repr__(self):
        return self.tape.describe(self)


class Lin:
    """One entry of a cotangent: sum of coef * (entry k of linear expression e). ``bad`` says why an
    entry is not linear wiring (a cotangent times a value): only the claims it reaches are affected."""

    __slots__ = ("parts", "tape", "bad")

    def __init__(self, parts: dict, tape, bad: str | None = None):
        self.parts, self.tape, self.bad = parts, tape, bad

    def _combine(self, o, sign=1):
        if isinstance(o, np.ndarray):
            return NotImplemented
        if isinstance(o, (int, Fraction)) and o == 0:
            return self
        if isinstance(o, Tag) and o.const == 0:
            return self
        if not isinstance(o, Lin):
            raise Unsupported("a value added to a cotangent")
        if self.bad or o.bad:
            return Lin({}, self.tape, self.bad or o.bad)
        parts = dict(self.parts)
        for key, c in o.parts.items():
            parts[key] = parts.get(key, 0) + sign * c
            if parts[key] == 0:
                del parts[key]
        return Lin(parts, self.tape)

    def __add__(self, o):
        return self._combine(o, 1)

    __radd__ = __add__

    def __sub__(self, o):
        return self._combine(o, -1)

    def __rsub__(self, o):
        return (-self)._combine(o, 1)

    def __neg__(self):
        return self * Fraction(-1)

    def __pos__(self):
        return self

    def __mul__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        if isinstance(o, Tag):
            if o.const is None:
                return Lin({}, self.tape, "a cotangent multiplied by a value (a gradient computed in "
                                          "the composite's own code, not by a node's VJP)")
            o = o.const
        if not isinstance(o, (int, Fraction)):
            raise Unsupported(f"a cotangent multiplied by {type(o).__name__}")
        if o == 0 and not self.bad:
            return Lin({}, self.tape)
        return Lin({k: c * o for k, c in self.parts.items()}, self.tape, self.bad)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        if isinstance(o, Tag):
            o = o.const
        if not isinstance(o, (int, Fraction)) or o == 0:
            raise Unsupported("a cotangent divided by a value")
        return self * (1 / Fraction(o))

    def __bool__(self):
        raise Unsupported("a branch on a cotangent")


# ============================================================================ sparse structural maps
class SMat:
    """An exact integer sparse matrix in canonical CSR (sorted, no explicit zeros): hashable by content."""

    __slots__ = ("m", "_key")

    def __init__(self, m):
        m = sps.csr_matrix(m, dtype=np.int64)
        m.sum_duplicates()
        m.eliminate_zeros()
        m.sort_indices()
        self.m = m
        self._key = (m.shape, m.indptr.tobytes(), m.indices.tobytes(), m.data.tobytes())

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, o):
        return isinstance(o, SMat) and self._key == o._key

    @property
    def shape(self):
        return self.m.shape

    def is_zero(self) -> bool:
        return self.m.nnz == 0

    def is_identity(self) -> bool:
        r, c = self.m.shape
        return r == c and self.m.nnz == r and bool(np.all(self.m.indices == np.arange(r))) \
            and bool(np.all(self.m.data == 1))

    def T(self) -> "SMat":
        return SMat(self.m.T)

    def __matmul__(self, o: "SMat") -> "SMat":
        return SMat(self.m @ o.m)

    def content(self) -> int:
        g = 0
        for v in self.m.data:
            g = gcd(g, int(v))
        if g and self.m.data.size and self.m.data[0] < 0:
            g = -g
        return g


@dataclass(frozen=True)
class J:
    """The Jacobian block d out(call) / d arg of one node call, or its transpose."""
    call: int
    arg: str
    transposed: bool = False

    def T(self) -> "J":
        return J(self.call, self.arg, not self.transposed)


@dataclass
class Term:
    coef: Fraction
    word: tuple          # elements applied right to left: SMat or J
    base: object         # "dy" or ("t", input name)


@dataclass
class Expr:
    size: int
    terms: list = field(default_factory=list)


def canonical(coef: Fraction, word: tuple):
    """(coef, word) with adjacent matrices multiplied out, identities dropped, each matrix's integer
    content moved into the coefficient; None when the word is the zero map."""
    out: list = []
    for el in word:
        if isinstance(el, SMat):
            if out and isinstance(out[-1], SMat):
                el = out.pop() @ el
            if el.is_zero():
                return None
        out.append(el)
    final = []
    for el in out:
        if isinstance(el, SMat):
            if el.is_identity():
                continue
            g = el.content()
            if g not in (0, 1):
                coef *= g
                el = SMat(sps.csr_matrix((el.m.data // g, el.m.indices, el.m.indptr), shape=el.m.shape))
        final.append(el)
    if coef == 0:
        return None
    return coef, tuple(final)


def transpose_word(word: tuple) -> tuple:
    return tuple(el.T() for el in reversed(word))


# ============================================================================ the tape
@dataclass
class Call:
    id: int
    instance: str
    op: Op
    key: tuple
    args: dict            # name -> tag array (object ndarray) for inputs and non-differentiable inputs
    params: dict          # name -> Tag or plain value
    dims: dict
    out_shape: tuple
    from_backward: bool = False


class Tape:
    def __init__(self):
        self._interned: dict = {}
        self.tags: list[Tag] = []
        self.calls: list[Call] = []
        self._calls_by_key: dict = {}
        self.exprs: list[Expr] = []
        self._bases: dict = {}
        self._tangent: dict[int, dict] = {}
        self._call_tangent: dict[int, int] = {}
        self.mismatches: list[dict] = []

    # ---------------------------------------------------------------- tags
    def tag(self, kind, *args) -> Tag:
        key = (kind, args)
        t = self._interned.get(key)
        if t is None:
            t = Tag(len(self.tags), kind, args, self)
            self.tags.append(t)
            self._interned[key] = t
        return t

    def const(self, q) -> Tag:
        return self.tag("const", Fraction(q))

    def lift(self, v) -> Tag:
        if isinstance(v, Tag):
            return v
        if isinstance(v, (bool, np.bool_)):
            return self.const(int(v))
        if isinstance(v, (int, np.integer, Fraction)):
            return self.const(Fraction(v))
        raise Unsupported(f"a {type(v).__name__} in the composite's own arithmetic")

    def add(self, a: Tag, b: Tag) -> Tag:
        if a.const is not None and b.const is not None:
            return self.const(a.const + b.const)
        if a.const == 0:
            return b
        if b.const == 0:
            return a
        a, b = sorted((a, b), key=lambda t: t.id)
        return self.tag("add", a.id, b.id)

    def scale(self, c: Fraction, a: Tag) -> Tag:
        c = Fraction(c)
        if a.const is not None:
            return self.const(c * a.const)
        if c == 1:
            return a
        if c == 0:
            return self.const(0)
        return self.tag("scale", c, a.id)

    def describe(self, t: Tag, depth: int = 2) -> str:
        if t.kind == "const":
            return str(t.const)
        if t.kind in ("in", "nondiff"):
            name, idx = t.args
            return f"{name}{list(idx)}"
        if t.kind == "param":
            return t.args[0]
        if t.kind == "out":
            c = self.calls[t.args[0]]
            return f"{c.instance}(...)[{t.args[1]}]"
        if depth <= 0:
            return "..."
        if t.kind == "add":
            return f"({self.describe(self.tags[t.args[0]], depth - 1)} + {self.describe(self.tags[t.args[1]], depth - 1)})"
        return f"{t.args[0]}*{self.describe(self.tags[t.args[1]], depth - 1)}"

    def tag_array(self, kind, name, shape) -> np.ndarray:
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = self.tag(kind, name, idx)
        return out

    # ---------------------------------------------------------------- linear expressions
    def new_expr(self, size: int, terms: list) -> int:
        self.exprs.append(Expr(size, terms))
        return len(self.exprs) - 1

    def base(self, base, size: int) -> int:
        if base not in self._bases:
            self._bases[base] = self.new_expr(size, [Term(Fraction(1), (), base)])
        return self._bases[base]

    def lin_array(self, expr: int, shape) -> np.ndarray:
        out = np.empty(shape, dtype=object)
        for k, idx in enumerate(np.ndindex(*shape)):
            out[idx] = Lin({(expr, k): Fraction(1)}, self)
        return out

    def expr_from_parts(self, parts_per_entry: list[dict]) -> int:
        """One linear expression from the parts of each entry (entry p = sum of c * expr_e[k])."""
        n = len(parts_per_entry)
        by_expr: dict[int, list] = {}
        for p, parts in enumerate(parts_per_entry):
            for (e, k), c in parts.items():
                by_expr.setdefault(e, []).append((p, k, Fraction(c)))
        terms = []
        for e, triples in by_expr.items():
            den = 1
            for _, _, c in triples:
                den = den * c.denominator // gcd(den, c.denominator)
            rows = [p for p, _, _ in triples]
            cols = [k for _, k, _ in triples]
            data = [int(c * den) for _, _, c in triples]
            S = SMat(sps.coo_matrix((data, (rows, cols)), shape=(n, self.exprs[e].size)))
            for t in self.exprs[e].terms:
                got = canonical(t.coef / den, (S, *t.word))
                if got is not None:
                    terms.append(Term(got[0], got[1], t.base))
        return self.new_expr(n, terms)

    def expr_from_array(self, arr) -> int:
        """A cotangent array (Lin entries, or zero constants) as one linear expression."""
        arr = np.asarray(arr, dtype=object)
        parts = []
        for v in arr.ravel():
            if isinstance(v, Lin):
                if v.bad:
                    raise Unsupported(v.bad)
                parts.append(v.parts)
            elif (isinstance(v, Tag) and v.const == 0) or (isinstance(v, (int, Fraction)) and v == 0):
                parts.append({})
            else:
                raise Unsupported(f"a cotangent entry that is not linear in dy: {v!r}")
        return self.expr_from_parts(parts)

    # ---------------------------------------------------------------- tangents (forward mode)
    def tangent_parts(self, t: Tag) -> dict:
        """The tangent of a tag as parts {(expr, k): coef}, memoised (iteratively: sums can be long)."""
        if t.id in self._tangent:
            return self._tangent[t.id]
        stack = [t]
        while stack:
            u = stack[-1]
            if u.id in self._tangent:
                stack.pop()
                continue
            kids = [self.tags[i] for i in ((u.args[0], u.args[1]) if u.kind == "add" else
                                           (u.args[1],) if u.kind == "scale" else ())]
            todo = [k for k in kids if k.id not in self._tangent]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            self._tangent[u.id] = self._tangent_of(u)
        return self._tangent[t.id]

    def _tangent_of(self, u: Tag) -> dict:
        if u.kind in ("const", "param", "nondiff"):
            return {}
        if u.kind == "in":
            name, idx = u.args
            e, shape = self._inputs[name]
            return {(e, int(np.ravel_multi_index(idx, shape)) if shape else 0): Fraction(1)}
        if u.kind == "add":
            out = dict(self._tangent[u.args[0]])
            for key, c in self._tangent[u.args[1]].items():
                out[key] = out.get(key, 0) + c
                if out[key] == 0:
                    del out[key]
            return out
        if u.kind == "scale":
            return {k: c * u.args[0] for k, c in self._tangent[u.args[1]].items()}
        if u.kind == "out":
            call, k = u.args
            return {(self.call_tangent(call), k): Fraction(1)}
        raise AssertionError(u.kind)

    def call_tangent(self, call_id: int) -> int:
        """d out(call) = sum over every argument a with a nonzero tangent of J(call, a) d a."""
        if call_id not in self._call_tangent:
            call = self.calls[call_id]
            terms = []
            arrays = dict(call.args)
            arrays.update({k: np.asarray(v, dtype=object) for k, v in call.params.items() if isinstance(v, Tag)})
            for name, arr in arrays.items():
                parts = [self.tangent_parts(v) for v in np.asarray(arr, dtype=object).ravel()]
                if not any(parts):
                    continue
                e = self.expr_from_parts(parts)
                for t in self.exprs[e].terms:
                    got = canonical(t.coef, (J(call_id, name), *t.word))
                    if got is not None:
                        terms.append(Term(got[0], got[1], t.base))
            self._call_tangent[call_id] = self.new_expr(int(np.prod(call.out_shape)), terms)
        return self._call_tangent[call_id]


def collect(tape: Tape, expr: int) -> dict:
    """{(word, base): coef} with like words collected and zero coefficients dropped."""
    out: dict = {}
    for t in tape.exprs[expr].terms:
        key = (t.word, t.base)
        out[key] = out.get(key, 0) + t.coef
        if out[key] == 0:
            del out[key]
    return out


