"""The Triton tier: does a Triton kernel compute its op's spec within the project's tolerance rule?

The same checks as the Numba kernel tier (``cuda_kernels/check.py``), with what both share in
``core/kernel_checks.py``. For one (op, kernel claim, dims) and each input case (``core/input_cases.py``,
and the kernel cases of ``core/kernel_checks.py``): sample inputs in the kernel's dtype (float32,
bfloat16, float16; seeded, recorded), run the kernel on fenced copies of the inputs with its outputs
NaN-poisoned (``triton_kernels.harness``), in Triton's interpreter on a CPU (``TRITON_INTERPRET=1``,
patched to behave as compiled Triton: ``triton_kernels.interpreter``) or natively on a GPU, and only
then evaluate the spec in float64 (the reference) and float32 (the baseline) at those inputs: while the
kernel runs, no float64 result of its inputs exists for it to find. The launcher is handed copies of the checker's arrays. In the first case
the kernel runs twice, and once more with other fences. Then, in order, each of these can fail the
claim:
  1. the kernel raised,
  2. fences: a store past the end (or before the start) of a tensor; input written: the launcher
     changed an array it was handed (a caller's input or gradient),
  3. NaN poison: an output element never written, or NaN/Inf, where the spec is finite (a load past
     the end of an input reads the fence's NaN and usually lands here),
  4. determinism: when the two runs give the same bits, the run with the fences holding huge finite
     values instead of NaN must give them too, or the kernel read outside its tensors (``fence
     read``: a row max ignores NaN, so a max over a block that runs past the end shows here). Runs
     that differ are not a failure but a property of the kernel (a sum in a random block order),
     recorded in evidence["determinism"]: every run is then held to check 5, and so is every program
     order of check 6,
  5. tolerance: per output, the model-free rule of ``core/tolerance.py`` (FlashAttention's:
     max|kernel - spec_f64| <= k max|spec_f32 - spec_f64| + 4 u max|spec_f64|, k = 2 forward, 3
     backward; in a low-precision dtype, spec_f32 rounded to it and u its own); external kernels have
     no rounding-error model of ours (their arithmetic is theirs). Outside the rule, the rounding bound
     that holds for every summation order decides (``core/kernel_bounds.py``): within k x it at every
     element, ``inconclusive`` (ill-conditioned, with the condition number), else ``failed`` with the
     bound. A kernel that documents its casting is held to that casting's bound at every element
     (``casting``), in every case and whatever the rule says,
  6. program order (in the interpreter, the first case; ``triton_kernels/orders.py``): the case again with each launch's programs
     in every other order of ``interpreter.ORDERS`` (reversed, seeded shuffles; the seed a hash of the
     kernel, dims and case; evidence["program_orders"] records which ran). A GPU runs a launch's
     programs in any order, so any bit that differs from grid order is a race between programs of one
     launch, unless the run made float atomic adds, whose rounding legitimately depends on the order
     (or the kernel's bits vary anyway): then every order is held to the rule of check 5 instead
     (bitwise would call every atomic accumulation a race; a race reading stale data is far outside
     the rule),
  7. laws: each runtime law of the kernel on its outputs, against the same law on the float32 spec.
The sizes are the kernel's own and the gate's (``triton_dims``); a kernel's samplers add to the
gate's cases, never replace them. Verdicts: ``kernel-match``, ``failed`` (evidence["witness"]: which
check, which case, where, by how much), ``inconclusive`` (Triton or torch missing).

This module imports from ``specs`` and ``core`` only (never from another checker or ``vjpcert``).
"""
from __future__ import annotations

import time

import numpy as np

from vjpcert.core import input_cases as _cases
from vjpcert.core import kernel_bounds as _bounds
from vjpcert.core import kernel_checks as _shared
from vjpcert.core import tolerance as _rule
from vjpcert.core.certificate import Certificate, checker_code_sha256, versions
from vjpcert.core.low_precision import STORAGE_DTYPES, precision_problem, storage_dtype
from vjpcert.core.registry import Op, SpecError
from vjpcert.triton_kernels import gate
from vjpcert.triton_kernels.interpreter import ORDERS
from vjpcert.triton_kernels.orders import (KernelRaised, OrderUnknown, nondeterminism, program_orders, varies)

