"""What both kernel tiers (``cuda_kernels/``: Numba CUDA, ``triton_kernels/``: Triton) check the same way:
the float32 inputs of an input case, the spec's float64 / float32 references at them, and the laws
evaluated on a kernel's outputs. A kernel here is anything with the conventions of a kernel spec:
``name``, ``op``, ``kind`` ("forward" / "backward"), ``forward`` (a backward's forward kernel),
``laws`` and a ``launcher`` taking the spec's argument names as numpy arrays (inputs, non-differentiable
inputs, ``dy`` for a backward, the op's params) and returning numpy arrays.

The two checkers differ in what they run kernels on (the CUDA simulator or a GPU; Triton's
interpreter or a GPU) and in their tolerance (a per-kernel rounding-error model, or the model-free
rule of ``core/tolerance.py``); the law rule is the same: ``core.tolerance.law_bound``.
"""
from __future__ import annotations

import functools
import zlib

import numpy as np

from vjpcert.core import input_cases as _input_cases
from vjpcert.core import tolerance as _rule
from vjpcert.core.backends import F32, F64
from vjpcert.core.certificate import dims_slug
from vjpcert.core.registry import Op, SpecError

FIRST_CASE = "random"           # the case run twice for determinism (and under the race detector)

# Input cases only the kernel tiers draw: what a kernel's blocking and reductions get wrong, and a
# spec's own numeric checks have no reason to sample.
#   offset_sweep        each row (the first axis) offset by +-10^e standard deviations, the exponents
#                       stratified over OFFSET_DECADES: a draw's rows span |mean| / std from 0.3 to
#                       300 (three rows or more: one in every decade slice), the regime between the
#                       near-constant and large-offset cases where a one-pass variance or an unshifted
#                       exponential starts to lose digits, which no single-offset case samples
#   huge_in_last_block  standard normal, with HUGE_VALUE added to the last entry of every row (the last axis):
#                       in a row's last, partial block, where a reduction over full blocks only (a row
#                       maximum that skips the tail) misses it, and exp(HUGE_VALUE - max) overflows
OFFSET_SWEEP = "offset_sweep"
HUGE_IN_LAST_BLOCK = "huge_in_last_block"
KERNEL_CASES = (OFFSET_SWEEP, HUGE_IN_LAST_BLOCK)
OFFSET_DECADES = (-0.5, 2.5)
HUGE_VALUE = 100.0              # float32's exp overflows past 88.7
WITNESS_INPUTS_MAX = 256        # store the inputs themselves in a witness up to this many entries


def base_name(op: Op) -> str:
    return getattr(op, "base_name", op.name)


def _rng(seed: int, *labels) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(str(l).encode()) for l in labels)])


def sample_inputs(op: Op, dims: dict, seed: int, with_dy: bool, case: str = FIRST_CASE):
    """float32 inputs (differentiable: the input case, as in the numeric tier; others: the spec's
    sampler or standard normal) and, for a backward, a float32 standard-normal cotangent (signed,
    never constant)."""
    known = (*_input_cases.ALL_CASES, *KERNEL_CASES)
    if case not in known:
        raise SpecError(op.name, f"unknown input case {case!r}; cases: {', '.join(known)}")
    rng = _rng(seed, base_name(op), dims_slug(dims), case)
    inputs = {}
    for name, decl in op.inputs.items():
        shape = op.shape(decl, dims)
        v = op.sample[name](rng, shape) if name in op.sample else kernel_case_values(case, rng, shape)
        inputs[name] = np.asarray(v).astype(np.float32)
    for name, decl in op.nondiff.items():
        shape = op.shape(decl, dims)
        v = op.sample[name](rng, shape) if name in op.sample else rng.standard_normal(shape)
        inputs[name] = np.asarray(v).astype(np.float32)
    dy = rng.standard_normal(op.shape(op.output, dims)).astype(np.float32) if with_dy else None
    return inputs, dy


