"""The kernel tier: does each CUDA kernel compute its op's spec within its own rounding-error model?

For one (op, kernel claim, dims[, launch configuration]) and each input case of
``core/input_cases.py`` (random, large magnitudes, near-constant rows, a large offset, mixed
magnitudes) and the kernel cases of ``core/kernel_checks.py`` (an offset sweep over rows, a huge
entry in each row's last block): sample float32 inputs (seeded, recorded), run the kernel on copies of them with every
output poisoned with NaN before each launch, and only then evaluate the spec in float64 (the
reference) and in float32 (the sanity floor) at those same inputs, and the kernel's error model there
(while the kernel runs, no float64 result of its inputs exists for it to find). In the first case
the kernel runs twice, the first time under the shared-memory race detector in the simulator. Then,
in order, each of these can fail the claim:
  1. the kernel raised (an out-of-bounds index, more static shared memory or threads than a GPU
     has, in the simulator) or the race detector fired, or the launcher wrote into an array it was
     handed (``input written``: a caller's input or gradient would be corrupted),
  2. NaN poison: an output element the kernel never wrote (or wrote as NaN/Inf) where the spec is finite,
  3. determinism: the two runs differ in any bit (in the simulator the second runs the blocks, and
     each block's threads, in reverse order: a kernel whose threads race on global memory gives
     other bits),
  4. tolerance: per element, the bound of ``cuda_kernels.settings`` (the kernel's error model, the
     float32 spec's error as a floor),
  5. laws: each runtime law of the kernel (registry), evaluated in float64 on the kernel's outputs,
     against the same law on the float32 spec's outputs.
Verdicts: ``kernel-match``, ``failed`` (evidence["witness"] says which check, which case, where, by
how much), ``inconclusive`` (no CUDA to run on, or an error model that does not reproduce the spec).

``launch="gpu"`` runs the GPU's own launch configuration (``common.GPU_CONFIG``: blocks of 256
threads, 16 x 16 tiles) wherever the kernels run, the simulator included. ``launch="orders"`` is the
summation-order check: at a kernel's ``Sizes.orders``, one run in the equal-rows case only, where a
kernel that sums in another order than its model states errs beyond the model's bound though random
inputs hide it (``settings.ORDER_CASES`` says why).

This module imports from ``specs`` and ``core`` only (never from ``symbolic``, ``numeric`` or ``vjpcert``).
"""
from __future__ import annotations

import time

import numpy as np

from vjpcert.core import kernel_bounds as _bounds
from vjpcert.core import kernel_checks as _shared
from vjpcert.core import tolerance as _rule
from vjpcert.core.low_precision import is_low, precision_problem, rounded, storage_dtype
from vjpcert.cuda_kernels import env
from vjpcert.cuda_kernels import settings as tol
from vjpcert.core.certificate import Certificate, checker_code_sha256, versions
from vjpcert.core.registry import Op, SpecError

# The checker's code: this folder and core/ (the input cases and the rule are there).
CHECKER_SHA256 = checker_code_sha256(__name__, discovered=__package__)   # kernel files are found, not imported
ORDERS = "orders"
# None: this process's configuration; "gpu": the GPU's own; ORDERS: this process's, at a kernel's
# ``Sizes.orders`` with the summation-order case only (settings.ORDER_CASES)
LAUNCHES = (None, "gpu", ORDERS)
CUDA_DTYPES = ("float32", "float16")     # Numba CUDA has no bfloat16 type for kernel arguments


def detect_mode() -> str:
    """"gpu" | "simulator" | "none" (compile-only processes cannot run kernels: "none")."""
    mode = env.detect_mode()
    return mode if mode in ("gpu", "simulator") else "none"


def unavailable_reason(installing: bool = True) -> str | None:
    """Why kernels cannot run in this process, or None. Our kernels use warp shuffles, which only the
    patched simulator has: an unpatched one would fail every kernel for a reason not the kernel's.
    ``installing=False`` answers from the installed packages without patching (or importing) numba.cuda."""
    if detect_mode() == "simulator":
        from vjpcert.cuda_kernels.simulator import unavailable_reason as simulator_reason
        return simulator_reason(installing)
    return None


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
    """Sizes at which the kernels of ``op`` are checked in ``mode`` (default: this process's), in
    this process's launch configuration."""
    name = _base_name(_op(op))
    mode = mode or detect_mode()
    _, dims = _registry()
    table = dims["gpu" if mode == "gpu" else "simulator"]
    return [dict(d) for d in table.get(name, [])]


