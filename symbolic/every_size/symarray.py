"""The array of the shape-polymorphic trace: ``SymArray``, a function from symbolic indices to SymPy
expressions made of ``Piece``s (a box of local indices with an affine map per axis), and the
elementwise algebra on it (broadcasting, aligning pieces, arithmetic, powers, matmul).

Every entry point a spec can reach -- operators, array methods, numpy's ufunc and function protocols
-- is checked against the spec language first (``core.language.check_call``) and refuses with its
shared messages. The constructs themselves (reductions, indexing, layouts) live in
``symbolic.every_size.constructs`` and ``symbolic.every_size.layouts``; the array dispatches to them
through the tables below, which those modules fill when they are imported.
"""
from __future__ import annotations

import numbers
from fractions import Fraction
from typing import Callable

import numpy as np
import sympy as sp

from vjpcert.core import language
from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.every_size.grid import _refine, align
from vjpcert.symbolic.every_size.normal import Ind
from vjpcert.symbolic.every_size.sizes import _FLOAT, Dim, _ctx, dim_or_int, same

# What an array's methods and numpy's protocols dispatch to, by name: filled by the modules that
# define the constructs (so this module never imports them, and they import it).
CONSTRUCTS: dict[str, Callable] = {}
UFUNCS: dict[str, Callable] = {}
FUNCTIONS: dict[str, Callable] = {}


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


class SymArray:
    """An array with symbolic dimensions: shape (SymPy sizes) and pieces. ``boolean`` arrays (masks)
    hold indicator expressions (1, 0, products of ``Ind``)."""

    __array_priority__ = 10_000

    def __init__(self, shape, pieces, boolean: bool = False):
        self._shape = tuple(sp.expand(sp.sympify(z)) for z in shape)
        self._pieces = list(pieces)
        self.boolean = boolean
        self.ctx = _ctx()

    # numpy's aliasing (``writes``): the array this one is a view of, how, and its own live views; a
    # view is read again from its base at its first use after the base was written (``_dirty``)
    _parent = _kind = _key = _children = None
    _stale = _dirty = False

    @property
    def pieces(self) -> list:
        if self._stale:
            language.refuse_view_write("a use of the result of a reshape, transpose or other view after its "
                                       "base was written")
        if self._dirty:
            self._dirty = False
            self._pieces = CONSTRUCTS["getitem"](self._parent, self._key)._pieces
        return self._pieces

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

    # ------------------------------------------------------------------ refusals (core.language's own words)
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __abs__ = language.refuse_comparison
    __hash__ = object.__hash__
    __bool__ = language.refuse_branch
    __float__ = __int__ = __index__ = __complex__ = language.refuse_float

    def __mod__(self, o):
        refuse("% of traced values (or of an index array): a remainder is a branch per entry")

    __rmod__ = __floordiv__ = __rfloordiv__ = __divmod__ = __mod__

    input = False           # a spec's input (``shape_trace._input``): writes into it are refused alike

    def __setitem__(self, key, value):
        CONSTRUCTS["setitem"](self, key, value)

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
        return self.clone()

    def __pow__(self, k):
        return fresh(power(self, k), (self,))

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
        language.check_call("sum", given(axis=axis, keepdims=keepdims, **kw))
        return fresh(CONSTRUCTS["sum"](self, axis, keepdims, **kw), (self,))

    def mean(self, axis=None, keepdims=False, **kw):
        language.check_call("mean", given(axis=axis, keepdims=keepdims, **kw))
        return fresh(CONSTRUCTS["mean"](self, axis, keepdims, **kw), (self,))

    # any/all apply to masks built from shapes (never to values: that is a branch), so they are
    # questions about shapes, not primitives of the language
    def any(self, axis=None, keepdims=False, **kw):
        _no_extra(kw, "any")
        return fresh(CONSTRUCTS["reduce"](self, axis, keepdims, "any"), (self,))

    def all(self, axis=None, keepdims=False, **kw):
        _no_extra(kw, "all")
        return fresh(CONSTRUCTS["reduce"](self, axis, keepdims, "all"), (self,))

    def max(self, *a, **k):
        language.refuse_comparison()

    min = argmax = argmin = max

    def transpose(self, *axes):
        language.check_call("transpose")
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        axes = tuple(range(self.ndim))[::-1] if not axes else tuple(_axis(a, self.ndim) for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            refuse(f"transpose with axes {axes}")

        def move(P):
            return Piece([P.maps[a] for a in axes],
                         lambda idx, P=P: P.value(_unpermute(idx, axes)))
        return CONSTRUCTS["derived"](SymArray([self._shape[a] for a in axes], [move(P) for P in self.pieces],
                                              self.boolean), self)

    def swapaxes(self, a, b):
        language.check_call("swapaxes")
        return CONSTRUCTS["derived"](CONSTRUCTS["swapaxes"](self, a, b), self)

    def reshape(self, *shape, **kw):
        language.check_call("reshape", given(**kw))
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return CONSTRUCTS["derived"](FUNCTIONS["reshape"](self, shape, **kw), self)

    def astype(self, dtype, **kw):
        if np.dtype(dtype) == np.dtype(object) or (self.boolean and np.dtype(dtype) == np.dtype(bool)):
            return self.clone()                  # numpy's astype copies
        refuse(f"astype({np.dtype(dtype)}) of a traced array: the exact backends hold objects")

    def copy(self, *a, **k):
        language.check_call("copy", given(**k))
        return self.clone()

    def clone(self) -> "SymArray":
        """A new array of the same value (its pieces are immutable, so they are shared)."""
        return SymArray(self._shape, self.pieces, self.boolean)

    def __getitem__(self, key):
        return CONSTRUCTS["view"](CONSTRUCTS["getitem"](self, key), self, key)

    # ------------------------------------------------------------------ numpy protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = "true_divide" if ufunc is np.true_divide else ufunc.__name__     # numpy names it divide
        if method != "__call__":
            prim = language.ufunc_primitive(ufunc, method)        # the shared refusal of other methods
            language.check_call(prim, given(**kwargs))
            if prim == "add.at":
                return CONSTRUCTS["add_at"](*inputs)
            refuse(f"np.{name}.{method} is part of the spec language, but the every-size trace does not "
                   f"follow it for every size")
        if kwargs.get("out") is not None:
            refuse(f"np.{name}(..., out=...) is not part of the spec language")
        if name in MASK_UFUNCS:
            if not all(lift(x).boolean for x in inputs):
                language.refuse_comparison()
            return fresh(UFUNCS[name](*inputs), inputs)
        prim = language.PRIMITIVES.get(name)
        if prim is None or prim.kind not in ("arithmetic", "contraction"):
            if name in COMPARISON_UFUNCS:
                language.refuse_comparison()
            language.refuse_ufunc(ufunc)
        language.check_call(name, given(**kwargs))
        return fresh(UFUNCS[name](*inputs), inputs)

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in ("any", "all"):                 # masks only (reduce refuses values)
            return fresh(FUNCTIONS[name](*args, **kwargs), args)
        language.check_call(name, given(**kwargs))
        fn = FUNCTIONS.get(name)
        if fn is None:
            refuse(f"np.{name} is part of the spec language, but the every-size trace does not follow it "
                   f"for every size")
        out = fn(*args, **kwargs)
        if name in VIEW_FUNCTIONS:              # numpy's result is a view of its first argument
            return [CONSTRUCTS["derived"](o, args[0]) for o in out] if isinstance(out, list) else \
                CONSTRUCTS["derived"](out, args[0])
        return out if name == "diff" else fresh(out, args)     # np.diff(x, n=0) is x itself, as here


def _method(name: str):
    def method(self, *args, **kwargs):
        return self.__array_function__(getattr(np, name), (SymArray,), (self, *args), kwargs)
    method.__name__ = name
    method.__doc__ = f"x.{name}(...) is np.{name}(x, ...): one primitive of the language, one cell here"
    return method


# the language's other method spellings reach the same cell as numpy's function (or its decline)
for _name in language.METHODS:
    if not hasattr(SymArray, _name):
        setattr(SymArray, _name, _method(_name))


# x op= y: without these Python would rebind ``z += b`` to ``z = z + b`` and an alias of z would keep
# the old value, which is not what numpy computes; the result is written into the array itself
for _name, _ufunc in (("__iadd__", "add"), ("__isub__", "subtract"), ("__imul__", "multiply"),
                      ("__itruediv__", "true_divide"), ("__ipow__", "power"), ("__imatmul__", "matmul")):
    setattr(SymArray, _name, lambda self, o, u=_ufunc: CONSTRUCTS["in_place"](self, o, u))


# ufuncs of masks built from shapes (&, |, ~ and numpy's spellings of them)
MASK_UFUNCS = ("logical_and", "bitwise_and", "logical_or", "bitwise_or", "logical_not", "invert")
COMPARISON_UFUNCS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "maximum",
                     "minimum", "fmax", "fmin", "absolute", "sign")


