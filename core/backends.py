"""Number backends: the ``B`` every spec is written against.

A spec does array structure with numpy (reshape, sum, matmul, where with a *concrete* mask) and asks
``B`` for everything that depends on the number system: transcendental functions, pi, and exact
constants ``B.c(p, q)`` (never a Python float literal: a rounded 0.7978845608 cannot be proved, and in
mpmath it silently caps the precision). Arrays are numpy arrays: ``dtype=object`` holding SymPy
expressions or mpmath numbers, or float64 / float32.

The tracing backend (expression DAGs for the prover, and spec hygiene) lives in ``vjpcert.core.trace``.
"""
from __future__ import annotations

import contextlib
import numbers
import weakref
from fractions import Fraction

import numpy as np

from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.errors import SpecError, refuse
from vjpcert.core.language import ELEMENTWISE, TRANSCENDENTAL, refuse_branch, refuse_comparison, refuse_float
from vjpcert.core.spec_array import in_spec_code, plain, running, wrap

# Everything a spec may ask of its backend (docs/spec-language.md). Nothing else is visible
# to spec code: a spec that could read the backend's name, precision or dtype could take one path in
# the exact and mpmath backends (where it is proved and checked) and another in floats (what kernels
# and implementations are compared with).
# The kink family, written once over the spec's own B from its one kink ``step`` ([a > 0]), so every
# backend computes the same function and every prover meets one primitive. Its derivative on each open
# region is the formula's; at the kink it is what the formula gives with step(0) = 0 (relu'(0) = 0).
KINK_FAMILY = {
    "relu": lambda B, a: a * B.step(a),
}
SPEC_API = frozenset({*ELEMENTWISE, "pi", "c", "zeros", "array", "max_shift", *KINK_FAMILY})


class SpecBackend:
    """The ``B`` spec code receives: the documented functions of a backend and nothing else. Reading
    any other attribute is refused as bad input (``core.registry.refuse``)."""

    __slots__ = ("__weakref__",)

    def __getattr__(self, name):
        if name in KINK_FAMILY:
            fn = KINK_FAMILY[name]
            return lambda *args: fn(self, *args)
        if name in SPEC_API:
            value = getattr(_IMPL[self], name)
            return _in_spec(value) if callable(value) else value
        refuse(f"the spec reads B.{name}, which is not part of the backend a spec may use "
               f"({', '.join(sorted(SPEC_API))}): a spec must compute the same thing on every backend")

    def __setattr__(self, name, value):
        refuse(f"the spec sets B.{name}: the backend is read-only to spec code")

    def __repr__(self):
        return "<spec backend B>"


def _in_spec(fn):
    """A backend function as spec code calls it: numpy arrays in and out are ``SpecArray``s (held to
    the spec language), and the backend's own numpy work inside is not checked again."""
    def call(*args, **kwargs):
        with running():
            return wrap(fn(*plain(args), **{k: plain(v) for k, v in kwargs.items()}))
    call.__name__ = getattr(fn, "__name__", "B")
    return call


_IMPL: "weakref.WeakKeyDictionary[SpecBackend, object]" = weakref.WeakKeyDictionary()
_FACADE: "weakref.WeakKeyDictionary[object, SpecBackend]" = weakref.WeakKeyDictionary()


def spec_backend(backend) -> SpecBackend:
    """The facade spec code sees for ``backend`` (one per backend; idempotent)."""
    if isinstance(backend, SpecBackend):
        return backend
    facade = _FACADE.get(backend)
    if facade is None:
        facade = object.__new__(SpecBackend)
        _IMPL[facade] = backend
        _FACADE[backend] = facade
    return facade


def unwrap(backend):
    """The backend behind a facade (machinery only; spec code cannot reach this)."""
    return _IMPL.get(backend, backend) if isinstance(backend, SpecBackend) else backend


