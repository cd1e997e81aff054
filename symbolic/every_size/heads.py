"""The every-size tier's derivatives held to the one derivative table (``core.derivatives``).

The tier differentiates indexed SymPy expressions with ``sympy.diff``: SymPy's chain rule through
``Sum``, ``Indexed`` and ``KroneckerDelta`` is what makes the derivation work for every size, and
rewriting it is out of proportion to what it would buy. What SymPy must not decide on its own is
the derivative of a primitive: before the tier differentiates, ``check_heads`` finds every head
applied to something that depends on the array being differentiated, and holds SymPy's derivative
of that head to the table's row (once per head, cached); a head with no row, or whose row SymPy
disagrees with, refuses the derivation (``DerivationRefused``: the claim is ``inconclusive``).

``SympyOps`` is the table's field-operations protocol over SymPy expressions.
"""
from __future__ import annotations

import functools
from fractions import Fraction

import sympy as sp

from vjpcert.core.derivatives import RULES, MissingRule, derivative, uses_value
from vjpcert.symbolic.every_size.atoms import Step
from vjpcert.symbolic.every_size.inverse import LowerInverse
from vjpcert.symbolic.every_size.normal import Ind
from vjpcert.symbolic.every_size.shape_trace import DerivationRefused

# SymPy's spelling of the table's unary primitives (sqrt, inv and pow are Pow, read off the exponent)
SYMPY_HEADS = {sp.exp: "exp", sp.log: "log", sp.erf: "erf", sp.tanh: "tanh", sp.sin: "sin", sp.cos: "cos"}
# heads of the tier's own structure: functions of indices only, never of the array's values
STRUCTURAL = (sp.KroneckerDelta, Ind)


class SympyOps:
    """The derivative table's operations on SymPy expressions."""

    def c(self, q):
        q = Fraction(q)
        return sp.Rational(q.numerator, q.denominator)

    def add(self, x, z):
        return x + z

    def mul(self, x, z):
        return x * z

    def neg(self, x):
        return -x

    def inv(self, x):
        return 1 / x

    def pow(self, x, n: int):
        return x ** n

    def exp(self, x):
        return sp.exp(x)

    def sqrt(self, x):
        return sp.sqrt(x)

    def sin(self, x):
        return sp.sin(x)

    def cos(self, x):
        return sp.cos(x)

    def pi(self):
        return sp.pi


SYMPY_OPS = SympyOps()
_Z = sp.Symbol("z")


def sympy_primitive(kind: str, a, k=None):
    """The primitive ``kind`` applied to ``a`` in SymPy."""
    if kind == "sqrt":
        return sp.sqrt(a)
    if kind == "inv":
        return 1 / a
    if kind == "pow":
        q = Fraction(k)
        return a ** sp.Rational(q.numerator, q.denominator)
    if kind == "step":
        return Step(a)
    return getattr(sp, kind)(a)


def table_derivative(kind: str, a, k=None):
    """The table's f'(a) of ``kind`` as a SymPy expression."""
    y = sympy_primitive(kind, a, k) if uses_value(kind, k) else None
    return derivative(SYMPY_OPS, kind, a, y, k)


def _abs_agrees() -> bool:
    """|a| is no primitive of the language: it is SymPy's spelling of sqrt(a^2) for real a, so its
    derivative must be the table's sqrt row after its square row, 2a / (2 sqrt(a^2)). SymPy's sign(a)
    is compared on each open region (a > 0, a < 0); at the kink a = 0 neither is defined."""
    p = sp.Symbol("p", positive=True)
    z = sp.Symbol("z", real=True)
    chain = table_derivative("sqrt", z ** 2) * table_derivative("pow", z, 2)
    return all(sp.simplify((sp.diff(sp.Abs(z), z) - chain).subs(z, side)) == 0 for side in (p, -p))


@functools.lru_cache(maxsize=None)
def agrees(kind: str, k=None) -> bool:
    """Whether SymPy's derivative of the head equals the table's row (checked symbolically)."""
    if kind == "abs":
        return _abs_agrees()
    if kind not in RULES:
        return False
    try:
        row = table_derivative(kind, _Z, k)
    except MissingRule:
        return False
    return sp.simplify(sp.diff(sympy_primitive(kind, _Z, k), _Z) - row) == 0


@functools.lru_cache(maxsize=None)
def lower_inverse_agrees(sizes=(1, 2, 3, 4, 5)) -> bool:
    """Whether the rule of ``unit_lower_inverse`` is the derivative of its definition:
    at each size, SymPy differentiates the definition (run on SymPy matrices of free entries) along a
    free direction, and the rule applied to the definition's value must give the same matrix."""
    import numpy as np

    from vjpcert.core.backends import SYMPY
    from vjpcert.core.matrix_functions import RULES, unit_lower_inverse

    class Ops:
        matmul = staticmethod(lambda X, Y: X * Y)
        neg = staticmethod(lambda X: -X)
        strict_lower = staticmethod(lambda X: sp.Matrix(X.rows, X.cols, lambda r, c: X[r, c] if r > c else 0))

    t = sp.Symbol("t")
    for n in sizes:
        A = sp.Matrix(n, n, lambda r, c: sp.Symbol(f"a_{r}_{c}"))
        D = sp.Matrix(n, n, lambda r, c: sp.Symbol(f"d_{r}_{c}"))
        T = sp.Matrix(np.asarray(unit_lower_inverse(SYMPY, np.array(A + t * D, dtype=object)),
                                 dtype=object).tolist())
        want = T.diff(t).subs(t, 0)
        got = RULES["unit_lower_inverse"](Ops, T.subs(t, 0), D)
        if (want - got).expand() != sp.zeros(n, n):
            return False
    return True


def head_of(e) -> tuple | None:
    """(kind, k) of the table for a SymPy head, None for a head the table has no row for."""
    if isinstance(e, sp.Pow):
        q = e.exp
        if not q.is_Rational:
            return None
        if q == sp.Rational(1, 2):
            return ("sqrt", None)
        return ("pow", Fraction(int(q.p), int(q.q)))
    if isinstance(e, sp.Abs):
        return ("abs", None)
    if isinstance(e, Step):
        return ("step", None)
    kind = SYMPY_HEADS.get(e.func)
    return None if kind is None else (kind, None)


def check_heads(expr, *bases) -> None:
    """Refuse the derivation unless every head in ``expr`` applied to something depending on one of
    ``bases`` (an IndexedBase, or the symbols of an instantiated array) has a row of the table that
    SymPy's derivative agrees with."""
    for e in sp.preorder_traversal(sp.sympify(expr)):
        if not (isinstance(e, (sp.Function, sp.Pow)) and e.has(*bases)):
            continue
        if isinstance(e, STRUCTURAL):
            continue
        if isinstance(e, LowerInverse):
            if not lower_inverse_agrees():
                raise DerivationRefused("the rule of unit_lower_inverse disagrees with "
                                        "the derivative of its definition (core.matrix_functions)")
            check_heads(e.body, *bases)       # the matrix it inverts, which its rule differentiates
            continue
        head = head_of(e)
        if head is None:
            raise DerivationRefused(f"the derivative table (core.derivatives) has no row for "
                                    f"{sp.sstr(e.func) if not isinstance(e, sp.Pow) else 'a power'} "
                                    f"in {sp.sstr(e)[:120]}")
        if not agrees(*head):
            raise DerivationRefused(f"SymPy's derivative of {head[0]} disagrees with the derivative "
                                    f"table's row (core.derivatives)")