def kernel_launches(op, mode: str | None = None, claim: str | None = None) -> list[tuple[dict, str | None]]:
    """(dims, launch) for every check of ``op``'s kernels (or of one kernel ``claim``) in ``mode``: the
    sizes of ``kernel_dims`` in this process's configuration and, in the simulator, the GPU's own
    launch configuration at the sizes of the registry's ``simulator_gpu_launch`` table (keyed by op,
    or by kernel name where one kernel needs other sizes). On a GPU the two are one."""
    name = _base_name(_op(op))
    mode = mode or detect_mode()
    _, dims = _registry()
    out = [(d, None) for d in kernel_dims(op, mode)]
    key = claim.removeprefix("kernel:") if claim else None
    if mode != "gpu":
        table = dims["simulator_gpu_launch"]
        out += [(dict(d), "gpu") for d in (table[key] if key in table else table.get(name, []))]
    table = dims["orders"]          # in either mode: long sums, where summation orders part
    out += [(dict(d), ORDERS) for d in (table[key] if key in table else table.get(name, []))]
    return out


# ------------------------------------------------------------------------------ inputs
# Shared with the Triton tier (core/kernel_checks.py): the inputs of a case, the spec's references.
reference = _shared.reference
_launcher_params = _shared.launcher_params
_as_tuple = _shared.as_tuple


def run_kernel(spec, op: Op, inputs: dict, dy, params: dict) -> tuple:
    """One call of the launcher, on copies of the checker's arrays (a write into them raises
    ``InputWritten``); its outputs copied out, so that nothing the launcher keeps can change them."""
    args = dict(inputs)
    if spec.kind == "backward":
        args["dy"] = dy
    copies = _shared.handed(args)
    outs = tuple(np.array(o, copy=True) for o in _as_tuple(spec.launcher(**copies, **params)))
    _shared.no_input_written(args, copies)
    return outs


def _run_in_order(spec, op: Op, inputs: dict, dy, params: dict, *, reversed_threads: bool) -> tuple:
    """One run; with ``reversed_threads`` every simulated launch runs its blocks, and every block its
    threads, last to first, so a determinism run that differs from the first shows an order-dependent
    access to global memory (a store and an atomic add with nothing between them; a buffer one block
    clears while others write it), which the shared-memory race detector does not watch."""
    if not reversed_threads:
        return run_kernel(spec, op, inputs, dy, params)
    from vjpcert.cuda_kernels.simulator import thread_order
    with thread_order("reversed"):
        return run_kernel(spec, op, inputs, dy, params)


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
def check_law(op: Op, spec, law, inputs: dict, dy, kernels: dict) -> dict:
    """One runtime law on the kernel's outputs, against the same law on the float32 spec (the rule
    and the evaluation are shared with the Triton tier: core/kernel_checks.py)."""
    return _shared.check_law(op, spec, law, inputs, dy, kernels, launch_checked=_launch_checked,
                             storage=spec.dtype, accumulate=spec.accumulate)


def _low_rule(spec) -> str:
    return (_rule.rule_in_words(spec.kind == "backward", storage_dtype(spec.dtype))
            + f"; outside it, within {_bounds.K_REFORMULATION[spec.kind]:g} x the rounding bound that holds for every "
              f"summation order (core/kernel_bounds.py): inconclusive, else failed (no error model of this kernel)")


def _low_precision_tolerance(spec, op, inputs, dy, outs_run, ref64, ref32, outs: dict):
    """A kernel without an error model (a float16 one): per output, the model-free rule in its dtype;
    outside it, the any-order bound decides. ("failed", witness), or ("ill", [where, ...]): possibly empty."""
    storage = storage_dtype(spec.dtype)
    siblings = max((float(np.abs(r).max()) for r in ref64 if r.size), default=0.0) if spec.kind == "backward" else 0.0
    bounds, ill = None, []
    for i, (name, out, r64, r32) in enumerate(zip(spec.outputs, outs_run, ref64, ref32)):
        r = _rule.compare(out, r64, r32, backward=spec.kind == "backward", dtype=storage, floor_scale=siblings)
        outs[name] = {k: r[k] for k in ("error", "baseline_error", "bound", "scale")}
        if r["ok"]:
            continue
        idx = [int(j) for j in np.unravel_index(r["worst_index"], r64.shape)] if r64.ndim else []
        witness = {"output": name, "index": idx, "kernel": float(out[tuple(idx)]), "spec_f64": float(r64[tuple(idx)]),
                   "error": r["error"], "bound": r["bound"], "baseline_error": r["baseline_error"]}
        if not _bounds.analysable(inputs, dy):
            return "failed", {**witness, "any_order_bound": "not computed at these dims (core/kernel_bounds.py)"}
        if bounds is None:
            bounds = _bounds.any_order_bounds(op, spec.kind, inputs, dy, storage=spec.dtype,
                                              casting=_bounds.undocumented_casting(spec.dtype, spec.accumulate))
        factor = _bounds.K_REFORMULATION[spec.kind]
        within = _bounds.ill_conditioned(out, r64, bounds[i], factor, _rule.unit_roundoff(storage))
        if not within:
            return "failed", {**witness, "outside_any_order_bound": _bounds.outside(out, r64, bounds[i], factor)}
        ill.append({**witness, **within})
    return "ill", ill