CHECKER_SHA256 = checker_code_sha256(__name__, discovered=__package__)   # kernel files are found, not imported
CASES = (*_cases.CASES, *_shared.KERNEL_CASES)
FIRST_CASE = _shared.FIRST_CASE
DETERMINISM_RUNS = 2
# Program orders run in the first case only, at every size: each order is one more run of the case
# (measured on the Liger ladder and our kernels, 104 checks: 37 s without the orders, 40 s with them),
# and a race shows with any inputs. A shuffle that repeats an order already run (a launch of two
# programs has two) is not run again.
def rule_in_words(kind: str, dtype="float32") -> str:
    return _rule.rule_in_words(kind == "backward", storage_dtype(dtype)) + (
        " (per output; the floor's scale is the largest cotangent's, as in `vjpcert check --impl`)"
        if kind == "backward" else " (per output)")


def unavailable_reason() -> str | None:
    """Why Triton kernels cannot run in this process, or None."""
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as exc:
        return f"the Triton tier needs triton and torch ({exc}): pip install -e '.[triton]'"
    return None


def detect_mode() -> str:
    """"gpu" (a CUDA device: compiled Triton), "interpreter" (Triton's, on the CPU) or "none"."""
    if unavailable_reason():
        return "none"
    from vjpcert.triton_kernels import harness
    from vjpcert.triton_kernels.interpreter import interpreting
    if interpreting():
        return "interpreter"
    return "gpu" if harness.device() == "cuda" else "none"


def _registry() -> dict:
    from vjpcert.triton_kernels.registry import discover
    return discover()[0]


def _op(op) -> Op:
    if isinstance(op, Op):
        return op
    from vjpcert.specs import resolve_op
    return resolve_op(op)


def cotangents_checked(op: Op, spec) -> list[int]:
    """Which of the spec's cotangents a backward kernel returns (indices in spec order): all of them
    when it returns as many, else those its ``outputs`` name ``d<input>``."""
    names = list(op.inputs)
    if spec.kind != "backward" or len(spec.outputs) == len(names):
        return list(range(len(names) if spec.kind == "backward" else 1))
    wanted = [o.removeprefix("d") if o.removeprefix("d") in names else o for o in spec.outputs]
    unknown = [o for o, w in zip(spec.outputs, wanted) if w not in names]
    if unknown or len(set(wanted)) != len(wanted) or not wanted:
        raise SpecError(op.name, f"Triton kernel {spec.name} returns {list(spec.outputs)}: a backward that returns "
                                 f"some cotangents names each d<input> of the spec's {names}")
    return [names.index(w) for w in wanted]


def triton_claims(op) -> list[str]:
    """Claim names of the registered Triton kernels implementing ``op``; [] if it has none."""
    name = _shared.base_name(_op(op))
    return [k.claim for k in _registry().values() if k.op_name == name]


def triton_dims(kernel, mode: str | None = None, seed: int = 0) -> list[dict]:
    """Where a kernel is checked: its own sizes (on a GPU, its GPU sizes), then the gate's
    (``triton_kernels.gate``): fixed edge sizes and sizes drawn from its code's digest and ``seed``."""
    mode = mode or detect_mode()
    declared = kernel.gpu_sizes if mode == "gpu" else kernel.sizes
    return gate.gate_sizes(kernel, _op(kernel.op), seed, declared=declared)


