"""One traced jaxpr of the JAX frontend: the primitive rules (``RULES``: each JAX primitive a jaxpr
may hold, with its exact mathematical meaning over the evaluator's values, ``vjpcert.frontends.values``),
the evaluation of a jaxpr's equations over a backend ``B`` (``run_jaxpr``, nested jaxprs recursively),
and ``trace``: ``jax.make_jaxpr`` of ``(f(x...), vjp_f(dy))`` at one dtype as a ``JaxGraph``. One trace
at one dtype: ``vjpcert.frontends.jax_paths`` compares them.

JAX is optional (``pip install -e '.[jax]'``); nothing here imports it until a jaxpr is traced.
"""
from __future__ import annotations

import contextlib
import os
from fractions import Fraction
from typing import Callable, Mapping

import numpy as np

from vjpcert.core.registry import SpecError
from vjpcert.frontends.precision import DTYPES
from vjpcert.frontends.constants import DEFAULT_CONSTANTS, Constants
from vjpcert.frontends import jax_cnn  # noqa: F401  (registers the rules of convolutional networks)
from vjpcert.frontends.jax_rules import RULES, rule
from vjpcert.frontends.values import Context, Val, as_array


def _jax():
    # JAX is an optional extra, and slow to import: it is loaded when a JAX op is made or traced
    try:
        import jax
    except ImportError:
        raise SpecError(None, "the JAX frontend needs JAX: pip install -e '.[jax]'") from None
    return jax


def _x64(jax, on: bool = True):
    """64-bit floats on (a float64 trace) or off (a lower precision's: JAX's default, which training
    runs in) for the trace only (``jax.enable_x64`` since 0.4.31; before, experimental)."""
    enable = getattr(jax, "enable_x64", None)
    if enable is None:
        from jax.experimental import enable_x64, disable_x64
        return enable_x64() if on else disable_x64()
    return enable(on)


def jax_version() -> str:
    return _jax().__version__


# ------------------------------------------------------------------------------------ primitive rules
# the table is ``jax_rules``'; this module and ``jax_cnn`` (convolutional networks) fill it


def _is_float(dt) -> bool:
    """numpy's floats and JAX's own (bfloat16 is an ml_dtypes type numpy does not call a float)."""
    return dt.kind == "f" or dt.name in DTYPES


def _kind(dtype) -> str:
    dt = np.dtype(dtype)
    if dt == bool:
        return "bool"
    if dt.kind in "iu":
        return "int"
    if _is_float(dt):
        return "float"
    raise SpecError(None, f"dtype {dt} is not supported")


@rule("add", "add_any")
def _add(c, x, y, **_):
    return c.binary("+", x, y)


@rule("sub")
def _sub(c, x, y, **_):
    return c.binary("-", x, y)


@rule("mul")
def _mul(c, x, y, **_):
    return c.binary("*", x, y)


@rule("div")
def _div(c, x, y, **_):
    if x.static and y.static and x.kind == "int" and y.kind == "int":      # integer division truncates
        q = np.vectorize(lambda a, b: int(Fraction(int(a), int(b))) if b else 0, otypes=[np.int64])(x.a, y.a)
        return Val(q, True)
    return c.binary("/", x, y)


@rule("neg")
def _neg(c, x, **_):
    return c.neg(x)


for _name in ("exp", "log", "sqrt", "rsqrt", "erf", "tanh", "sin", "cos", "expm1", "log1p"):
    rule(_name)(lambda c, x, _k=_name, **_: c.unary(_k, x))
rule("logistic")(lambda c, x, **_: c.unary("sigmoid", x))


@rule("erfc")
def _erfc(c, x, **_):
    return c.binary("-", 1, c.unary("erf", x))


@rule("exp2")
def _exp2(c, x, **_):
    return c.unary("exp", c.binary("*", x, Val(as_array(c.B.log(c.B.c(2))), False)))


@rule("integer_pow")
def _integer_pow(c, x, y, **_):
    return c.power(x, int(y))


@rule("square")
def _square(c, x, **_):
    return c.power(x, 2)


@rule("pow")
def _pow(c, x, y, **_):
    return c.power(x, y)


