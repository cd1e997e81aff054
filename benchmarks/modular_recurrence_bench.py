"""How the modular tier's cost grows with a recurrence's length (symbolic.modular at production T).

A gate's division is a new denominator at every step of a GRU or an LSTM, so the state at step t
carries the denominators of all the steps before it, and the randomised test's degree bound grows up
to T^2 (the GRU's). What must not grow as T^2 is the time: ``symbolic/modular/bound.py`` shares a
state's classes from step to step by reference. For each op, one joint trial of every VJP claim at T/16, T/4 and T
(one process per run, so each has its own memory), seconds per trial and the degree bound; the peer
of each length is the same op at a quarter of it, in the same run: a ratio near 4 is linear in T,
near 16 quadratic. The chunked linear attention and the chunked gated delta rule are timed the same
way at their production size, each beside its recurrent form. ``--only`` reruns some ops and keeps the
other rows of the committed figures.

``--wide``: the GRU and the LSTM at a production width (256 units, 128 inputs, T = 2048), three trials
each: their millions of gate atoms make one trial's collision term alone above 1, so what the three
trials state rests on their agreeing on how they identified their atoms (``false_pass_bound``); the
table gives both bounds. Kept in the same files beside the length runs.

Writes reports/benchmarks/modular_recurrence.json and .md.
Run: python benchmarks/modular_recurrence_bench.py [--only OP ...] [--length T] [--wide] [--render]
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# op, its widths (and structural params), the lengths' dim
OPS = [
    ("elman_rnn", {"n": 16, "k": 8}),
    ("gru", {"n": 16, "k": 8}),
    ("lstm", {"n": 16, "k": 8}),
    ("linear_attention", {"h": 4, "d": 64, "e": 64}),
    ("linear_attention_chunked", {"h": 4, "d": 64, "e": 64, "C": 64}),
    ("gated_delta_rule", {"h": 4, "dk": 64, "dv": 64}),
    ("gated_delta_rule_chunked", {"h": 4, "dk": 64, "dv": 64, "C": 64}),
]
WIDE = [("gru", {"n": 256, "k": 128, "T": 2048}), ("lstm", {"n": 256, "k": 128, "T": 2048})]
WIDE_TRIALS = 3


def one(name: str, entry: dict, trials: int = 1) -> dict:
    """``trials`` trials of every VJP claim of ``name`` at ``entry``, in this process."""
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic.modular.check import check_vjps, false_pass_bound, split_dims
    op = builtin_ops()[name]
    dims, params = split_dims(op, entry)
    start = time.perf_counter()
    run = check_vjps(op, dims, params, trials=trials)
    seconds = time.perf_counter() - start
    roots = max((len(F._roots) for F in run["fields"]), default=0)
    bound = false_pass_bound(run["bound"], run["fields"], run["trials"], roots)
    out = {"op": name, "dims": entry, "seconds_per_trial": round(run["seconds_per_trial"][0], 2),
           "seconds_total": round(seconds, 2),
           "failed": sorted(c for c, r in run["claims"].items() if r["status"] == "nonzero"),
           "degree_bound": bound["degree"], "false_pass_per_trial": f"{bound['per_trial']:.3g}",
           "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
    if trials > 1:
        out.update(trials=run["trials"], seconds_per_trials=[round(s, 1) for s in run["seconds_per_trial"]],
                   atoms=bound["atoms"], identifications_agreed=bound["identifications_agreed"],
                   false_pass_total=f"{bound['total']:.3g}",
                   false_pass_without_agreement=f"{bound['per_trial'] ** run['trials']:.3g}")
    return out


def _subprocess(name: str, entry: dict, timeout: float, trials: int = 1) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--one", name, json.dumps(entry), "--trials", str(trials)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"{name} at {entry} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render(data: dict) -> str:
    lines = ["# The modular tier along a recurrence's length", "",
             "`python benchmarks/modular_recurrence_bench.py` (each run in its own process). One trial = one "
             "prime in [2^59, 2^60) and one random point: the forward on dual numbers, backpropagation through "
             "time, and the residual of every VJP claim at once. The peer of each length is the same op at a "
             "quarter of it, in the same run: a ratio near 4 is linear in T, near 16 quadratic.", "",
             f"Machine: {data['machine']}.", "",
             "| op | dims | seconds per trial | ratio to T/4 | degree bound | false pass per trial | residual | peak memory |",
             "|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in data["runs"]:
        by.setdefault(r["op"], []).append(r)
    for name, runs in by.items():
        for i, r in enumerate(runs):
            ratio = f"{r['seconds_per_trial'] / runs[i - 1]['seconds_per_trial']:.1f}x" if i else "-"
            residual = "0" if not r["failed"] else "nonzero: " + ", ".join(r["failed"])
            lines.append(f"| `{name}` | {r['dims']} | {r['seconds_per_trial']} | {ratio} | {r['degree_bound']:.3g} "
                         f"| {r['false_pass_per_trial']} | {residual} | {r['peak_rss_gib']} GiB |")
    ratios = [r["seconds_per_trial"] / rs[i - 1]["seconds_per_trial"] for rs in by.values()
              for i, r in enumerate(rs) if i]
    lines += ["", "Each gate's division (the GRU's r and z, the LSTM's i, f and o) is a new denominator at every "
              "step, which the state carries on to the next; Elman's network, the linear attention and the gated "
              "delta rule divide by nothing in their recurrent forms (the chunked linear attention by powers of "
              "the decay, the chunked gated delta rule by the gates' products, and its triangular solve "
              "multiplies out a series of up to C - 1 powers). The degree bound grows as the table shows; the "
              f"time per trial grows {min(ratios):.1f}x to {max(ratios):.1f}x for each 4x in T (linear is 4x, "
              "quadratic 16x): `symbolic/modular/bound.py` carries a state's denominator classes from step to "
              "step by reference instead of visiting them one by one." if ratios else ""]
    if data.get("wide"):
        lines += ["", "## At a production width: three trials", "",
                  "`python benchmarks/modular_recurrence_bench.py --wide`. One trial's collision term counts every "
                  "pair of the millions of gate atoms, which puts it above 1: alone, the trials state nothing. "
                  "Where every trial identified its atoms alike (the same classes, folds and signs), a false "
                  "identification must recur in every trial, and the collision terms fall with the power of the "
                  "trials (`symbolic/modular/check.py`, `false_pass_bound`).", "",
                  "| op | dims | atoms | seconds per trial | residual | per trial | three trials, per-trial bound "
                  "| identifications agreed | three trials, stated |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in data["wide"]:
            residual = "0" if not r["failed"] else "nonzero: " + ", ".join(r["failed"])
            lines.append(f"| `{r['op']}` | {r['dims']} | {r['atoms']} | {r['seconds_per_trials']} | {residual} "
                         f"| {r['false_pass_per_trial']} | {r['false_pass_without_agreement']} "
                         f"| {'yes' if r['identifications_agreed'] else 'no'} | **{r['false_pass_total']}** |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("OP", "ENTRY"), help=argparse.SUPPRESS)
    ap.add_argument("--only", nargs="*", help="op names (default: all)")
    ap.add_argument("--length", type=int, default=2048, help="the longest T (default 2048)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--wide", action="store_true", help="only the GRU and the LSTM at a production width, "
                                                         "three trials each")
    ap.add_argument("--trials", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--render", action="store_true", help="only re-render the .md from the .json")
    args = ap.parse_args()
    out = ROOT / "reports" / "benchmarks"
    if args.render:
        (out / "modular_recurrence.md").write_text(render(json.loads((out / "modular_recurrence.json").read_text())))
        return
    if args.one:
        print(json.dumps(one(args.one[0], json.loads(args.one[1]), args.trials)))
        return
    committed = out / "modular_recurrence.json"
    if args.wide:
        wide = []
        for name, entry in WIDE:
            print(f"{name} {entry}, {WIDE_TRIALS} trials ...", flush=True)
            wide.append(_subprocess(name, entry, args.timeout * WIDE_TRIALS, WIDE_TRIALS))
            print(f"  {wide[-1]['seconds_per_trials']} s, stated {wide[-1]['false_pass_total']}", flush=True)
        data = json.loads(committed.read_text())
        data["wide"] = wide
        committed.write_text(json.dumps(data, indent=1) + "\n")
        (out / "modular_recurrence.md").write_text(render(data))
        print(render(data))
        return
    unknown = set(args.only or ()) - {name for name, _ in OPS}
    if unknown:
        raise SystemExit(f"unknown ops: {sorted(unknown)} (known: {[name for name, _ in OPS]})")
    runs = []
    for name, widths in OPS:
        if args.only and name not in args.only:
            continue
        for T in (args.length // 16, args.length // 4, args.length):
            entry = {**widths, "T": T}
            print(f"{name} {entry} ...", flush=True)
            r = _subprocess(name, entry, args.timeout)
            print(f"  {r['seconds_per_trial']} s per trial, degree bound {r['degree_bound']:.3g}", flush=True)
            runs.append(r)
    previous = json.loads(committed.read_text()) if committed.is_file() else {}
    if args.only and previous:                                          # keep the other ops' rows, in order
        kept = previous["runs"]
        order = [name for name, _ in OPS]
        runs = sorted([r for r in kept if r["op"] not in args.only] + runs,
                      key=lambda r: (order.index(r["op"]) if r["op"] in order else len(order), r["dims"].get("T", 0)))
    import numpy as np
    data = {"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}; Python "
                       f"{platform.python_version()}, numpy {np.__version__}", "runs": runs,
            **({"wide": previous["wide"]} if previous.get("wide") else {})}
    out.mkdir(parents=True, exist_ok=True)
    (out / "modular_recurrence.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "modular_recurrence.md").write_text(render(data))
    print(render(data))


if __name__ == "__main__":
    main()