def _run(kernel, op: Op, inputs: dict, dy, params: dict, fence: str = "nan", order: str = "grid",
         order_seed: int = 0, record: bool = False):
    """One launch: fresh fenced inputs (fences of pattern ``fence``), poisoned outputs, the interpreter
    made faithful, every launch's programs in ``order``. Returns (outputs, fence violations), and the
    interpreter's ``Record`` of the launches (None on a GPU) after them with ``record``."""
    from vjpcert.triton_kernels import harness
    from vjpcert.triton_kernels.interpreter import OrderPatchBroken, faithful, interpreting
    args = dict(inputs)
    if kernel.kind == "backward":
        args["dy"] = dy
    # the launcher gets copies, compared after it returns: it cannot reach the checker's arrays, and
    # a launcher that writes into the arrays it is handed (a caller's x or dy) is reported
    handed = _shared.handed(args)
    # numpy's overflow warnings inside the interpreter (exp of a large logit) are the kernel's business:
    # an overflow that matters shows as a non-finite output or an error over the bound
    with faithful(kernel.modules or _modules_of(kernel), order=order, order_seed=order_seed) as launches, \
            harness.run_context(fence) as arena, np.errstate(all="ignore"):
        try:
            outs = _shared.as_tuple(kernel.launcher(**handed, **params))
        except SpecError:
            raise
        except Exception as exc:
            broken = exc
            while broken is not None and not isinstance(broken, OrderPatchBroken):
                broken = broken.__cause__ or broken.__context__
            if broken is not None:
                raise OrderUnknown(str(broken)) from exc
            if "outside of the scope of a kernel" in str(exc) and interpreting():
                raise SpecError(op.name, "a Triton kernel of this launcher was decorated before TRITON_INTERPRET "
                                         "was set, so it cannot run in the interpreter: import vjpcert.triton_kernels "
                                         "before triton, or run with TRITON_INTERPRET=1") from exc
            raise KernelRaised(f"{type(exc).__name__}: {str(exc)[:500]}") from exc
        outs = tuple(np.array(o if isinstance(o, np.ndarray) else harness.to_numpy(o), copy=True) for o in outs)
        _shared.no_input_written(args, handed)
        return (outs, arena.violations(), launches) if record else (outs, arena.violations())


def _modules_of(kernel) -> tuple:
    import sys
    mod = sys.modules.get(getattr(kernel.launcher, "__module__", ""), None)
    return (mod,) if mod is not None else ()


class _LawKernel:
    """A kernel as the shared law check runs it: its launcher through the harness."""

    def __init__(self, kernel, op):
        self.__dict__.update({f: getattr(kernel, f) for f in ("name", "op", "kind", "forward", "laws")})
        self._kernel, self._op = kernel, op

    def launcher(self, **kw):
        params = {k: kw.pop(k) for k in list(kw) if k in self._op.params}
        dy = kw.pop("dy", None)
        outs, _ = _run(self._kernel, self._op, kw, dy, params)
        return outs if len(outs) > 1 or self.kind == "backward" else outs[0]


