"""Benchmark of the symbolic tier (issue: specs and exact proofs).

1. `vjpcert prove` of every built-in op at default dims, cold (a fresh process), wall time.
2. For softmax, RMSNorm and LayerNorm: the largest n proved exactly within 1 s per claim, walking a
   ladder of n; and, in the same run, the peer this project replaces -- SymPy's own route (Jacobian by
   ``sympy.diff`` then ``simplify`` of backward - J^T dy) -- at the small n it can reach, as a ratio.

Writes reports/benchmarks/prove.json and prove.md. Run: python benchmarks/prove_bench.py

With ``--general``, only the every-size proofs: `vjpcert prove --jobs 2`, cold, with
``--no-general`` and without, and per every-size claim the time to derive its statement from the spec
(the shape-polymorphic trace), to normalise it, to cross-check it at concrete sizes and to prove the
spec there with the fixed-dims prover, read from the certificates of that run. Writes
reports/benchmarks/general.json and general.md.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.core.budget import run_with_budget  # noqa: E402
from vjpcert.core.certificate import atomic_write  # noqa: E402
from vjpcert.symbolic.fixed import strategies  # noqa: E402
from vjpcert.symbolic.fixed.claims import trace_claim  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402

LADDER = {"softmax": [16, 32, 64, 128, 192, 256], "rmsnorm": [8, 16, 32, 64, 128, 256],
          "layernorm": [8, 16, 32, 64, 128, 256]}
PEER_N = [2, 3, 4, 6, 8]
PEER_BUDGET_S = 20.0


def cold_prove_all(*extra: str, keep=None) -> float:
    """Wall time of `vjpcert prove --jobs 2` of every built-in op in a fresh process; with ``keep``,
    a function given the reports directory before it is removed."""
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "vjpcert.cli", "prove", "--quiet", "--jobs", "2",
                               "--reports", tmp, *extra], capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"vjpcert prove exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        if keep is not None:
            keep(Path(tmp))
        return wall


def general_figures() -> dict:
    """Cold `vjpcert prove --jobs 2` with and without the every-size proofs, and per every-size claim
    what its certificate says the steps took."""
    rows: list = []

    def read(root: Path):
        # certificates carry no timings: the run's times are in timings.json beside them, the
        # steps' times in the certificate objects only (so they are measured again here, in process)
        from vjpcert.specs import builtin_ops
        from vjpcert.symbolic.every_size.general import prove_general
        times = json.loads((root / "timings.json").read_text())
        for path in sorted((root / "certificates").rglob("symbolic-general__*.json")):
            rec = json.loads(path.read_text())
            t = prove_general(builtin_ops()[rec["op"]], rec["claim"]).evidence.get("timings", {})
            rows.append({"op": rec["op"], "claim": rec["claim"], "verdict": rec["verdict"],
                         "dims": rec["dims"], "seconds": times.get(str(path.relative_to(root))),
                         "derive": t.get("build"), "normalise": t.get("normalise"),
                         "cross_check": t.get("cross-check"), "fixed_dims": t.get("fixed-dims"),
                         "cross_check_sizes": len(rec["evidence"].get("cross_check", {}).get("at", []))})
    without = cold_prove_all("--no-general")
    with_general = cold_prove_all(keep=read)
    total = lambda key: round(sum(r[key] or 0 for r in rows), 2)  # noqa: E731
    return {"command": "vjpcert prove --jobs 2 (every built-in op, default dims, cold process)",
            "cold_no_general_seconds": round(without, 2), "cold_with_general_seconds": round(with_general, 2),
            "general_claims": len(rows), "proved_general": sum(r["verdict"] == "proved-general" for r in rows),
            "sum_seconds": {k: total(k) for k in ("seconds", "derive", "normalise", "cross_check", "fixed_dims")},
            "claims": rows}


def write_general(result: dict):
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "general.json", json.dumps(result, indent=2) + "\n")
    s = result["sum_seconds"]
    lines = ["# Every-size proofs, derived from the spec's code", "",
             "Command: `python benchmarks/prove_bench.py --general` (2 cores, shared).", "",
             f"- `{result['command']}`: **{result['cold_with_general_seconds']} s** with the every-size "
             f"proofs, **{result['cold_no_general_seconds']} s** with `--no-general`",
             f"- {result['proved_general']} of {result['general_claims']} every-size claims `proved-general`; "
             f"summed over them (one process each, as the certificates record it): {s['seconds']} s in all, "
             f"of which deriving the statements from the specs {s['derive']} s, normalising {s['normalise']} s, "
             f"cross-checking at concrete sizes {s['cross_check']} s, the fixed-dims prover {s['fixed_dims']} s",
             "", "| op | claim | dims | verdict | derive s | normalise s | cross-check s (sizes) | fixed-dims s | total s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["claims"]:
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines.append(f"| {r['op']} | `{r['claim']}` | {dims} | {r['verdict']} | {r['derive']} | {r['normalise']} | "
                     f"{r['cross_check']} ({r['cross_check_sizes']}) | {r['fixed_dims']} | {r['seconds']} |")
    atomic_write(out / "general.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def largest_n(op, claim: str) -> tuple[int, list]:
    best, rows = 0, []
    for n in LADDER[op.name]:
        cert = prove_claim(op, claim, {"rows": 1, "n": n}, budget=30)
        rows.append({"n": n, "verdict": cert.verdict, "seconds": cert.seconds})
        if cert.verdict == "proved" and cert.seconds <= 1.0:
            best = n
        else:
            break
    return best, rows


def peer_vs_ours(op, claim: str) -> list:
    rows = []
    for n in PEER_N:
        traced = trace_claim(op, claim, {"rows": 1, "n": n})
        peer = run_with_budget(lambda: strategies.sympy_simplify(traced), PEER_BUDGET_S)
        ours = prove_claim(op, claim, {"rows": 1, "n": n})
        rows.append({"n": n, "sympy_seconds": round(peer.seconds, 3) if peer.status == "ok" else None,
                     "sympy_status": peer.status if peer.status != "ok" else peer.value["status"],
                     "ours_seconds": ours.seconds, "ours_verdict": ours.verdict,
                     "ratio": round(peer.seconds / max(ours.seconds, 1e-4), 1) if peer.status == "ok" else None})
        if peer.status != "ok":
            break
    return rows


def main():
    ops = builtin_ops()
    result = {"cold_prove_all_seconds": round(cold_prove_all(), 2), "largest_n_within_1s": {},
              "peer_sympy": {}}
    for name in LADDER:
        op = ops[name]
        for claim in op.claims():
            best, rows = largest_n(op, claim)
            result["largest_n_within_1s"][f"{name} {claim}"] = {"n": best, "ladder": rows}
        result["peer_sympy"][f"{name} vjp[x]"] = peer_vs_ours(op, "vjp[x]")
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "prove.json", json.dumps(result, indent=2) + "\n")
    lines = ["# Symbolic tier benchmark", "", "Command: `python benchmarks/prove_bench.py` (2 cores).", "",
             f"- `vjpcert prove` (all built-in ops, default dims, `--jobs 2`, cold process): "
             f"**{result['cold_prove_all_seconds']} s** (target <= 30 s)", "",
             "| claim | largest n proved in <= 1 s | ladder (n: seconds) |", "|---|---|---|"]
    for key, v in result["largest_n_within_1s"].items():
        ladder = ", ".join(f"{r['n']}: {r['seconds']:.2f}" for r in v["ladder"])
        lines.append(f"| {key} | **{v['n']}** | {ladder} |")
    lines += ["", "Peer in the same run: SymPy's own route (`diff`, then `cancel`/`simplify`), "
              f"budget {PEER_BUDGET_S:.0f} s per claim.", "",
              "| claim | n | sympy s | ours s | ratio |", "|---|---|---|---|---|"]
    for key, rows in result["peer_sympy"].items():
        for r in rows:
            lines.append(f"| {key} | {r['n']} | {r['sympy_seconds'] if r['sympy_seconds'] is not None else r['sympy_status']} "
                         f"| {r['ours_seconds']:.3f} | {r['ratio'] if r['ratio'] is not None else '-'} |")
    atomic_write(out / "prove.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if "--general" in sys.argv[1:]:
        write_general(general_figures())
    else:
        main()