def exact(p, q=1) -> Fraction:
    """p/q as an exact fraction; ``p`` may be an int, a Fraction or a decimal string such as "0.044715"."""
    if isinstance(p, float) or isinstance(q, float):
        raise TypeError("B.c() takes ints, Fractions or decimal strings, not floats: "
                        "a float constant is already rounded")
    p, q = (int(v) if isinstance(v, numbers.Integral) else v for v in (p, q))     # numpy ints wrap around
    out = Fraction(p) / Fraction(q)
    return Fraction(int(out.numerator), int(out.denominator))


def _elementwise(fn):
    ufunc = np.frompyfunc(fn, 1, 1)

    def apply(a):
        out = ufunc(a)
        return out.astype(object) if isinstance(out, np.ndarray) else out
    apply.__name__ = getattr(fn, "__name__", "elementwise")
    return apply


class ObjectBackend:
    """Shared by the backends whose arrays hold Python number objects."""

    dtype = object
    name = "object"

    def zeros(self, shape):
        return np.zeros(shape, dtype=object) * self.c(0)

    def max_shift(self, x, mask=None):
        """Exact arithmetic cannot overflow: no shift (see FloatBackend.max_shift)."""
        return self.zeros(np.shape(x)[:-1] + (1,))

    def array(self, values):
        return np.array(values, dtype=object)


class SympyBackend(ObjectBackend):
    """Object arrays of SymPy expressions, for the interactive Jacobian and the SymPy proof strategy."""

    name = "sympy"

    def __init__(self):
        import sympy
        self.sympy = sympy
        for kind in TRANSCENDENTAL:
            setattr(self, kind, _elementwise(getattr(sympy, kind)))
        self.step = _elementwise(lambda a: sympy.Heaviside(a, sympy.Rational(STEP_AT_KINK.numerator, STEP_AT_KINK.denominator)))
        self.pi = sympy.pi

    def c(self, p, q=1):
        f = exact(p, q)
        return self.sympy.Rational(f.numerator, f.denominator)


_MP_CONTEXT = None


def mp_context(dps: int):
    """A private mpmath context at ``dps`` digits. Its conversion declines a numpy array at once:
    mpmath's own builds the array's repr for the TypeError it raises when an mpf stands left of an
    array (``mpf * x``), before numpy's reflected operation takes over -- a tenth of the numeric
    tier's time, spent on a message nobody reads."""
    global _MP_CONTEXT
    if _MP_CONTEXT is None:
        import mpmath        # third-party and slow to import: loaded at its first use

        class ArrayDecliningContext(mpmath.MPContext):
            def convert(self, x, strings=True):
                if isinstance(x, np.ndarray):
                    raise TypeError("an mpf does not take a numpy array: numpy's operation does")
                return super().convert(x, strings)
        _MP_CONTEXT = ArrayDecliningContext
    ctx = _MP_CONTEXT()
    ctx.dps = dps
    return ctx


class MpmathBackend(ObjectBackend):
    """Object arrays of mpmath numbers at ``dps`` decimal digits, in a private context (so two checks
    at different precisions never share the global ``mp``)."""

    name = "mpmath"

    def __init__(self, dps: int = 50):
        self.ctx = ctx = mp_context(dps)
        self.dps = dps
        self.mpf = ctx.mpf
        for kind in TRANSCENDENTAL:
            setattr(self, kind, _elementwise(getattr(ctx, kind)))
        self.step = _elementwise(lambda a: ctx.mpf(1) if a > 0 else self.c(STEP_AT_KINK))

    @contextlib.contextmanager
    def strict(self):
        """While a spec runs: converting one of this context's numbers to a Python float (float(),
        math.*, np.float64) raises, instead of silently capping the precision at 16 digits; and spec
        code (not mpmath's own functions) comparing or branching on one is refused, as in every other
        interpreter (``core.language``)."""
        def to_float(v):
            refuse_float()

        def guard(old, refusal):
            def method(*args):
                if in_spec_code():
                    refusal()
                return old(*args)
            return method
        patches = {"__float__": lambda cls: to_float}
        for name in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__abs__"):
            patches[name] = lambda cls, name=name: guard(getattr(cls, name), refuse_comparison)
        patches["__bool__"] = lambda cls: guard(cls.__bool__, refuse_branch)
        saved = []
        for cls in (self.ctx.mpf, self.ctx.mpc):
            for name, make in patches.items():
                if name in ("__lt__", "__le__", "__gt__", "__ge__") and not hasattr(cls, name):
                    continue
                saved.append((cls, name, cls.__dict__.get(name)))
                setattr(cls, name, make(cls))
        try:
            yield self
        finally:
            for cls, name, old in reversed(saved):
                if old is None:
                    delattr(cls, name)
                else:
                    setattr(cls, name, old)

    @property
    def pi(self):
        """At the context's *current* precision (mpmath.diff raises it while it differentiates)."""
        return +self.ctx.pi

    def c(self, p, q=1):
        f = exact(p, q)
        return self.ctx.mpf(f.numerator) / f.denominator

    def convert(self, a):
        """Exact conversion of ints / Fractions / floats (binary64 values are exact in mpf)."""
        def one(v):
            if isinstance(v, Fraction):
                return self.ctx.mpf(v.numerator) / v.denominator
            return self.ctx.mpf(float(v)) if isinstance(v, np.floating) else self.ctx.mpf(v)
        out = np.empty(np.shape(a), dtype=object)
        flat = np.asarray(a, dtype=object)
        for idx in np.ndindex(*out.shape):
            out[idx] = one(flat[idx])
        return out