def check_triton_claim(op, claim: str, dims: dict, *, seed: int = 0, kernel=None, cases=None) -> Certificate:
    """Check one Triton kernel claim ("triton:<name>") of ``op`` at ``dims``. ``kernel`` substitutes a
    TritonKernel for the registry's (negative controls and users' kernels); the verdict is the same
    either way. ``cases``: a subset of the input cases (default: all of them)."""
    start = time.perf_counter()
    op = _op(op)
    registry = _registry() if kernel is None else {}
    spec = kernel if kernel is not None else registry.get(claim.removeprefix("triton:"))
    if spec is None or spec.op_name != _shared.base_name(op):
        raise SpecError(op.name, f"has no Triton kernel claim {claim!r}; it has {triton_claims(op)}")
    dims = op.resolve_dims(dims)
    own = _kernel_sampled(op, spec)
    cases = tuple(cases or CASES + ((gate.KERNEL_SAMPLERS,) if own["diff"] else ()))
    unknown = [c for c in cases if c not in CASES and not (c == gate.KERNEL_SAMPLERS and own["diff"])]
    if unknown:
        raise SpecError(op.name, f"unknown input cases {unknown}; cases: {', '.join(CASES)}"
                                 + (f", {gate.KERNEL_SAMPLERS}" if own["diff"] else ""))
    for what in ("dtype", "accumulate"):
        if getattr(spec, what) not in STORAGE_DTYPES:
            raise SpecError(op.name, f"Triton kernel {spec.name} has {what} {getattr(spec, what)!r}; dtypes: "
                                     f"{', '.join(STORAGE_DTYPES)}")
    for what, arithmetic in (("accumulate", spec.accumulate),
                             ("casting arithmetic", spec.casting.arithmetic if spec.casting else spec.dtype)):
        problem = precision_problem(spec.dtype, arithmetic, f"Triton kernel {spec.name}: {what}")
        if problem:
            raise SpecError(op.name, problem)
    unknown = set(spec.params) - set(op.params)
    if unknown:
        raise SpecError(op.name, f"Triton kernel {spec.name} sets params {sorted(unknown)} the spec does not have")
    mode = detect_mode()
    exact_params = {k: spec.params.get(k, p.default) for k, p in op.params.items()}
    params = _shared.launcher_params(op, spec.params)
    partial = spec.kind == "backward" and len(cotangents_checked(op, spec)) < len(op.inputs)
    evidence: dict = {"mode": mode, "kernel": spec.name, "source": spec.source, "kind": spec.kind,
                      **({"cotangents": list(spec.outputs)} if partial else {}),
                      "tolerance_rule": rule_in_words(spec.kind, spec.dtype), "seed": seed, "cases": list(cases),
                      "dtype": spec.dtype, **({"casting": _casting_words(spec.casting)} if spec.casting else {})}

    def certificate(verdict):
        return Certificate.issue(
            op, claim=claim, tier="triton", verdict=verdict, method=f"triton-{mode}", dims=dims,
            assumptions=[f"{n} = {v}" for n, v in exact_params.items()]
            + ([f"the kernel returns {', '.join(spec.outputs)} of the spec's cotangents "
                f"({', '.join('d' + n for n in op.inputs)}): only those are checked"] if partial else [])
            + [f"kernel: {spec.source}",
               f"inputs: the cases {', '.join(cases)} (core/input_cases.py, core/kernel_checks.py), seed {seed}, "
               f"{_precision_words(spec.dtype)}, sums accumulated in {spec.accumulate}"]
            + ([f"casting: {_casting_words(spec.casting)}; every element is held to the any-order rounding bound "
                f"of that casting (core/kernel_bounds.py)"] if spec.casting else [])
            + [f"{n}: drawn by the kernel's own sampler in every case (the claim holds for such {n})"
               for n in own["nondiff"]]
            + [f"{n}: the gate's cases, then the kernel's own sampler as one more case" for n in own["diff"]]
            + [f"tolerance: {rule_in_words(spec.kind, spec.dtype)}; outside it, within "
               f"{_bounds.K_REFORMULATION[spec.kind]:g} x the any-order rounding bound of every element: inconclusive "
               f"(ill-conditioned), else failed (core/kernel_bounds.py)"]
            + (["run in Triton's interpreter on the CPU (TRITON_INTERPRET=1): float scalars passed as fp32 and "
                "libdevice functions evaluated in float64 and rounded once (triton_kernels/interpreter.py); "
                "a GPU's own libdevice errors are not seen",
                f"program orders: each launch's programs run one after another, in grid order and, for the "
                f"first case, {', '.join(ORDERS[1:])} (seeded, recorded): an output that depends on the "
                f"order fails; a race only an interleaving of two programs shows (a lost update whose sums "
                f"come out the same in every order) is not seen"]
               if mode == "interpreter" else
               ["program orders: the GPU's own; the determinism runs are the only look at a race"]),
            evidence=evidence, seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256,
            versions={**versions(), **_versions()})

    state = {"inputs": {}, "dy": None, "case": None, "seed": seed}

    def failed(check: str, **witness):
        evidence["witness"] = {"check": check, "case": state["case"], **witness, "seed": seed, "dims": dims}
        small = _shared.small_inputs(state["inputs"], state["dy"])
        if small is not None:
            evidence["witness"]["inputs"] = small
        return certificate("failed")

    if mode == "none":
        evidence["reason"] = unavailable_reason() or "no CUDA device and TRITON_INTERPRET is off"
        return certificate("inconclusive")
    try:
        return _check_cases(op, spec, kernel, dims, cases, params, mode, evidence, state, failed, certificate)
    except _shared.InputWritten as exc:
        return failed("input written", **exc.witness)
    except OrderUnknown as exc:
        evidence["reason"] = (f"Triton's interpreter did not run the programs the way the program-order patch "
                              f"assumes ({exc}): which order ran cannot be said (triton_kernels/interpreter.py)")
        return certificate("inconclusive")