class InputWritten(Exception):
    """A launcher changed an array it was handed: ``witness`` says which, where and how."""

    def __init__(self, witness: dict):
        self.witness = witness
        super().__init__(str(witness))


def handed(args: dict) -> dict:
    """What a launcher is given: copies of the checker's arrays, so that it cannot reach them (and
    whatever it writes into them is seen by ``no_input_written``)."""
    return {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in args.items()}


def no_input_written(given: dict, copies: dict) -> None:
    """Raise InputWritten where a launcher changed an array it was handed (a bit of it, a NaN's payload
    included): a caller's input or gradient would be corrupted."""
    for name, original in given.items():
        after = copies[name]
        if not isinstance(original, np.ndarray):
            continue
        if not isinstance(after, np.ndarray) or after.shape != original.shape or after.dtype != original.dtype:
            raise InputWritten({"input": name, "explanation": "the launcher replaced the array's shape or dtype"})
        if not original.size:
            continue
        changed = bits_differ(original, after)
        if changed.any():
            idx = [int(i) for i in np.argwhere(changed)[0]] if changed.ndim else []
            raise InputWritten({"input": name, "index": idx, "before": finite_or_text(original[tuple(idx)]),
                                "after": finite_or_text(after[tuple(idx)]), "changed": int(changed.sum()),
                                "of": int(changed.size),
                                "explanation": "the launcher wrote into an array it was handed: a caller's "
                                               "input (or its gradient) would be corrupted"})


def bits_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per entry of two arrays of one shape and dtype: whether any bit differs."""
    def per_entry(x):
        return np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, -1)
    return (per_entry(a) != per_entry(b)).any(axis=1).reshape(a.shape)


def finite_or_text(v) -> float | str:
    v = float(v)
    return v if np.isfinite(v) else str(v)


def kernel_case_values(case: str, rng: np.random.Generator, shape) -> np.ndarray:
    """float64 values of an input case: the shared ones of ``core/input_cases.py``, or a kernel case."""
    if case not in KERNEL_CASES:
        return _input_cases.case_values(case, rng, shape)
    z = rng.standard_normal(shape)
    if z.ndim == 0:
        return z
    if case == OFFSET_SWEEP:
        # stratified: row i's exponent in the i-th of k equal slices of the decades, rows shuffled, so
        # k rows always cover the sweep (three rows: one offset in each of [0.3, 3], [3, 30], [30, 300])
        k = z.shape[0]
        lo, hi = OFFSET_DECADES
        exponents = lo + (hi - lo) * (rng.permutation(k) + rng.uniform(size=k)) / k
        offsets = rng.choice([-1.0, 1.0], k) * 10.0 ** exponents
        return z + offsets.reshape((k,) + (1,) * (z.ndim - 1))
    z[..., -1] += HUGE_VALUE          # HUGE_VALUE + a normal draw: no two rows tie by construction
    return z


def launcher_params(op: Op, overrides: dict | None = None) -> dict:
    """The op's params as a launcher takes them: floats for symbolic ones (eps), else as declared."""
    out = {}
    for name, p in op.params.items():
        v = (overrides or {}).get(name, p.default)
        out[name] = float(v) if p.symbolic else v
    return out


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def reference(op: Op, kind: str, inputs: dict, dy, dtype, params: dict | None = None) -> tuple:
    """The spec at these inputs on the numpy backend of ``dtype`` (float64 reference, float32 baseline),
    at the op's default params or at ``params`` (exact values, e.g. Fractions)."""
    from vjpcert.core.reference import forward, vjp
    arrays = {k: np.asarray(v, dtype) for k, v in inputs.items()}
    if params:
        return _reference_at(op, kind, arrays, dy, dtype, params)
    if kind == "forward":
        return (np.asarray(forward(op, dtype, **arrays)),)
    return tuple(np.asarray(c) for c in vjp(op, np.asarray(dy, dtype), dtype, **arrays))


