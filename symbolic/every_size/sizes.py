"""Sizes for the shape-polymorphic trace (``symbolic.every_size.shape_trace``): the ``Dim`` a spec sees
for a symbolic dimension, the arithmetic on size expressions (exact division, residues), the trace's
context (the builder G and the facts every size satisfies) and where a refusal happened in spec code.
"""
from __future__ import annotations

import linecache
import math
import numbers
import os
import threading
from pathlib import Path

import numpy as np
import sympy as sp

from vjpcert.core.registry import refuse
from vjpcert.symbolic.every_size.dims import DerivationRefused  # noqa: F401  (raised here, defined with the dims)
from vjpcert.symbolic.every_size.normal import Normaliser


# ============================================================================ refusals and where
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]             # the repository root (or site-packages/vjpcert)
_MACHINERY = tuple(str(p) for p in (_PACKAGE_ROOT / "symbolic", _PACKAGE_ROOT / "core",
                                     Path(np.__file__).resolve().parent, Path(sp.__file__).resolve().parent))
_STDLIB = str(Path(os.__file__).resolve().parent)
_FLOAT = ("a float ({!r}) reached the spec's arithmetic: write constants as B.c(p, q) or B.c('0.044715') "
          "so they stay exact")


def source_of(where: str) -> str:
    """The line of code at file:line (as ``spec_line`` names it), stripped; "" when unknown."""
    if ":" not in where:
        return ""
    name, line = where.rsplit(":", 1)
    path = Path(_SHOWN.get(name, _PACKAGE_ROOT / name))
    return linecache.getline(str(path), int(line)).strip() if path.is_file() and line.isdigit() else ""


# a spec file outside the package is named by its file name alone: where it was read from
_SHOWN: dict[str, str] = {}


def spec_line(frames) -> str:
    """file:line of the innermost frame that is spec code (not vjpcert's machinery, numpy or SymPy);
    a file inside the vjpcert package is named relative to its root, so certificates do not depend
    on where the repository is checked out."""
    where = ""
    for frame in frames:
        if frame.filename.startswith("<"):
            continue
        path = str(Path(frame.filename).resolve())
        if path.startswith(_MACHINERY) or (path.startswith(_STDLIB) and "-packages" not in path):
            continue
        try:
            shown = Path(path).relative_to(_PACKAGE_ROOT).as_posix()
        except ValueError:
            shown = Path(path).name
            _SHOWN[shown] = path
        where = f"{shown}:{frame.lineno}"
    return where


# ============================================================================ the trace context
class _Context:
    """What a trace needs while it runs and while its lazy entries are evaluated: the builder G (dim
    symbols, fresh indices) and the facts about sizes (every dim >= 1)."""

    def __init__(self, G):
        self.G = G
        self.N = Normaliser(G.dim_symbols)

    @property
    def dims(self) -> set:
        return set(self.G.dim_symbols)

    def local(self, size) -> sp.Symbol:
        """A temporary index in [0, size - 1] (for facts about piece maps, never in a statement)."""
        s = sp.Dummy("p", integer=True)
        self.N.ranges[s] = (sp.Integer(0), sp.sympify(size) - 1)
        return s

    def nonneg(self, e) -> bool:
        """e >= 0 for every allowed size and every value of the temporary indices in e (a sufficient
        test: each index is replaced by the end of its range that makes e least, then the polynomial
        in the dims must have nonnegative coefficients over d - 1 >= 0)."""
        e = sp.expand(sp.sympify(e))
        for s in [s for s in e.free_symbols if s in self.N.ranges]:
            c = e.coeff(s)
            if not c.is_Integer or s in sp.expand(e - c * s).free_symbols:
                return False
            lo, hi = self.N.ranges[s]
            e = sp.expand(e - c * s + c * (lo if c > 0 else hi))
        if e.free_symbols - self.dims:
            return False
        return self.N._nonneg(e)

    def never_equal(self, a, b) -> bool:
        d = sp.expand(sp.sympify(a) - sp.sympify(b))
        return self.nonneg(d - 1) or self.nonneg(-d - 1) or residue(d, None) not in (None, 0)


_LOCAL = threading.local()


def _ctx() -> _Context:
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is None:
        raise RuntimeError("a symbolic-size array was used outside a derivation")
    return ctx


def same(a, b) -> bool:
    return sp.expand(sp.sympify(a) - sp.sympify(b)) == 0


def divide_exactly(e, k: int):
    """e / k when every coefficient of the polynomial e is divisible by k, else None."""
    e = sp.expand(sp.sympify(e))
    if k == 1:
        return e
    q = sp.expand(e / k)
    poly = sp.Poly(q, *sorted(q.free_symbols, key=str)) if q.free_symbols else None
    coeffs = poly.coeffs() if poly is not None else [q]
    return q if all(sp.sympify(c).is_Integer for c in coeffs) else None