def _check_cases(op, spec, kernel, dims, cases, params, mode, evidence, state, failed, certificate):
    storage = storage_dtype(spec.dtype)
    per_case: dict = {}
    evidence["per_case"] = per_case
    for case in cases:
        state["case"] = case
        inputs, dy = _sample(op, spec, dims, state["seed"], case)
        state["inputs"], state["dy"] = inputs, dy
        first = case == cases[0]

        # 1-2. the runs (two in the first case, and one with the other fences), fences
        runs, other = [], None
        try:
            while len(runs) < (DETERMINISM_RUNS if first else 1):
                outs, fence, launches = _run(spec, op, inputs, dy, params, record=True)
                if fence:
                    return failed("fence", violations=fence)
                if not runs:
                    grid_launches = launches
                runs.append(outs)
        except KernelRaised as exc:
            return failed("kernel raised", error=str(exc))
        if first:
            try:
                other, fence = _run(spec, op, inputs, dy, params, fence="large")
            except KernelRaised as exc:
                return failed("kernel raised", fences="large", error=str(exc))
            if fence:
                return failed("fence", fences="large", violations=fence)

        # determinism: two runs of the same launches on the same inputs. Bits that differ are a
        # property of the kernel (a sum in a random block order), recorded; each run, and every later
        # comparison, is then held to the tolerance rule instead of to the first run's bits. Other bits
        # under other fences are a read outside the tensors, unless the kernel's bits vary anyway and
        # its first two runs agreed by chance: more runs under the same fences tell the two apart
        fence_read = None
        if first:
            state["nondeterministic"] = nondeterminism(spec, runs)
            if not state["nondeterministic"] and nondeterminism(spec, [runs[0], other]):
                try:
                    state["nondeterministic"] = varies(spec, lambda: _run(spec, op, inputs, dy, params), runs)
                except KernelRaised as exc:
                    return failed("kernel raised", error=str(exc))
                if not state["nondeterministic"]:
                    w = nondeterminism(spec, [runs[0], other])
                    fence_read = {**{k: w[k] for k in ("output", "index", "differing") if k in w},
                                  "explanation": f"the output changes with what lies past the ends of the tensors "
                                                 f"(NaN fences vs fences of 3e38), and {len(runs)} runs with NaN "
                                                 f"fences gave the same bits: the kernel reads outside them"}

        # the truth, only now: while the kernel ran, no float64 result of these inputs existed anywhere
        # it could find (the garbage collector's objects, the caller's frames)
        checked = cotangents_checked(op, spec)
        ref64, ref32 = ([_shared.reference(op, spec.kind, inputs, dy, dtype, spec.params)[i] for i in checked]
                        for dtype in (np.float64, np.float32))
        # the baseline at the kernel's precision: its float32 arithmetic, its outputs stored
        ref32 = [np.asarray(r).astype(storage).astype(np.float64) for r in ref32]
        if spec.casting is not None:
            _bounds.check_casting(op, spec.kind, spec.casting, inputs, dy, spec.params)
        if len(runs[0]) != len(ref64):
            raise SpecError(op.name, f"Triton kernel {spec.name} returned {len(runs[0])} outputs; "
                                     f"it declares {len(ref64)} ({', '.join(spec.outputs)})")

        # 3. NaN poison (after the shape and the dtype: a float64 output is float64 code, whose small
        # error says nothing of a float32 kernel)
        for run in runs:
            for name, out, r in zip(spec.outputs, run, ref64):
                if out.shape != r.shape:
                    return failed("shape", output=name, kernel_shape=list(out.shape), spec_shape=list(r.shape))
                if out.dtype != storage:
                    return failed("dtype", output=name, kernel_dtype=str(out.dtype), expected=spec.dtype)
                bad = ~np.isfinite(out) & np.isfinite(r)
                if bad.any():
                    idx = [int(i) for i in np.argwhere(bad)[0]] if bad.ndim else []
                    return failed("NaN poison", output=name, index=idx, kernel=str(out[tuple(idx)]),
                                  spec_f64=float(r[tuple(idx)]), unwritten_or_nonfinite=int(bad.sum()),
                                  of=int(bad.size))

        # 4. determinism (classified before the truth existed, reported here)
        if first:
            if fence_read is not None:
                return failed("fence read", **fence_read)
            if state["nondeterministic"]:
                evidence["determinism"] = {"runs": len(runs), "bitwise_identical": False,
                                           **state["nondeterministic"], "held_to": "the tolerance rule, each run"}
            else:
                evidence["determinism"] = f"{len(runs)} runs bitwise identical (case {case})"
                evidence["fence_read"] = "a run with fences of 3e38 instead of NaN gave the same bits"

        # 5. tolerance, per output, of every run (the run with the other fences too, where the kernel's
        # bits vary from run to run)
        outs = {}
        per_case[case] = {"outputs": outs}
        siblings = _floor_scale(spec, ref64)
        held = runs + ([other] if other is not None and state.get("nondeterministic") else [])
        bounds = _Bounds(op, spec, inputs, dy, checked)
        if not bounds.analysable:
            evidence["any_order_bound"] = (f"not computed at these dims (more than {_bounds.ANALYSIS_MAX_ELEMENTS} "
                                           f"input elements for the object-array analysis): a failure of the rule "
                                           f"stands" + (", and the documented casting is not checked"
                                                        if spec.casting else ""))
        for run in held:
            for i, (name, out, r64, r32) in enumerate(zip(spec.outputs, run, ref64, ref32)):
                if out.shape != r64.shape:
                    return failed("shape", output=name, kernel_shape=list(out.shape), spec_shape=list(r64.shape))
                # a documented casting is a contract: every element within the bound of that casting
                if spec.casting is not None and bounds.analysable:
                    off = _bounds.outside(out, r64, bounds.casting()[i])
                    if off is not None:
                        return failed("casting", output=name, casting=_casting_words(spec.casting), **off,
                                      explanation="outside the rounding the kernel's documented casting allows in "
                                                  "any summation order: it rounds where its casting says it does not")
                r = _rule.compare(out, r64, r32, backward=spec.kind == "backward", dtype=storage,
                                  floor_scale=siblings)
                if name not in outs or r["error"] > outs[name]["error"]:
                    outs[name] = {k: r[k] for k in ("error", "baseline_error", "bound", "scale")}
                if r["ok"]:
                    continue
                idx = [int(j) for j in np.unravel_index(r["worst_index"], r64.shape)] if r64.ndim else []
                witness = dict(output=name, index=idx, kernel=float(out[tuple(idx)]), spec_f64=float(r64[tuple(idx)]),
                               spec_baseline=float(r32[tuple(idx)]), error=r["error"], bound=r["bound"],
                               baseline_error=r["baseline_error"])
                # outside the rule, whose baseline is one float evaluation in numpy's order: is the kernel
                # inside what rounding can do to any evaluation of the formula at its precision?
                spec_bound = bounds.spec()
                if spec_bound is None:
                    return failed("tolerance", **witness)
                factor = 1.0 if spec.casting is not None else _bounds.K_REFORMULATION[spec.kind]
                within = _bounds.ill_conditioned(out, r64, spec_bound[i], factor, _rule.unit_roundoff(storage))
                if not within:
                    off = _bounds.outside(out, r64, spec_bound[i], factor)
                    return failed("tolerance", **witness, outside_any_order_bound=off)
                state.setdefault("ill_conditioned", []).append({"check": "tolerance", "case": case, **witness,
                                                                **within})

        # 6. program orders, once grid order is known to be within the rule (the interpreter's grid
        # order is one of the many a GPU may use)
        if mode == "interpreter" and first:
            verdict = program_orders(spec, lambda **kw: _run(spec, op, inputs, dy, params, **kw), dims, case,
                                     evidence, failed, runs[0], grid_launches, ref64, ref32, state["seed"],
                                     dtype=storage, floor_scale=siblings, relaxed=bool(state.get("nondeterministic")))
            if verdict is not None:
                return verdict
        elif mode == "gpu" and first:
            evidence["program_orders"] = {"ran": ["the GPU's own"], "note": "on a GPU the hardware chooses the "
                                          "order (and runs programs at once); it is not chosen here"}

        # 7. laws
        laws = {}
        per_case[case]["laws"] = laws
        law_kernels = {k.name: _LawKernel(k, op) for k in (_registry().values() if kernel is None else ())}
        if kernel is not None and spec.forward and spec.forward in _registry():
            law_kernels[spec.forward] = _LawKernel(_registry()[spec.forward], op)
        for law in _shared.law_objects(op, spec):
            try:
                entry = _shared.check_law(op, _LawKernel(spec, op), law, inputs, dy, law_kernels,
                                          params=spec.params, storage=spec.dtype,
                                          accumulate=spec.casting.arithmetic if spec.casting else spec.accumulate)
            except KernelRaised as exc:
                return failed("kernel raised", law=law.name, error=str(exc))
            laws[law.name] = entry
            if entry.get("ill_conditioned"):
                state.setdefault("ill_conditioned", []).append({"check": "law", "case": case, "law": law.name,
                                                                **{k: v for k, v in entry.items() if k != "ok"}})
            elif not entry["ok"]:
                return failed("law", law=law.name, **{k: v for k, v in entry.items() if k != "ok"})
        del ref64, ref32        # gone before the next case's kernel runs
    evidence["nan_poison"] = ("outputs NaN-filled and every buffer fenced before every launch; every element "
                              "written and finite, no fence touched")

    if state.get("ill_conditioned"):
        evidence["ill_conditioned"] = state["ill_conditioned"]
        evidence["reason"] = (f"outside the tolerance rule {len(state['ill_conditioned'])} time(s) (its baseline, one "
                              f"evaluation in numpy's order, was luckier there), yet inside k x the rounding bound "
                              f"that holds for every summation order at the kernel's precision: the inputs are "
                              f"ill-conditioned for {spec.dtype}, and the error does not tell a wrong kernel from "
                              f"rounding (evidence.ill_conditioned: where, the bound and its condition number)")
        return certificate("inconclusive")
    return certificate("kernel-match")


