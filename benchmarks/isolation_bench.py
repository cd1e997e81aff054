"""Whether the suite's verdicts depend on how it is run: every test file alone (one process, no
pytest-xdist, so no file leans on another's fixtures, imports or leftovers), then README's test command
with the tests shuffled (pytest-randomly with a seed: the conftest still runs the long files first and
the framework tests last in each worker, so what is shuffled is the order of files and of tests
within each of those parts). Each run in a fresh process, with its wall and CPU seconds.

Writes reports/benchmarks/isolation.json and .md, and exits 1 if any run failed (its seed, for the
shuffled run, is in both: ``pytest -p randomly --randomly-seed=N`` runs that order again).
Run: python benchmarks/isolation_bench.py [--skip alone|shuffled] [--seed N] [--only FILE ...]
(about 16 minutes alone and 7 shuffled on 2 cores).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.feedback_bench import _pytest  # noqa: E402  (README's pytest, in a fresh process, timed)


def test_files() -> list[Path]:
    return [p.relative_to(ROOT) for folder in ("tests", "examples") for p in sorted((ROOT / folder).glob("test_*.py"))]


def alone(files: list[Path], cwd: Path = ROOT) -> list[dict]:
    rows = []
    for i, f in enumerate(files, 1):
        out = _pytest(["-n", "0", str(f)], cwd=cwd)
        # exit code 5, no tests collected: the file skipped itself when collected (an optional dependency
        # missing, "1 skipped"); an error while collecting it is exit code 2
        rows.append({"file": str(f), "ok": out["code"] in (0, 5), "code": out["code"], "wall_s": out["wall_s"],
                     "cpu_s": out["cpu_s"], "summary": out["summary"], "failed": out["failed"]})
        print(f"  [{i}/{len(files)}] {f}: {'ok' if rows[-1]['ok'] else 'FAILED'} ({out['wall_s']:.1f} s) "
              f"{out['summary']}", flush=True)
    return rows


def shuffled(seed: int) -> dict:
    out = _pytest(["-n", "auto", "-p", "randomly", f"--randomly-seed={seed}"])
    row = {"seed": seed, "ok": out["code"] == 0, "code": out["code"], "wall_s": out["wall_s"], "cpu_s": out["cpu_s"],
           "summary": out["summary"], "failed": out["failed"]}
    print(f"  shuffled (seed {seed}): {'ok' if row['ok'] else 'FAILED'} ({row['wall_s']:.0f} s) {row['summary']}",
          flush=True)
    return row


def render(data: dict) -> str:
    lines = ["# The suite, run alone and shuffled", "",
             f"{data['machine']}; Python {data['python']}. `python benchmarks/isolation_bench.py` writes this page.", ""]
    rows = data.get("alone")
    if rows is not None:
        bad = [r for r in rows if not r["ok"]]
        skipped = [r["file"] for r in rows if r["code"] == 5]
        lines += ["## Every test file alone (`pytest -n 0 FILE`, each in a fresh process)", "",
                  f"{len(rows) - len(bad)} of {len(rows)} files pass alone"
                  + (f" (skipped whole when collected, an optional dependency missing: "
                     f"{', '.join(f'`{f}`' for f in skipped)})" if skipped else "")
                  + f"; {sum(r['wall_s'] for r in rows):.0f} s wall and {sum(r['cpu_s'] for r in rows):.0f} CPU s "
                  f"in all.", ""]
        if bad:
            lines += ["| file failing alone | exit code | summary |", "|---|---|---|",
                      *[f"| `{r['file']}` | {r['code']} | {r['summary']} |" for r in bad], ""]
        lines += ["The slowest alone:", "", "| file | wall s | CPU s | summary |", "|---|---|---|---|",
                  *[f"| `{r['file']}` | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['summary']} |"
                    for r in sorted(rows, key=lambda r: -r["wall_s"])[:12]], ""]
    s = data.get("shuffled")
    if s is not None:
        lines += ["## README's test command, shuffled (`pytest -n auto -p randomly --randomly-seed=N`)", "",
                  f"Seed {s['seed']}: {'passed' if s['ok'] else 'FAILED'} (exit code {s['code']}), "
                  f"{s['wall_s']:.0f} s wall, {s['cpu_s']:.0f} CPU s. {s['summary']}", "",
                  *[f"- {line}" for line in s["failed"]], ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip", action="append", default=[], choices=("alone", "shuffled"))
    p.add_argument("--seed", type=int, default=None, help="the shuffled run's seed (default: drawn, and reported)")
    p.add_argument("--only", action="append", default=[], metavar="FILE", help="these test files alone (repeatable)")
    args = p.parse_args(argv)
    if "shuffled" not in args.skip and importlib.util.find_spec("pytest_randomly") is None:
        p.error("the shuffled run needs pytest-randomly: pip install -e '.[test]' (or --skip shuffled)")
    files = test_files()
    if args.only:
        unknown = set(args.only) - {str(f) for f in files}
        if unknown:
            p.error(f"not a test file of the suite: {', '.join(sorted(unknown))}")
        files = [f for f in files if str(f) in args.only]
    data = {"machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)", "python": platform.python_version()}
    if "alone" not in args.skip:
        print(f"every test file alone ({len(files)} files):", flush=True)
        data["alone"] = alone(files)
    if "shuffled" not in args.skip:
        print("README's test command, shuffled:", flush=True)
        data["shuffled"] = shuffled(args.seed if args.seed is not None else random.SystemRandom().randrange(2**31))
    out = ROOT / "reports" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    from vjpcert.core.certificate import atomic_write
    atomic_write(out / "isolation.json", json.dumps(data, indent=2) + "\n")
    atomic_write(out / "isolation.md", render(data))
    print(f"wrote {out / 'isolation.md'}")
    runs = [*data.get("alone", []), *([data["shuffled"]] if "shuffled" in data else [])]
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