def residue(e, k: int | None):
    """e mod k when it is the same for every value of e's symbols (every non-constant coefficient
    divisible by k), else None. With k None: the gcd of the non-constant coefficients is the modulus
    (a parity argument: 2h - 2p - 1 is never 0)."""
    e = sp.expand(sp.sympify(e))
    const, rest = e.as_coeff_Add()
    if not const.is_Integer:
        return None
    coeffs = sp.Poly(rest, *sorted(rest.free_symbols, key=str)).coeffs() if rest.free_symbols else []
    if not all(sp.sympify(c).is_Integer for c in coeffs):
        return None
    if k is None:
        k = math.gcd(*[int(c) for c in coeffs]) if coeffs else 0
        if k <= 1:
            return None
    if any(int(c) % k for c in coeffs):
        return None
    return int(const) % k


# ============================================================================ dims
class Dim:
    """A dimension with no value: arithmetic with ints and other dims, ``//`` when exact, use as a
    number through ``B.c(d)``; every test of its value refuses (see the module docstring)."""

    __slots__ = ("expr",)

    def __init__(self, expr):
        object.__setattr__(self, "expr", sp.expand(sp.sympify(expr)))

    def __setattr__(self, name, value):
        refuse("the spec sets an attribute of a dim")

    @staticmethod
    def _of(o):
        if isinstance(o, Dim):
            return o.expr
        if isinstance(o, (bool, np.bool_)) or not isinstance(o, numbers.Integral):
            refuse(f"a dim was combined with a {type(o).__name__}: only ints and other dims keep it a size")
        return sp.Integer(int(o))

    def __add__(self, o):
        return dim_or_int(self.expr + Dim._of(o))

    __radd__ = __add__

    def __sub__(self, o):
        return dim_or_int(self.expr - Dim._of(o))

    def __rsub__(self, o):
        return dim_or_int(Dim._of(o) - self.expr)

    def __mul__(self, o):
        return dim_or_int(self.expr * Dim._of(o))

    __rmul__ = __mul__

    def __neg__(self):
        return dim_or_int(-self.expr)

    def __pow__(self, k):
        if not isinstance(k, numbers.Integral) or k < 0:
            refuse("a dim to a power other than a nonnegative int")
        return dim_or_int(self.expr ** int(k))

    def __floordiv__(self, o):
        k = Dim._of(o)
        if not (k.is_Integer and k > 0):
            refuse("a dim divided (//) by something other than a positive int")
        q = divide_exactly(self.expr, int(k))
        if q is None:
            refuse(f"{self.expr} // {k} is exact only for some sizes (declare the dim a multiple of {k} "
                   f"through the op's constraints)")
        return dim_or_int(q)

    def __truediv__(self, o):
        refuse("a dim divided with / (a float in numpy): use // for a size, or B.c(d) for a number")

    __rtruediv__ = __rfloordiv__ = __truediv__

    def _no_test(op: str):
        def test(self, *_):
            refuse(f"a test of a dim's value ({op} on {self.expr}): Python control flow on a size cannot "
                   f"hold for every size (comparisons, %, divmod, min/max and dict keys all refuse)")
        return test

    __eq__, __ne__, __lt__, __le__ = _no_test("=="), _no_test("!="), _no_test("<"), _no_test("<=")
    __gt__, __ge__ = _no_test(">"), _no_test(">=")
    __mod__ = __rmod__ = _no_test("%")
    __divmod__ = __rdivmod__ = _no_test("divmod")
    __hash__ = _no_test("hash")

    def __bool__(self):
        refuse("bool() of a dim (an if or a while on a size): Python control flow on a size cannot hold "
               "for every size")

    def __index__(self):
        refuse("a dim used as a Python int (range(n), np.arange(n) in a loop, int(n), a list index): "
               "a loop over a size unrolls only at one size; write it vectorised")

    __int__ = __float__ = __complex__ = __index__

    def __str__(self):
        refuse("str() / format() of a dim: its value is not known")

    __format__ = __str__

    def __repr__(self):
        return f"<dim {self.expr}>"


def dim_or_int(e):
    e = sp.expand(sp.sympify(e))
    return int(e) if e.is_Integer else Dim(e)


def _size_expr(s):
    if isinstance(s, Dim):
        return s.expr
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Integral):
        refuse(f"a shape entry {type(s).__name__} is neither an int nor a dim")
    return sp.Integer(int(s))