class _Bounds:
    """The any-order rounding bounds of a case's checked outputs, computed when first asked for (they
    cost an object-array evaluation of the spec): the spec's and the kernel's documented casting's.
    None where the analysis does not follow the spec, or above its size (``kernel_bounds.analysable``):
    a failure of the rule then stands, and a casting is not checked (the certificate says so)."""

    def __init__(self, op, spec, inputs, dy, checked):
        self._args = (op, spec.kind, inputs, dy, spec.params)
        self._spec, self._checked, self._found = spec, checked, {}
        self.analysable = _bounds.analysable(inputs, dy)

    def _get(self, casting):
        key = casting is not None
        if key not in self._found and not self.analysable:
            self._found[key] = None
        if key not in self._found:
            try:
                b = _bounds.any_order_bounds(*self._args, storage=self._spec.dtype,
                                             casting=casting or _bounds.undocumented_casting(self._spec.dtype,
                                                                                              self._spec.accumulate))
                self._found[key] = [b[i] for i in self._checked]
            except SpecError:
                raise
            except Exception:       # a construct the running error analysis does not follow
                if casting is not None:
                    raise
                self._found[key] = None
        return self._found[key]

    def spec(self):
        """The bound the tolerance rule's failures are read against: the documented casting's, else the
        spec's formula (in float32, or with any intermediate rounded to a low-precision storage dtype)."""
        return self.casting() if self._spec.casting is not None else self._get(None)

    def casting(self):
        return self._get(self._spec.casting)


