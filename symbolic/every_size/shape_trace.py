"""The every-size statement of a claim, derived from the spec's own numpy code: a shape-polymorphic trace.

The spec's forward, backward and laws run once with arrays whose dimensions are *symbols* (n >= 1,
rows >= 1, d = 2h where the op's constraints only allow even d). Such an array (``SymArray``) holds
no entries: it is a function from symbolic indices to a SymPy expression -- ``IndexedBase`` entries
for the inputs, ``Sum`` for reductions, index arithmetic for slices -- evaluated lazily when the
statement is built. What the spec computes *is* the statement: nothing is transcribed by hand.

What the trace follows: elementwise arithmetic with broadcasting, the backend ``B`` (exp, log, sqrt,
erf, tanh, sin, cos, pi, c, zeros, array, max_shift -- 0 in exact arithmetic), ``.sum/.mean/.any/.all``
over an axis (keepdims), ``@``, ``.T``, basic indexing (``x[0]``, ``x[:, h:]``, ``x[:, 0::2]``,
``x[..., :1]``, ``None``), ``np.concatenate``, ``np.stack``, ``reshape`` merging a constant-size axis
(RoPE's interleave), ``np.where`` with a mask built from shapes (``np.ones``, ``np.tril``,
``np.triu``), ``np.arange`` of a dim (an index-valued array, usable as a number only) and ``x.shape``.
A layout that splits an axis (a concatenation, an interleave) makes the array *pieces*: each piece
is a box of local indices p with an affine map  j = a p + b  per axis (``general_form`` proves that
the pieces of the final arrays tile them).

What cannot pass: a dim (``x.shape[-1]``) is a ``Dim`` that refuses ``==``, ``<``, ``%``, ``bool()``,
``int()``, ``__index__`` (so ``range(n)``, ``if n % 4 == 0``, ``if n > 2048`` and iteration over a
symbolic axis all refuse), hashing and ``str()``; a ``SymArray`` refuses comparisons, ``bool()``,
iteration over a symbolic axis, conversion to a numpy array and in-place writes; a slice or an index
with a bound not provably inside every size (``x[..., :2048]``) refuses, as does a layout that cannot
be aligned for every size. Every refusal goes through ``core.registry.refuse``, so a spec that catches
it is still refused. A refused derivation makes the every-size claim ``inconclusive`` with the reason
and the spec's file:line (``DerivationRefused``). Identity and type tests (``n is 16``,
``isinstance(n, int)``) cannot be intercepted by any Python object; the cross-check of
``symbolic.every_size.general`` at concrete sizes is what stands behind them.

Public API: ``derive(op, claim) -> builder`` (a ``GeneralBuilder -> G.vjp(...) | G.law(...)``),
``dim_forms(op) -> {dim: (k, sub)}``, ``DerivationRefused``.
"""
from __future__ import annotations

import contextlib
import inspect
import numbers
import os
import threading
import traceback
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np
import sympy as sp
from sympy import Sum

from vjpcert.core.backends import exact
from vjpcert.core.registry import Op, SpecError, refuse, take_refusals
from vjpcert.symbolic.every_size.normal import Ind, Normaliser

# ============================================================================ refusals and where
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]             # the repository root (or site-packages/vjpcert)
_MACHINERY = tuple(str(p) for p in (_PACKAGE_ROOT / "symbolic", _PACKAGE_ROOT / "core",
                                     Path(np.__file__).resolve().parent, Path(sp.__file__).resolve().parent))
_STDLIB = str(Path(os.__file__).resolve().parent)
_FLOAT = ("a float ({!r}) reached the spec's arithmetic: write constants as B.c(p, q) or B.c('0.044715') "
          "so they stay exact")


class DerivationRefused(Exception):
    """The spec could not be traced with symbolic dimensions: ``reason``, at ``where`` (file:line)."""

    def __init__(self, reason: str, where: str = ""):
        self.reason, self.where = reason, where
        super().__init__(f"{where}: {reason}" if where else reason)


def source_of(where: str) -> str:
    """The line of code at file:line (as ``spec_line`` names it), stripped; "" when unknown."""
    import linecache
    if ":" not in where:
        return ""
    name, line = where.rsplit(":", 1)
    path = _PACKAGE_ROOT / name
    return linecache.getline(str(path), int(line)).strip() if path.is_file() and line.isdigit() else ""


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
        import math
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


# ============================================================================ arrays
class Piece:
    """Part of an array: for local indices p in the box of ``maps`` (per axis: global j = a p + b,
    p in [0, size - 1]), the entry is ``fn(p)``; memoised, so a shared intermediate is one expression."""

    __slots__ = ("maps", "fn", "_memo")

    def __init__(self, maps, fn: Callable):
        self.maps = tuple((int(a), sp.expand(sp.sympify(b)), sp.expand(sp.sympify(z))) for a, b, z in maps)
        self.fn = fn
        self._memo: dict = {}

    def value(self, local):
        key = tuple(local)
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = sp.sympify(self.fn(key))
        return v


def _identity_maps(shape):
    return tuple((1, 0, z) for z in shape)


def _same_maps(m1, m2) -> bool:
    return all(a1 == a2 and same(b1, b2) and same(z1, z2) for (a1, b1, z1), (a2, b2, z2) in zip(m1, m2))


