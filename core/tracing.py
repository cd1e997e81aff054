"""Running spec code under the tracer (``core.trace``): the leaves of a claim's point, the forward,
the backward and the laws as object arrays of nodes, with every problem turned into one clear
``SpecError`` naming the spec's file and line (a wrong output shape, a Python float, ``math.*``,
``np.exp`` on backend values, a data-dependent branch, a write into an input). ``core.validate`` runs
an op through it once before any checker does; the provers trace their claims with it.
"""
from __future__ import annotations

import contextlib
import os
import threading
import traceback
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vjpcert.core.errors import SpecError, take_refusals
from vjpcert.core.language import INPUT_WRITE, KINK
from vjpcert.core.reads import MACHINERY, PACKAGE
from vjpcert.core.trace import TRACE, Leaf, Node, TraceBackend, leaf_array

if TYPE_CHECKING:
    from vjpcert.core.registry import Op

_UFUNC_HINT = " (a numpy function such as np.exp was applied to traced values: use B.exp, B.sqrt, ...)"


def _as_array(value, what: str, op: Op) -> np.ndarray:
    if isinstance(value, Node):
        return np.array(value, dtype=object)
    if not isinstance(value, np.ndarray):
        raise SpecError(op.name, f"{what} returned a {type(value).__name__}, not an array")
    return value.astype(object)


# vjpcert's machinery (every floor but the specs) and numpy: never the user's line
_MACHINERY = tuple(str(PACKAGE / m) for m in sorted(MACHINERY)) + (str(Path(np.__file__).resolve().parent),)


def spec_location(tb, skip: tuple[str, ...] = ()) -> str:
    """``file:line`` of the innermost frame of a traceback (or an extracted stack) that is the spec's
    own code (not vjpcert's machinery, not numpy, not the folders in ``skip``), or "" when there is none."""
    where = ""
    frames = tb if isinstance(tb, list) else traceback.extract_tb(tb)
    for frame in frames:
        path = str(Path(frame.filename).resolve()) if not frame.filename.startswith("<") else ""
        if path and not path.startswith(_MACHINERY + tuple(skip)):
            try:
                shown = os.path.relpath(path)
            except ValueError:
                shown = path
            where = f"{shown if not shown.startswith('..') else path}:{frame.lineno}"
    return where


_recorder = threading.local()


@contextlib.contextmanager
def recording():
    """Inside: every traced call is appended, as (fn, role, values, out), to the list this yields
    (``core.replay`` runs them again in the other interpreters)."""
    outer = getattr(_recorder, "calls", None)
    _recorder.calls = calls = []
    try:
        yield calls
    finally:
        _recorder.calls = outer


def _call(op: Op, fn, role: str, values: dict, backend=TRACE):
    """Run spec code under the tracer (recorded inside ``recording``)."""
    out = run_spec_code(op, role, lambda: op.bind(fn, backend, values))
    calls = getattr(_recorder, "calls", None)
    if calls is not None:
        calls.append((fn, role, dict(values), out))
    return out


def run_spec_code(op: Op, role: str, call, passthrough: tuple = ()):
    """``call()``, which runs spec code in one interpreter. Anything it cannot follow is bad input, named
    with the spec's file and line -- also when the spec caught the refusal and carried on
    (``core.registry.refuse``). Exceptions in ``passthrough`` are the interpreter's own signals
    (the modular tier's pole, its request for another prime) and go up as they are."""
    take_refusals()
    try:
        out = call()
    except passthrough:
        take_refusals()
        raise
    except SpecError as exc:
        take_refusals()
        where = spec_location(exc.__traceback__)
        raise SpecError(op.name, f"{role}: {where + ': ' if where else ''}{exc.problem}") from None
    except Exception as exc:
        take_refusals()
        where = spec_location(exc.__traceback__)
        if isinstance(exc, ValueError) and "read-only" in str(exc):
            raise SpecError(op.name, f"{role}: {where + ': ' if where else ''}{INPUT_WRITE}") from None
        msg = f"{role}: {where + ': ' if where else ''}raised {type(exc).__name__}: {exc}"
        if "ufunc" in str(exc) or "callable" in str(exc):
            msg += _UFUNC_HINT
        raise SpecError(op.name, msg) from None
    swallowed = take_refusals()
    if swallowed:
        problem, stack = swallowed[0]
        where = spec_location(stack)
        raise SpecError(op.name, f"{role}: {where + ': ' if where else ''}{problem} (the spec caught "
                                 f"this and carried on; a checker cannot follow that path faithfully)")
    return out


def primal_values(op: Op, dims: dict, param_overrides=None) -> dict:
    """Leaves for every input, non-differentiable input and symbolic parameter."""
    values = {}
    for name, shape in op.inputs.items():
        values[name] = leaf_array(op.shape(shape, dims), name, "input")
    for name, shape in op.nondiff.items():
        values[name] = leaf_array(op.shape(shape, dims), name, "nondiff")
    for name, p in op.params.items():
        if p.symbolic:
            values[name] = Node("leaf", (), Leaf(name, "param", name, (), p.positive))
        else:
            values[name] = p.default
    for name, v in (param_overrides or {}).items():
        if name not in op.params:
            raise SpecError(op.name, f"law overrides unknown param {name!r}")
        values[name] = Node.lift(Fraction(v)) if op.params[name].symbolic else v
    return values


