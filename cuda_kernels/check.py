"""The kernel tier: does each CUDA kernel compute its op's spec within a justified float32 bound?

For one (op, kernel claim, dims): sample signed random float32 inputs (seeded, recorded), evaluate
the spec in float64 (the reference) and in float32 (the baseline) at those same inputs, and run the
kernel twice with every output poisoned with NaN before each launch. In the simulator the first run
is under the shared-memory race detector. Then, in order, each of these can fail the claim:
  1. the kernel raised (an out-of-bounds index in the simulator) or the race detector fired,
  2. NaN poison: an output element the kernel never wrote (or wrote as NaN/Inf) where the spec is finite,
  3. determinism: the two runs differ in any bit,
  4. tolerance: the rule in ``cuda_kernels.tolerances`` for every output,
  5. laws: each runtime law of the kernel (registry), evaluated in float64 on the kernel's outputs,
     against the same law on the float32 spec's outputs.
Verdicts: ``kernel-match``, ``failed`` (evidence["witness"] says which check, where, by how much),
``inconclusive`` (no CUDA to run on).

This module imports from ``specs`` only (never from ``symbolic``, ``numeric`` or ``vjpcert``).
"""
from __future__ import annotations

import functools
import time
import zlib
from pathlib import Path

import numpy as np

from vjpcert.cuda_kernels import env
from vjpcert.cuda_kernels import tolerances as tol
from vjpcert.core.backends import F32, F64
from vjpcert.core.certificate import Certificate, checker_code_sha256, dims_slug, versions
from vjpcert.core.registry import Op, SpecError

CHECKER_SHA256 = checker_code_sha256(Path(__file__).parent)
WITNESS_INPUTS_MAX = 256        # store the inputs themselves in a witness up to this many entries


def detect_mode() -> str:
    """"gpu" | "simulator" | "none" (compile-only processes cannot run kernels: "none")."""
    mode = env.detect_mode()
    return mode if mode in ("gpu", "simulator") else "none"


def _registry():
    from vjpcert.cuda_kernels.registry import DIMS, KERNELS
    return KERNELS, DIMS




def _op(op) -> Op:
    from vjpcert.specs import resolve_op
    return resolve_op(op)


def _base_name(op: Op) -> str:
    return getattr(op, "base_name", op.name)


def kernel_claims(op) -> list[str]:
    """Claim names of the kernels implementing ``op`` (an Op or a name); [] if it has none."""
    name = _base_name(_op(op))
    kernels, _ = _registry()
    return [k.claim for k in kernels.values() if k.op == name]


def kernel_dims(op, mode: str | None = None) -> list[dict]:
    """Sizes at which the kernels of ``op`` are checked in ``mode`` (default: this process's)."""
    name = _base_name(_op(op))
    mode = mode or detect_mode()
    _, dims = _registry()
    table = dims["gpu" if mode == "gpu" else "simulator"]
    return [dict(d) for d in table.get(name, [])]


# ------------------------------------------------------------------------------ inputs
def _rng(seed: int, *labels) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(str(l).encode()) for l in labels)])


def sample_inputs(op: Op, dims: dict, seed: int, with_dy: bool):
    """float32 inputs (differentiable: standard normal; others: the spec's sampler or standard
    normal) and, for a backward, a float32 standard-normal cotangent (signed, never constant)."""
    rng = _rng(seed, _base_name(op), dims_slug(dims))
    inputs = {}
    for name, decl in op.inputs.items():
        inputs[name] = rng.standard_normal(op.shape(decl, dims)).astype(np.float32)
    for name, decl in op.nondiff.items():
        shape = op.shape(decl, dims)
        v = op.sample[name](rng, shape) if name in op.sample else rng.standard_normal(shape)
        inputs[name] = np.asarray(v).astype(np.float32)
    dy = rng.standard_normal(op.shape(op.output, dims)).astype(np.float32) if with_dy else None
    return inputs, dy


