"""Speed of this tree against an earlier commit, in the same run: did writing the spec language once
(one table every interpreter checks, the derivative table, the split provers) cost speed?

Three figures, each measured on both trees, the runs interleaved (baseline, current, baseline, ...) so
a busy moment of this shared machine hits both alike:
- **exact reach**: CPU seconds of every claim of softmax, log_softmax, rmsnorm and layernorm at n = 32,
  and of attention at m = d = 6, proved by the fixed-dims prover (about the baseline's reach);
- **modular trials**: seconds per trial of the ViT-Tiny, Llama-style and GPT-2-small blocks at
  production size on one thread (``benchmarks/modular_bench.py --one block K --single`` of each tree);
- **``vjpcert all --force``** of leaf ops (every tier: symbolic, every size, numeric, kernels), CPU
  seconds of the whole command -- on this tree also with the kernel gate held to the baseline's five
  input cases (``BASELINE_KERNEL_CASES``: the same cases on both trees) -- and by tier (``vjpcert
  prove``, ``check``, ``kernels`` of the same ops):
  the spec language is interpreted by the first two; the kernel tier runs kernels in the CUDA simulator
  and compares them with the spec's float references, so its figure moves with what the kernel gate
  checks, not with the language.

``--merge`` keeps the committed figures of what ``--skip`` leaves out (a partial rerun). A ViT-Tiny
trial is a fraction of a second, so each round takes the best of three of its runs.

Each tree is imported from its own folder: an import hook placed first on ``sys.meta_path`` maps
``vjpcert`` and ``vjpcert.<floor>`` to the tree's folders (the installed package maps them to this
checkout), so the baseline runs its own code with this environment's libraries.
Writes reports/benchmarks/language_speed.{json,md}.
Run: python benchmarks/language_speed.py [--baseline REV] [--skip reach|modular|all|tiers] [--rounds N] [--merge]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "benchmarks"
# the last commit before the spec language was written once (core/language.py, core/derivatives.py,
# symbolic/ split into fixed/, every_size/, composition/, modular/)
BASELINE = "5c3f51d"
REACH_OPS = {"softmax": {"n": 32}, "log_softmax": {"n": 32}, "rmsnorm": {"n": 32}, "layernorm": {"n": 32},
             "attention": {"m": 6, "d": 6}}
ALL_OPS = ["softmax", "log_softmax", "rmsnorm", "layernorm", "gelu_tanh"]
TIERS = ("prove", "check", "kernels")
BLOCKS = {0: "ViT-Tiny", 1: "GPT-2-small", 2: "Llama-style"}
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}

# imported first in every child (``sitecustomize``): vjpcert and its floors from the tree in VJPCERT_TREE
SHIM = '''
import importlib.machinery, importlib.util, os, sys
_TREE = os.environ["VJPCERT_TREE"]
_FLOORS = {d for d in os.listdir(_TREE) if os.path.isfile(os.path.join(_TREE, d, "__init__.py"))}

class _TreeFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        parts = name.split(".")
        if parts[0] != "vjpcert":
            return None
        if len(parts) > 2:              # from the tree or not at all (never the installed checkout's)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None:
                raise ModuleNotFoundError(f"No module named {name!r} in {_TREE}", name=name)
            return spec
        folder = os.path.join(_TREE, "vjpcert" if len(parts) == 1 else parts[1])
        if len(parts) == 2 and (parts[1] not in _FLOORS or parts[1] == "vjpcert"):
            return None
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])

sys.meta_path.insert(0, _TreeFinder)
'''

REACH = '''
import json, resource, sys, time

def cpu():      # this process and the strategies it forks
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
try:
    from vjpcert.symbolic.fixed.prover import prove_claim
except ImportError:
    from vjpcert.symbolic.prover import prove_claim
from vjpcert.specs import builtin_ops
ops = builtin_ops()
out = {}
for name, dims in json.loads(sys.argv[1]).items():
    op = ops[name]
    dims = {**op.dims[0], **dims}
    for claim in op.claims():
        t = cpu()
        cert = prove_claim(op, claim, dims, budget=60)
        out[f"{name} {claim}"] = {"cpu_s": round(cpu() - t, 3), "verdict": cert.verdict}
print("RESULT " + json.dumps(out))
'''


def _tree(rev: str, into: Path) -> Path:
    """The files of ``rev`` (git archive), unpacked under ``into``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    dest = into / rev
    dest.mkdir(parents=True)
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(dest, filter="data")
    return dest


