#!/usr/bin/env python3
"""Registers, spills, shared memory and theoretical occupancy of every kernel on sm_90, before and after
the kernel work on resources and occupancy (GPU timings need a GPU: benchmarks/gpu_run.py).

"Before" is reports/kernels/baseline_resources.json, the sm_90 resource report committed with the
kernels as they were (main at 0e94827: shared-memory tree reductions, flash row statistics by one
thread per row, unpadded tiles, no launch bounds); "after" is compiled now, without a GPU
(cuda_kernels.resources: numba.cuda.compile_ptx for sm_90, linked by nvJitLink). Occupancy is the
fraction of an SM's 64 warps that can be resident, from registers, threads and shared memory
(cuda_kernels.resources.occupancy, the CUDA occupancy calculator's rules for compute capability 9.0).

Writes reports/kernels/occupancy.json and occupancy.md. Run: python benchmarks/kernel_occupancy.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.core.certificate import atomic_write  # noqa: E402
from vjpcert.cuda_kernels.resources import occupancy, problems, resource_report  # noqa: E402

OUT = ROOT / "reports" / "kernels"


def _row(r: dict | None) -> dict | None:
    if not r or not r.get("registers"):
        return None
    threads = r.get("threads", 256)          # every kernel of the baseline ran blocks of 256 threads
    occ = occupancy(r["registers"], threads, r.get("shared_bytes", 0))
    return {"registers": r["registers"], "spill_bytes": r.get("spill_bytes", 0),
            "shared_bytes": r.get("shared_bytes", 0), "threads": threads, **occ}


def main() -> int:
    before = json.loads((OUT / "baseline_resources.json").read_text())["kernels"]
    report = resource_report()
    after = report["kernels"]
    rows = {name: {"before": _row(before.get(name)), "after": _row(after.get(name))}
            for name in sorted(set(before) | set(after))}
    result = {"arch": report["arch"], "versions": report["versions"], "problems": problems(report), "kernels": rows}
    atomic_write(OUT / "occupancy.json", json.dumps(result, indent=1, sort_keys=True) + "\n")

    def cell(r, key, fmt="{}"):
        return fmt.format(r[key]) if r else "-"
    lines = ["# Kernel resources and occupancy on sm_90, before and after the occupancy work", "",
             "Compiled without a GPU (`numba.cuda.compile_ptx` for sm_90, linked with nvJitLink; "
             "`benchmarks/kernel_occupancy.py`). Occupancy: resident warps / 64 per SM, limited by registers, "
             "threads or shared memory (228 KiB per SM, 1 KiB reserved per block). Before: main at 0e94827 "
             "(`baseline_resources.json`). After: warp-shuffle block reductions (2 barriers instead of 9), flash "
             "row max and sum by shuffles among the row's 16 lanes (no serial thread, 3 barriers per key tile "
             "instead of 5), flash tiles padded to D + 1 floats per row (no 16-way bank conflict on K and V), "
             "launch bounds asking for 4 resident blocks of 256 threads (3 for the norms' backwards) where the "
             "compile shows no spill. GPU timings: `benchmarks/gpu_run.py` on a GPU.", "",
             f"Problems (spills, > 48 KiB static shared memory, .f64): {result['problems'] or 'none'}.", "",
             "| kernel | registers before | after | static shared bytes before | after | occupancy before | after "
             "| limited by (after) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        b, a = r["before"], r["after"]
        lines.append(f"| `{name}` | {cell(b, 'registers')} | {cell(a, 'registers')} | {cell(b, 'shared_bytes')} | "
                     f"{cell(a, 'shared_bytes')} | {cell(b, 'occupancy', '{:.1%}')} | "
                     f"{cell(a, 'occupancy', '{:.1%}')} | "
                     f"{cell(a, 'limited_by')} |")
    atomic_write(OUT / "occupancy.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
