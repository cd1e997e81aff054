"""The paths a JAX function takes at other dtypes and on other backends, so that none hides.

``jax.make_jaxpr`` records the one path the function takes for abstract arrays of one dtype. A
function that dispatches on ``x.dtype`` (a ``custom_vjp`` below float64, plain ``jnp`` code for
float64) would be proved for a path training never takes. As for PyTorch (``torch_paths``): by
default the jaxpr proved is float64's (64-bit floats on), and the function is traced at float32,
bfloat16 and float16 too (64-bit floats off, as JAX runs by default); each jaxpr must be the float64
one modulo casts (``canonical``: nested jaxprs inlined, ``convert_element_type`` between floats and
identities skipped, literals and constants compared rounded to the lower dtype, dtypes as their
kind, a product's ``precision`` ignored), else the function is refused, naming the dtype to pass.

The backend: a jaxpr is traced on abstract arrays, but the code may ask ``jax.default_backend()``
(or ``jax.devices()``) which path to take. ``BackendProbe`` records those reads by the function's own
code (frames outside JAX and this package); ``default_backend()`` is answered "gpu" in a second
trace, which must give the same jaxpr; a read of ``jax.devices()`` / ``jax.local_devices()`` cannot
be answered as on a GPU, and is refused. JAX's own lowering by backend is not seen ("traced on cpu").
"""
from __future__ import annotations

import math
import re
import sys
import threading
from pathlib import Path

import numpy as np

from vjpcert.frontends.jax_graph import CALLS, _is_drop, _is_float, _is_literal, trace
from vjpcert.frontends.eager import HELD
from vjpcert.frontends.precision import DEFAULT, checked_paths, commuted, round_to, term, who

FRONTEND_DIR = str(Path(__file__).resolve().parent)
_LOCK = threading.RLock()
_DTYPE_NAMES = re.compile(r"\b(float64|float32|bfloat16|float16|f64|f32|bf16|f16)\b")
_IDENTITIES = {"copy", "copy_p", "stop_gradient", "optimization_barrier", "reduce_precision"}
# how a product is rounded and accumulated (bfloat16 inputs accumulate in float32), not what it is
_ROUNDING = {"precision"}


# ------------------------------------------------------------------------------ jaxprs modulo casts
def canonical(g, at: str) -> tuple:
    """The joint jaxpr as the terms its outputs compute (``precision.term``), nested calls inlined,
    casts between floats and identities skipped, constants rounded to ``at``: (outputs, terms)."""
    terms: dict = {}

    def walk(jaxpr, consts, ins):
        env = {}
        for v, c in zip(jaxpr.constvars, consts):
            env[id(v)] = term(("const", _value(c, at)))
        for v, r in zip(jaxpr.invars, ins):
            env[id(v)] = r

        def read(v):
            return term(("literal", _value(v.val, at))) if _is_literal(v) else env[id(v)]
        for e in jaxpr.eqns:
            args = tuple(read(v) for v in e.invars)
            name = e.primitive.name
            sub = e.params.get(CALLS[name]) if name in CALLS else None
            if sub is not None:
                closed = sub() if callable(sub) and not hasattr(sub, "jaxpr") else sub
                inner, inner_consts = (closed.jaxpr, closed.consts) if hasattr(closed, "consts") else (closed, [])
                outs = walk(inner, list(inner_consts), args[len(args) - len(inner.invars):])
            elif name in _IDENTITIES or (name == "convert_element_type" and _is_float(np.dtype(e.params["new_dtype"]))
                                         and _is_float(np.dtype(e.invars[0].aval.dtype))):
                outs = [args[0]] * len(e.outvars)
            else:
                params = tuple(sorted((k, _param(v, at)) for k, v in e.params.items() if k not in _ROUNDING))
                node = term((name, commuted(name, args, ()), params), terms, name)
                outs = [term((node, i)) if e.primitive.multiple_results else node for i in range(len(e.outvars))]
            for o, r in zip(e.outvars, outs):
                if not _is_drop(o):
                    env[id(o)] = r
        return [read(o) for o in jaxpr.outvars]
    closed = g.closed
    ins = [term(("in", i)) for i in range(len(closed.jaxpr.invars))]
    return tuple(walk(closed.jaxpr, list(closed.consts), ins)), terms


