"""The arrays of the modular backend: residues mod p with their tangents and bounds (``ModArray``), as
numpy arrays behave -- in-place updates mutate, basic slices and transposes are views that write through
to their base and see its later writes (``symbolic.modular.views``) -- and the exact constants and
rational arrays they start from. Every entry point checks the call against the spec language
(``core.language.check_call``) first, so a keyword outside it is refused, never dropped."""
from __future__ import annotations

import hashlib
import math
import numbers
import operator
from fractions import Fraction

import numpy as np

from vjpcert.core import language as lang
from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.modular import bound as bnd
from vjpcert.symbolic.modular import views
from vjpcert.symbolic.modular.bound import ATOM, LEAF
from vjpcert.symbolic.modular.computation_ids import TracedArray, _desc, derive
from vjpcert.symbolic.modular.exact import exact_bound, exact_inv, exact_mul, exact_pow, exact_sqrt
from vjpcert.symbolic.modular.field import Field

_HANDLED = {}
HOOKS = {}          # functions of the modules above: B.sqrt (``backend``)


def _implements(*fns):
    def register(impl):
        for fn in fns:
            _HANDLED[fn] = impl
        return impl
    return register


class ModArray(TracedArray):
    """An array of residues mod p with its tangent (None: exactly 0) and bounds. Spec code sees the
    numpy array interface of the spec language (``core.language``): shape, indexing, writes and in-place
    updates with numpy's aliasing (``symbolic.modular.views``), the methods in ``language.METHODS``,
    arithmetic, @, and the numpy functions in ``_HANDLED``. It refuses comparisons and branches. An
    array made outside the backend (``leaf``: the checker's inputs, cotangents, parameters) is read-only."""

    __slots__ = ("F", "_v", "_t", "b", "tb", "exact", "qa", "atom", "sid", "leaf", "_parent", "_fn",
                 "_kind", "_desc", "_children", "_ids", "_stale", "scalar", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, F: Field, v, t=None, b=LEAF, tb=None, exact=None, leaf=True):
        self.F, self._v, self._t, self.exact = F, np.asarray(v, dtype=np.int64), t, exact
        # bounds of the value and of the tangent (``bound``): index arrays with this array's axes
        self.b, self.tb = bnd.align(b, self._v.ndim), bnd.align(tb, self._v.ndim)
        self.qa = None          # an exact rational array (B.array of ints, arithmetic on it): exponents
        self.atom = None        # the source id of an array of atoms, as B.sqrt returned it (``inverse``)
        # how the value was computed (None: not known), a hash of the operations from named leaves and
        # constants: equal ids are equal polynomials entry by entry, so a recomputed atom is one atom
        self.sid = None
        self.leaf = leaf
        # numpy's aliasing (``views``): the array this one is a view of, the map, its kind
        self._parent = self._fn = self._kind = self._desc = self._children = self._ids = None
        self._stale = False
        # a 0-d result is a numpy scalar (immutable: x += y rebinds x) unless numpy makes it a 0-d
        # array (np.zeros(()), np.where, x[...]); None: not known, so an in-place update is refused
        self.scalar = not (leaf and isinstance(v, np.ndarray))     # a leaf parameter is a number
        if t is not None:
            self._t = np.broadcast_to(np.asarray(t, dtype=np.int64), self._v.shape)

    # ---- the entries (a view whose base was written where numpy's layout decides is refused)
    @property
    def v(self):
        if self._stale:
            self._refuse_stale()
        return self._v

    @v.setter
    def v(self, value):
        self._v = value

    @property
    def t(self):
        if self._stale:
            self._refuse_stale()
        return self._t

    @t.setter
    def t(self, value):
        self._t = value

    def _refuse_stale(self):
        lang.refuse_view_write("the result of a reshape or ravel was used after its base was written "
                               "(numpy makes it a view or a copy by the memory layout of its base)")

    def assign(self, other: "ModArray") -> None:
        """Take ``other``'s entries, tangent, bounds and identity (a view recomputed from its base)."""
        self._v, self._t, self.b, self.tb = other._v, other._t, other.b, other.tb
        self.exact, self.qa, self.atom, self.sid = other.exact, other.qa, other.atom, other.sid

    # ---- lifting
    def _lift(self, x) -> "ModArray":
        return lift(self.F, x)

    # ---- structure
    @property
    def shape(self):
        return self._v.shape

    @property
    def ndim(self):
        return self._v.ndim

    @property
    def size(self):
        return self._v.size

    def __len__(self):
        return len(self._v)

    def _mapped(self, fn, desc=None) -> "ModArray":
        """A structural map (reshape, transpose, slice, repeat, pad, flip, ...): numpy's own function
        applied to the residues and the tangents (it only moves entries or fills zeros, so it is exact
        mod p), and the bounds' index arrays moved the same way."""
        out = _new(self.F, fn(self.v), None if self.t is None else fn(self.t),
                   bnd.remap(self.b, fn, self.shape), bnd.remap(self.tb, fn, self.shape),
                   self.exact if self.v.ndim == 0 else None)
        out.qa = None if self.qa is None else fn(self.qa)
        out.atom = self.atom                 # a slice or a reshape of atoms is still atoms
        out.sid = None if desc is None or self.sid is None else derive("map", desc, self)
        if out.ndim == 0:
            out.scalar = views.scalar_result(fn, self)
        return out

    def _map(self, fn, desc=None, kind=None) -> "ModArray":
        """``_mapped``; ``kind`` (``views.VIEW`` or ``views.MAYBE``) where numpy's result is a view."""
        out = self._mapped(fn, desc)
        if kind is not None and not (self.ndim == 0 and self.scalar):    # a scalar shares no memory
            out._desc = desc
            views.link(out, self, fn, kind)
        return out

    def __getitem__(self, key):
        lang.check_call("getitem")
        if isinstance(key, ModArray) or (isinstance(key, tuple) and any(isinstance(k, ModArray) for k in key)):
            refuse("an array is indexed by traced values: indices must come from shapes or structural params")
        return self._map(lambda a: a[key], ("getitem", _desc(key)), views.VIEW if views.is_view(key, self.shape) else None)

    def __setitem__(self, key, value):
        lang.check_call("setitem")
        if isinstance(key, ModArray) or (isinstance(key, tuple) and any(isinstance(k, ModArray) for k in key)):
            refuse("an array is written at traced indices: indices must come from shapes or structural params")
        views.write(self, key, self._lift(value), derive)

    def _inplace(self, ufunc, result):
        """``x op= y``: numpy writes the result into x itself, so every alias and view of x sees it."""
        lang.check_call(ufunc)
        if self.ndim == 0 and self.scalar is not False:
            if self.scalar is None:
                lang.refuse_view_write("an in-place update of a 0-d value numpy may make a scalar or an array")
            return result                    # a numpy scalar is immutable: Python rebinds the name
        views.write(self, None, result, derive)
        return self

    def reshape(self, *shape, **kw):
        lang.check_call("reshape", kw)
        order = kw.get("order", "C")
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return self._map(lambda a: np.reshape(a, shape, order=order), ("reshape", _desc(shape), order),
                         views.MAYBE)

    def ravel(self, order="C"):
        lang.check_call("ravel", {"order": order})
        return self.reshape(-1, order=order)

    def flatten(self, order="C"):
        lang.check_call("ravel", {"order": order})
        return self._map(lambda a: np.ravel(a, order=order).copy(), ("flatten", order))

    def squeeze(self, axis=None):
        lang.check_call("squeeze")
        return self._map(lambda a: a.squeeze(axis), ("squeeze", _desc(axis)), views.VIEW)

    def transpose(self, *axes):
        lang.check_call("transpose")
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return self._map(lambda a: a.transpose(*axes), ("transpose", _desc(axes)), views.VIEW)

    def swapaxes(self, i, j):
        lang.check_call("swapaxes")
        return self._map(lambda a: a.swapaxes(i, j), ("swapaxes", i, j), views.VIEW)

    @property
    def T(self):
        return self._map(lambda a: a.T, ("T",), views.VIEW)

    def copy(self):
        lang.check_call("copy")
        return self._map(lambda a: a.copy(), ("copy",))

    def repeat(self, repeats, axis=None):
        lang.check_call("repeat")
        return _HANDLED[np.repeat](self, repeats, axis)

    def cumsum(self, axis=None):
        lang.check_call("cumsum")
        return _HANDLED[np.cumsum](self, axis)

    def prod(self, axis=None, *, keepdims=False):
        lang.check_call("prod")
        return _HANDLED[np.prod](self, axis, keepdims=keepdims)

    def dot(self, o):
        lang.check_call("dot")
        return _HANDLED[np.dot](self, o)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    # ---- reductions
    def sum(self, axis=None, *, keepdims=False, **kw):      # numpy's next positional is dtype: refused
        lang.check_call("sum", kw)
        return _HANDLED[np.sum](self, axis, keepdims=keepdims, **kw)

    def mean(self, axis=None, *, keepdims=False, **kw):
        lang.check_call("mean", kw)
        return _HANDLED[np.mean](self, axis, keepdims=keepdims, **kw)

    def _sum(self, axis, keepdims):
        F = self.F
        _used(self)
        axes = tuple(range(self.ndim)) if axis is None else tuple(a % self.ndim for a in np.atleast_1d(axis))
        v = F.sum(self.v, axis, keepdims)
        t = None if self.t is None else F.sum(np.ascontiguousarray(self.t), axis, keepdims)
        out = _new(F, v, t, bnd.sum_axes(self.b, self.shape, axes, keepdims),
                   bnd.sum_axes(self.tb, self.shape, axes, keepdims), None)
        out.sid = derive("sum", (axes, bool(keepdims)), self)
        return out

    # ---- arithmetic
    def __add__(self, o):
        o = self._lift(o)
        F = self.F
        _used(self, o)
        exact = None
        if self.exact is not None and o.exact is not None and not self.exact[1] and not o.exact[1]:
            exact = (self.exact[0] + o.exact[0], ())
        v = F.add(self.v, o.v)
        nd = v.ndim
        out = _new(F, v, _tadd(F, self.t, o.t), bnd.add(self.b, o.b, nd), bnd.add(self.tb, o.tb, nd), exact)
        out.sid = derive("add", None, self, o)
        return _with_qa(out, self, o, lambda x, y: x + y)

    __radd__ = __add__

    def __neg__(self):
        F = self.F
        _used(self)
        out = _new(F, F.neg(self.v), None if self.t is None else F.neg(self.t), self.b, self.tb,
                       None if self.exact is None else exact_mul(self.exact, (Fraction(-1), ())))
        out.qa = None if self.qa is None else -self.qa
        out.sid = derive("neg", None, self)
        return out

    def __pos__(self):
        # numpy's +x is a new array: a later write into x must not reach it
        return self._map(lambda a: a.copy(), ("positive",))

    def __sub__(self, o):
        return self + (-self._lift(o))

    def __rsub__(self, o):
        return self._lift(o) + (-self)

    def __mul__(self, o):
        o = self._lift(o)
        F = self.F
        _used(self, o)
        t = _tadd(F, None if self.t is None else F.mul(self.t, o.v), None if o.t is None else F.mul(self.v, o.t))
        exact = exact_mul(self.exact, o.exact) if self.exact is not None and o.exact is not None else None
        sid = derive("mul", None, self, o)
        v = F.value(sid, lambda: F.mul(self.v, o.v))
        nd = v.ndim
        out = _new(F, v, t, bnd.mul(self.b, o.b, nd),
                       bnd.add(bnd.mul(self.tb, o.b, nd), bnd.mul(self.b, o.tb, nd), nd), exact)
        out.sid = sid
        return _with_qa(out, self, o, lambda x, y: x * y)

    __rmul__ = __mul__

    def inverse(self) -> "ModArray":
        F = self.F
        if self.exact is not None:
            return exact_const(F, exact_inv(self.exact))
        if self.qa is not None:
            if any(q == 0 for q in self.qa.ravel()):
                raise SpecError(None, "division by an exact zero")
            return qarray(F, np.vectorize(lambda q: 1 / q, otypes=[object])(self.qa))
        if self.b is None:
            raise SpecError(None, "division by an exact zero")
        if self.atom is not None:
            # 1 / s for an atom s: the variable w = 1 / s (uniform where s is; s = 0 is a pole). Sound
            # while s itself never enters the residual: ``Field.atoms_used_both_ways`` checks that.
            F.inverted_atoms.add(self.atom)
            u = F.value(derive("inv", None, self), lambda: F.inv(self.v))
            F.pole_degree += self.v.size
            t = None if self.t is None else F.neg(F.mul(F.mul(u, u), self.t))
            w = bnd.Bound(1, 0)
            out = _new(F, u, t, w, bnd.mul(self.tb, bnd.mul(w, w, self.ndim), self.ndim))
            out.sid = derive("inv", None, self)
            return out
        _used(self)
        u = F.value(derive("inv", None, self), lambda: F.inv(self.v))
        t = None if self.t is None else F.neg(F.mul(F.mul(u, u), self.t))   # d(1/a) = -da / a^2
        ib = bnd.inv(self.b, self.shape)        # one new denominator per entry: a's numerator
        F.pole_degree += self.b.n * self.v.size
        nd = self.ndim
        out = _new(F, u, t, ib, bnd.mul(self.tb, bnd.mul(ib, ib, nd), nd))
        out.sid = derive("inv", None, self)
        return out

    def __truediv__(self, o):
        return self * self._lift(o).inverse()

    def __rtruediv__(self, o):
        return self._lift(o) * self.inverse()

    def __pow__(self, k):
        if isinstance(k, ModArray) and k.qa is not None:
            return _pow_exact_array(self, k.qa)
        if isinstance(k, ModArray):
            if k.exact is None or k.exact[1]:
                refuse("x ** y with a non-constant exponent is not supported; use B.exp/B.log")
            k = k.exact[0]
        if isinstance(k, float):
            refuse(f"a float exponent ({k!r}): write exponents as ints or Fractions")
        k = Fraction(k)
        if k.denominator == 1:
            k = int(k)
            if self.exact is not None:
                return exact_const(self.F, exact_pow(self.exact, k))
            if k < 0:
                return self.inverse() ** (-k)
            if k == 0:
                return lift(self.F, 1) + self * 0
            F = self.F
            _used(self)
            v = F.pow(self.v, k)
            t = None if self.t is None else F.mul(F.mul_scalar(F.pow(self.v, k - 1), k), self.t)
            nd = self.ndim
            tb = bnd.mul(bnd.mul(bnd.const(k), bnd.pow_(self.b, k - 1), nd), self.tb, nd)
            out = _new(F, v, t, bnd.pow_(self.b, k), tb)
            out.sid = derive("pow", k, self)
            return out
        if k == Fraction(1, 2):
            return HOOKS["sqrt"](self)
        if k == Fraction(-1, 2):
            return HOOKS["sqrt"](self).inverse()
        if self.exact is not None and not self.exact[1] and self.exact[0] > 0:
            return cpow(self.F, self.exact[0], k)
        refuse(f"x ** {k} is not supported; use B.sqrt or integer powers")

    def __matmul__(self, o):
        return _HANDLED[np.matmul](self, o)

    def used(self):
        """The value enters arithmetic (not only its inverse): recorded for ``Field.atoms_used_both_ways``."""
        if self.atom is not None:
            self.F.plain_atoms.add(self.atom)

    def __rmatmul__(self, o):
        return _HANDLED[np.matmul](o, self)

    # ---- what a spec may not do (the refusals every interpreter shares)
    def _no_compare(self, other):
        lang.refuse_comparison()

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _no_compare
    __hash__ = object.__hash__

    def __bool__(self):
        lang.refuse_branch()

    def __abs__(self):
        lang.refuse_comparison()

    def __float__(self):
        lang.refuse_float()

    __int__ = __index__ = __complex__ = __float__

    def __array__(self, *args, **kwargs):
        refuse("a traced value was converted to a plain numpy array (np.asarray, np.array, a numpy "
               "function the modular backend does not follow): use array methods and B's functions")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        base = "true_divide" if ufunc is np.true_divide else ufunc.__name__     # numpy names it divide
        name = base if method == "__call__" else f"{base}.{method}"
        if name not in _UFUNCS:
            if method == "__call__":
                lang.ufunc_primitive(ufunc)             # the shared refusal of a non-primitive ufunc
            lang.check_call(name, kwargs)
            refuse(f"np.{name} on traced values is not supported by the modular backend")
        lang.check_call(name, kwargs)
        F = next(x.F for x in inputs if isinstance(x, ModArray))
        if name == "add.at":
            target, key, values = (list(inputs) + [None])[:3]
            if not isinstance(target, ModArray):
                refuse("np.add.at of traced values into a plain numpy array")
            if isinstance(key, ModArray):
                refuse("np.add.at at traced indices: indices must come from shapes or structural params")
            views.write(target, key, lift(F, values), derive, accumulate=True)
            return None
        return _UFUNCS[name](*[lift(F, x) for x in inputs])

    def __array_function__(self, func, types, args, kwargs):
        lang.check_call(func.__name__, kwargs)
        impl = _HANDLED.get(func)
        if impl is None:
            refuse(f"np.{func.__name__} on traced values is not supported by the modular backend")
        return impl(*args, **kwargs)

    def __repr__(self):
        return f"ModArray(shape={self.shape}, p={self.F.p})"


