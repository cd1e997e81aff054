"""Benchmark of the kernel tier on this (CPU-only) machine: what the checks cost, what the race
detector adds, and what every kernel needs on an sm_90 GPU.

* every kernel claim at its simulator sizes: verdict, worst error / bound, seconds (the first of
  the two runs is under the race detector);
* the race detector's overhead: one launch per kernel at a middle size, with and without it;
* resources from the sm_90 link (registers, spills, static shared memory, .f64 count) and compile time.
GPU timings against PyTorch come from benchmarks/gpu_run.py on a GPU machine.

Writes reports/benchmarks/kernels.json and kernels.md. Run: python benchmarks/kernels_bench.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.cuda_kernels.check import (check_kernel_claim, detect_mode, kernel_dims, kernel_launches,  # noqa: E402
                                        run_kernel, sample_inputs)
from vjpcert.cuda_kernels.check import _launcher_params  # noqa: E402
from vjpcert.cuda_kernels.registry import KERNELS  # noqa: E402
from vjpcert.cuda_kernels.resources import problems, resource_report  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.core.certificate import atomic_write  # noqa: E402


def checks(ops) -> list[dict]:
    rows = []
    for spec in KERNELS.values():
        for dims, launch in kernel_launches(spec.op, claim=spec.claim):
            cert = check_kernel_claim(ops[spec.op], spec.claim, dims, launch=launch)
            worst = max((o["worst_error_over_bound"] for pc in cert.evidence.get("per_case", {}).values()
                         for o in pc["outputs"].values()), default=0.0)
            rows.append({"kernel": spec.name, "dims": dims, "launch": launch or "simulator", "verdict": cert.verdict,
                         "seconds": cert.seconds, "worst_error_over_bound": round(worst, 3),
                         "cases": cert.evidence.get("cases"),
                         "shared_accesses_checked": cert.evidence.get("race_detector", {}).get("accesses")})
    return rows


def detector_overhead(ops) -> list[dict]:
    from vjpcert.cuda_kernels.simulator import race_detector
    rows = []
    for spec in KERNELS.values():
        op = ops[spec.op]
        dims = kernel_dims(spec.op)[1]
        inputs, dy = sample_inputs(op, dims, 0, spec.kind == "backward")
        params = _launcher_params(op)
        t = time.perf_counter()
        run_kernel(spec, op, inputs, dy, params)
        plain = time.perf_counter() - t
        t = time.perf_counter()
        with race_detector():
            run_kernel(spec, op, inputs, dy, params)
        checked = time.perf_counter() - t
        rows.append({"kernel": spec.name, "dims": dims, "plain_s": round(plain, 4), "race_detector_s": round(checked, 4),
                     "overhead": round(checked / plain, 2) if plain else None})
    return rows


def main():
    if detect_mode() != "simulator":
        print("this benchmark measures the simulator; on a GPU run benchmarks/gpu_run.py", file=sys.stderr)
        return 2
    ops = builtin_ops()
    t0 = time.perf_counter()
    result = {"checks": checks(ops)}
    result["checks_seconds"] = round(time.perf_counter() - t0, 2)
    result["race_detector"] = detector_overhead(ops)
    t = time.perf_counter()
    report = resource_report()
    result["ptx_seconds"] = round(time.perf_counter() - t, 2)
    result["resources"] = report
    result["resource_problems"] = problems(report)
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "kernels.json", json.dumps(result, indent=2, default=str) + "\n")
    lines = ["# Kernel tier (simulator and sm_90 compile, CPU only)", "",
             f"{len(result['checks'])} kernel checks in {result['checks_seconds']} s "
             f"({sum(c['verdict'] == 'kernel-match' for c in result['checks'])} kernel-match); "
             f"sm_90 compile + link of {len(report['kernels'])} kernels in {result['ptx_seconds']} s; "
             f"problems: {result['resource_problems'] or 'none'}.", "",
             "| kernel | dims | launch | verdict | worst error / bound (all cases) | s |", "|---|---|---|---|---|---|"]
    lines += [f"| {c['kernel']} | {c['dims']} | {c['launch']} | {c['verdict']} | {c['worst_error_over_bound']} | "
              f"{c['seconds']} |" for c in result["checks"]]
    lines += ["", "| kernel | dims | plain s | race detector s | overhead |", "|---|---|---|---|---|"]
    lines += [f"| {r['kernel']} | {r['dims']} | {r['plain_s']} | {r['race_detector_s']} | {r['overhead']}x |"
              for r in result["race_detector"]]
    lines += ["", "| compiled kernel (sm_90) | registers | spill bytes | static shared bytes | .f64 | compile s |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r.get('registers')} | {r.get('spill_bytes')} | {r.get('shared_bytes')} | "
              f"{r.get('f64_instructions')} | {r.get('seconds')} |" for n, r in sorted(report["kernels"].items())]
    atomic_write(out / "kernels.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