law_objects = _shared.law_objects


# ------------------------------------------------------------------------------ the claim
_small_inputs = _shared.small_inputs


def launch_config(launch: str | None):
    """The launch configuration a check runs: this process's (the default and ``ORDERS``), or the GPU's
    own (``launch="gpu"``)."""
    from vjpcert.cuda_kernels.common import GPU_CONFIG, config
    if launch not in LAUNCHES:
        raise SpecError(None, f"unknown kernel launch {launch!r}: use the default, 'gpu' or {ORDERS!r}")
    return GPU_CONFIG if launch == "gpu" else config()


def sample_inputs(op: Op, dims: dict, seed: int, with_dy: bool, case: str = _shared.FIRST_CASE):
    """The inputs of a case (core/kernel_checks.py); the summation-order case ``equal_rows``
    (settings.py) repeats the first row (the last axis) of the random case's differentiable inputs
    and cotangent along every other axis."""
    if case not in tol.ORDER_CASES:
        return _shared.sample_inputs(op, dims, seed, with_dy, case)
    inputs, dy = _shared.sample_inputs(op, dims, seed, with_dy, _shared.FIRST_CASE)

    def equal_rows(a):
        a = np.asarray(a)
        if a.ndim < 2:
            return a
        return np.ascontiguousarray(np.broadcast_to(a.reshape(-1, a.shape[-1])[0], a.shape))
    inputs = {k: equal_rows(v) if k in op.inputs else v for k, v in inputs.items()}
    return inputs, (equal_rows(dy) if dy is not None else None)


def model_bounds(spec, op: Op, cfg, inputs: dict, dy, params: dict, case: str, ref64: tuple):
    """Per output: (bound array of the kernel's error model, the worst deviation of the model's
    exact-arithmetic value from the float64 spec, as a fraction of what is allowed). The model restates
    the kernel's arithmetic: its values must be the spec's, up to float64 rounding (relative
    MODEL_VALUE_RTOL of the output's scale) or to a sliver (MODEL_VALUE_OF_BOUND) of the float32
    error the model allows at that element -- either way too small to change a verdict."""
    from vjpcert.cuda_kernels.error_model import bound
    args = dict(inputs)
    if spec.kind == "backward":
        args["dy"] = dy
    with np.errstate(all="ignore"):
        tracked = _as_tuple(spec.model(cfg, **args, **params))
    if len(tracked) != len(ref64):
        raise SpecError(op.name, f"the error model of {spec.name} has {len(tracked)} outputs; the spec {len(ref64)}")
    out = []
    for t, r in zip(tracked, ref64):
        scale = float(np.max(np.abs(r), initial=0.0))
        allowed = np.maximum(tol.MODEL_VALUE_RTOL * scale, tol.MODEL_VALUE_OF_BOUND * tol.UNIT_ROUNDOFF * t.l1())
        with np.errstate(all="ignore"):
            dev = np.abs(t.v - r)
            frac = np.where(dev > 0, dev / allowed, 0.0)
        out.append((bound(t, tol.MODEL_FOR_CASE[case]), float(np.max(frac, initial=0.0))))
    return out