def _launcher_params(op: Op, overrides: dict | None = None) -> dict:
    """The op's params as a launcher takes them: floats for symbolic ones (eps), else as declared."""
    out = {}
    for name, p in op.params.items():
        v = (overrides or {}).get(name, p.default)
        out[name] = float(v) if p.symbolic else v
    return out


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def reference(op: Op, kind: str, inputs: dict, dy, dtype) -> tuple:
    """The spec at these inputs on the numpy backend of ``dtype`` (float64 reference, float32 baseline)."""
    from vjpcert.core.reference import forward, vjp
    arrays = {k: np.asarray(v, dtype) for k, v in inputs.items()}
    if kind == "forward":
        return (np.asarray(forward(op, dtype, **arrays)),)
    return tuple(np.asarray(c) for c in vjp(op, np.asarray(dy, dtype), dtype, **arrays))


def run_kernel(spec, op: Op, inputs: dict, dy, params: dict) -> tuple:
    args = dict(inputs)
    if spec.kind == "backward":
        args["dy"] = dy
    return tuple(np.asarray(o) for o in _as_tuple(spec.launcher(**args, **params)))


class KernelRaised(Exception):
    pass


def _launch_checked(fn):
    """Run fn; an exception raised *inside* simulated kernel threads (the simulator names the thread:
    'tid=[..] ctaid=[..]') is the kernel's failure, anything else is the checker's."""
    try:
        return fn()
    except Exception as exc:
        if "tid=" in str(exc) and "ctaid=" in str(exc):
            raise KernelRaised(f"{type(exc).__name__}: {exc}") from exc
        raise


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
        outs = tuple(np.asarray(o, np.float64) for o in _as_tuple(run(a, p)))
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


def _spec32_run(op: Op, fn):
    return _spec_run(op, fn, F32)


def _law_values(op: Op, law, inputs: dict, dy) -> dict:
    values = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    if dy is not None:
        values["dy"] = np.asarray(dy, np.float64)
    for name, p in op.params.items():
        v = law.params.get(name, p.default)
        values[name] = F64.c(v) if p.symbolic else v
    return values


def _law_residual(op_twin: Op, law, values: dict):
    out = op_twin.bind(law.fn, F64, values)
    lhs, rhs = out if isinstance(out, tuple) else (out, np.zeros_like(np.asarray(out, np.float64)))
    lhs, rhs = np.broadcast_arrays(np.asarray(lhs, np.float64), np.asarray(rhs, np.float64))
    res = np.abs(lhs - rhs)
    return res, lhs, rhs


def check_law(op: Op, spec, law, inputs: dict, dy, kernels: dict) -> dict:
    """One runtime law on the kernel's outputs, against the same law on the float32 spec."""
    fwd_spec = kernels.get(spec.forward) if spec.kind == "backward" else spec
    record: list = []
    k_fwd = _impl(op, op.forward, _kernel_run(fwd_spec) if fwd_spec else _spec32_run(op, op.forward), record)
    k_bwd = _impl(op, op.vjp, _kernel_run(spec) if spec.kind == "backward" else _spec32_run(op, op.vjp), record)
    s_fwd = _impl(op, op.forward, _spec32_run(op, op.forward), None)
    s_bwd = _impl(op, op.vjp, _spec32_run(op, op.vjp), None)
    if dy is None and law.needs_dy:
        raise SpecError(op.name, f"law {law.name} needs dy; attach it to a backward kernel")
    values = _law_values(op, law, inputs, dy)
    # Where the law itself is not defined at these inputs (LayerNorm's eps = 0 law on a row of one
    # element: zero variance, 1/0), the float64 spec gives no finite value either: skip, and say so.
    spec64 = _twin(op, _impl(op, op.forward, _spec_run(op, op.forward, F64), None),
                   _impl(op, op.vjp, _spec_run(op, op.vjp, F64), None))
    with np.errstate(all="ignore"):
        _, lhs64, rhs64 = _law_residual(spec64, law, values)
    if not (np.all(np.isfinite(lhs64)) and np.all(np.isfinite(rhs64))):
        return {"ok": True, "skipped": "the law is not finite for the float64 spec at these inputs",
                "params": {k: str(v) for k, v in law.params.items()}}
    res_k, lhs, rhs = _launch_checked(lambda: _law_residual(_twin(op, k_fwd, k_bwd), law, values))
    with np.errstate(all="ignore"):
        res_s, _, _ = _law_residual(_twin(op, s_fwd, s_bwd), law, values)
    per_component = max(1, int(np.ceil(sum(r.size for r in record) / max(1, lhs.size))))
    mag = max((float(np.max(np.abs(r))) for r in record if r.size), default=0.0)
    scale = max(float(np.max(np.abs(lhs), initial=0)), float(np.max(np.abs(rhs), initial=0)), mag * per_component)
    residual = float(np.max(res_k, initial=0))
    baseline = float(np.max(res_s, initial=0))
    b = tol.law_bound(spec.kind, baseline, scale)
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
    out = []
    for law in spec.laws:
        out.append(op.get_law(law) if isinstance(law, str) else law)
    return out