@rule("max")
def _max(c, x, y, **_):
    """max(-inf, v) = v for real v (jax.nn.softmax guards its row maximum so); any other maximum of
    two values compares them."""
    for a, b in ((x, y), (y, x)):
        if a.static and a.a.shape == () and a.neginf is not None:
            return c.structural(b, lambda v: np.broadcast_to(v, np.broadcast_shapes(a.shape, b.shape)))
    if x.static and y.static:
        return c.where(c.compare("ge", x, y), x, y)
    for a, b in ((x, y), (y, x)):
        if b.static:
            return _clipped(c, a, b)
    return c.tie_split(x, y)          # lax.max's JVP: the balanced split


@rule("min")
def _min(c, x, y, **_):
    """min(x, y) = -max(-x, -y)."""
    return c.neg(_max(c, c.neg(x), c.neg(y)))


def _clipped(c, x, bound):
    """max(x, bound) for a constant bound, as relu: bound + (x - bound) step(x - bound). The traced side
    passes its gradient where it is strictly above the bound -- relu'(0) = 0, the convention
    jax.nn.relu and relu6 state with their custom JVPs; lax.max's own JVP gives it half on the tie, so
    jnp.maximum(x, 0.) is held to relu's convention and fails on the kink, with the half as witness."""
    d = c.binary("-", x, bound)
    return c.binary("+", bound, c.binary("*", d, c.unary("step", d)))


@rule("reduce_sum")
def _reduce_sum(c, x, axes, **_):
    return c.reduce_sum(x, tuple(int(a) for a in axes), False)


@rule("reduce_max")
def _reduce_max(c, x, axes, **_):
    return c.max_site(x, tuple(int(a) for a in axes), False)


@rule("reduce_and")
def _reduce_and(c, x, axes, **_):
    return c.any_all("all", x, tuple(int(a) for a in axes), False)


@rule("reduce_or")
def _reduce_or(c, x, axes, **_):
    return c.any_all("any", x, tuple(int(a) for a in axes), False)


for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    rule(_cmp)(lambda c, x, y, _k=_cmp, **_: c.compare(_k, x, y))
for _lg in ("and", "or", "xor"):
    rule(_lg)(lambda c, x, y, _k=_lg, **_: c.logical(_k, x, y))
rule("not")(lambda c, x, **_: c.logical("not", x))


@rule("is_finite")
def _is_finite(c, x, **_):
    return Val(~x.mask(), True)


@rule("select_n")
def _select_n(c, which, *cases):
    """cases[which]: a static predicate (bool: False -> cases[0]) or static index."""
    if len(cases) == 1:
        return cases[0]
    if not which.static and which.indicator and len(cases) == 2:      # a comparison: a kink (B.step)
        return c.where(which, cases[1], cases[0])
    if not which.static:
        c.refuse("select_n picks entries by a traced value that is no comparison")
    if len(cases) == 2:
        return c.where(c.convert(which, "bool"), cases[1], cases[0])
    out = cases[0]
    idx = c.convert(which, "int")
    for k, case in enumerate(cases[1:], start=1):
        out = c.where(Val(np.asarray(idx.a == k), True), case, out)
    return out


@rule("convert_element_type")
def _convert(c, x, new_dtype, **_):
    if not x.static:
        c.casts.add(f"-> {np.dtype(new_dtype).name}")
    return c.convert(x, _kind(new_dtype))


@rule("copy", "copy_p", "stop_gradient", "optimization_barrier", "reduce_precision")
def _identity(c, x, *rest, **_):
    return x


@rule("broadcast_in_dim")
def _broadcast_in_dim(c, x, shape, broadcast_dimensions, **_):
    shape = tuple(int(s) for s in shape)

    def fn(a):
        inter = [1] * len(shape)
        for i, d in enumerate(broadcast_dimensions):
            inter[int(d)] = a.shape[i]
        return np.broadcast_to(a.reshape(inter), shape)
    return c.structural(x, fn)


@rule("reshape")
def _reshape(c, x, new_sizes, dimensions=None, **_):
    if dimensions is not None:
        x = c.structural(x, lambda a: np.transpose(a, tuple(dimensions)))
    return c.structural(x, lambda a: a.reshape(tuple(int(s) for s in new_sizes)))


@rule("transpose")
def _transpose(c, x, permutation, **_):
    return c.structural(x, lambda a: np.transpose(a, tuple(int(p) for p in permutation)))


@rule("squeeze")
def _squeeze(c, x, dimensions, **_):
    return c.structural(x, lambda a: np.squeeze(a, axis=tuple(int(d) for d in dimensions)) if dimensions else a)