class SymArray:
    """An array with symbolic dimensions: shape (SymPy sizes) and pieces. ``boolean`` arrays (masks)
    hold indicator expressions (1, 0, products of ``Ind``)."""

    __array_priority__ = 10_000

    def __init__(self, shape, pieces, boolean: bool = False):
        self._shape = tuple(sp.expand(sp.sympify(z)) for z in shape)
        self.pieces = list(pieces)
        self.boolean = boolean
        self.ctx = _ctx()

    # ------------------------------------------------------------------ construction
    @staticmethod
    def full(shape, fn: Callable, boolean=False) -> "SymArray":
        return SymArray(shape, [Piece(_identity_maps(shape), fn)], boolean)

    @staticmethod
    def scalar(value, boolean=False) -> "SymArray":
        v = sp.sympify(value)
        return SymArray((), [Piece((), lambda idx: v)], boolean)

    # ------------------------------------------------------------------ shape
    @property
    def shape(self) -> tuple:
        return tuple(dim_or_int(z) for z in self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self):
        return dim_or_int(sp.Mul(*self._shape))

    @property
    def dtype(self):
        return np.dtype(bool) if self.boolean else np.dtype(object)

    @property
    def T(self) -> "SymArray":
        return self.transpose()

    def __len__(self):
        if not self._shape:
            refuse("len() of a 0-d array")
        if not self._shape[0].is_Integer:
            refuse("len() of a symbolic-size axis: its value is not known")
        return int(self._shape[0])

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def sample(self):
        """An entry of the first piece at temporary indices (for eager checks)."""
        p = self.pieces[0]
        return p.value(tuple(self.ctx.local(z) for _, _, z in p.maps))

    # ------------------------------------------------------------------ refusals
    def _no_compare(self, *_):
        refuse("a comparison (==, !=, <, <=, >, >=, max, abs, sort, ...) of traced values: specs must be "
               "branch-free in their inputs; build masks from shapes (np.ones, np.tril)")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _no_compare
    __hash__ = object.__hash__

    def __bool__(self):
        refuse("a branch depends on a traced value (if, and, or, any/all of values): specs must be "
               "branch-free in their inputs; build masks from shapes or structural params")

    def __abs__(self):
        refuse("abs() of a traced value: |x| has a kink at 0 and the proof cannot follow it")

    def __float__(self):
        refuse("float() or math.* was applied to a traced value: use B.exp, B.sqrt, ...")

    __int__ = __index__ = __complex__ = __float__

    def __mod__(self, o):
        refuse("% of traced values (or of an index array): a remainder is a branch per entry")

    __rmod__ = __floordiv__ = __rfloordiv__ = __divmod__ = __mod__

    def __setitem__(self, key, value):
        refuse("writes into an array in place; inputs are read-only to spec code: compute a new array")

    def __array__(self, *a, **k):
        refuse("a symbolic-size array was converted to a numpy array (np.asarray, np.array, a numpy "
               "function the trace does not follow): its entries are not known")

    def __repr__(self):
        return f"<symbolic array {tuple(map(str, self._shape))}{' bool' if self.boolean else ''}>"

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, o):
        return elementwise(sp.Add, self, o)

    def __radd__(self, o):
        return elementwise(sp.Add, o, self)

    def __sub__(self, o):
        return elementwise(lambda a, b: a - b, self, o)

    def __rsub__(self, o):
        return elementwise(lambda a, b: a - b, o, self)

    def __mul__(self, o):
        return elementwise(sp.Mul, self, o)

    def __rmul__(self, o):
        return elementwise(sp.Mul, o, self)

    def __truediv__(self, o):
        return elementwise(_divide, self, o)

    def __rtruediv__(self, o):
        return elementwise(_divide, o, self)

    def __neg__(self):
        return elementwise(lambda a: -a, self)

    def __pos__(self):
        return self

    def __pow__(self, k):
        return power(self, k)

    def __rpow__(self, b):
        return power(lift(b), self)

    def __matmul__(self, o):
        return matmul(self, lift(o))

    def __rmatmul__(self, o):
        return matmul(lift(o), self)

    def __and__(self, o):
        return logical(sp.Mul, self, o)

    __rand__ = __and__

    def __or__(self, o):
        return logical(lambda a, b: 1 - (1 - a) * (1 - b), self, o)

    __ror__ = __or__

    def __invert__(self):
        return logical(lambda a: 1 - a, self)

    # ------------------------------------------------------------------ numpy methods
    def sum(self, axis=None, keepdims=False, **kw):
        _no_extra(kw, "sum")
        return reduce(self, axis, keepdims, "sum")

    def mean(self, axis=None, keepdims=False, **kw):
        _no_extra(kw, "mean")
        s = reduce(self, axis, keepdims, "sum")
        count = sp.Mul(*[self._shape[a] for a in _axes(axis, self.ndim)])
        return s / SymArray.scalar(count)

    def any(self, axis=None, keepdims=False, **kw):
        _no_extra(kw, "any")
        return reduce(self, axis, keepdims, "any")

    def all(self, axis=None, keepdims=False, **kw):
        _no_extra(kw, "all")
        return reduce(self, axis, keepdims, "all")

    def max(self, *a, **k):
        self._no_compare()

    min = argmax = argmin = max

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        axes = tuple(range(self.ndim))[::-1] if not axes else tuple(_axis(a, self.ndim) for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            refuse(f"transpose with axes {axes}")

        def move(P):
            return Piece([P.maps[a] for a in axes],
                         lambda idx, P=P: P.value(_unpermute(idx, axes)))
        return SymArray([self._shape[a] for a in axes], [move(P) for P in self.pieces], self.boolean)

    def reshape(self, *shape, **kw):
        _no_extra(kw, "reshape")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def astype(self, dtype, **kw):
        if np.dtype(dtype) == np.dtype(object) or (self.boolean and np.dtype(dtype) == np.dtype(bool)):
            return self
        refuse(f"astype({np.dtype(dtype)}) of a traced array: the exact backends hold objects")

    def copy(self, *a, **k):
        return self

    def __getitem__(self, key):
        return getitem(self, key)

    # ------------------------------------------------------------------ numpy protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            refuse(f"np.{ufunc.__name__}.{method} on a symbolic-size array")
        fn = _UFUNCS.get(ufunc.__name__)
        if fn is None:
            refuse(f"np.{ufunc.__name__} was applied to traced values: use B.exp, B.sqrt, ... (numpy's own "
                   f"functions would silently leave the exact backends)")
        return fn(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        fn = _FUNCTIONS.get(func.__name__)
        if fn is None:
            refuse(f"np.{func.__name__} on a symbolic-size array is not followed by the every-size trace")
        return fn(*args, **kwargs)


def _no_extra(kw, what):
    bad = {k: v for k, v in kw.items() if v is not None}
    if bad:
        refuse(f".{what}() with {sorted(bad)} is not followed by the every-size trace")


def _divide(a, b):
    if b == 0:
        raise SpecError(None, "division by an exact zero")
    return a / b


def _axis(a, ndim: int) -> int:
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers.Integral):
        refuse(f"an axis {a!r} that is not an int")
    a = int(a)
    if not -ndim <= a < ndim:
        refuse(f"axis {a} of a {ndim}-d array")
    return a % ndim


def _axes(axis, ndim):
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (tuple, list)):
        return sorted({_axis(a, ndim) for a in axis})
    return [_axis(axis, ndim)]


def _unpermute(idx, axes):
    out = [None] * len(axes)
    for pos, a in enumerate(axes):
        out[a] = idx[pos]
    return tuple(out)


