"""A no-op `vjpcert all` (every certificate current), before and after the plot and resource stamps, in
one run on one machine.

"before": reports/stamps.json removed, so every finite-difference plot is redrawn and the kernel
resources are compiled again (what every no-op run did before the stamps); "after": the same command
again, with the stamps the first one wrote. Both runs are the `vjpcert` command in a fresh process
(start-up included). The report directory is a throwaway copy: of --reports DIR when given (its
certificates must be current), else one made first by `vjpcert all OPS` (not timed).

Run: python benchmarks/noop_all.py [OP ...] [--reports DIR]   (default ops: softmax gelu_tanh)
Writes reports/benchmarks/noop_all.json and .md.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VJPCERT = [sys.executable, "-m", "vjpcert.cli"]


def timed_all(ops, reports) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([*VJPCERT, "all", *ops, "--reports", str(reports), "--quiet"],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 3):
        sys.exit(f"vjpcert all failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return round(seconds, 2), proc.returncode, proc.stderr


def _mtimes(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*.json")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ops", nargs="*", default=["softmax", "gelu_tanh"])
    parser.add_argument("--reports", help="time no-op runs on a copy of this (current) report directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reports = Path(tmp) / "reports"
        if args.reports:
            shutil.copytree(args.reports, reports)
            setup = None
        else:
            setup, _, _ = timed_all(args.ops, reports)
        (reports / "stamps.json").unlink(missing_ok=True)
        certificates = _mtimes(reports / "certificates")
        before, _, _ = timed_all(args.ops, reports)
        after, _, _ = timed_all(args.ops, reports)
        ran = certificates != _mtimes(reports / "certificates")     # a no-op writes no certificate
    row = {"ops": args.ops or "all", "reports": args.reports or f"made by `vjpcert all {' '.join(args.ops)}`",
           "first_run_seconds": setup, "noop_before_seconds": before, "noop_after_seconds": after,
           "every_certificate_current": not ran}
    print(f"no-op `vjpcert all {' '.join(args.ops)}`: before (no stamps) {before} s, after (stamps) {after} s"
          + ("" if not ran else "  [WARNING: some claims ran; the reports were not current]"))
    out = ROOT / "reports" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / "noop_all.json").write_text(json.dumps(row, indent=1) + "\n")
    (out / "noop_all.md").write_text(
        "# No-op `vjpcert all`\n\n"
        f"Command: `python benchmarks/noop_all.py {' '.join(sys.argv[1:])}`. Ops: {' '.join(args.ops)}. "
        "Before: no stamps (every plot redrawn, kernel resources recompiled); after: with "
        "`reports/stamps.json`.\n\n| run | seconds |\n|---|---|\n"
        + (f"| first run (certificates made) | {setup} |\n" if setup is not None else "")
        + f"| no-op, before | {before} |\n| no-op, after | {after} |\n")


if __name__ == "__main__":
    main()