@rule("expand_dims")
def _expand_dims(c, x, dimensions, **_):
    return c.structural(x, lambda a: np.expand_dims(a, tuple(int(d) for d in dimensions)))


@rule("rev")
def _rev(c, x, dimensions, **_):
    return c.structural(x, lambda a: np.flip(a, axis=tuple(int(d) for d in dimensions)))


@rule("concatenate")
def _concatenate(c, *xs, dimension, **_):
    return c.concat(list(xs), int(dimension))


@rule("slice")
def _slice(c, x, start_indices, limit_indices, strides=None, **_):
    idx = tuple(slice(int(s), int(e), int(st) if strides else 1)
                for s, e, st in zip(start_indices, limit_indices, strides or [1] * len(start_indices)))
    return c.structural(x, lambda a: a[idx])


@rule("split")
def _split(c, x, sizes, axis, **_):
    out, start = [], 0
    for s in sizes:
        idx = [slice(None)] * x.a.ndim
        idx[int(axis)] = slice(start, start + int(s))
        out.append(c.structural(x, lambda a, idx=tuple(idx): a[idx]))
        start += int(s)
    return out


@rule("iota")
def _iota(c, dtype, shape, dimension, **_):
    shape = tuple(int(s) for s in shape)
    a = np.broadcast_to(np.arange(shape[int(dimension)], dtype=np.int64).reshape(
        [-1 if i == int(dimension) else 1 for i in range(len(shape))]), shape).copy()
    return c.convert(Val(a, True), _kind(dtype))


@rule("cumsum")
def _cumsum(c, x, axis, reverse=False, **_):
    if x.neginf is not None:
        c.refuse("a cumulative sum over -inf entries")
    a = c._static_exact(x) if x.static else x.a
    if reverse:
        a = np.flip(a, int(axis))
    out = np.cumsum(a, axis=int(axis))
    if reverse:
        out = np.flip(out, int(axis))
    return Val(np.asarray(out), x.static)


@rule("dot_general")
def _dot_general(c, x, y, dimension_numbers, **_):
    """Batch dims first, then x's free dims, then y's (JAX's order), as one batched matmul."""
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (tuple(int(i) for i in t) for t in (lc, rc, lb, rb))
    lf = [i for i in range(x.a.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(y.a.ndim) if i not in rc and i not in rb]
    bshape = tuple(x.shape[i] for i in lb)
    lfs, rfs = tuple(x.shape[i] for i in lf), tuple(y.shape[i] for i in rf)
    k = int(np.prod([x.shape[i] for i in lc])) if lc else 1
    a = c.structural(x, lambda v: np.transpose(v, (*lb, *lf, *lc)).reshape(
        bshape + (int(np.prod(lfs)) if lfs else 1, k)))
    b = c.structural(y, lambda v: np.transpose(v, (*rb, *rc, *rf)).reshape(
        bshape + (k, int(np.prod(rfs)) if rfs else 1)))
    out = c.matmul(a, b)
    return c.structural(out, lambda v: v.reshape(bshape + lfs + rfs))


CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
         "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
         "remat": "jaxpr", "checkpoint": "jaxpr"}
MAX_SITES = {"reduce_max"}
HINTS = {
    "abs": "abs has a kink at 0 (a comparison of input values)",
    "sign": "sign compares input values",
    "clamp": "clamp compares input values (kinks)",
    "argmax": "argmax compares input values",
    "sort": "sorting compares input values",
}


# ------------------------------------------------------------------------------------ evaluation
def _static_from_numpy(c: Context, value) -> Val:
    """A constant of a jaxpr (a literal or a captured array) as an exact static value."""
    arr = np.asarray(value)
    if arr.dtype == bool:
        return Val(arr.copy(), True)
    if arr.dtype.kind in "iu":
        return Val(arr.astype(np.int64), True)
    if not _is_float(arr.dtype):
        raise SpecError(c.op_name, f"a constant of dtype {arr.dtype} is not supported")
    own = arr.dtype.name if arr.dtype.name in DTYPES else None      # printed at its own precision
    if arr.shape == ():
        return c.scalar(float(arr), own)
    parts = [c.scalar(float(v), own) for v in arr.ravel()]
    if any(not p.static for p in parts):          # named constants inside an array: over B
        return Val(c._array_of([c.lift(p).item() if np.ndim(c.lift(p)) == 0 else c.lift(p) for p in parts],
                               arr.shape), False)
    a = np.array([p.a.item() for p in parts], dtype=object).reshape(arr.shape)
    neginf = np.array([p.neginf is not None for p in parts]).reshape(arr.shape)
    nan = np.array([p.nan is not None for p in parts]).reshape(arr.shape)
    return Val(a, True, neginf, nan)