def lift(o) -> SymArray:
    """Any operand the spec may use in arithmetic, as a SymArray (ints, Fractions, dims, bools, small
    concrete integer or boolean arrays); floats and other objects refuse, as in every tier."""
    if isinstance(o, SymArray):
        return o
    if isinstance(o, Dim):
        return SymArray.scalar(o.expr)
    if isinstance(o, (bool, np.bool_)):
        return SymArray.scalar(int(o), boolean=True)
    if isinstance(o, (numbers.Integral, Fraction)):
        return SymArray.scalar(sp.Rational(Fraction(o).numerator, Fraction(o).denominator))
    if isinstance(o, (float, np.floating, complex, np.complexfloating)):
        refuse(_FLOAT.format(o))
    if isinstance(o, sp.Basic):
        return SymArray.scalar(o)
    if isinstance(o, (list, tuple)):
        return stack([lift(v) for v in o], 0) if o else refuse("an empty list in the spec's arithmetic")
    if isinstance(o, np.ndarray):
        if o.dtype.kind == "f" or o.dtype.kind == "c":
            refuse(_FLOAT.format(o.dtype))
        if o.ndim == 0:
            return lift(o.item())
        return stack([lift(v) for v in o], 0)
    refuse(f"a {type(o).__name__} ({o!r}) reached the spec's arithmetic; use the backend B for numbers")


# ---------------------------------------------------------------------------- broadcasting, alignment
def broadcast_shape(shapes) -> tuple:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        sizes = [s[len(s) - nd + k] for s in shapes if len(s) - nd + k >= 0]
        size = sp.Integer(1)
        for z in sizes:
            if z == 1 or same(z, size):
                continue
            if size == 1:
                size = z
                continue
            refuse(f"arrays of sizes {size} and {z} on one axis broadcast only for some sizes")
        out.append(size)
    return tuple(out)


def broadcast_to(A: SymArray, shape) -> SymArray:
    if len(A._shape) == len(shape) and all(same(a, b) for a, b in zip(A._shape, shape)):
        return A
    extra = len(shape) - A.ndim
    pieces = []
    for P in A.pieces:
        maps, fixed = [], []
        for k, target in enumerate(shape):
            if k < extra:
                maps.append((1, 0, target))
                fixed.append(True)
                continue
            a, b, z = P.maps[k - extra]
            if A._shape[k - extra] == 1 and target != 1:
                maps.append((1, 0, target))
                fixed.append(True)
            else:
                maps.append((a, b, z))
                fixed.append(False)

        def fn(idx, P=P, fixed=tuple(fixed)):
            return P.value(tuple(0 if f else i for f, i in zip(fixed, idx))[extra:])
        pieces.append(Piece(maps, fn))
    return SymArray(shape, pieces, A.boolean)


def locate(ctx: _Context, maps, A: SymArray):
    """A function from the local indices of a box (``maps``) to A's entry at the same global index,
    when one piece of A provably contains the whole box; else None."""
    locals_ = [ctx.local(z) for _, _, z in maps]
    for Q in A.pieces:
        solved = []
        for (a, b, z), (aq, bq, zq), p in zip(maps, Q.maps, locals_):
            j = a * p + b if z != 1 else b
            if zq == 1:
                if not same(j, bq):
                    break
                solved.append(sp.Integer(0))
                continue
            q = divide_exactly(j - bq, aq)
            if q is None or not (ctx.nonneg(q) and ctx.nonneg(zq - 1 - q)):
                break
            solved.append(q)
        else:
            def at(idx, Q=Q, solved=tuple(solved), locals_=tuple(locals_)):
                m = dict(zip(locals_, idx))
                return Q.value(tuple(sp.expand(q.xreplace(m)) for q in solved))
            return at
    return None


def align(arrays: list[SymArray]):
    """A common piece structure for arrays of one shape: (maps of each box, [entry function per array])."""
    if all(len(A.pieces) == 1 for A in arrays) and all(_same_maps(A.pieces[0].maps, arrays[0].pieces[0].maps)
                                                       for A in arrays):
        return [(arrays[0].pieces[0].maps, [A.pieces[0].value for A in arrays])]
    ctx = _ctx()
    for g in sorted(range(len(arrays)), key=lambda k: -len(arrays[k].pieces)):
        out = []
        for P in arrays[g].pieces:
            row = []
            for k, A in enumerate(arrays):
                at = P.value if k == g else locate(ctx, P.maps, A)
                if at is None:
                    break
                row.append(at)
            else:
                out.append((P.maps, row))
                continue
            break
        else:
            return out
    refuse("the spec combines arrays whose layouts (a concatenation, an interleave) cannot be aligned "
           "for every size")


def elementwise(f: Callable, *operands, boolean: bool = False) -> SymArray:
    arrays = [lift(o) for o in operands]
    shape = broadcast_shape([A._shape for A in arrays])
    arrays = [broadcast_to(A, shape) for A in arrays]
    pieces = [Piece(maps, lambda idx, row=row: f(*[at(idx) for at in row])) for maps, row in align(arrays)]
    return SymArray(shape, pieces, boolean)


def logical(f, *operands) -> SymArray:
    arrays = [lift(o) for o in operands]
    if not all(A.boolean for A in arrays):
        refuse("&, |, ~ of traced values (not masks built from shapes)")
    return elementwise(lambda *v: _indicator(f(*v)), *arrays, boolean=True)


def _indicator(e):
    """An indicator expression kept as a product of Ind factors where possible (1 - Ind(e) = Ind(-e - 1))."""
    e = sp.expand(e)
    if e in (0, 1):
        return e
    const, rest = e.as_coeff_Add()
    if const == 1 and isinstance(-rest, Ind):
        return Ind(-(-rest).args[0] - 1)
    return sp.factor_terms(e)


def power(A, k) -> SymArray:
    A = lift(A)
    if isinstance(k, (numbers.Integral, Fraction)) and not isinstance(k, (bool, np.bool_)):
        k = Fraction(k)
        if k.denominator not in (1, 2):
            refuse(f"x ** {k} is not supported; use B.sqrt or integer powers")
        e = sp.Rational(k.numerator, k.denominator)
        return elementwise(lambda a: a ** e, A)
    K = lift(k)
    base, ex = A.sample(), K.sample()
    if base.is_Rational and base > 0 and not ex.has(sp.Indexed):
        return elementwise(lambda a, b: a ** b, A, K)       # RoPE's base ** (-2i/d): a constant per entry
    if ex.is_Rational and ex.q in (1, 2):
        return elementwise(lambda a, b: a ** b, A, K)
    refuse("x ** y with a non-constant exponent is not supported; use B.exp/B.log")


