"""What both kernel tiers (``cuda_kernels/``: Numba CUDA, ``triton_kernels/``: Triton) check the same way:
the float32 inputs of an input case, the spec's float64 / float32 references at them, and the laws
evaluated on a kernel's outputs. A kernel here is anything with the conventions of a kernel spec:
``name``, ``op``, ``kind`` ("forward" / "backward"), ``forward`` (a backward's forward kernel),
``laws`` and a ``launcher`` taking the spec's argument names as numpy arrays (inputs, non-differentiable
inputs, ``dy`` for a backward, the op's params) and returning numpy arrays.

The two checkers differ in what they run kernels on (the CUDA simulator or a GPU; Triton's
interpreter or a GPU) and in their tolerance (a per-kernel rounding-error model, or the model-free
rule of ``core/tolerance.py``); the law rule is the same: ``core.tolerance.law_bound``, and a law's
residual outside it is read against the law evaluated on outputs each within its any-order rounding
bound (``core/kernel_bounds.py``). A low-precision kernel (bfloat16, float16) gets its differentiable
inputs and dy in its dtype from the checkers, its non-differentiable ones as the spec reads them.
"""
from __future__ import annotations

import functools
import zlib

import numpy as np

from vjpcert.core import input_cases as _input_cases
from vjpcert.core import kernel_bounds as _bounds
from vjpcert.core import tolerance as _rule
from vjpcert.core.backends import F32, F64
from vjpcert.core.certificate import dims_slug
from vjpcert.core.low_precision import is_low, rounded, storage_dtype
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
#   activations         what a network's hidden states look like rather than a textbook draw: heavy tails
#                       (Student's t, ACTIVATION_TAIL_DOF degrees of freedom) and a few outlier channels
#                       (one in OUTLIER_EVERY of the last axis, at least one) ACTIVATION_OUTLIER_SCALE
#                       times the rest, as in large language models' residual streams: a kernel tuned to
#                       unit-variance normal rows (a fixed shift, a short accumulator) meets its real data
OFFSET_SWEEP = "offset_sweep"
HUGE_IN_LAST_BLOCK = "huge_in_last_block"
ACTIVATIONS = "activations"
KERNEL_CASES = (OFFSET_SWEEP, HUGE_IN_LAST_BLOCK, ACTIVATIONS)
ACTIVATION_TAIL_DOF = 3
OUTLIER_EVERY = 64
ACTIVATION_OUTLIER_SCALE = (20.0, 60.0)
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
    if case == ACTIVATIONS:
        z = rng.standard_t(ACTIVATION_TAIL_DOF, shape)
        if z.ndim:
            n = z.shape[-1]
            channels = rng.choice(n, max(1, n // OUTLIER_EVERY), replace=False)
            z[..., channels] *= rng.uniform(*ACTIVATION_OUTLIER_SCALE, size=channels.size)
        return z
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


def _impl(op: Op, spec_fn, run, record: list | None, dtype=np.float32, stored=None):
    """A function with ``spec_fn``'s signature (so laws bind it by argument name) that runs ``run``
    on ``dtype`` copies of the arrays and returns float64 results (the law's own arithmetic stays in
    float64, so its residual measures the implementation, not the law's rounding); ``stored``: a
    low-precision dtype its results are rounded to first (the float32 spec as a bfloat16 kernel's
    baseline)."""
    arrays = set(op.inputs) | set(op.nondiff) | {"dy"}

    @functools.wraps(spec_fn)
    def impl(B, **kw):
        # the differentiable inputs and dy in the implementation's dtype; non-differentiable ones (targets,
        # positions, masks) in float32, as the spec reads them
        a = {k: np.asarray(v, np.float64).astype(dtype if k in op.inputs or k == "dy" else np.float32)
             for k, v in kw.items() if k in arrays}
        p = {k: v for k, v in kw.items() if k in op.params}
        outs = tuple(np.asarray(o, np.float64) if stored is None else rounded(o, stored) for o in as_tuple(run(a, p)))
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
              params: dict | None = None, storage="float32", accumulate="float32") -> dict:
    """One runtime law on the kernel's outputs, against the same law on the float32 spec
    (``core.tolerance.law_bound``). ``kernels``: name -> kernel, where a backward kernel's forward is
    found; ``launch_checked`` wraps each run of the kernel (the simulator turns exceptions raised in
    simulated threads into the kernel's failure); ``params``: the op's params where they differ from
    its defaults (a law's own params still win); ``storage``: the kernel's storage dtype. Outside that
    rule, the entry says ``ill_conditioned`` (not ok, and not a failure) where the residual is within
    what outputs each within its any-order bound can give the law (``core.kernel_bounds``)."""
    fwd_spec = kernels.get(spec.forward) if spec.kind == "backward" else spec
    record: list = []
    held = storage_dtype(storage)
    k_fwd = _impl(op, op.forward, _kernel_run(fwd_spec) if fwd_spec else _spec_run(op, op.forward, F32), record,
                  held if fwd_spec else np.float32)
    k_bwd = _impl(op, op.vjp, _kernel_run(spec) if spec.kind == "backward" else _spec_run(op, op.vjp, F32), record,
                  held if spec.kind == "backward" else np.float32)
    # the baseline: the same law on the float32 spec's outputs (rounded to a low-precision kernel's dtype)
    low = held if is_low(held) else None
    s_fwd = _impl(op, op.forward, _spec_run(op, op.forward, F32), None, stored=low)
    s_bwd = _impl(op, op.vjp, _spec_run(op, op.vjp, F32), None, stored=low)
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
    b = _rule.law_bound(spec.kind == "backward", baseline, scale, held)
    entry = {"residual": residual, "float32_spec_residual": baseline, "bound": b, "scale": scale,
             "params": {k: str(v) for k, v in law.params.items()}, "ok": bool(residual <= b)}
    if not np.isfinite(residual):
        entry["ok"] = False
    if not entry["ok"]:
        idx = int(np.nanargmax(np.where(np.isfinite(res_k), res_k, np.inf)))
        entry["component"] = [int(i) for i in np.unravel_index(idx, res_k.shape)] if res_k.ndim else []
        entry["lhs"], entry["rhs"] = float(lhs.flat[idx]), float(rhs.flat[idx])
        if np.isfinite(residual):
            allowance = _law_any_order(op, law, inputs, dy, params, storage, accumulate)
            if allowance is not None:
                factor = _bounds.K_REFORMULATION[spec.kind]
                allowance = np.broadcast_to(allowance, res_k.shape)
                entry["law_bound_any_order"] = _bounds._finite(allowance.flat[idx])
                if np.all(res_k <= factor * allowance + _rule.ABSOLUTE_FLOOR):
                    entry["ill_conditioned"] = {
                        "law_bound_any_order": entry["law_bound_any_order"], "factor": factor,
                        "explanation": "the residual is within what outputs each within its any-order rounding "
                                       "bound can give this law: rounding, at these inputs, may explain it"}
    return entry


def _values64(v):
    """float64 values of an array of Rounded numbers (or of a plain array)."""
    a = np.array(v, dtype=object if isinstance(v, np.ndarray) and v.dtype == object else None, subok=False)
    if a.dtype != object:
        return a
    return np.array([float(getattr(r, "v", r)) for r in a.ravel()], np.float64).reshape(a.shape)


def _law_any_order(op: Op, law, inputs: dict, dy, params: dict | None, storage, accumulate):
    """Per law component: |residual| + its bound, for the law evaluated in float64 on the spec's outputs
    each carrying its any-order bound (``core.kernel_bounds.bounded``); None where the analysis does
    not follow the spec."""
    from vjpcert.core.any_order import AnyOrderBackend
    from vjpcert.core.rounding import Rounded, values_and_bounds
    arrays = set(op.inputs) | set(op.nondiff) | {"dy"}
    if not _bounds.analysable(inputs, dy):
        return None

    def bounded_fn(kind, spec_fn):
        @functools.wraps(spec_fn)
        def impl(B, **kw):
            a = {k: np.asarray(_values64(v), np.float64) for k, v in kw.items() if k in arrays}
            # a param the law passes on is the exact value it was given (an int, a Fraction), or the
            # number made of one here from the law's exact params
            p = {k: exact_params[k] if isinstance(v, Rounded) else v for k, v in kw.items() if k in op.params}
            outs, _ = _bounds.bounded(op, kind, {k: v for k, v in a.items() if k != "dy"}, a.get("dy"),
                                      {**(params or {}), **p} or None, storage, accumulate)
            return outs if len(outs) > 1 or kind == "backward" else outs[0]
        return impl
    B64 = AnyOrderBackend(np.float64)
    exact_params = {k: law.params.get(k, (params or {}).get(k, p.default)) for k, p in op.params.items()}
    values = {k: B64.input(v) for k, v in _law_values(op, law, inputs, dy, params).items() if k not in op.params}
    values.update({k: B64.c(v) if op.params[k].symbolic else v for k, v in exact_params.items()})
    try:
        with np.errstate(all="ignore"):
            out = _twin(op, bounded_fn("forward", op.forward), bounded_fn("backward", op.vjp)).bind(law.fn, B64, values)
            lhs, rhs = out if isinstance(out, tuple) else (out, 0)
            res = np.asarray(np.asarray(lhs, dtype=object) - np.asarray(rhs, dtype=object), dtype=object)
            v, e = values_and_bounds(res)
    except Exception:           # a construct the running error analysis does not follow: no allowance
        return None
    return np.abs(v) + e


def law_objects(op: Op, spec) -> list:
    return [op.get_law(law) if isinstance(law, str) else law for law in spec.laws]