def _is_literal(v) -> bool:
    return type(v).__name__ == "Literal"


def _is_drop(v) -> bool:
    return type(v).__name__ == "DropVar"


def _needed_eqns(jaxpr, wanted) -> set:
    """ids of the equations the wanted outvars depend on."""
    need_vars = {id(v) for v in wanted if not _is_literal(v)}
    keep = set()
    for i in range(len(jaxpr.eqns) - 1, -1, -1):
        e = jaxpr.eqns[i]
        if any(id(o) in need_vars for o in e.outvars):
            keep.add(i)
            need_vars |= {id(v) for v in e.invars if not _is_literal(v)}
    return keep


def run_jaxpr(c: Context, jaxpr, consts, args, wanted=None) -> list:
    """The outvars of a jaxpr (those flagged in ``wanted``) from its constvars and invars."""
    env = {}
    for v, val in zip(jaxpr.constvars, consts):
        env[id(v)] = val if isinstance(val, Val) else _static_from_numpy(c, val)
    for v, val in zip(jaxpr.invars, args):
        env[id(v)] = val
    outs = [o for o, w in zip(jaxpr.outvars, wanted or [True] * len(jaxpr.outvars)) if w]
    keep = _needed_eqns(jaxpr, outs)

    def read(v):
        return _static_from_numpy(c, v.val) if _is_literal(v) else env[id(v)]
    for i, e in enumerate(jaxpr.eqns):
        if i not in keep:
            continue
        try:
            _run_eqn(c, e, read, env)
        except SpecError as exc:
            where = "" if getattr(exc, "located", False) else _user_line(e)
            if not where:
                raise
            located = SpecError(exc.op, f"{where}: {exc.problem}")
            located.located = True
            raise located from None
    c.at = "output"
    return [read(o) for o in outs]


def _user_line(eqn) -> str:
    """The user's ``file:line`` an equation comes from (JAX records the Python stack of each), or ""."""
    import traceback

    from vjpcert.core.tracing import spec_location
    try:
        from jax._src import source_info_util
        frames = list(source_info_util.user_frames(eqn.source_info.traceback))
    except Exception:        # noqa: BLE001  (JAX's private API moved: no line, the refusal stands)
        return ""
    return spec_location([traceback.FrameSummary(f.file_name, f.start_line, f.function_name)
                          for f in reversed(frames)])


def _run_eqn(c: Context, e, read, env) -> None:
    """One equation of a jaxpr: its outputs into ``env``."""
    name = e.primitive.name
    c.at = name
    ins = [read(v) for v in e.invars]
    if name == "scan":
        outs_val = _scan(c, e, ins)
    elif name in CALLS:
        sub = e.params.get(CALLS[name])
        if sub is None:
            c.refuse(f"{name} without its jaxpr")
        closed = sub() if callable(sub) and not hasattr(sub, "jaxpr") else sub
        inner, inner_consts = (closed.jaxpr, closed.consts) if hasattr(closed, "consts") else (closed, [])
        n_in = len(inner.invars)
        sub_wanted = [not _is_drop(o) for o in e.outvars]
        res = run_jaxpr(c, inner, list(inner_consts), ins[len(ins) - n_in:], sub_wanted)
        it = iter(res)
        outs_val = [next(it) if w else None for w in sub_wanted]
    else:
        fn = RULES.get(name)
        if fn is None:
            hint = HINTS.get(name)
            c.refuse(f"the JAX primitive {name!r} has no exact rule" + (f" ({hint})" if hint else ""))
        res = fn(c, *ins, **{k: v for k, v in e.params.items()})
        outs_val = res if e.primitive.multiple_results else [res]
    for o, val in zip(e.outvars, outs_val):
        if not _is_drop(o):
            env[id(o)] = val