def _erf(a):
    from scipy import special      # when a spec asks: importing SciPy took 0.2 s of every command's start
    return special.erf(a)


class FloatBackend:
    """numpy float64 or float32. The float32 backend casts every constant, so the float32 baseline
    really runs in float32 (numpy would otherwise promote to float64 at the first float64 scalar).
    With ``shift=False``, ``max_shift`` is 0 as in the exact backends: the float path of the very
    function the tracer saw (``core.replay`` holds the two together)."""

    def __init__(self, dtype, shift: bool = True):
        self.dtype = np.dtype(dtype)
        self.name = self.dtype.name
        self.shift = shift
        t = self.dtype.type
        self.pi = t(np.pi)
        self.exp = self._checked(np.exp)
        self.log = self._checked(np.log)
        self.sqrt = self._checked(np.sqrt)
        self.erf = self._checked(_erf)
        self.tanh = self._checked(np.tanh)
        self.sin = self._checked(np.sin)
        self.cos = self._checked(np.cos)
        self.step = self._checked(lambda a: np.heaviside(a, float(STEP_AT_KINK)).astype(self.dtype))

    def _checked(self, fn):
        dtype = self.dtype

        def apply(a):
            a = np.asarray(a)
            if a.dtype != dtype:
                raise TypeError(f"{self.name} backend got a {a.dtype} array: a spec step left {self.name}")
            return fn(a)
        apply.__name__ = fn.__name__
        return apply

    def c(self, p, q=1):
        f = exact(p, q)
        return self.dtype.type(f.numerator / f.denominator)

    def zeros(self, shape):
        return np.zeros(shape, dtype=self.dtype)

    def max_shift(self, x, mask=None):
        """The row maximum (over the entries ``mask`` keeps), as a constant, for softmax-like specs to
        subtract before exp: exp(x - m) / sum exp(x - m) is the same number (the softmax law
        ``shift_invariance`` proves it) but does not overflow at large logits. Exact backends return
        0, so the proofs and the float references run the same spec code."""
        x = np.asarray(x)
        if not self.shift:
            return self.zeros(x.shape[:-1] + (1,))
        masked = x if mask is None else np.where(mask, x, -np.inf)
        m = masked.max(-1, keepdims=True) if x.shape[-1] else np.zeros(x.shape[:-1] + (1,), self.dtype)
        return np.where(np.isfinite(m), m, 0).astype(self.dtype)

    def array(self, values):
        return np.asarray(values, dtype=self.dtype)


F64 = FloatBackend(np.float64)
F32 = FloatBackend(np.float32)


def __getattr__(name):          # SYMPY is built on first use: importing SymPy costs half a second
    if name == "SYMPY":
        globals()["SYMPY"] = backend = SympyBackend()
        return backend
    raise AttributeError(name)