def matmul(A: SymArray, B: SymArray) -> SymArray:
    if A.ndim == 0 or B.ndim == 0:
        refuse("@ with a 0-d operand")
    if A.ndim == 1 and B.ndim == 1:
        return (A * B).sum(-1)
    if A.ndim == 1:
        return (A[:, None] * B).sum(-2)
    if B.ndim == 1:
        return (A * B).sum(-1)
    return (A[..., :, :, None] * B[..., None, :, :]).sum(-2)


# ---------------------------------------------------------------------------- reductions
def reduce(A: SymArray, axis, keepdims: bool, kind: str) -> SymArray:
    A = lift(A)
    axes = _axes(axis, A.ndim)
    if kind != "sum" and not A.boolean:
        refuse(f".{kind}() of traced values (a branch per entry); it applies to masks built from shapes")
    out = A
    for ax in sorted(axes, reverse=True):
        out = _reduce_axis(out, ax, kind)
    if keepdims:
        for ax in axes:
            out = _insert_axis(out, ax)
    return out


def _insert_axis(A: SymArray, ax: int) -> SymArray:
    pieces = [Piece(P.maps[:ax] + ((1, 0, 1),) + P.maps[ax:],
                    lambda idx, P=P: P.value(idx[:ax] + idx[ax + 1:])) for P in A.pieces]
    return SymArray(A._shape[:ax] + (1,) + A._shape[ax:], pieces, A.boolean)


def _reduce_axis(A: SymArray, ax: int, kind: str) -> SymArray:
    G = A.ctx.G
    groups: list[tuple[tuple, list]] = []
    for P in A.pieces:
        _, _, z = P.maps[ax]
        rest = P.maps[:ax] + P.maps[ax + 1:]

        def part(idx, P=P, z=z):
            if z == 1:
                return P.value(idx[:ax] + (0,) + idx[ax:])
            if kind == "sum":
                k = G.index("k", z)
                return Sum(P.value(idx[:ax] + (k,) + idx[ax:]), (k, 0, z - 1))
            t = A.ctx.local(z)
            return _quantify(P.value(idx[:ax] + (t,) + idx[ax:]), t, z, kind)
        for maps, parts in groups:
            if _same_maps(maps, rest):
                parts.append(part)
                break
        else:
            groups.append((rest, [part]))
    if kind != "sum" and len(A.pieces) > 1:
        refuse(f".{kind}() of a mask made of several pieces")
    for i, (m1, _) in enumerate(groups):
        for m2, _ in groups[i + 1:]:
            if not any(_disjoint(A.ctx, x, y) for x, y in zip(m1, m2)):
                refuse("a reduction over an axis whose pieces do not line up on the other axes")
    pieces = [Piece(maps, lambda idx, parts=parts: sp.Add(*[f(idx) for f in parts])) for maps, parts in groups]
    return SymArray(A._shape[:ax] + A._shape[ax + 1:], pieces, A.boolean)


def _disjoint(ctx: _Context, m1, m2) -> bool:
    """Two axis maps provably never hit the same index."""
    (a1, b1, z1), (a2, b2, z2) = m1, m2
    e1, e2 = b1 + a1 * (z1 - 1), b2 + a2 * (z2 - 1)
    if ctx.nonneg(b2 - e1 - 1) or ctx.nonneg(b1 - e2 - 1):
        return True
    return a1 == a2 and residue(b1 - b2, a1) not in (None, 0) if a1 > 1 else False


def _quantify(v, t, z, kind):
    """any/all over t in [0, z - 1] of an indicator expression: exact for a single factor Ind(+-t + r)."""
    v = sp.sympify(v)
    if v in (0, 1):
        return v
    inside = [f for f in sp.Mul.make_args(v) if t in f.free_symbols]
    outside = sp.Mul(*[f for f in sp.Mul.make_args(v) if t not in f.free_symbols])
    if len(inside) != 1 or not isinstance(inside[0], Ind):
        refuse(f"{kind}() of a mask that is not one bound on the reduced index")
    arg = sp.expand(inside[0].args[0])
    c = arg.coeff(t)
    r = sp.expand(arg - c * t)
    if c not in (1, -1) or t in r.free_symbols:
        refuse(f"{kind}() of a mask that is not one bound on the reduced index")
    # c = -1: t <= r;  c = +1: t >= -r
    if kind == "any":
        q = Ind(r) if c == -1 else Ind(z - 1 + r)
    else:
        q = Ind(r - z + 1) if c == -1 else Ind(r)
    return outside * q


# ---------------------------------------------------------------------------- indexing
def _bound(v, size, what: str):
    """A slice bound or an index as a size expression (negative ints count from the end)."""
    if isinstance(v, Dim):
        return v.expr
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        refuse(f"{what} {v!r}: only ints and dims index a symbolic-size array (no fancy indexing)")
    v = int(v)
    return sp.expand(size + v) if v < 0 else sp.Integer(v)