def _scan(c: Context, e, ins) -> list:
    """lax.scan, unrolled at its static length: the body jaxpr run at each step on the consts, the carry
    and the step's slice of each sequence (from the last step first where ``reverse``), its ys stacked
    at their step. The transposed scan of a VJP is one more scan, run the same way."""
    p = e.params
    closed = p["jaxpr"]
    body, body_consts = (closed.jaxpr, closed.consts) if hasattr(closed, "consts") else (closed, [])
    n_consts, n_carry, T = p["num_consts"], p["num_carry"], int(p["length"])
    if T < 1:
        c.refuse("a scan of length 0")
    consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    ys = [None] * T
    for t in (reversed(range(T)) if p["reverse"] else range(T)):
        x_t = [_squeeze(c, _slice(c, x, (t, *[0] * (len(x.shape) - 1)), (t + 1, *x.shape[1:])), (0,))
               for x in xs]
        res = run_jaxpr(c, body, list(body_consts), [*consts, *carry, *x_t])
        carry, ys[t] = res[:n_carry], res[n_carry:]
    stacked = [_concatenate(c, *[_expand_dims(c, y[j], (0,)) for y in ys], dimension=0)
               for j in range(len(ys[0]))]
    return [*carry, *stacked]


class JaxGraph:
    """One traced joint jaxpr: outvars[0] is the forward, the rest the cotangents."""

    def __init__(self, closed, output_shape, constants: str, op_name: str, dtype: str = "float64"):
        self.closed = closed
        self.op_name = op_name
        self.dtype = dtype              # what it was traced at (jax_paths adds what it was compared with)
        self.explicit, self.compared, self.device_reads = False, (), ()
        self.output_shape = tuple(int(s) for s in output_shape)
        self.constants_mode = constants
        self.code = str(closed)
        self.n_out = len(closed.jaxpr.outvars)
        probe = self._dry_run()
        self.max_sites = probe.sites
        self.readings = dict(probe.constants.readings)
        self.rounded = set(probe.constants.rounded)
        self.casts = set(probe.casts)
        self.decomposed = []

    def _dry_run(self) -> Context:
        """Evaluate once in float64 on zeros: refusals surface when the op is made, and the graph's
        constants, casts and row maxima are counted."""
        from vjpcert.core.backends import F64     # the backends load SciPy and mpmath: a traced graph needs them
        c = Context(F64, Constants(self.constants_mode, self.dtype), self.op_name)
        args = [Val(np.zeros(v.aval.shape), False) for v in self.closed.jaxpr.invars]
        run_jaxpr(c, self.closed.jaxpr, list(self.closed.consts), args)
        return c

    def evaluate(self, B, arrays, part: str) -> list[np.ndarray]:
        c = Context(B, Constants(self.constants_mode, self.dtype), self.op_name)
        jaxpr = self.closed.jaxpr
        args = [Val(as_array(a), False) for a in arrays]
        if part == "forward":
            args.append(Val(np.zeros(jaxpr.invars[-1].aval.shape), True))
            wanted = [True] + [False] * (self.n_out - 1)
        elif part == "backward":
            wanted = [False] + [True] * (self.n_out - 1)
        else:
            wanted = [True] * self.n_out
        outs = run_jaxpr(c, jaxpr, list(self.closed.consts), args, wanted)
        return [c.output(v) for v in outs]


def _describe_error(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if "Concretization" in type(exc).__name__ or "TracerBool" in type(exc).__name__ or "concrete" in str(exc).lower():
        text += " (the function branches on, or reads, input values: its jaxpr would hold at one point only)"
    return text[:400]


def trace(fn: Callable, shapes: list, n_diff: int, params: Mapping, *, constants: str = DEFAULT_CONSTANTS,
          op_name: str = "?", dtype: str = "float64", probe=None) -> JaxGraph:
    """Trace ``fn(*diff, *nondiff, **params)`` and its VJP at these shapes and ``dtype`` (64-bit floats
    on for float64, off, as JAX runs by default, below); ``probe`` (``jax_paths.BackendProbe``)
    watches the code's reads of the backend. One trace: ``jax_paths.trace_checked`` compares."""
    jax = _jax()
    import jax.numpy as jnp
    params = dict(params)
    jdt = getattr(jnp, dtype)

    def call(*xs):
        return fn(*xs, **params)

    with _x64(jax, dtype == "float64"), probe if probe is not None else contextlib.nullcontext():
        structs = [jax.ShapeDtypeStruct(tuple(s), jdt) for s in shapes]
        try:
            out = jax.eval_shape(call, *structs)
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"calling the function on arrays of shapes {shapes} raised "
                                     f"{_describe_error(exc)}") from None
        if not hasattr(out, "shape") or isinstance(out, (tuple, list, dict)):
            raise SpecError(op_name, f"the function returned a {type(out).__name__}; it must return one array")

        def joint(*args):
            diff, rest, dy = args[:n_diff], args[n_diff:-1], args[-1]
            y, vjp = jax.vjp(lambda *d: call(*d, *rest), *diff)
            return (y, *vjp(dy))
        try:
            closed = jax.make_jaxpr(joint)(*structs, jax.ShapeDtypeStruct(tuple(out.shape), out.dtype))
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"tracing with jax.make_jaxpr failed: {_describe_error(exc)}") from None
        graph = JaxGraph(closed, out.shape, constants, op_name, dtype)
        graph.against_eager = lambda strict=True: _against_eager(jax, graph, closed, joint, call, shapes, n_diff,
                                                                 tuple(out.shape), jdt, dtype, op_name, strict)
        return graph