def _run(tree: Path, shim: Path, argv: list[str], env: dict | None = None, timeout: float = 3600,
         ok=(0,)) -> tuple:
    """(stdout, wall seconds, CPU seconds of the child) of ``python argv`` with ``tree`` imported."""
    full = {**os.environ, "VJPCERT_TREE": str(tree), "PYTHONPATH": str(shim), **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=tree, env=full, capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        raise RuntimeError(f"{argv[:3]} in {tree.name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return proc.stdout, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def reach(tree: Path, shim: Path) -> dict:
    out, _, _ = _run(tree, shim, ["-c", REACH, json.dumps(REACH_OPS)], ONE_THREAD)
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def modular(tree: Path, shim: Path, k: int) -> float:
    if k == 0:                                        # ViT-Tiny: a fraction of a second, best of three
        return min(_modular_once(tree, shim, k) for _ in range(3))
    return _modular_once(tree, shim, k)


def _modular_once(tree: Path, shim: Path, k: int) -> float:
    out, _, _ = _run(tree, shim, ["benchmarks/modular_bench.py", "--one", "block", str(k), "--single"], ONE_THREAD)
    res = json.loads(out.strip().splitlines()[-1])
    x = next(v for v in res.values() if isinstance(v, dict) and "seconds_per_trial" in v)
    return min(x["seconds_per_trial"])


# the kernel gate held to the input cases the baseline's checked (its five of core/input_cases.py, not
# the three kernel cases added since): the same cases on both trees
BASELINE_KERNEL_CASES = ("import vjpcert.cuda_kernels.settings as _tol, vjpcert.core.input_cases as _cases; "
                         "_tol.CASES = _cases.CASES; ")


def forced_cpu(tree: Path, shim: Path, reports: Path, command: str = "all", prelude: str = "") -> float:
    """CPU seconds of `vjpcert <command> ALL_OPS --force` (all, or one tier) in ``tree``, after
    ``prelude``."""
    shutil.rmtree(reports, ignore_errors=True)
    argv = ["-c", prelude + "import sys; from vjpcert.cli import main; sys.exit(main())", command, *ALL_OPS,
            "--force", "--quiet", "--reports", str(reports)]
    _, _, cpu = _run(tree, shim, argv, ok=(0, 1))      # 1: a claim failed (the Liger-free ops have none)
    return cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=BASELINE, help=f"the commit compared against (default {BASELINE})")
    ap.add_argument("--skip", action="append", default=[], choices=["reach", "modular", "all", "tiers"])
    ap.add_argument("--merge", action="store_true", help="keep the committed figures of what --skip leaves out")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of each figure (default 2)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vjpcert-speed-"))
    try:
        shim = work / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(SHIM)
        trees = {"baseline": _tree(args.baseline, work), "current": ROOT}
        data = {"baseline": args.baseline, "current": _head(), "machine": f"{platform.machine()}, "
                f"{os.cpu_count()} cores", "rounds": args.rounds, "figures": {}}
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for label in order:
                tree = trees[label]
                fig = data["figures"].setdefault(label, {"reach": {}, "modular": {}, "all_cpu_s": [], "tiers": {}})
                if "reach" not in args.skip:
                    for claim, v in reach(tree, shim).items():
                        fig["reach"].setdefault(claim, []).append(v)
                    print(f"{label} reach round {r}: {sum(v[-1]['cpu_s'] for v in fig['reach'].values()):.1f} CPU s",
                          flush=True)
                if "modular" not in args.skip:
                    for k, name in BLOCKS.items():
                        fig["modular"].setdefault(name, []).append(modular(tree, shim, k))
                    print(f"{label} modular round {r}: {({n: v[-1] for n, v in fig['modular'].items()})}", flush=True)
                if "all" not in args.skip:
                    fig["all_cpu_s"].append(round(forced_cpu(tree, shim, work / f"reports-{label}"), 1))
                    print(f"{label} all --force round {r}: {fig['all_cpu_s'][-1]} CPU s", flush=True)
                    if label == "current":
                        fig.setdefault("all_same_cases_cpu_s", []).append(round(forced_cpu(
                            tree, shim, work / f"reports-{label}-cases", prelude=BASELINE_KERNEL_CASES), 1))
                        print(f"{label} all --force, the baseline's kernel cases, round {r}: "
                              f"{fig['all_same_cases_cpu_s'][-1]} CPU s", flush=True)
                if "tiers" not in args.skip:
                    for tier in TIERS:
                        fig["tiers"].setdefault(tier, []).append(
                            round(forced_cpu(tree, shim, work / f"reports-{label}-{tier}", tier), 1))
                    print(f"{label} by tier round {r}: {({t: v[-1] for t, v in fig['tiers'].items()})}", flush=True)
        committed = OUT / "language_speed.json"
        if args.merge and committed.is_file():
            old = json.loads(committed.read_text())
            if old.get("baseline") == args.baseline:
                keys = {"reach": ["reach"], "modular": ["modular"], "all": ["all_cpu_s", "all_same_cases_cpu_s"],
                        "tiers": ["tiers"]}
                for label in data["figures"]:
                    for skipped in args.skip:
                        for key in keys[skipped]:
                            kept = old["figures"].get(label, {}).get(key)
                            if kept:
                                data["figures"][label][key] = kept
                data["merged_with"] = old.get("merged_with", old.get("current"))
        summary = _summary(data)
        data["summary"] = summary
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "language_speed.json").write_text(json.dumps(data, indent=1) + "\n")
        (OUT / "language_speed.md").write_text(_markdown(data))
        print(_markdown(data))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def _summary(data: dict) -> dict:
    """Per figure: the best of the rounds on each tree, and current / baseline."""
    b, c = data["figures"].get("baseline", {}), data["figures"].get("current", {})
    out = {}
    if b.get("reach"):
        rows = {}
        for claim in b["reach"]:
            if claim in c.get("reach", {}):
                bv, cv = min(v["cpu_s"] for v in b["reach"][claim]), min(v["cpu_s"] for v in c["reach"][claim])
                rows[claim] = {"baseline_s": bv, "current_s": cv, "ratio": round(cv / max(bv, 1e-3), 2),
                               "verdicts": [b["reach"][claim][0]["verdict"], c["reach"][claim][0]["verdict"]]}
        tb = sum(r["baseline_s"] for r in rows.values())
        tc = sum(r["current_s"] for r in rows.values())
        out["reach"] = {"claims": rows, "total_baseline_s": round(tb, 2), "total_current_s": round(tc, 2),
                        "ratio": round(tc / tb, 2)}
    if b.get("modular"):
        out["modular"] = {n: {"baseline_s": min(b["modular"][n]), "current_s": min(c["modular"][n]),
                              "ratio": round(min(c["modular"][n]) / min(b["modular"][n]), 2)} for n in b["modular"]}
    if b.get("all_cpu_s"):
        out["all_force"] = {"baseline_cpu_s": min(b["all_cpu_s"]), "current_cpu_s": min(c["all_cpu_s"]),
                            "ratio": round(min(c["all_cpu_s"]) / min(b["all_cpu_s"]), 2)}
        if c.get("all_same_cases_cpu_s"):
            same = min(c["all_same_cases_cpu_s"])
            out["all_force_same_cases"] = {"baseline_cpu_s": min(b["all_cpu_s"]), "current_cpu_s": same,
                                           "ratio": round(same / min(b["all_cpu_s"]), 2)}
    if b.get("tiers"):
        out["tiers"] = {t: {"baseline_cpu_s": min(b["tiers"][t]), "current_cpu_s": min(c["tiers"][t]),
                            "ratio": round(min(c["tiers"][t]) / min(b["tiers"][t]), 2)} for t in b["tiers"]}
    return out