def getitem(A: SymArray, key) -> SymArray:
    ctx = A.ctx
    key = key if isinstance(key, tuple) else (key,)
    ell = [k for k in key if k is Ellipsis]
    if len(ell) > 1:
        refuse("two Ellipses in one index")
    real = [k for k in key if k is not None and k is not Ellipsis]
    if len(real) > A.ndim:
        refuse(f"{len(real)} indices into a {A.ndim}-d array")
    items = []
    for k in key:
        if k is Ellipsis:
            items += [slice(None)] * (A.ndim - len(real))
        else:
            items.append(k)
    if not ell:
        items += [slice(None)] * (A.ndim - len(real))
    # global meaning of each item, checked once: ("new",) | ("at", c) | ("slice", start, stop, step, L)
    plan, ax, shape = [], 0, []
    for k in items:
        if k is None:
            plan.append(("new",))
            shape.append(sp.Integer(1))
            continue
        S = A._shape[ax]
        if isinstance(k, slice):
            step = 1 if k.step is None else k.step
            if isinstance(step, (bool, np.bool_)) or not isinstance(step, numbers.Integral) or step < 1:
                refuse(f"slice step {step!r}: only positive int steps are followed")
            step = int(step)
            start = sp.Integer(0) if k.start is None else _bound(k.start, S, "slice start")
            stop = S if k.stop is None else _bound(k.stop, S, "slice stop")
            if not (ctx.nonneg(start) and ctx.nonneg(stop - start) and ctx.nonneg(S - stop)):
                refuse(f"the slice {start}:{stop} is not provably inside every size of an axis of size {S} "
                       f"(numpy would clip it, so its length would depend on the size)")
            span = sp.expand(stop - start + step - 1)          # L = floor(span / step), exactly
            r = 0 if step == 1 else residue(span, step)
            L = None if r is None else divide_exactly(span - r, step)
            if L is None:
                refuse(f"the slice {start}:{stop}:{step} has a length that is not a polynomial in the sizes")
            plan.append(("slice", ax, start, stop, step, L))
            shape.append(L)
        else:
            c = _bound(k, S, "index")
            if not (ctx.nonneg(c) and ctx.nonneg(S - 1 - c)):
                refuse(f"the index {c} is not provably inside every size of an axis of size {S}")
            plan.append(("at", ax, c))
        ax += 1
    pieces = []
    for P in A.pieces:
        new = _select(ctx, P, plan)
        if new is not None:
            pieces.append(new)
    if not pieces:
        refuse("an index that selects nothing")
    return SymArray(shape, pieces, A.boolean)


def _select(ctx: _Context, P: Piece, plan):
    """The part of piece P that the index plan keeps, as a piece of the result (None: nothing)."""
    maps = []                       # the new piece's axis maps
    fixed: dict[int, sp.Expr] = {}  # old axis -> its old local index as an expression of new locals
    out_axis = 0
    for item in plan:
        if item[0] == "new":
            maps.append((1, 0, 1))
            out_axis += 1
            continue
        ax = item[1]
        a, b, z = P.maps[ax]
        if item[0] == "at":
            c = item[2]
            if z == 1:
                if same(c, b):
                    fixed[ax] = sp.Integer(0)
                    continue
                if ctx.never_equal(c, b):
                    return None
                refuse(f"cannot tell for every size whether index {c} falls in a part of the array at {b}")
            p = divide_exactly(c - b, a)
            if p is None:
                if residue(c - b, a) not in (None, 0):
                    return None
                refuse(f"cannot tell for every size which part of the array index {c} falls in")
            if ctx.nonneg(p) and ctx.nonneg(z - 1 - p):
                fixed[ax] = p
                continue
            if ctx.nonneg(-p - 1) or ctx.nonneg(p - z):
                return None
            refuse(f"cannot tell for every size which part of the array index {c} falls in")
        _, _, start, stop, step, L = item
        u = sp.Dummy("u", integer=True)          # the new local index of this axis
        res = _slice_piece(ctx, a, b, z, start, stop, step, L, u)
        if res is None:
            return None
        new_map, old_local = res
        maps.append(new_map)
        fixed[ax] = ("slice", u, old_local, out_axis)
        out_axis += 1

    def fn(idx, P=P, fixed=dict(fixed)):
        local = []
        for ax in range(len(P.maps)):
            f = fixed[ax]
            if isinstance(f, tuple):
                _, u, old, pos = f
                local.append(sp.expand(old.xreplace({u: idx[pos]})))
            else:
                local.append(f)
        return P.value(tuple(local))
    return Piece(maps, fn)