_FORKED: list = []          # set in a forked child: its XLA, if any, is its parent's, threads and locks
os.register_at_fork(after_in_child=lambda: _FORKED.append(True))


def _against_eager(jax, graph, closed, joint, call, shapes, n_diff, out_shape, jdt, dtype, op_name, strict) -> None:
    """The jaxpr evaluated on real arrays against JAX's own run of the same ``jax.vjp``, op by op, not
    under a tracer (``frontends.eager``; JAX arrays have no memory layout of their own to vary)."""
    import jax.numpy as jnp

    from vjpcert.frontends.eager import check_against_eager

    def arrays(outs):
        return [np.asarray(o, dtype=np.float64) for o in outs]

    def graph_run(inputs, dy):
        return arrays(jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *(jnp.asarray(x, dtype=jdt) for x in inputs),
                                          jnp.asarray(dy, dtype=jdt)))

    def eager_run(inputs, dy, layout):
        try:
            with jax.disable_jit():
                return arrays(joint(*(jnp.asarray(x, dtype=jdt) for x in inputs), jnp.asarray(dy, dtype=jdt)))
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"calling the function on arrays of shapes {shapes} raised "
                                     f"{_describe_error(exc)}") from None
    def forward_run(inputs):
        try:
            with jax.disable_jit():
                return arrays([call(*(jnp.asarray(x, dtype=jdt) for x in inputs))])
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"calling the function on arrays of shapes {shapes} raised "
                                     f"{_describe_error(exc)}") from None

    def check():
        try:
            with _x64(jax, dtype == "float64"):
                check_against_eager(op_name, shapes, n_diff, out_shape, float(jnp.finfo(jdt).eps), graph_run,
                                    eager_run, forward_run=forward_run, strict=strict)
        except SpecError as exc:
            return exc.problem
        return None
    # in a forked child while this process has not started XLA: running arrays starts its threads, and
    # JAX deadlocks in a child forked from a threaded parent (the prover forks each strategy, and a
    # strategy may trace). A process that has started them already runs it itself: a child of it would
    # deadlock on the check.
    from jax._src.xla_bridge import backends_are_initialized

    from vjpcert.core.budget import run_with_budget
    if backends_are_initialized() and _FORKED:
        # a child of a process that ran JAX: running arrays here deadlocks (JAX's own warning at the fork);
        # the certificate says the graph was not held to the eager run (the command line traces each
        # graph in a process of its own first, where the check runs)
        graph.eager = EAGER_SKIPPED
        return
    if backends_are_initialized():
        problem = check()
        if problem:
            raise SpecError(op_name, problem)
        return
    out = run_with_budget(check, EAGER_BUDGET_S, memory_mb=None)
    if out.status != "ok":
        if not strict:
            return                   # a dtype the function is only compared at: nothing computed to compare
        raise SpecError(op_name, f"running the function on real arrays, against the graph traced from it, "
                                 f"did not finish ({(out.error or out.status).strip().splitlines()[0][:300]})")
    if out.value:
        raise SpecError(op_name, out.value)


EAGER_BUDGET_S = 120.0
EAGER_SKIPPED = ("not held to JAX's own run on real arrays: it was traced in a process forked from one that "
                 "had run JAX, where running arrays deadlocks")