def _markdown(data: dict) -> str:
    s = data["summary"]
    lines = [f"# Speed against {data['baseline']} (before the spec language was written once)", "",
             f"Current tree {data['current']}" + (f" (figures not rerun: from the run at {data['merged_with']})"
                                                  if data.get("merged_with") else "") +
             f", {data['machine']}, {data['rounds']} interleaved rounds, "
             "the best of each. A ratio is current / baseline (below 1: faster now); the issue's bound is 1.10.",
             "", "| figure | baseline | current | ratio |", "|---|---|---|---|"]
    if "reach" in s:
        r = s["reach"]
        lines.append(f"| exact reach, every claim (n = 32; attention m = d = 6), CPU s | {r['total_baseline_s']} | "
                     f"{r['total_current_s']} | {r['ratio']} |")
    for name, m in s.get("modular", {}).items():
        lines.append(f"| modular trial, {name}, one thread, s | {m['baseline_s']} | {m['current_s']} | {m['ratio']} |")
    if "all_force" in s:
        a = s["all_force"]
        lines.append(f"| `vjpcert all --force {' '.join(ALL_OPS)}`, CPU s | {a['baseline_cpu_s']} | "
                     f"{a['current_cpu_s']} | {a['ratio']} |")
    if "all_force_same_cases" in s:
        a = s["all_force_same_cases"]
        lines.append(f"| the same, the kernel gate held to the baseline's five input cases, CPU s | "
                     f"{a['baseline_cpu_s']} | {a['current_cpu_s']} | {a['ratio']} |")
    for tier, a in s.get("tiers", {}).items():
        lines.append(f"| `vjpcert {tier} --force` of the same ops, CPU s | {a['baseline_cpu_s']} | "
                     f"{a['current_cpu_s']} | {a['ratio']} |")
    if "tiers" in s:
        lines += ["", "`prove` (the symbolic tiers) and `check` (the numeric tier) interpret the spec language; "
                  "`kernels` runs the kernels in the CUDA simulator against the spec's float references, so its "
                  "figure follows what the kernel gate checks (since the baseline: eight input cases a kernel instead "
                  "of five, and its determinism run with the blocks and threads in reverse order), not the "
                  "language."]
    if "reach" in s:
        lines += ["", "Claims (CPU s, verdicts baseline / current):", "", "| claim | baseline | current | ratio | verdicts |",
                  "|---|---|---|---|---|"]
        for claim, r in s["reach"]["claims"].items():
            lines.append(f"| {claim} | {r['baseline_s']} | {r['current_s']} | {r['ratio']} | {' / '.join(r['verdicts'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