def _slice_piece(ctx: _Context, a, b, z, start, stop, step, L, u):
    """(new axis map, old local index as a function of the new local u) of a piece axis (a, b, z)
    under the slice start:stop:step; None when the piece lies outside the slice."""
    last = b + a * (z - 1)
    if ctx.nonneg(start - last - 1) or ctx.nonneg(b - stop):
        return None                                                   # entirely outside
    if z == 1:
        q = divide_exactly(b - start, step)
        if q is None:
            if residue(b - start, step) not in (None, 0):
                return None
            refuse("cannot tell for every size whether a strided slice hits a part of the array")
        if ctx.nonneg(b - start) and ctx.nonneg(stop - 1 - b):
            return (1, q, 1), sp.Integer(0)
        refuse("cannot tell for every size whether a slice hits a part of the array")
    if a % step == 0:
        q = divide_exactly(b - start, step)
        if q is None:
            if residue(b - start, step) not in (None, 0):
                return None
            refuse("cannot tell for every size which entries of a part of the array a strided slice keeps")
        if ctx.nonneg(b - start) and ctx.nonneg(stop - 1 - last):
            return (a // step, q, z), u                               # contained
        if a == 1 and step == 1:
            if ctx.nonneg(start - b) and ctx.nonneg(last - stop + 1):     # the piece covers the slice
                return (1, 0, L), u + start - b
            if ctx.nonneg(start - b) and ctx.nonneg(stop - 1 - last) and ctx.nonneg(last - start + 1):
                return (1, 0, last - start + 1), u + start - b                # overlaps its left end
            if ctx.nonneg(b - start) and ctx.nonneg(last - stop + 1) and ctx.nonneg(stop - b):
                return (1, b - start, stop - b), u                            # overlaps its right end
        refuse("a slice cuts a part of the array where the cut is not known for every size")
    if a == 1 and ctx.nonneg(start - b) and ctx.nonneg(last - stop + 1):
        return (1, 0, L), start - b + step * u                        # a strided slice of a contiguous part
    refuse("a strided slice of a part of the array whose layout does not line up for every size")


# ---------------------------------------------------------------------------- building arrays
def concatenate(arrays, axis=0, **kw):
    _no_extra(kw, "concatenate")
    arrays = [lift(a) for a in arrays]
    if not arrays:
        refuse("np.concatenate of nothing")
    nd = arrays[0].ndim
    if nd == 0 or any(A.ndim != nd for A in arrays):
        refuse("np.concatenate of arrays of different ranks (or 0-d)")
    ax = _axis(axis if axis is not None else 0, nd)
    for A in arrays[1:]:
        for k in range(nd):
            if k != ax and not same(A._shape[k], arrays[0]._shape[k]):
                refuse(f"np.concatenate of arrays whose sizes {A._shape[k]} and {arrays[0]._shape[k]} differ")
    pieces, offset = [], sp.Integer(0)
    for A in arrays:
        for P in A.pieces:
            maps = list(P.maps)
            a, b, z = maps[ax]
            maps[ax] = (a, b + offset, z)
            pieces.append(Piece(maps, P.value))
        offset += A._shape[ax]
    shape = list(arrays[0]._shape)
    shape[ax] = offset
    return SymArray(shape, pieces, all(A.boolean for A in arrays))


def stack(arrays, axis=0, **kw):
    _no_extra(kw, "stack")
    arrays = [lift(a) for a in arrays]
    if not arrays:
        refuse("np.stack of nothing")
    shape = arrays[0]._shape
    if any(len(A._shape) != len(shape) or not all(same(x, y) for x, y in zip(A._shape, shape)) for A in arrays):
        refuse("np.stack of arrays of different shapes")
    ax = _axis(axis, len(shape) + 1)
    return concatenate([_insert_axis(A, ax) for A in arrays], ax)


def reshape(A: SymArray, shape) -> SymArray:
    A = lift(A)
    target = [_size_expr(s) if not (isinstance(s, numbers.Integral) and s == -1) else None for s in shape]
    if target.count(None) > 1:
        refuse("reshape with two -1 entries")
    if None in target:
        known = sp.Mul(*[t for t in target if t is not None])
        q = sp.cancel(sp.Mul(*A._shape) / known)
        if not q.is_polynomial() or divide_exactly(sp.expand(q), 1) is None:
            refuse("reshape's -1 is not a size for every size")
        target[target.index(None)] = sp.expand(q)
    old = list(A._shape)
    out, i, j, pos = A, 0, 0, 0          # i: old axis, j: target axis, pos: axis of ``out``
    while i < len(old) or j < len(target):
        o = old[i] if i < len(old) else None
        t = target[j] if j < len(target) else None
        if o is not None and t is not None and same(o, t):
            i, j, pos = i + 1, j + 1, pos + 1
        elif o is not None and t is not None and i + 1 < len(old) and old[i + 1].is_Integer \
                and same(o * old[i + 1], t):
            out = _merge(out, pos, int(old[i + 1]))
            i, j, pos = i + 2, j + 1, pos + 1
        elif o is not None and o == 1:
            out = _drop_unit(out, pos)
            i += 1
        elif t is not None and t == 1:
            out = _insert_axis(out, pos)
            j, pos = j + 1, pos + 1
        else:
            refuse(f"reshape from {tuple(map(str, old))} to {tuple(map(str, target))} is not followed by the "
                   f"every-size trace (it merges an axis with a following axis of constant size)")
    return out


def _drop_unit(A: SymArray, ax: int) -> SymArray:
    pieces = [Piece(P.maps[:ax] + P.maps[ax + 1:], lambda idx, P=P: P.value(idx[:ax] + (0,) + idx[ax:]))
              for P in A.pieces]
    return SymArray(A._shape[:ax] + A._shape[ax + 1:], pieces, A.boolean)


def _merge(A: SymArray, ax: int, c: int) -> SymArray:
    """Axes ax and ax + 1 (of constant size c) as one axis j = c * j_ax + j_next."""
    pieces = []
    for P in A.pieces:
        (a, b, z), (av, bv, zv) = P.maps[ax], P.maps[ax + 1]
        if zv == 1:
            splits = [(sp.Integer(0), bv)]
        elif zv == c and av == 1 and same(bv, 0):
            splits = [(sp.Integer(t), sp.Integer(t)) for t in range(c)]
        else:
            refuse("reshape merges an axis that is split into parts")
        for local_v, jv in splits:
            maps = P.maps[:ax] + ((c * a, c * b + jv, z),) + P.maps[ax + 2:]
            pieces.append(Piece(maps, lambda idx, P=P, lv=local_v: P.value(idx[:ax + 1] + (lv,) + idx[ax + 1:])))
    shape = A._shape[:ax] + (A._shape[ax] * c,) + A._shape[ax + 2:]
    return SymArray(shape, pieces, A.boolean)


def where(cond, a=None, b=None):
    if a is None or b is None:
        refuse("np.where with one argument (the indices of a mask)")
    C = lift(cond)
    if not C.boolean:
        refuse("np.where on a condition that is not a mask built from shapes (a comparison of values)")

    def pick(m, x, y):
        if m == 1:
            return x
        if m == 0:
            return y
        return m * x + (1 - m) * y
    return elementwise(pick, C, a, b, boolean=lift(a).boolean and lift(b).boolean)


def _band(A, k, lower: bool):
    A = lift(A)
    if A.ndim < 2:
        refuse("np.tril/np.triu of an array of rank < 2")
    if isinstance(k, Dim):
        k = k.expr
    elif isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_)):
        k = sp.Integer(int(k))
    else:
        refuse(f"a diagonal offset {k!r} that is neither an int nor a dim")
    pieces = []
    for P in A.pieces:
        (ai, bi, _), (aj, bj, _) = P.maps[-2], P.maps[-1]

        def fn(idx, P=P, ai=ai, bi=bi, aj=aj, bj=bj):
            i, j = ai * idx[-2] + bi, aj * idx[-1] + bj
            return P.value(idx) * (Ind(i + k - j) if lower else Ind(j - i - k))
        pieces.append(Piece(P.maps, fn))
    return SymArray(A._shape, pieces, A.boolean)


def _shape_of(a):
    return lift(a).shape


_UFUNCS = {
    "add": lambda x, y: lift(x) + y, "subtract": lambda x, y: lift(x) - y,
    "multiply": lambda x, y: lift(x) * y, "true_divide": lambda x, y: lift(x) / y,
    "negative": lambda x: -lift(x), "positive": lambda x: lift(x), "power": lambda x, y: power(x, y),
    "matmul": lambda x, y: matmul(lift(x), lift(y)),
    "logical_and": lambda x, y: lift(x) & y, "bitwise_and": lambda x, y: lift(x) & y,
    "logical_or": lambda x, y: lift(x) | y, "bitwise_or": lambda x, y: lift(x) | y,
    "logical_not": lambda x: ~lift(x), "invert": lambda x: ~lift(x),
}
_FUNCTIONS = {
    "concatenate": concatenate, "stack": stack, "where": where,
    "reshape": lambda a, shape=None, newshape=None, **kw: reshape(lift(a), shape if shape is not None else newshape),
    "transpose": lambda a, axes=None: lift(a).transpose(*(axes or ())),
    "sum": lambda a, axis=None, keepdims=False, **kw: lift(a).sum(axis, keepdims, **kw),
    "mean": lambda a, axis=None, keepdims=False, **kw: lift(a).mean(axis, keepdims, **kw),
    "any": lambda a, axis=None, keepdims=False, **kw: lift(a).any(axis, keepdims, **kw),
    "all": lambda a, axis=None, keepdims=False, **kw: lift(a).all(axis, keepdims, **kw),
    "shape": _shape_of, "ndim": lambda a: lift(a).ndim, "matmul": lambda x, y, **kw: matmul(lift(x), lift(y)),
    "tril": lambda m, k=0: _band(m, k, True), "triu": lambda m, k=0: _band(m, k, False),
    "expand_dims": lambda a, axis: _insert_axis(lift(a), _axis(axis, lift(a).ndim + 1)),
    "broadcast_to": lambda a, shape, **kw: broadcast_to(lift(a), tuple(_size_expr(s) for s in shape)),
}