def trace_forward(op: Op, values: dict, dims: dict, backend=TRACE) -> np.ndarray:
    y = _as_array(_call(op, op.forward, "forward", values, backend), "the forward", op)
    want = op.shape(op.output, dims)
    if y.shape != want:
        raise SpecError(op.name, f"the forward returned shape {y.shape}, but the op declares output "
                                 f"{op.output} = {want} at dims {dims}")
    return y


def trace_vjp(op: Op, values: dict, dy: np.ndarray, dims: dict, backend=TRACE) -> list[np.ndarray]:
    if op.vjp is None:
        raise SpecError(op.name, "has no backward: register one with @<op>.defvjp")
    cots = _call(op, op.vjp, "backward", {**values, "dy": dy}, backend)
    names = list(op.inputs)
    if not isinstance(cots, (tuple, list)):
        raise SpecError(op.name, f"the backward returned a {type(cots).__name__}; it must return a tuple "
                                 f"of {len(names)} cotangent(s), one per differentiable input {names}")
    if len(cots) != len(names):
        raise SpecError(op.name, f"the backward returned {len(cots)} cotangent(s), expected {len(names)} "
                                 f"(one per differentiable input {names})")
    out = []
    for name, cot in zip(names, cots):
        cot = _as_array(cot, f"the backward's cotangent for {name}", op)
        if cot.shape != values[name].shape:
            raise SpecError(op.name, f"the backward's cotangent for {name} has shape {cot.shape}, but "
                                     f"{name} has shape {values[name].shape}")
        out.append(cot)
    return out



def trace_law(op: Op, law_name: str, values: dict, y: np.ndarray):
    """(lhs, rhs) object arrays of a law, broadcast to one shape."""
    law = op.get_law(law_name)
    if law.needs_dy:
        values = {**values, "dy": leaf_array(y.shape, "dy", "dy")}
    out = _call(op, law.fn, f"law {law.name}", values)
    if isinstance(out, tuple):
        if len(out) != 2:
            raise SpecError(op.name, f"law {law.name} returned a tuple of {len(out)}; return an array "
                                     f"that must be 0, or a pair (lhs, rhs) that must be equal")
        lhs, rhs = (_as_array(v, f"law {law.name}", op) for v in out)
    else:
        lhs = _as_array(out, f"law {law.name}", op)
        rhs = np.zeros(lhs.shape, dtype=object)
    try:
        lhs, rhs = np.broadcast_arrays(lhs, rhs)
    except ValueError:
        raise SpecError(op.name, f"law {law.name}: its two sides have shapes {lhs.shape} and "
                                 f"{rhs.shape}") from None
    if lhs.size == 0:
        raise SpecError(op.name, f"law {law.name} returned an empty array (an empty slice?): it states "
                                 f"nothing, so proving it would say nothing")
    return np.array(lhs, dtype=object), np.array(rhs, dtype=object)


def trace_shift_free(op: Op, dims: dict):
    """The claim ``max_shift_free`` as (lhs, rhs): the forward and every cotangent with a free shift
    per row (``TraceBackend(free_shift=True)``) against the same with shift 0, flattened into one
    vector each. It holds iff nothing the op computes depends on ``B.max_shift``."""
    values = primal_values(op, dims)
    free = TraceBackend(free_shift=True)
    y1 = trace_forward(op, values, dims, free)
    y0 = trace_forward(op, values, dims)
    dy = leaf_array(y0.shape, "dy", "dy")
    c1 = trace_vjp(op, values, dy, dims, free)
    c0 = trace_vjp(op, values, dy, dims)
    lhs = np.concatenate([np.ravel(a) for a in [y1, *c1]]).astype(object)
    rhs = np.concatenate([np.ravel(a) for a in [y0, *c0]]).astype(object)
    return lhs, rhs


def uses_max_shift(op: Op, dims: dict | None = None) -> bool:
    """Whether the op's own forward or backward calls ``B.max_shift`` (its nodes' calls are theirs)."""
    return spec_features(op, dims)[0]


def spec_features(op: Op, dims: dict | None = None) -> tuple[bool, bool]:
    """(max_shift, kinks): whether the op's own forward or backward calls ``B.max_shift`` (its nodes'
    calls are theirs), and whether they meet a kink (``B.step`` of a value that is not a constant)."""
    d = op.resolve_dims(dims or op.dims[0])
    values = primal_values(op, d)
    free = TraceBackend(free_shift=True)
    y = trace_forward(op, values, d, free)
    roots = [np.asarray(y, dtype=object)]
    if op.vjp is not None:
        roots += [np.asarray(c, dtype=object) for c in trace_vjp(op, values, leaf_array(y.shape, "dy", "dy"), d, free)]
    seen: set[int] = set()
    stack = [n for r in roots for n in r.ravel().tolist() if isinstance(n, Node)]
    kinks = False
    while stack and not kinks:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        kinks = n.op == KINK
        stack.extend(a for a in n.args if isinstance(a, Node))
    return bool(free.shifts), kinks
