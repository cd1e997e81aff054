"""The fixed-dims prover's fields that are no evidence: ``SizeField`` bounds how large the ring's
polynomials would grow before the ring is built, so the ladder can pass over a claim beyond its reach;
``SympyField`` shows a claim as SymPy expressions.

Apart from the fields whose values are a proof or a witness (``fields``: the exact ring and its mod-p
image) because neither needs python-flint or the ring's atoms.
"""
from __future__ import annotations

from fractions import Fraction

from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.evaluate import _OperatorField


class SizeField:
    """How large the ring's polynomials would grow, without building them: each value is (terms,
    degree), an upper bound on the number of monomials of its expansion and its total degree, with the
    ring's atoms (a transcendental, a reciprocal, a shared long linear form) one term each. Cheap (the
    DAG is walked once with integers), so the ladder can see a claim past the ring's reach before it
    spends the ring's share of the budget on it."""

    CAP = 10 ** 18

    def __init__(self, lin_min_terms: int | None = None):
        self.lin_min_terms = lin_min_terms

    def const(self, q):
        return (0, 0) if Fraction(q) == 0 else (1, 0)

    def leaf(self, leaf):
        return (1, 1)

    def add(self, a, b):
        return (min(a[0] + b[0], self.CAP), max(a[1], b[1]))

    def mul(self, a, b):
        return (min(a[0] * b[0], self.CAP), a[1] + b[1]) if a[0] and b[0] else (0, 0)

    def neg(self, a):
        return a

    def inv(self, a):
        return (1, 1) if a[0] > 1 else (1, a[1])

    def pow(self, a, k: int):
        if k < 0:
            return self.pow(self.inv(a), -k)
        return (min(a[0] ** k, self.CAP) if a[0] < self.CAP else self.CAP, a[1] * k)

    def _atom(self, a):
        return (1, 1)

    exp = log = sqrt = erf = tanh = sin = cos = step = _atom

    def pi(self):
        return (1, 1)

    def cpow(self, base, k):
        return (1, 1)

    def share(self, v):
        return (1, 1) if self.lin_min_terms and v[1] == 1 and v[0] >= self.lin_min_terms else v



class SympyField(_OperatorField):
    """SymPy expressions with the real functions (leaves become real symbols)."""

    def __init__(self):
        import sympy
        self.sp = sympy
        self.symbols: dict = {}

    def const(self, q):
        q = Fraction(q)
        return self.sp.Rational(q.numerator, q.denominator)

    def leaf(self, leaf):
        s = self.symbols.get(leaf)
        if s is None:
            s = self.symbols[leaf] = self.sp.Symbol(leaf.name, real=True, positive=leaf.positive or None)
        return s

    def inv(self, a):
        return 1 / a

    def pi(self):
        return self.sp.pi

    def step(self, a):
        return self.sp.Heaviside(a, self.const(STEP_AT_KINK))

    def __getattr__(self, kind):       # exp, log, sqrt, erf, tanh, sin, cos
        if kind.startswith("_"):
            raise AttributeError(kind)
        return getattr(self.sp, kind)