def _precision_words(dtype: str) -> str:
    if dtype == "float32":
        return "float32"
    return f"{dtype} inputs and outputs (drawn in {dtype}; the truth from those very values)"


def _casting_words(casting) -> str:
    return f"{casting.doc} (arithmetic in {casting.arithmetic})"


def _floor_scale(spec, ref64) -> float:
    # as `vjpcert check --impl` does (vjpcert/impl.py): a cotangent far smaller than its siblings
    # (RMSNorm's dx on a row of one element, eps / x^2 ~ 1e-6 of dgamma) is computed from the same
    # O(1) quantities and carries their rounding, so the floor's scale is the largest cotangent's
    if spec.kind != "backward":
        return 0.0
    return max((float(np.abs(r).max()) for r in ref64 if r.size), default=0.0)


def _kernel_sampled(op: Op, spec) -> dict:
    """The inputs the kernel brings its own sampler for: non-differentiable ones (a restriction of the
    claim, used in every case) and differentiable ones (one more case, after the gate's)."""
    unknown = set(spec.samplers) - set(op.inputs) - set(op.nondiff)
    if unknown:
        raise SpecError(op.name, f"Triton kernel {spec.name} has samplers for {sorted(unknown)}, which are not "
                                 f"inputs of the spec ({', '.join([*op.inputs, *op.nondiff])})")
    return {"nondiff": [n for n in spec.samplers if n in op.nondiff],
            "diff": [n for n in spec.samplers if n in op.inputs]}