# ============================================================================ numpy functions that take a shape
_PATCH_LOCK = threading.Lock()
_PATCH_DEPTH = [0]
_ORIGINAL: dict = {}


def _symbolic_shape(shape) -> bool:
    shape = shape if isinstance(shape, (tuple, list)) else (shape,)
    return any(isinstance(s, Dim) for s in shape)


def _filled(name, value):
    def make(shape, dtype=None, *a, **k):
        if not _symbolic_shape(shape) or getattr(_LOCAL, "ctx", None) is None:
            return _ORIGINAL[name](shape, dtype, *a, **k)
        shape = shape if isinstance(shape, (tuple, list)) else (shape,)
        sizes = tuple(_size_expr(s) for s in shape)
        kind = np.dtype(dtype).kind if dtype is not None else "f"
        if kind == "b":
            return SymArray.full(sizes, lambda idx: sp.Integer(value), boolean=True)
        if kind in "iuO":
            return SymArray.full(sizes, lambda idx: sp.Integer(value))
        refuse(f"np.{name} with a float dtype (the default): a float array would leave the exact backends; "
               f"pass dtype=bool for a mask, or use B.zeros")
    make.__name__ = name
    return make


def _arange(*args, **kw):
    if not any(isinstance(a, Dim) for a in args) or getattr(_LOCAL, "ctx", None) is None:
        return _ORIGINAL["arange"](*args, **kw)
    if len(args) != 1 or (kw.get("dtype") is not None and np.dtype(kw["dtype"]).kind not in "iuO"):
        refuse("np.arange of a dim takes one argument (np.arange(n)) and an int dtype")
    n = args[0].expr
    return SymArray.full((n,), lambda idx: idx[0])


_PATCHES = {"ones": lambda: _filled("ones", 1), "zeros": lambda: _filled("zeros", 0), "arange": lambda: _arange}


@contextlib.contextmanager
def symbolic_numpy():
    """np.ones / np.zeros / np.arange accept symbolic sizes while a derivation runs. They are module
    attributes, replaced for the duration: the replacement hands every concrete shape to numpy
    unchanged, so other code running meanwhile sees no difference."""
    with _PATCH_LOCK:
        if _PATCH_DEPTH[0] == 0:
            for name, make in _PATCHES.items():
                _ORIGINAL[name] = getattr(np, name)
                setattr(np, name, make())
        _PATCH_DEPTH[0] += 1
    try:
        yield
    finally:
        with _PATCH_LOCK:
            _PATCH_DEPTH[0] -= 1
            if _PATCH_DEPTH[0] == 0:
                for name in _PATCHES:
                    setattr(np, name, _ORIGINAL[name])


# ============================================================================ the backend B
class ShapeBackend:
    """The ``B`` a spec sees during the trace (behind ``core.backends.spec_backend``)."""

    name = "symbolic-size"
    dtype = object

    def __init__(self):
        for kind, f in (("exp", sp.exp), ("log", sp.log), ("sqrt", sp.sqrt), ("erf", sp.erf),
                        ("tanh", sp.tanh), ("sin", sp.sin), ("cos", sp.cos)):
            setattr(self, kind, self._unary(f))

    @staticmethod
    def _unary(f):
        def apply(a):
            return elementwise(f, a)
        apply.__name__ = f.__name__
        return apply

    @property
    def pi(self):
        return SymArray.scalar(sp.pi)

    def c(self, p, q=1):
        def part(v):
            if isinstance(v, Dim):
                return v.expr
            if isinstance(v, SymArray):
                refuse("B.c() of a traced value")
            f = exact(v)
            return sp.Rational(f.numerator, f.denominator)
        num, den = part(p), part(q)
        if den == 0:
            raise SpecError(None, "division by an exact zero")
        return SymArray.scalar(num / den)

    def zeros(self, shape):
        shape = shape if isinstance(shape, (tuple, list)) else (shape,)
        return SymArray.full(tuple(_size_expr(s) for s in shape), lambda idx: sp.Integer(0))

    def array(self, values):
        return lift(values)

    def max_shift(self, x, mask=None):
        """0 in exact arithmetic, as in every exact backend."""
        shape = lift(x)._shape
        return SymArray.full(shape[:-1] + (1,), lambda idx: sp.Integer(0))


SHAPE_BACKEND = ShapeBackend()


# ============================================================================ dims of the statement
PROBE = range(1, 25)        # sizes at which an op's constraints are probed


def dim_forms(op: Op) -> dict:
    """For every dim of the op, (k, sub): the dim is k * sub with sub >= 1 (k = 1: any size;
    k = 2: RoPE's even d = 2h). Read off the op's constraints by probing sizes 1..24 with the other
    dims at the op's first dims; a constraint of another form (a bound, a relation between dims)
    cannot be stated for every size and is refused."""
    base = {**op.dims[0]}
    out = {}
    for name in sorted(op.dim_names()):
        if op.constraints is None:
            out[name] = (1, name)
            continue
        ok = []
        for v in PROBE:
            try:
                ok.append(not op.constraints({**base, name: v}))
            except Exception:  # a constraint that raises rejects the size
                ok.append(False)
        allowed = [v for v, good in zip(PROBE, ok) if good]
        k = allowed[0] if allowed else 0
        if k and allowed == [v for v in PROBE if v % k == 0]:
            out[name] = (k, name if k == 1 else ("h" if name == "d" else f"{name}_{k}"))
        else:
            raise DerivationRefused(f"the op's constraints allow {name} in {allowed[:8]}... (sizes 1..24): "
                                    f"not every size, nor every multiple of one size, so no every-size "
                                    f"statement covers exactly the allowed sizes")
    return out