def check_kernel_claim(op, claim: str, dims: dict, *, seed: int = 0, kernel=None, launch: str | None = None,
                       cases=None) -> Certificate:
    """Check one kernel claim ("kernel:<name>") of ``op`` at ``dims``. ``kernel`` substitutes a
    KernelSpec for the registry's (the negative controls use it); the verdict is the same either way.
    ``launch="gpu"``: in the GPU's own launch configuration. ``cases``: a subset of the input cases
    (default: all of them)."""
    start = time.perf_counter()
    op = _op(op)
    kernels, _ = _registry()
    spec = kernel if kernel is not None else kernels.get(claim.removeprefix("kernel:"))
    if spec is None or spec.op != _base_name(op):
        raise SpecError(op.name, f"has no kernel claim {claim!r}; it has {kernel_claims(op)}")
    if spec.dtype not in CUDA_DTYPES or spec.accumulate not in CUDA_DTYPES:
        raise SpecError(op.name, f"kernel {spec.name}: dtype {spec.dtype!r}, accumulate {spec.accumulate!r}; "
                                 f"the CUDA tier checks {' and '.join(CUDA_DTYPES)} kernels")
    problem = precision_problem(spec.dtype, spec.accumulate, f"kernel {spec.name}: accumulate")
    if problem:
        raise SpecError(op.name, problem)
    if spec.model is None and spec.dtype == "float32":
        raise SpecError(op.name, f"kernel {spec.name} has no error model (a float32 kernel needs one)")
    storage = storage_dtype(spec.dtype)
    dims = op.resolve_dims(dims)
    mode = detect_mode()
    if cases is None:
        cases = tol.SIMULATED_GPU_LAUNCH_CASES if (launch == "gpu" and mode == "simulator") else \
            tol.ORDER_CASES if launch == ORDERS else (*tol.CASES, *(tol.KINK_CASES if op.uses_kinks() else ()))
    cases = tuple(cases)
    known = (*tol.CASES, *tol.KINK_CASES, *tol.ORDER_CASES)
    unknown = [c for c in cases if c not in known]
    if unknown:
        raise SpecError(op.name, f"unknown input cases {unknown}; cases: {', '.join(known)}")
    params = _launcher_params(op)
    cfg = launch_config(launch) if mode != "none" else None
    evidence: dict = {"mode": mode, "kernel": spec.name, "kind": spec.kind, "tolerance_rule": tol.RULE_IN_WORDS,
                      "seed": seed, "cases": list(cases), "launch": launch or "default",
                      "launch_config": cfg.__dict__ if cfg else None}

    launch_words = "the GPU's own" if launch == "gpu" else "this process's"
    launch_desc = ", ".join(f"{k} {v}" for k, v in (cfg.__dict__ if cfg else {}).items())

    def certificate(verdict):
        return Certificate.issue(op, claim=claim, tier="kernel", verdict=verdict,
                           method=f"numba-cuda-{mode}" + ("-gpu-launch" if launch == "gpu" and mode != "gpu" else "")
                           + ("-summation-order" if launch == ORDERS else ""),
                           dims=dims,
                           assumptions=[f"{n} = {v}" for n, v in params.items()]
                           + [f"inputs: the cases {', '.join(cases)} ("
                              + ("the summation-order case of cuda_kernels/settings.py: the random case's first row "
                                 "repeated" if set(cases) <= set(tol.ORDER_CASES)
                                 else "core/input_cases.py, core/kernel_checks.py") + f"), seed {seed}"
                              + (f"; {spec.dtype} inputs and outputs (the truth from those very values), sums "
                                 f"accumulated in {spec.accumulate}" if is_low(spec.dtype) else ""),
                              f"launch configuration: {launch_words} ({launch_desc})",
                              f"tolerance: {tol.RULE_IN_WORDS if spec.model is not None else _low_rule(spec)}",
                              "library functions (expf, erff, tanhf, logf) within the CUDA guide's maximum ulp "
                              "errors"]
                           + (["the race detector instruments the simulator: on a GPU shared-memory races are not "
                               "checked"] if mode == "gpu" else []),
                           evidence=evidence, seconds=time.perf_counter() - start,
                           checker_sha256=CHECKER_SHA256, versions={**versions(), **env.versions()})

    state = {"inputs": {}, "dy": None, "case": None}

    def failed(check: str, **witness):
        evidence["witness"] = {"check": check, "case": state["case"], **witness, "seed": seed, "dims": dims}
        small = _small_inputs(state["inputs"], state["dy"])
        if small is not None:
            evidence["witness"]["inputs"] = small
        return certificate("failed")

    if mode == "none":
        evidence["reason"] = ("no CUDA to run kernels on: numba-cuda is missing, or numba.cuda was "
                              "imported without a GPU before the simulator could be selected")
        return certificate("inconclusive")

    from vjpcert.cuda_kernels.common import use_config
    per_case: dict = {}
    ill: list = []          # law residuals that rounding may explain (core/kernel_bounds.py)
    evidence["per_case"] = per_case
    with use_config(cfg):
        for case in cases:
            state["case"] = case
            inputs, dy = sample_inputs(op, dims, seed, spec.kind == "backward", case)
            if is_low(spec.dtype):      # drawn in the kernel's dtype: the truth from these very values
                inputs = {k: v.astype(storage) if k in op.inputs else v for k, v in inputs.items()}
                dy = dy.astype(storage) if dy is not None else None
            state["inputs"], state["dy"] = inputs, dy

            # 1. the runs: in the first case two (the first under the race detector in the simulator);
            # the summation-order check runs once (races and determinism are the default launch's)
            runs = []
            first = case == cases[0] and launch != ORDERS
            if case == cases[0] and launch == ORDERS:
                evidence["race_detector"] = {"ran": False, "reason": "the summation-order check runs the kernel "
                                                                     "once: races are checked at its other sizes"}
                evidence["determinism"] = "checked at the kernel's other sizes (the summation-order check runs once)"
            try:
                if first and mode == "simulator":
                    from vjpcert.cuda_kernels.simulator import DetectorUnavailable, RaceError, race_detector
                    try:
                        with race_detector() as counts:
                            runs.append(_launch_checked(lambda: run_kernel(spec, op, inputs, dy, params)))
                        evidence["race_detector"] = {"ran": True, "clean": True, "case": case, **counts}
                    except DetectorUnavailable as exc:
                        evidence["race_detector"] = {"ran": False, "reason": str(exc)}
                    except RaceError as exc:
                        evidence["race_detector"] = {"ran": True, "clean": False}
                        return failed("race detector", violations=exc.violations)
                elif first:
                    evidence["race_detector"] = {"ran": False, "reason": "GPU mode: shared-memory accesses are "
                                                                           "logged in the simulator"}
                while len(runs) < (tol.DETERMINISM_RUNS if first else 1):
                    runs.append(_launch_checked(lambda: _run_in_order(spec, op, inputs, dy, params,
                                                                     reversed_threads=len(runs) > 0 and
                                                                     mode == "simulator")))
            except KernelRaised as exc:
                return failed("kernel raised", error=str(exc))
            except _shared.InputWritten as exc:
                return failed("input written", **exc.witness)

            # the truth and the error model, only now: while the kernel ran, no float64 result of these
            # inputs existed for it to find (the garbage collector's objects, its callers' frames)
            ref64 = reference(op, spec.kind, inputs, dy, np.float64)
            ref32 = reference(op, spec.kind, inputs, dy, np.float32)
            if is_low(spec.dtype):      # the baseline: the spec in float32, rounded to the kernel's dtype
                ref32 = tuple(rounded(r, storage) for r in ref32)
            models = (model_bounds(spec, op, cfg, inputs, dy, params, case, ref64) if spec.model is not None
                      else [(None, 0.0)] * len(ref64))
            for name, (_, dev) in zip(spec.outputs, models):
                if not dev <= 1:
                    evidence["reason"] = (f"the error model of {spec.name} does not reproduce the spec at output "
                                          f"{name} (case {case}): its value deviates {dev:.3g} x what float64 "
                                          f"rounding explains")
                    return certificate("inconclusive")
            if len(runs[0]) != len(ref64):
                raise SpecError(op.name, f"kernel {spec.name} returned {len(runs[0])} outputs; "
                                         f"the spec has {len(ref64)}")

            # 2. NaN poison: every element written, and finite where the spec is finite
            for name, out, r in zip(spec.outputs, runs[0], ref64):
                if out.shape != r.shape:
                    return failed("shape", output=name, kernel_shape=list(out.shape), spec_shape=list(r.shape))
                if out.dtype != storage:
                    return failed("dtype", output=name, kernel_dtype=str(out.dtype), expected=spec.dtype)
                bad = ~np.isfinite(out) & np.isfinite(r)
                if bad.any():
                    idx = [int(i) for i in np.argwhere(bad)[0]]
                    return failed("NaN poison", output=name, index=idx, kernel=str(out[tuple(idx)]),
                                  spec_f64=float(r[tuple(idx)]), unwritten_or_nonfinite=int(bad.sum()),
                                  of=int(bad.size))

            # 3. determinism
            if first:
                for name, a, b in zip(spec.outputs, runs[0], runs[1]):
                    diff = _shared.bits_differ(a, b)
                    if diff.any():
                        idx = [int(i) for i in np.argwhere(diff)[0]]
                        return failed("determinism", output=name, index=idx, run1=float(a[tuple(idx)]),
                                      run2=float(b[tuple(idx)]), differing=int(diff.sum()))
                evidence["determinism"] = (f"{tol.DETERMINISM_RUNS} runs bitwise identical (case {case})"
                                           + (", the second with the blocks and their threads in reverse order"
                                              if mode == "simulator" else ""))

            # 4. tolerance, per element
            outs = {}
            per_case[case] = {"model": tol.MODEL_FOR_CASE[case], "outputs": outs}
            if spec.model is None:
                verdict, found = _low_precision_tolerance(spec, op, inputs, dy, runs[0], ref64, ref32, outs)
                if verdict == "failed":
                    return failed("tolerance", **found)
                ill += [{"check": "tolerance", "case": case, **w} for w in found]
            for name, out, r64, r32, (model, dev) in zip(spec.outputs, runs[0], ref64, ref32, models):
                if model is None:
                    continue
                err = np.abs(out.astype(np.float64) - r64)
                f32 = np.abs(r32.astype(np.float64) - r64)
                f32 = np.where(np.isfinite(f32), f32, 0.0)        # a float32 spec that overflows is no floor
                allowed = tol.element_bound(model, f32)
                with np.errstate(all="ignore"):
                    ratio = np.where(err > 0, err / allowed, 0.0)
                worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
                scale = float(np.max(np.abs(r64), initial=0.0))
                outs[name] = {"kernel_error": float(np.max(err, initial=0.0)),
                              "worst_error_over_bound": float(np.max(ratio, initial=0.0)),
                              "bound_at_worst": float(allowed[worst]) if ratio.size else 0.0,
                              "max_bound": float(np.max(allowed, initial=0.0)), "scale": scale,
                              "max_bound_over_scale": float(np.max(allowed, initial=0.0)) / scale if scale else None,
                              "float32_spec_error": float(np.max(f32, initial=0.0)),
                              "floor_decides": int(np.sum(f32 > model)), "of": int(err.size),
                              "model_value_deviation": dev}
                if ratio.size and ratio[worst] > 1:
                    idx = [int(i) for i in worst]
                    return failed("tolerance", output=name, index=idx, kernel=float(out[worst]),
                                  spec_f64=float(r64[worst]), spec_f32=float(r32[worst]), error=float(err[worst]),
                                  bound=float(allowed[worst]), model_bound=float(model[worst]),
                                  model=tol.MODEL_FOR_CASE[case],
                                  elements_over=int(np.sum(ratio > 1)), of=int(ratio.size))

            # 5. laws (at the GPU's launch configuration in the simulator they were checked at the
            # simulator's own, in every case: the configuration adds nothing a law would see)
            if launch == "gpu" and mode == "simulator":
                per_case[case]["laws"] = "checked at the simulator's launch configuration"
                continue
            laws = {}
            per_case[case]["laws"] = laws
            for law in law_objects(op, spec):
                try:
                    entry = check_law(op, spec, law, inputs, dy, kernels)
                except KernelRaised as exc:
                    return failed("kernel raised", law=law.name, error=str(exc))
                except _shared.InputWritten as exc:
                    return failed("input written", law=law.name, **exc.witness)
                laws[law.name] = entry
                if entry.get("ill_conditioned"):
                    ill.append({"case": case, "law": law.name, **{k: v for k, v in entry.items() if k != "ok"}})
                elif not entry["ok"]:
                    return failed("law", law=law.name, **{k: v for k, v in entry.items() if k != "ok"})
            del ref64, ref32, models        # gone before the next case's kernel runs
    evidence["nan_poison"] = "outputs NaN-filled before every launch; every element written and finite"
    if ill:
        evidence["ill_conditioned"] = ill
        evidence["reason"] = (f"outside the tolerance rule or a law's {len(ill)} time(s), yet within k x the rounding "
                              f"bound that holds for every summation order at the kernel's precision "
                              f"(core/kernel_bounds.py): the inputs are ill-conditioned there, and the error does not "
                              f"tell a wrong kernel from rounding (evidence.ill_conditioned)")
        return certificate("inconclusive")
    return certificate("kernel-match")


__all__ = ["CHECKER_SHA256", "LAUNCHES", "ORDERS", "check_kernel_claim", "detect_mode", "kernel_claims", "kernel_dims",
           "kernel_launches", "launch_config"]