def _value(val, at: str):
    arr = np.asarray(val)
    if _is_float(arr.dtype):
        flat = tuple(round_to(float(x), at) if math.isfinite(float(x)) else repr(float(x)) for x in arr.ravel())
        return ("float", arr.shape, flat)
    return (_kind_of(arr.dtype), arr.shape, tuple(arr.ravel().tolist()))


def _kind_of(dt) -> str:
    """A dtype as its kind: the int width follows the 64-bit flag as the float width does."""
    return "float" if _is_float(dt) else "bool" if dt == bool else "int" if dt.kind in "iu" else dt.name


def _param(v, at: str):
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return ("dtype", _kind_of(np.dtype(v)))
    if isinstance(v, (list, tuple)):
        return tuple(_param(x, at) for x in v)
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return ("float", round_to(v, at) if math.isfinite(v) else repr(v))
    if callable(v) and not hasattr(v, "jaxpr"):
        return ("function",)              # a rule's thunk: what it computes is in the jaxpr already
    return (type(v).__name__, _DTYPE_NAMES.sub("float", str(v)))


# ------------------------------------------------------------------------------ the backend
class BackendProbe:
    """While active: records each call of ``jax.default_backend()``, ``jax.devices()`` or
    ``jax.local_devices()`` from the function's own code and, ``as_gpu``, answers the first "gpu"."""

    def __init__(self, as_gpu: bool = False):
        self.as_gpu = as_gpu
        self.reads: list[str] = []
        self.fixed: list[str] = []          # reads that cannot be answered as on a GPU
        self._saved: list = []

    def _read(self, what: str, real, gpu, fixed: bool):
        frame = sys._getframe(2)
        file = frame.f_code.co_filename
        if not any(file.startswith(d) for d in (*_JAX_DIRS, FRONTEND_DIR)):
            where = f"{what} at {Path(file).name}:{frame.f_lineno}"
            if where not in self.reads:
                self.reads.append(where)
            if fixed and what not in self.fixed:
                self.fixed.append(what)
            if self.as_gpu and not fixed:
                return gpu
        return real()

    def __enter__(self):
        import jax            # optional and slow to import: only a JAX trace enters the probe
        _LOCK.acquire()
        if not _JAX_DIRS:
            _JAX_DIRS.extend(str(Path(m.__file__).resolve().parent) for m in _jax_modules())
        probe = self
        try:
            for name, gpu, fixed in (("default_backend", "gpu", False), ("devices", None, True),
                                     ("local_devices", None, True)):
                real = getattr(jax, name)
                self._saved.append((name, real))
                setattr(jax, name, _wrap(probe, f"jax.{name}()", real, gpu, fixed))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        import jax
        try:
            for name, real in reversed(self._saved):
                setattr(jax, name, real)
            self._saved.clear()
        finally:
            _LOCK.release()
        return False


def _wrap(probe, what, real, gpu, fixed):
    def asked(*args, **kwargs):
        return probe._read(what, lambda: real(*args, **kwargs), gpu, fixed)
    return asked


def _jax_modules():
    import jax
    out = [jax]
    try:
        import jaxlib
        out.append(jaxlib)
    except ImportError:
        pass
    return out


_JAX_DIRS: list[str] = []


# ------------------------------------------------------------------------------ the checked trace
def trace_checked(fn, shapes, n_diff, params, *, constants: str, op_name: str, dtype: str | None,
                  compare: bool = True):
    """The jaxpr proved: traced at ``dtype`` (float64 when None), refused if the function's jaxpr at
    another dtype (when none is given) or with the backend answered "gpu" differs."""
    def one(d, as_gpu):
        probe = BackendProbe(as_gpu)
        g = trace(fn, shapes, n_diff, params, constants=constants, op_name=op_name, dtype=d, probe=probe)
        if compare and not as_gpu:
            # the jaxpr is what JAX runs on real arrays, at every dtype traced
            g.against_eager(strict=d == (dtype or DEFAULT))
            g.eager = getattr(g, "eager", None) or HELD
        return g, probe.reads, probe.fixed
    return checked_paths(one, canonical, dtype=dtype, op_name=op_name, name=who(fn, op_name), fork=False,
                         compare=compare)