def _sample(op: Op, spec, dims: dict, seed: int, case: str):
    """The inputs of a case: the shared cases (``core/input_cases.py``), the kernel cases
    (``core/kernel_checks.py``), and the kernel's own samplers where it has them (Liger's cross-entropy takes integer labels only:
    its targets are drawn so in every case; a sampler of a differentiable input draws only in the
    case ``kernel_samplers``)."""
    base = _cases.CASES[0] if case == gate.KERNEL_SAMPLERS else case
    inputs, dy = _shared.sample_inputs(op, dims, seed, spec.kind == "backward", base)
    own = _kernel_sampled(op, spec)
    rng = _shared._rng(seed, "triton-samplers", spec.name, str(sorted(dims.items())), case)
    for name in own["nondiff"] + (own["diff"] if case == gate.KERNEL_SAMPLERS else []):
        shape = op.shape({**op.inputs, **op.nondiff}[name], dims)
        inputs[name] = np.asarray(spec.samplers[name](rng, shape, spec.params)).astype(np.float32)
    # the differentiable inputs drawn in the kernel's storage dtype (the truth is computed from these
    # very values); non-differentiable ones (positions, targets, masks) stay as the spec reads them
    storage = storage_dtype(spec.dtype)
    inputs = {k: v.astype(storage) if k in op.inputs else v for k, v in inputs.items()}
    return inputs, (dy.astype(storage) if dy is not None else None)


def _versions() -> dict:
    out = {}
    for name in ("triton", "liger_kernel"):
        try:
            from importlib import metadata
            out[name] = metadata.version(name.replace("_", "-"))
        except Exception:
            pass
    return out


__all__ = ["CHECKER_SHA256", "check_triton_claim", "detect_mode", "triton_claims", "triton_dims"]