# x op= y for every arithmetic operator: numpy's in-place update (``_inplace``)
for _name, _ufunc, _fn in (("__iadd__", "add", operator.add), ("__isub__", "subtract", operator.sub),
                           ("__imul__", "multiply", operator.mul), ("__itruediv__", "true_divide", operator.truediv),
                           ("__ipow__", "power", operator.pow), ("__imatmul__", "matmul", operator.matmul)):
    setattr(ModArray, _name, lambda self, o, u=_ufunc, f=_fn: self._inplace(u, f(self, o)))

_UFUNCS = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
           "true_divide": lambda a, b: a / b, "matmul": lambda a, b: a @ b, "power": lambda a, b: a ** b,
           "negative": lambda a: -a, "positive": lambda a: +a, "add.at": None}


def _new(F: Field, v, t=None, b=LEAF, tb=None, exact=None) -> ModArray:
    """An array the backend computed (writable, unlike the checker's leaves)."""
    return ModArray(F, v, t, b, tb, exact, leaf=False)


def _tadd(F, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return F.add(a, b)


def lift(F: Field, x) -> ModArray:
    """An operand as a ModArray: ints and Fractions exactly, integer/bool numpy arrays as constants;
    floats are refused (a float constant is already rounded)."""
    if isinstance(x, ModArray):
        return x
    if isinstance(x, (bool, np.bool_, numbers.Integral, Fraction)):
        return exact_const(F, (Fraction(int(x)) if not isinstance(x, Fraction) else x, ()))
    if isinstance(x, np.ndarray) and x.dtype.kind in "biu":
        v = np.mod(x.astype(object), F.p).astype(np.int64) if x.dtype.kind == "u" else np.mod(x.astype(np.int64), F.p)
        big = np.abs(x.astype(np.float64)).max(initial=0)
        out = _new(F, v, None, bnd.const(int(big)) if big else None, None)
        out.sid = derive("ints", _desc(x))
        return out
    if isinstance(x, (list, tuple)):
        return _HANDLED[np.stack]([lift(F, e) for e in x])
    if isinstance(x, (float, np.floating, complex)) or (isinstance(x, np.ndarray) and x.dtype.kind in "fc"):
        refuse(f"a float ({x!r}) reached the spec's arithmetic: write constants as B.c(p, q) or "
               f"B.c('0.044715') so they stay exact")
    refuse(f"a {type(x).__name__} ({x!r}) reached the spec's arithmetic; use the backend B for numbers")


def _qa_of(x: ModArray):
    if x.qa is not None:
        return x.qa
    if x.exact is not None and not x.exact[1]:
        return np.array(x.exact[0], dtype=object)
    return None


def _with_qa(out: ModArray, a: ModArray, b: ModArray, fn) -> ModArray:
    """Keep an exact rational array exact through + and * (RoPE's exponents -2i/d)."""
    if out.exact is None and (a.qa is not None or b.qa is not None):
        qa, qb = _qa_of(a), _qa_of(b)
        if qa is not None and qb is not None:
            out.qa = fn(qa, qb)
    return out


def qarray(F: Field, qa) -> ModArray:
    """An exact rational array: its residues, and the Fractions (for exponents)."""
    if isinstance(qa, np.ndarray) and qa.dtype.kind in "biu" and qa.size:
        return _integer_array(F, qa.astype(np.int64))
    qa = np.asarray(qa, dtype=object)
    flat = [q if type(q) is Fraction else Fraction(q) for q in qa.ravel().tolist()]
    residues: dict = {}                  # each distinct value once (a mask holds two)
    for q in flat:
        if q not in residues:
            residues[q] = F.residue(q)
    v = np.fromiter((residues[q] for q in flat), dtype=np.int64, count=len(flat)).reshape(qa.shape)
    # every entry q = (q L) / L for L the lcm of the denominators: one constant class, |q L| <= big L
    big = max([abs(q) for q in residues] + [Fraction(1)])
    den = math.lcm(*[q.denominator for q in residues], 1)
    b = bnd.const(Fraction(1, den))
    out = _new(F, v, None, bnd.Bound(0, math.log2(max(1, big * den)), b.cls), None)
    exact = np.empty(len(flat), dtype=object)
    exact[:] = flat
    out.qa = exact.reshape(qa.shape)
    out.sid = derive("rationals", repr(out.qa.tolist()), None)
    return out


def _integer_array(F: Field, ints: np.ndarray) -> ModArray:
    """``qarray`` of an int64 array (a mask, an index table: the entries of a framework graph's static
    arrays), its residues by numpy and its Fractions one per distinct value."""
    big = int(np.abs(ints).max())
    b = bnd.const(Fraction(1))
    out = _new(F, np.mod(ints, F.p), None, bnd.Bound(0, math.log2(max(1, big)), b.cls), None)
    as_fraction = {int(k): Fraction(int(k)) for k in np.unique(ints)}
    exact = np.empty(ints.size, dtype=object)
    exact[:] = [as_fraction[k] for k in ints.ravel().tolist()]
    out.qa = exact.reshape(ints.shape)
    out.sid = derive("rationals", repr(out.qa.tolist()), None)
    return out


def _pow_exact_array(base: ModArray, ks) -> ModArray:
    """base ** k for an exact rational base and an exact array of exponents: each entry exact where k
    is an integer or a half, else one algebraic-constant atom keyed by (base, k), as the ring's cpow."""
    F = base.F
    if base.exact is None or base.exact[1] or base.exact[0] <= 0:
        if all(Fraction(k).denominator == 1 for k in np.asarray(ks, dtype=object).ravel()):
            return _pow_int_array(base, ks)
        refuse("x ** k with an array of exponents that are not all integers needs a positive rational "
               "constant base")
    q = base.exact[0]
    flat = []
    for k in np.asarray(ks, dtype=object).ravel():
        k = Fraction(k)
        if k.denominator == 1:
            flat.append(int(exact_const(F, exact_pow((q, ()), int(k))).v))
        elif k.denominator == 2 and exact_sqrt((q, ())) is not None:
            root = exact_sqrt((q, ()))
            flat.append(int(exact_const(F, exact_pow(root, int(k.numerator))).v))
        else:
            flat.append(int(cpow(F, q, k).v))
    v = np.array(flat, dtype=np.int64).reshape(np.shape(ks))
    out = _new(F, v, None, ATOM, None)
    out.sid = derive("pow-exact", (repr(q), repr(np.asarray(ks, dtype=object).tolist())))   # constants of (q, k)
    return out


def _pow_int_array(base: ModArray, ks) -> ModArray:
    """base ** k for an array of integer exponents (a decay's powers gamma ** arange(n)): the integer
    power of each distinct k, by its own rule (value, tangent, bound), each entry picked from its own
    k's power by ``np.where`` -- whose bound, the join of the powers', holds for every entry."""
    ints = np.array([int(k) for k in np.asarray(ks, dtype=object).ravel()], dtype=np.int64).reshape(np.shape(ks))
    shape = np.broadcast_shapes(base.shape, ints.shape)
    out = None
    for k in np.unique(ints).tolist():
        power = base ** k
        out = np.broadcast_to(power, shape) if out is None else np.where(ints == k, power, out)
    return out


def exact_const(F: Field, exact) -> ModArray:
    q, bases = exact
    v = F.residue(q)
    for base, e in bases:
        root = F.sqrt_pi if base == "pi" else F.prime_root(base)
        v = v * pow(root, e, F.p) % F.p if e >= 0 else v * pow(pow(root, -e, F.p), -1, F.p) % F.p
    out = _new(F, np.int64(v), None, exact_bound(exact), None, exact)
    out.sid = derive("const", repr(exact))
    return out


def cpow(F: Field, base: Fraction, k: Fraction) -> ModArray:
    """An algebraic constant base^k (k not an integer or 1/2): one atom, keyed by (base, k)."""
    key = int.from_bytes(hashlib.sha256(f"{base}^{k}".encode()).digest()[:7], "big")   # stable across runs
    v = F.atom("cpow", np.int64(key), None)
    out = _new(F, v, None, ATOM, None)
    out.sid = derive("cpow", f"{base}^{k}")          # one constant of (base, k): the atom is keyed by them
    return out


def _used(*arrays):
    for x in arrays:
        if isinstance(x, ModArray) and x.atom is not None:
            x.F.plain_atoms.add(x.atom)