def declare_dims(G, op: Op) -> None:
    for name, (k, sub) in dim_forms(op).items():
        if k == 1:
            G.dim(name)
        else:
            G.multiple_dim(name, k, sub)


# ============================================================================ the derivation
def _input(G, name: str, shape) -> SymArray:
    if not shape:
        refuse(f"0-d input {name!r}: the every-size trace indexes every input")
    X = G.array(name)
    return SymArray.full(shape, lambda idx: X[tuple(idx)])


def _values(G, op: Op, overrides=None) -> dict:
    values = {}
    for name in [*op.inputs, *op.nondiff]:
        values[name] = _input(G, name, G.shape(name))
    for name, p in op.params.items():
        values[name] = SymArray.scalar(G.param(name)) if p.symbolic else p.default
    for name, v in (overrides or {}).items():
        if name not in op.params:
            raise SpecError(op.name, f"law overrides unknown param {name!r}")
        values[name] = SymArray.scalar(sp.Rational(Fraction(v).numerator, Fraction(v).denominator)) \
            if op.params[name].symbolic else v
    return values


def _run(op: Op, fn, role: str, values: dict):
    """Run spec code under the symbolic-size backend; any refusal (also one the spec caught) or error
    is a DerivationRefused naming the spec's file and line."""
    take_refusals()
    try:
        out = op.bind(fn, SHAPE_BACKEND, values)
    except DerivationRefused:
        take_refusals()
        raise
    except SpecError as exc:
        take_refusals()
        raise DerivationRefused(f"{role}: {exc.problem}",
                                spec_line(traceback.extract_tb(exc.__traceback__))) from None
    except Exception as exc:  # the spec's code did something the trace cannot follow
        take_refusals()
        raise DerivationRefused(f"{role}: raised {type(exc).__name__}: {exc}"[:300],
                                spec_line(traceback.extract_tb(exc.__traceback__))) from None
    swallowed = take_refusals()
    if swallowed:
        problem, stack = swallowed[0]
        raise DerivationRefused(f"{role}: {problem} (the spec caught this and carried on; the trace cannot "
                                f"follow that path)", spec_line(stack))
    return out


def _array(value, what: str) -> SymArray:
    if isinstance(value, SymArray):
        return value
    try:
        return lift(value)
    except SpecError as exc:
        raise DerivationRefused(f"{what}: {exc.problem}") from None


def _check_shape(A: SymArray, want, what: str):
    if len(A._shape) != len(want) or not all(same(a, b) for a, b in zip(A._shape, want)):
        raise DerivationRefused(f"{what} has shape {tuple(map(str, A._shape))}, the op declares "
                                f"{tuple(map(str, want))}")


def _signature(f, names):
    f.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return f


def pieces_of(G, A: SymArray, names: list[str]):
    """The array as G.piece(...)s (or one function of the index when it is one piece with the
    identity layout), index names as given."""
    names = list(names[:A.ndim]) + [f"i{k}" for k in range(len(names), A.ndim)]
    if len(A.pieces) == 1 and _same_maps(A.pieces[0].maps, _identity_maps(A._shape)):
        P = A.pieces[0]
        return _signature(lambda *idx: P.value(idx), names)
    out = []
    for P in A.pieces:
        maps = P.maps
        out.append(G.piece(_signature(lambda *p, maps=maps: tuple(a * q + b for (a, b, _), q in zip(maps, p)), names),
                           [z for _, _, z in maps],
                           _signature(lambda *p, P=P: P.value(p), names)))
    return out


FORWARD_NAMES = ["i", "j", "k", "l", "m2"]
INPUT_NAMES = ["s", "t", "u", "v", "w"]


def derive(op: Op, claim: str) -> Callable:
    """The builder of ``claim``'s every-size statement, from the spec's own code. Raises
    DerivationRefused (reason, spec file:line) when the code cannot be followed for every size."""
    if claim != "max_shift_free" and claim not in op.claims():
        raise SpecError(op.name, f"has no claim {claim!r}; it has {op.claims()}")

    def builder(G):
        token = getattr(_LOCAL, "ctx", None)
        declare_dims(G, op)
        _LOCAL.ctx = _Context(G)
        try:
            with symbolic_numpy():
                return _statement(G, op, claim)
        finally:
            _LOCAL.ctx = token
    builder.__qualname__ = f"derived from the spec ({claim})"
    builder.derived_from = op
    return builder


def _statement(G, op: Op, claim: str):
    if claim.startswith("vjp["):
        wrt = claim[4:-1]
        values = _values(G, op)
        y = _array(_run(op, op.forward, "forward", values), "the forward")
        _check_shape(y, G.shape("y"), "the forward's output")
        dy = _input(G, "dy", G.shape("dy"))
        cots = _run(op, op.vjp, "backward", {**values, "dy": dy})
        if not isinstance(cots, (tuple, list)) or len(cots) != len(op.inputs):
            raise DerivationRefused(f"the backward must return one cotangent per input {list(op.inputs)}")
        dx = _array(cots[list(op.inputs).index(wrt)], f"the cotangent of {wrt}")
        _check_shape(dx, G.shape(wrt), f"the cotangent of {wrt}")
        return G.vjp(wrt, forward=pieces_of(G, y, FORWARD_NAMES), backward=pieces_of(G, dx, INPUT_NAMES))
    law = op.get_law(claim)
    if law.fn is None:
        raise DerivationRefused(f"{claim} has no every-size form")
    values = _values(G, op, law.params)
    if law.needs_dy:
        values["dy"] = _input(G, "dy", G.shape("dy"))
    out = _run(op, law.fn, f"law {claim}", values)
    if isinstance(out, tuple):
        if len(out) != 2:
            raise DerivationRefused(f"law {claim} returned a tuple of {len(out)}")
        lhs, rhs = (_array(v, f"law {claim}") for v in out)
    else:
        lhs, rhs = _array(out, f"law {claim}"), lift(0)
    diff = _run_plain(lambda: lhs - rhs, f"law {claim}: its two sides")
    if any(z.is_Integer and z == 0 for z in diff._shape):
        raise DerivationRefused(f"law {claim} returned an empty array")
    return G.law(pieces_of(G, diff, INPUT_NAMES), over=diff._shape)


def _run_plain(fn, role):
    take_refusals()
    try:
        return fn()
    except SpecError as exc:
        take_refusals()
        raise DerivationRefused(f"{role}: {exc.problem}") from None