# numpy functions whose result may be a view of their first argument (writes: ``writes.derived``)
VIEW_FUNCTIONS = frozenset({"reshape", "ravel", "transpose", "moveaxis", "swapaxes", "expand_dims", "squeeze",
                            "broadcast_to", "flip", "split"})


def fresh(out, inputs):
    """``out``, or a clone of it where a construct handed back one of its operands unchanged: numpy's
    result is a new array there, so a later write into one must not reach the other."""
    if isinstance(out, SymArray) and any(out is x for x in inputs):
        return out.clone()
    return out


def given(**kwargs) -> dict:
    """The keyword arguments a call really passed: numpy's defaults (None, keepdims=False) say nothing."""
    return {k: v for k, v in kwargs.items() if v is not None and not (k == "keepdims" and v is False)}


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
        return CONSTRUCTS["stack"]([lift(v) for v in o], 0) if o else refuse("an empty list in the spec's arithmetic")
    if isinstance(o, np.ndarray):
        if o.dtype.kind == "f" or o.dtype.kind == "c":
            refuse(_FLOAT.format(o.dtype))
        if o.ndim == 0:
            return lift(o.item())
        return CONSTRUCTS["stack"]([lift(v) for v in o], 0)
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


def on_grid(A: SymArray):
    """A with its pieces re-cut into the grid of its own cut points (every piece a product of cells of
    each axis, so two pieces either share an axis's cell or are disjoint there); None when it cannot be."""
    cells = _refine(_ctx(), [A])
    if cells is None:
        return None
    return SymArray(A._shape, [Piece(maps, row[0]) for maps, row in cells], A.boolean)


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
    if (base.is_Rational and base > 0 or base.is_Symbol and base.is_positive) and not ex.has(sp.Indexed):
        # RoPE's base ** (-2i/d), a decay's gamma ** i (gamma > 0 a param): a constant per entry
        return elementwise(lambda a, b: a ** b, A, K)
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