# ------------------------------------------------------------------------------ the claim
def _small_inputs(inputs: dict, dy) -> dict | None:
    total = sum(v.size for v in inputs.values()) + (dy.size if dy is not None else 0)
    if total > WITNESS_INPUTS_MAX:
        return None
    out = {k: v.tolist() for k, v in inputs.items()}
    if dy is not None:
        out["dy"] = dy.tolist()
    return out


def check_kernel_claim(op, claim: str, dims: dict, *, seed: int = 0, kernel=None) -> Certificate:
    """Check one kernel claim ("kernel:<name>") of ``op`` at ``dims``. ``kernel`` substitutes a
    KernelSpec for the registry's (the negative controls use it); the verdict is the same either way."""
    start = time.perf_counter()
    op = _op(op)
    kernels, _ = _registry()
    spec = kernel if kernel is not None else kernels.get(claim.removeprefix("kernel:"))
    if spec is None or spec.op != _base_name(op):
        raise SpecError(op.name, f"has no kernel claim {claim!r}; it has {kernel_claims(op)}")
    dims = op.resolve_dims(dims)
    mode = detect_mode()
    params = _launcher_params(op)
    from vjpcert.cuda_kernels.common import config
    cfg = config() if mode != "none" else None
    evidence: dict = {"mode": mode, "kernel": spec.name, "kind": spec.kind, "tolerance_rule": tol.RULE_IN_WORDS,
                      "k": tol.k_for(spec.kind), "seed": seed, "inputs": tol.INPUT_DISTRIBUTION,
                      "launch_config": cfg.__dict__ if cfg else None}

    def certificate(verdict):
        return Certificate(op=_base_name(op), claim=claim, tier="kernel", verdict=verdict,
                           method=f"numba-cuda-{mode}", dims=dims,
                           assumptions=[f"{n} = {v}" for n, v in params.items()]
                           + [f"inputs: {tol.INPUT_DISTRIBUTION}, seed {seed}",
                              f"tolerance: {tol.RULE_IN_WORDS}"],
                           evidence=evidence, seconds=time.perf_counter() - start,
                           spec_sha256=op.spec_sha256, checker_sha256=CHECKER_SHA256,
                           versions={**versions(), **env.versions()})

    def failed(check: str, **witness):
        evidence["witness"] = {"check": check, **witness, "seed": seed, "dims": dims}
        small = _small_inputs(inputs, dy)
        if small is not None:
            evidence["witness"]["inputs"] = small
        return certificate("failed")

    inputs, dy = {}, None
    if mode == "none":
        evidence["reason"] = ("no CUDA to run kernels on: numba-cuda is missing, or numba.cuda was "
                              "imported without a GPU before the simulator could be selected")
        return certificate("inconclusive")

    inputs, dy = sample_inputs(op, dims, seed, spec.kind == "backward")
    ref64 = reference(op, spec.kind, inputs, dy, np.float64)
    ref32 = reference(op, spec.kind, inputs, dy, np.float32)

    # 1. two runs, the first under the race detector in the simulator
    runs = []
    race = {"ran": False}
    try:
        if mode == "simulator":
            from vjpcert.cuda_kernels.simulator import DetectorUnavailable, RaceError, race_detector
            try:
                with race_detector() as counts:
                    runs.append(_launch_checked(lambda: run_kernel(spec, op, inputs, dy, params)))
                race = {"ran": True, "clean": True, **counts}
            except DetectorUnavailable as exc:
                race = {"ran": False, "reason": str(exc)}
            except RaceError as exc:
                evidence["race_detector"] = {"ran": True, "clean": False}
                return failed("race detector", violations=exc.violations)
        else:
            race = {"ran": False, "reason": "GPU mode: shared-memory accesses are logged in the simulator"}
        while len(runs) < tol.DETERMINISM_RUNS:
            runs.append(_launch_checked(lambda: run_kernel(spec, op, inputs, dy, params)))
    except KernelRaised as exc:
        return failed("kernel raised", error=str(exc))
    evidence["race_detector"] = race

    if len(runs[0]) != len(ref64):
        raise SpecError(op.name, f"kernel {spec.name} returned {len(runs[0])} outputs; the spec has {len(ref64)}")

    # 2. NaN poison: every element written, and finite where the spec is finite
    for name, out, r in zip(spec.outputs, runs[0], ref64):
        if out.shape != r.shape:
            return failed("shape", output=name, kernel_shape=list(out.shape), spec_shape=list(r.shape))
        bad = ~np.isfinite(out) & np.isfinite(r)
        if bad.any():
            idx = [int(i) for i in np.argwhere(bad)[0]]
            return failed("NaN poison", output=name, index=idx, kernel=str(out[tuple(idx)]),
                          spec_f64=float(r[tuple(idx)]), unwritten_or_nonfinite=int(bad.sum()),
                          of=int(bad.size))
    evidence["nan_poison"] = "outputs NaN-filled before every launch; every element written and finite"

    # 3. determinism
    for name, a, b in zip(spec.outputs, runs[0], runs[1]):
        diff = a.view(np.uint32) != b.view(np.uint32)
        if diff.any():
            idx = [int(i) for i in np.argwhere(diff)[0]]
            return failed("determinism", output=name, index=idx, run1=float(a[tuple(idx)]),
                          run2=float(b[tuple(idx)]), differing=int(diff.sum()))
    evidence["determinism"] = f"{tol.DETERMINISM_RUNS} runs bitwise identical"

    # 4. tolerance
    per_output = {}
    for name, out, r64, r32 in zip(spec.outputs, runs[0], ref64, ref32):
        err = np.abs(out.astype(np.float64) - r64)
        base = float(np.max(np.abs(r32.astype(np.float64) - r64), initial=0))
        b = tol.bound(spec.kind, base, r64)
        e = float(np.max(err, initial=0))
        per_output[name] = {"kernel_error": e, "float32_baseline_error": base, "bound": b,
                            "floor": tol.floor(r64), "ratio_to_baseline": (e / base) if base else None}
        if e > b:
            idx = [int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape)]
            evidence["outputs"] = per_output
            return failed("tolerance", output=name, index=idx, kernel=float(out[tuple(idx)]),
                          spec_f64=float(r64[tuple(idx)]), spec_f32=float(r32[tuple(idx)]), error=e,
                          baseline_error=base, bound=b)
    evidence["outputs"] = per_output

    # 5. laws
    laws = {}
    for law in law_objects(op, spec):
        try:
            entry = check_law(op, spec, law, inputs, dy, kernels)
        except KernelRaised as exc:
            return failed("kernel raised", law=law.name, error=str(exc))
        laws[law.name] = entry
        if not entry["ok"]:
            evidence["laws"] = laws
            return failed("law", law=law.name, **{k: v for k, v in entry.items() if k != "ok"})
    evidence["laws"] = laws
    return certificate("kernel-match")


__all__ = ["CHECKER_SHA256", "check_kernel_claim", "detect_mode", "kernel_claims", "kernel_dims"]