def _reference_at(op: Op, kind, arrays, dy, dtype, params):
    B = F64 if np.dtype(dtype) == np.float64 else F32
    values = dict(arrays)
    for name, p in op.params.items():
        v = params.get(name, p.default)
        values[name] = B.c(v) if p.symbolic else v
    with np.errstate(all="ignore"):
        if kind == "forward":
            return (np.asarray(op.bind(op.forward, B, values)),)
        return tuple(np.asarray(c) for c in as_tuple(op.bind(op.vjp, B, {**values, "dy": np.asarray(dy, dtype)})))


def rounding_bounds(op: Op, kind: str, inputs: dict, dy, params: dict | None = None) -> tuple:
    """Per output, per element: the running error bound of the spec evaluated in float32 in its own
    order (``core.rounding``: every rounding of that evaluation, first order, proved), at these
    inputs. What a float32 evaluation of the formula may be off by; far above the float32 spec's
    actual error where the inputs are ill-conditioned (a mean of values near 1000, a cancellation)."""
    from vjpcert.core.rounding import RoundingBackend, values_and_bounds
    R = RoundingBackend(np.float32)
    values = {k: R.input(v) for k, v in inputs.items()}
    for name, p in op.params.items():
        v = (params or {}).get(name, p.default)
        values[name] = R.c(v) if p.symbolic else v
    with np.errstate(all="ignore"):
        if kind == "forward":
            outs = (op.bind(op.forward, R, values),)
        else:
            outs = as_tuple(op.bind(op.vjp, R, {**values, "dy": R.input(dy)}))
    return tuple(values_and_bounds(o)[1] for o in outs)


def small_inputs(inputs: dict, dy) -> dict | None:
    total = sum(v.size for v in inputs.values()) + (dy.size if dy is not None else 0)
    if total > WITNESS_INPUTS_MAX:
        return None
    out = {k: v.tolist() for k, v in inputs.items()}
    if dy is not None:
        out["dy"] = dy.tolist()
    return out


# ------------------------------------------------------------------------------ laws
def _twin(op: Op, forward_fn, backward_fn) -> Op:
    twin = object.__new__(type(op))
    twin.__dict__.update(op.__dict__)
    twin.forward, twin.vjp = forward_fn, backward_fn
    return twin


def _impl(op: Op, spec_fn, run, record: list | None):
    """A function with ``spec_fn``'s signature (so laws bind it by argument name) that runs ``run``
    on float32 copies of the arrays and returns float64 results (the law's own arithmetic stays in
    float64, so its residual measures the implementation, not the law's rounding)."""
    arrays = set(op.inputs) | set(op.nondiff) | {"dy"}

    @functools.wraps(spec_fn)
    def impl(B, **kw):
        a = {k: np.asarray(v, np.float32) for k, v in kw.items() if k in arrays}
        p = {k: v for k, v in kw.items() if k in op.params}
        outs = tuple(np.asarray(o, np.float64) for o in as_tuple(run(a, p)))
        if record is not None:
            record.extend(outs)
        return outs if len(outs) > 1 or spec_fn is op.vjp else outs[0]
    return impl


def _kernel_run(spec):
    def run(a, p):
        args = {k: v for k, v in a.items()}
        params = {k: (float(v) if not isinstance(v, (bool, int, np.integer)) else int(v)) for k, v in p.items()}
        return spec.launcher(**args, **params)
    return run


def _spec_run(op: Op, fn, B):
    def run(a, p):
        params = {k: (B.dtype.type(v) if op.params[k].symbolic else v) for k, v in p.items()}
        return op.bind(fn, B, {**{k: np.asarray(v, B.dtype) for k, v in a.items()}, **params})
    return run


def _law_values(op: Op, law, inputs: dict, dy, params: dict | None = None) -> dict:
    values = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    if dy is not None:
        values["dy"] = np.asarray(dy, np.float64)
    for name, p in op.params.items():
        v = law.params.get(name, (params or {}).get(name, p.default))
        values[name] = F64.c(v) if p.symbolic else v
    return values


