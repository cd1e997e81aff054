"""What spec code calls during the shape-polymorphic trace besides an array's own methods: numpy's
ufuncs and functions on symbolic-size arrays (the tables ``SymArray`` dispatches to, after
``core.language.check_call``), numpy's shape-taking constructors while a derivation runs
(``np.ones`` / ``np.zeros`` / ``np.arange`` of a dim), and the backend ``B``.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import sympy as sp

from vjpcert.core.backends import exact
from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.every_size import gathers, inverse, layouts, writes  # noqa: F401 -- writes fills CONSTRUCTS
from vjpcert.symbolic.every_size.atoms import Step
from vjpcert.symbolic.every_size.constructs import (_band, _shape_of, concatenate, masked_mean,
                                                    masked_sum, stack, where)
from vjpcert.symbolic.every_size.normal import Normaliser
from vjpcert.symbolic.every_size.sizes import _LOCAL, Dim, _size_expr, same
from vjpcert.symbolic.every_size.symarray import (FUNCTIONS, UFUNCS, Piece, SymArray, broadcast_to, elementwise,
                                                  fresh, lift, matmul, power)

UFUNCS.update({
    "add": lambda x, y: lift(x) + y, "subtract": lambda x, y: lift(x) - y,
    "multiply": lambda x, y: lift(x) * y, "true_divide": lambda x, y: lift(x) / y,
    "negative": lambda x: -lift(x), "positive": lambda x: lift(x), "power": lambda x, y: power(x, y),
    "matmul": lambda x, y: matmul(lift(x), lift(y)),
    "logical_and": lambda x, y: lift(x) & y, "bitwise_and": lambda x, y: lift(x) & y,
    "logical_or": lambda x, y: lift(x) | y, "bitwise_or": lambda x, y: lift(x) | y,
    "logical_not": lambda x: ~lift(x), "invert": lambda x: ~lift(x),
})
FUNCTIONS.update({
    "concatenate": concatenate, "stack": stack, "where": where,
    "reshape": lambda a, shape=None, newshape=None, order="C": layouts.reshape_ordered(
        a, shape if shape is not None else newshape, order),
    "transpose": lambda a, axes=None: lift(a).transpose(*(axes or ())),
    "sum": lambda a, axis=None, keepdims=False, **kw: masked_sum(a, axis, keepdims, **kw),
    "mean": lambda a, axis=None, keepdims=False, **kw: masked_mean(a, axis, keepdims, **kw),
    "any": lambda a, axis=None, keepdims=False, **kw: lift(a).any(axis, keepdims, **kw),
    "all": lambda a, axis=None, keepdims=False, **kw: lift(a).all(axis, keepdims, **kw),
    "shape": _shape_of, "ndim": lambda a: lift(a).ndim, "matmul": lambda x, y, **kw: matmul(lift(x), lift(y)),
    "tril": lambda m, k=0: _band(m, k, True), "triu": lambda m, k=0: _band(m, k, False),
    "expand_dims": layouts.expand_dims, "flip": layouts.flip, "roll": layouts.roll, "tile": layouts.tile,
    "split": layouts.split, "ravel": layouts.ravel, "squeeze": layouts.squeeze,
    "broadcast_to": lambda a, shape, **kw: broadcast_to(lift(a), tuple(_size_expr(s) for s in shape)),
    "moveaxis": layouts.moveaxis, "swapaxes": layouts.swapaxes, "outer": layouts.outer, "diff": layouts.diff,
    "pad": layouts.pad, "einsum": layouts.einsum, "copy": lambda a, **kw: lift(a),
    "zeros_like": lambda a, dtype=None: _zeros_like(lift(a), dtype), "cumsum": layouts.cumsum,
    "prod": layouts.prod, "take": gathers.take, "take_along_axis": gathers.take_along_axis,
    "repeat": gathers.repeat,
    "size": lambda a, axis=None: lift(a).size if axis is None else lift(a).shape[axis],
    "dot": lambda x, y: matmul(lift(x), lift(y)) if lift(x).ndim <= 2 and lift(y).ndim <= 2 else refuse(
        "np.dot of arrays of rank > 2 (numpy's dot is not a matmul there): use np.einsum or @"),
})


def _zeros_like(a: SymArray, dtype) -> SymArray:
    """Exact zeros of a's shape: False for a mask (or dtype=bool), the integer 0 otherwise; a float
    dtype would leave the exact backends, as np.zeros refuses it."""
    kind = np.dtype(dtype).kind if dtype is not None else ("b" if a.boolean else "O")
    if kind not in "biuO":
        refuse("np.zeros_like with a float dtype: a float array would leave the exact backends")
    return SymArray.full(a._shape, lambda idx: sp.Integer(0), boolean=kind == "b")     # masks are 0/1 too


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
    def step(a):
        """The kink: a ``Step`` atom per entry, a free Boolean of the region (so a claim is proved on
        every open region, as in the fixed-dims ring); the value on the kink is not stated here."""
        return elementwise(Step, a)

    @staticmethod
    def unit_lower_inverse(A):
        """``core.matrix_functions.unit_lower_inverse``, (I + tril(A, -1))^-1, at a symbolic size: an atom
        per entry (``symbolic.every_size.inverse``); at a constant size NotImplemented, so the definition
        runs, its loop over a number and its value exact, as in every other tier."""
        A = lift(A)
        if A.ndim < 2:
            refuse("unit_lower_inverse of an array of rank < 2")
        shape, G = A._shape, A.ctx.G
        if not same(shape[-1], shape[-2]):
            refuse(f"unit_lower_inverse of a matrix that is not square ({shape[-2]} x {shape[-1]})")
        n = shape[-1]
        if n.is_Integer:
            return NotImplemented
        pieces = []
        for P in A.pieces:      # a stack of matrices may be pieces along its leading axes, never within one
            if any(a != 1 or b != 0 or not same(z, n) for a, b, z in P.maps[-2:]):
                refuse("unit_lower_inverse of matrices made of several pieces (a concatenation, an interleave "
                       "along their rows or columns)")
            gens = tuple(sp.Symbol(f"{inverse.PREFIX}{k}", integer=True) for k in range(len(shape)))
            ranges = {g: (sp.Integer(0), z - 1) for g, (_, _, z) in zip(gens, P.maps)}
            body = P.value(gens)
            bases = sp.Tuple(*sorted({x.base for x in body.atoms(sp.Indexed)}, key=str))
            ranges = {**G.ranges, **ranges}
            Inv = inverse.head(gens, Normaliser(G.dim_symbols, ranges)(body), body, n, ranges)
            pieces.append(Piece(P.maps, lambda idx, Inv=Inv, bases=bases: Inv(bases, *idx)))
        return SymArray(shape, pieces, False)

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
        return fresh(lift(values), (values,))          # numpy's np.array copies

    def max_shift(self, x, mask=None):
        """0 in exact arithmetic, as in every exact backend."""
        shape = lift(x)._shape
        return SymArray.full(shape[:-1] + (1,), lambda idx: sp.Integer(0))


SHAPE_BACKEND = ShapeBackend()