def _law_residual(op_twin: Op, law, values: dict):
    out = op_twin.bind(law.fn, F64, values)
    lhs, rhs = out if isinstance(out, tuple) else (out, np.zeros_like(np.asarray(out, np.float64)))
    lhs, rhs = np.broadcast_arrays(np.asarray(lhs, np.float64), np.asarray(rhs, np.float64))
    res = np.abs(lhs - rhs)
    return res, lhs, rhs


def _run_plain(fn):
    return fn()


def check_law(op: Op, spec, law, inputs: dict, dy, kernels: dict, *, launch_checked=_run_plain,
              params: dict | None = None) -> dict:
    """One runtime law on the kernel's outputs, against the same law on the float32 spec
    (``core.tolerance.law_bound``). ``kernels``: name -> kernel, where a backward kernel's forward is
    found; ``launch_checked`` wraps each run of the kernel (the simulator turns exceptions raised in
    simulated threads into the kernel's failure); ``params``: the op's params where they differ from
    its defaults (a law's own params still win)."""
    fwd_spec = kernels.get(spec.forward) if spec.kind == "backward" else spec
    record: list = []
    k_fwd = _impl(op, op.forward, _kernel_run(fwd_spec) if fwd_spec else _spec_run(op, op.forward, F32), record)
    k_bwd = _impl(op, op.vjp, _kernel_run(spec) if spec.kind == "backward" else _spec_run(op, op.vjp, F32), record)
    s_fwd = _impl(op, op.forward, _spec_run(op, op.forward, F32), None)
    s_bwd = _impl(op, op.vjp, _spec_run(op, op.vjp, F32), None)
    if dy is None and law.needs_dy:
        raise SpecError(op.name, f"law {law.name} needs dy; attach it to a backward kernel")
    values = _law_values(op, law, inputs, dy, params)
    # Where the law itself is not defined at these inputs (LayerNorm's eps = 0 law on a row of one
    # element: zero variance, 1/0), the float64 spec gives no finite value either: skip, and say so.
    spec64 = _twin(op, _impl(op, op.forward, _spec_run(op, op.forward, F64), None),
                   _impl(op, op.vjp, _spec_run(op, op.vjp, F64), None))
    with np.errstate(all="ignore"):
        _, lhs64, rhs64 = _law_residual(spec64, law, values)
    if not (np.all(np.isfinite(lhs64)) and np.all(np.isfinite(rhs64))):
        return {"ok": True, "skipped": "the law is not finite for the float64 spec at these inputs",
                "params": {k: str(v) for k, v in law.params.items()}}
    res_k, lhs, rhs = launch_checked(lambda: _law_residual(_twin(op, k_fwd, k_bwd), law, values))
    with np.errstate(all="ignore"):
        res_s, _, _ = _law_residual(_twin(op, s_fwd, s_bwd), law, values)
    per_component = max(1, int(np.ceil(sum(r.size for r in record) / max(1, lhs.size))))
    mag = max((float(np.max(np.abs(r))) for r in record if r.size), default=0.0)
    scale = max(float(np.max(np.abs(lhs), initial=0)), float(np.max(np.abs(rhs), initial=0)), mag * per_component)
    residual = float(np.max(res_k, initial=0))
    baseline = float(np.max(res_s, initial=0))
    b = _rule.law_bound(spec.kind == "backward", baseline, scale, np.float32)
    entry = {"residual": residual, "float32_spec_residual": baseline, "bound": b, "scale": scale,
             "params": {k: str(v) for k, v in law.params.items()}, "ok": bool(residual <= b)}
    if not np.isfinite(residual):
        entry["ok"] = False
    if not entry["ok"]:
        idx = int(np.nanargmax(np.where(np.isfinite(res_k), res_k, np.inf)))
        entry["component"] = [int(i) for i in np.unravel_index(idx, res_k.shape)] if res_k.ndim else []
        entry["lhs"], entry["rhs"] = float(lhs.flat[idx]), float(rhs.flat[idx])
    return entry


def law_objects(op: Op, spec) -> list:
    return [op.get_law(law) if isinstance(law, str) else law for law in spec.laws]
