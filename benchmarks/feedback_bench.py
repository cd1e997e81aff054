"""Fast feedback, measured: each figure as a ratio to a peer timed in the same run on this machine.

1. Commands: `vjpcert --help` (the peer), a no-op `vjpcert all` and `vjpcert verify` on a copy of the
   committed reports (every certificate current), each in a fresh process; CPU seconds are the child's
   user + system time. The first `vjpcert all` in the copy is a fresh clone's (it derives a sample of
   certificates again, once) and is reported apart.
2. The exact tier's reach: every claim of softmax, log_softmax, RMSNorm and LayerNorm at n = 128, and
   of attention at m = d = 16, as `vjpcert prove --dims` plans and runs it (the fixed-dims ladder, or
   an instance of the claim's every-size proof), in this process; CPU seconds include the forked
   strategies'.
3. The mutation suite: the symbolic tier's time against torch.autograd.gradcheck's on the same mutants,
   read off the committed kill matrix (`vjpcert mutate` times both in one run).
4. The modular tier at production dims: one trial on one thread (BLAS and Numba) against the same
   block's forward + backward in PyTorch, float64, on one thread (`benchmarks/torch_blocks.py`), each in
   its own process, with its peak resident memory. Beside it, what its exact products cost: one exact
   product mod p (``ModP.matmul``) at the GPT-2 block's largest matmul against one float64 matmul, and
   what an exact product on this CPU's int8 matrix units would cost (``torch._int_mm``: the GEMMs alone
   of a residue-number-system product, one per small modulus).
5. The test suite: collecting it (`pytest --collect-only`, median of 3, pytest's own figure and the
   process's), then README's test command itself (`pytest -n auto`, once: minutes, with its slowest
   tests listed), each in a fresh process with what this machine has installed.

Every command runs with Python's bytecode cache on (see ``_as_installed``).

Writes reports/benchmarks/feedback.json and .md. Run: python benchmarks/feedback_bench.py [--skip SECTION]
(sections: commands, reach, mutation, modular, gemm, suite).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VJPCERT = [sys.executable, "-m", "vjpcert.cli"]
REACH = [("softmax", {"rows": 1, "n": 128}), ("log_softmax", {"rows": 1, "n": 128}),
         ("rmsnorm", {"rows": 1, "n": 128}), ("layernorm", {"rows": 1, "n": 128}),
         ("attention", {"m": 16, "d": 16})]
TARGETS = {"collection_s": 5.0, "suite_s": 300.0, "noop_over_help": 5.0, "verify_cpu_s": 10.0, "leaf_claim_cpu_s": 1.0, "attention_claim_cpu_s": 10.0,
           "symbolic_over_gradcheck": 1.0, "modular_over_torch": 8.0, "memory_over_torch": 3.0}


def _as_installed() -> dict:
    """This environment with Python's bytecode cache on, as on a user's machine and in CI (a machine
    that sets PYTHONDONTWRITEBYTECODE compiles every module again in every process: 10-20% on the
    commands and the suite, which start dozens of processes)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd, env=None, cwd=ROOT) -> dict:
    """Wall and CPU seconds of a command in a fresh process, and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_as_installed() if env is None else env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "code": proc.returncode, "stderr": proc.stderr[-2000:],
            "stdout": proc.stdout}


def median_of(cmd, n: int, **kw) -> dict:
    runs = [timed(cmd, **kw) for _ in range(n)]
    return {"wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "codes": sorted({r["code"] for r in runs}), "runs": n}


def commands() -> dict:
    """The no-op twice over: planned (its last run forgotten: what the first `vjpcert all` after any
    edit costs) and replayed (``vjpcert.up_to_date``: the same command on the same files again). The
    commands use a copy of this machine's cache (the checkers' code hashes, the ops' claims), so that
    forgetting the last runs forgets nothing else."""
    from vjpcert.core.disk_cache import cache_dir
    out = {"help": median_of([*VJPCERT, "--help"], 5)}
    with tempfile.TemporaryDirectory() as tmp:
        reports, cache = Path(tmp) / "reports", Path(tmp) / "cache"
        shutil.copytree(ROOT / "reports", reports, ignore=shutil.ignore_patterns("timings.json", ".tmp*"))
        if cache_dir().is_dir():
            shutil.copytree(cache_dir(), cache, ignore=shutil.ignore_patterns("up-to-date"))
        env = {**_as_installed(), "VJPCERT_CACHE_DIR": str(cache)}
        noop = [*VJPCERT, "all", "--reports", str(reports), "--quiet"]
        first = timed([*VJPCERT, "all", "--reports", str(reports)], env=env)
        out["first_all_on_a_fresh_clone"] = {k: first[k] for k in ("wall_s", "cpu_s", "code")}
        out["first_all_derived_a_sample"] = "deriving" in first["stderr"]
        planned = []
        for _ in range(3):
            shutil.rmtree(cache / "up-to-date", ignore_errors=True)
            planned.append(timed(noop, env=env))
        out["noop_all_planned"] = {"wall_s": round(statistics.median(r["wall_s"] for r in planned), 3),
                                   "cpu_s": round(statistics.median(r["cpu_s"] for r in planned), 3),
                                   "codes": sorted({r["code"] for r in planned}), "runs": 3}
        out["noop_all"] = median_of(noop, 3, env=env)
        out["noop_output_same"] = timed(noop, env=env)["stderr"].strip() == planned[-1]["stderr"].strip()
        out["verify"] = median_of([*VJPCERT, "verify", str(reports)], 3, env=env)
    out["noop_over_help"] = round(out["noop_all"]["wall_s"] / out["help"]["wall_s"], 2)
    out["planned_noop_over_help"] = round(out["noop_all_planned"]["wall_s"] / out["help"]["wall_s"], 2)
    return out


def reach() -> list[dict]:
    """Each claim as `vjpcert prove OP --dims ...` runs it: the symbolic tier's planner picks the method
    (the fixed-dims ladder, or an instance of the every-size proof), then the task runs here."""
    from vjpcert.specs import builtin_ops
    from vjpcert.tiers import Planning, tier
    symbolic = tier("symbolic")
    ops = builtin_ops()
    rows = []
    for name, dims in REACH:
        op = ops[name]
        p = Planning(overrides=dims, large=False, seed=0, budget=None, dps=50, method="central", point=None,
                     fixed_dims=None, general=False, check=lambda *a: None)
        for task in symbolic.plans(name, op, p):
            if dict(task.options).get("method") == "compositional":
                continue
            c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time()
            cert = symbolic.runs(op, task)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = time.process_time() - t0 + (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
            target = TARGETS["attention_claim_cpu_s" if name == "attention" else "leaf_claim_cpu_s"]
            steps = [(e["strategy"], e.get("status")) for e in cert.evidence.get("strategies", [])]
            route = cert.evidence.get("every_size")
            if route and route.get("tried"):
                steps.insert(0, ("every-size", route.get("verdict")))
            rows.append({"op": name, "claim": task.claim, "dims": dims, "verdict": cert.verdict,
                         "method": cert.method, "cpu_s": round(cpu, 2), "target_s": target, "steps": steps})
            print(f"  {name} {task.claim} {dims}: {cert.verdict} ({cert.method}) in {cpu:.2f} CPU s", flush=True)
    return rows


def mutation() -> dict:
    """The kill matrix's own totals over the mutants (the correct rows are its false-kill controls)."""
    summary = json.loads((ROOT / "reports" / "mutation" / "kill_matrix.json").read_text())["summary"]
    sym, grad = summary["symbolic"]["seconds"], summary["gradcheck"]["seconds"]
    return {"mutants": summary["mutants"], "symbolic_s": sym, "gradcheck_s": grad,
            "symbolic_over_gradcheck": round(sym / grad, 2),
            "source": "reports/mutation/kill_matrix.json (`vjpcert mutate`: both timed in one run)"}


def _one_thread_env() -> dict:
    return {**os.environ, **{v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                "NUMBA_NUM_THREADS")}}


TORCH_PEER = """
import json, resource, sys, torch
sys.path.insert(0, {root!r})
torch.set_num_threads(1)
from benchmarks.torch_blocks import forward_backward_seconds
s = forward_backward_seconds({name!r}, {dims!r})
print(json.dumps({{"seconds": s, "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}}))
"""


def modular() -> list[dict]:
    from benchmarks import modular_bench
    rows = []
    for i, (label, name, dims, _) in enumerate(modular_bench.BLOCKS):
        mod = modular_bench._case("block", i, label, 1, 1, 3600, single=True)
        trial = next((v for v in mod.values() if isinstance(v, dict) and "seconds_per_trial" in v), None)
        proc = subprocess.run([sys.executable, "-c", TORCH_PEER.format(root=str(ROOT), name=name, dims=dims)],
                              capture_output=True, text=True, env=_one_thread_env())
        peer = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-300:]}
        row = {"block": label, "op": name, "dims": dims,
               "modular_trial_s": trial["seconds_per_trial"][0] if trial else None,
               "modular_call_s": trial["seconds_total"] if trial else None,
               "trials_thrown_away": trial.get("trials_thrown_away") if trial else None,
               "dgemm_s": trial.get("dgemm_seconds") if trial else None,
               "modular_peak_rss_gib": mod.get("peak_rss_gib"), "modular_error": mod.get("error"),
               "torch_fwd_bwd_s": round(peer.get("seconds", 0), 3) or None,
               "torch_peak_rss_gib": round(peer.get("peak_rss_gib", 0), 3) or None, "torch_error": peer.get("error")}
        if row["modular_trial_s"] and row["torch_fwd_bwd_s"]:
            row["time_ratio"] = round(row["modular_trial_s"] / row["torch_fwd_bwd_s"], 1)
        if row["modular_peak_rss_gib"] and row["torch_peak_rss_gib"]:
            row["memory_ratio"] = round(row["modular_peak_rss_gib"] / row["torch_peak_rss_gib"], 1)
        rows.append(row)
        print(f"  {label}: modular {row['modular_trial_s']} s, torch {row['torch_fwd_bwd_s']} s "
              f"(x{row.get('time_ratio')}), memory x{row.get('memory_ratio')}", flush=True)
    return rows


GEMM_SHAPE = (1024, 768, 3072)       # M, K, N: the GPT-2-small block's MLP up-projection

GEMM_PEERS = """
import json, math, statistics, time
import numpy as np, torch
torch.set_num_threads(1)
from vjpcert.symbolic.modular.arith import ModP
M, K, N = {shape!r}
P = (1 << 60) - 93                       # a prime in [2^59, 2^60)

def best(f, n):
    for _ in range(3):                   # warm: the first calls of a matrix unit run some 2x slower
        f()
    times = []
    for _ in range(n):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return statistics.median(times)

rng = np.random.default_rng(0)
a, b = rng.random((M, K)), rng.random((K, N))
ta, tb = torch.from_numpy(a), torch.from_numpy(b)
ra, rb = rng.integers(0, P, (M, K)), rng.integers(0, P, (K, N))
F = ModP(P)
assert np.array_equal(F.matmul(ra[:3, :5], rb[:5, :4]),
                      np.array([[sum(int(x) * int(y) for x, y in zip(r, c)) % P for c in rb[:5, :4].T] for r in ra[:3, :5]]))
out = {{"shape": [M, K, N], "numpy_float64_s": best(lambda: a @ b, 9), "torch_float64_s": best(lambda: ta @ tb, 9),
        "exact_modp_s": best(lambda: F.matmul(ra, rb), 3)}}
# a residue-number-system product on int8 matrix units: pairwise coprime moduli m <= 128 whose product
# exceeds 4 K p^2 (the exact integer sum, with room to read it back); one int8 GEMM (int32 sums) each
need, moduli = math.log2(4 * K) + 2 * math.log2(P), []
for m in range(128, 1, -1):
    if sum(map(math.log2, moduli)) > need:
        break
    if all(math.gcd(m, c) == 1 for c in moduli):
        moduli.append(m)
out["rns_moduli"] = len(moduli)
try:
    ia = torch.randint(-64, 64, (M, K), dtype=torch.int8)
    ib = torch.randint(-64, 64, (K, N), dtype=torch.int8)
    out["int8_gemm_s"] = best(lambda: torch._int_mm(ia, ib), 9)
except (AttributeError, RuntimeError) as exc:
    out["int8_error"] = str(exc)[:200]
print(json.dumps(out))
"""


def gemm_peers() -> dict:
    """What the modular tier's exact products cost, in one process on one thread: an exact product mod p
    by the tier's own ``ModP.matmul`` (checked exact on a corner first) against one float64 matmul
    (numpy's BLAS, which the tier uses, and torch's, the block peer's), and int8 GEMMs
    (``torch._int_mm``, int32 sums) as many as a residue-number-system exact product needs: the GEMMs
    alone, before any residue is computed or read back. A block's trial makes five exact products for each of torch's three
    matmuls, so 5/3 of each ratio is what its matmuls cost against torch's by that route."""
    proc = subprocess.run([sys.executable, "-c", GEMM_PEERS.format(shape=GEMM_SHAPE)], capture_output=True,
                          text=True, env=_one_thread_env(), cwd=ROOT)
    if proc.returncode:
        return {"error": proc.stderr[-300:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    f64 = out["torch_float64_s"]
    out["exact_over_float64"] = round(out["exact_modp_s"] / f64, 1)
    out["matmuls_float64_route"] = round(5 / 3 * out["exact_over_float64"], 1)
    if "int8_gemm_s" in out:
        out["rns_int8_gemms_over_float64"] = round(out["rns_moduli"] * out["int8_gemm_s"] / f64, 2)
        out["matmuls_int8_route"] = round(5 / 3 * out["rns_int8_gemms_over_float64"], 1)
    print(f"  exact product mod p {out['exact_over_float64']}x a float64 matmul (a block's matmuls "
          f"{out['matmuls_float64_route']}x torch's); int8 route's GEMMs alone "
          f"{out.get('rns_int8_gemms_over_float64')}x", flush=True)
    return out


def _pytest(args: list[str], env=None, cwd=ROOT) -> dict:
    out = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], env=env, cwd=cwd)
    # pytest's last line: "N passed, ... in T s", "N skipped in T s", "N failed in T s", "N tests collected in T s"
    last = re.compile(r"\b(passed|failed|skipped|errors?|collected|no tests ran)\b.* in [0-9.]+s")
    tail = [ln for ln in out["stdout"].splitlines() if last.search(ln)]
    said = re.search(r" in ([0-9.]+)s", tail[-1]) if tail else None
    return {"wall_s": out["wall_s"], "cpu_s": out["cpu_s"], "code": out["code"], "summary": tail[-1] if tail else "",
            "pytest_s": float(said.group(1)) if said else None, "slowest": _slowest(out["stdout"]),
            "failed": [ln for ln in out["stdout"].splitlines() if ln.startswith(("FAILED", "ERROR"))]}


def suite() -> dict:
    """Collection (median of 3), collection as a fresh clone's first run meets it (Numba's cache empty:
    the test files that import the modular tier compile its loops there), and one run of README's test
    command, each in a fresh process."""
    import tempfile
    runs = [_pytest(["--collect-only"]) for _ in range(3)]
    collection = min(runs, key=lambda r: abs(r["pytest_s"] - statistics.median(x["pytest_s"] for x in runs)))
    print(f"  collection: {collection['pytest_s']} s", flush=True)
    with tempfile.TemporaryDirectory() as empty:
        fresh = _pytest(["--collect-only"], env={**_as_installed(), "NUMBA_CACHE_DIR": empty})
    print(f"  collection, Numba's cache empty: {fresh['pytest_s']} s", flush=True)
    run = _pytest(["-n", "auto", f"--durations={SLOWEST}"])
    print(f"  suite: {run['summary']}", flush=True)
    return {"collection": collection, "collection_fresh": fresh, "run": run}


SLOWEST = 25          # the suite's slowest tests, listed in the report: where a contributor looks first


def _slowest(stdout: str) -> list[dict]:
    """pytest's --durations lines ("12.34s call     tests/test_x.py::test_y[...]")."""
    rows = []
    for line in stdout.splitlines():
        m = re.match(r"^([0-9.]+)s (call|setup|teardown) +(\S+)", line)
        if m:
            rows.append({"seconds": float(m.group(1)), "phase": m.group(2), "test": m.group(3)})
    return rows[:SLOWEST]


def render(data: dict) -> str:
    lines = ["# Fast feedback", "",
             f"Command: `python benchmarks/feedback_bench.py`. Machine: {data['machine']}; every ratio is of two "
             "figures taken in the same run.", ""]
    c = data.get("commands")
    if c:
        lines += ["## Commands", "", "| what | wall s | CPU s | target |", "|---|---|---|---|",
                  f"| `vjpcert --help` (the peer) | {c['help']['wall_s']} | {c['help']['cpu_s']} | |",
                  f"| first `vjpcert all` on a fresh clone (derives a sample again: "
                  f"{'yes' if c['first_all_derived_a_sample'] else 'no'}) | {c['first_all_on_a_fresh_clone']['wall_s']} | "
                  f"{c['first_all_on_a_fresh_clone']['cpu_s']} | about a minute |",
                  f"| no-op `vjpcert all`, planned (its last run forgotten; median of 3) | "
                  f"{c['noop_all_planned']['wall_s']} | {c['noop_all_planned']['cpu_s']} | "
                  f"{c['planned_noop_over_help']}x help |",
                  f"| no-op `vjpcert all`, replayed (the same command on the same files again; median of 3; "
                  f"the same output as planned: {'yes' if c['noop_output_same'] else 'NO'}) | {c['noop_all']['wall_s']} | "
                  f"{c['noop_all']['cpu_s']} | <= {TARGETS['noop_over_help']}x help: **{c['noop_over_help']}x** |",
                  f"| `vjpcert verify` (median of 3) | {c['verify']['wall_s']} | **{c['verify']['cpu_s']}** | "
                  f"<= {TARGETS['verify_cpu_s']} CPU s |", ""]
    t = data.get("suite")
    if t:
        col, run = t["collection"], t["run"]
        lines += ["## The test suite", "", "| what | pytest's figure s | wall s | CPU s | target |", "|---|---|---|---|---|",
                  f"| collection (`pytest --collect-only`, median of 3) | **{col['pytest_s']}** | {col['wall_s']} | "
                  f"{col['cpu_s']} | <= {TARGETS['collection_s']} s |",
                  *([f"| collection as a fresh clone's first run meets it (Numba's cache empty: the modular tier's "
                     f"loops compile) | **{f['pytest_s']}** | {f['wall_s']} | {f['cpu_s']} | <= "
                     f"{TARGETS['collection_s']} s |"] if (f := t.get("collection_fresh")) else []),
                  f"| README's test command (`pytest -n auto`): {run['summary'].strip('= ')} | **{run['pytest_s']}** | "
                  f"{run['wall_s']} | {run['cpu_s']} | <= {TARGETS['suite_s']:.0f} s |", ""]
        if run.get("failed"):
            lines += ["Failed in that run:", ""] + [f"- `{ln}`" for ln in run["failed"]] + [""]
        if run.get("slowest"):
            lines += [f"Its {len(run['slowest'])} slowest tests (pytest's `--durations`, on one of the workers):", "",
                      "| s | phase | test |", "|---|---|---|"]
            lines += [f"| {t['seconds']} | {t['phase']} | `{t['test']}` |" for t in run["slowest"]] + [""]
    r = data.get("reach")
    if r:
        lines += ["## The exact tier's reach", "", "| op | claim | dims | verdict (method) | CPU s | target | steps |",
                  "|---|---|---|---|---|---|---|"]
        for row in r:
            ok = row["cpu_s"] <= row["target_s"] and row["verdict"] in ("proved", "checked-probabilistic")
            lines.append(f"| {row['op']} | `{row['claim']}` | {row['dims']} | {row['verdict']} ({row.get('method')}) | "
                         f"{'**' if not ok else ''}{row['cpu_s']}{'**' if not ok else ''} | <= {row['target_s']} | "
                         + ", ".join(f"{s}: {st}" for s, st in row["steps"]) + " |")
        lines.append("")
    m = data.get("mutation")
    if m:
        lines += ["## The mutation suite", "", f"symbolic tier {m['symbolic_s']} s, torch gradcheck {m['gradcheck_s']} s "
                  f"over the same {m['mutants']} mutants: **{m['symbolic_over_gradcheck']}x** (target <= "
                  f"{TARGETS['symbolic_over_gradcheck']}x); {m['source']}.", ""]
    mod = data.get("modular")
    if mod:
        lines += ["## The modular tier against PyTorch, one thread each", "",
                  "| block | dims | one modular trial s (the whole one-trial call; trials thrown away) | "
                  "of which exact dgemms s | torch float64 fwd+bwd s | ratio (target <= 8) | "
                  "dgemms alone / torch | peak memory GiB (modular, torch) | ratio (target <= 3) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in mod:
            call = f" ({row['modular_call_s']} s; {row['trials_thrown_away']})" if row.get("modular_call_s") else ""
            floor = round(row["dgemm_s"] / row["torch_fwd_bwd_s"], 1) if row.get("dgemm_s") and \
                row.get("torch_fwd_bwd_s") else None
            lines.append(f"| {row['block']} | {row['dims']} | {row['modular_trial_s']}{call} | {row.get('dgemm_s')} | "
                         f"{row['torch_fwd_bwd_s']} | {row.get('time_ratio')} | {floor} | "
                         f"{row['modular_peak_rss_gib']}, {row['torch_peak_rss_gib']} | {row.get('memory_ratio')} |")
        lines.append("")
    g = data.get("gemm")
    if g and "error" not in g:
        m, k, n = g["shape"]
        lines += [f"What an exact product costs, at the GPT-2 block's largest matmul ({m} x {k} @ {k} x {n}), one "
                  "thread, one process:", "",
                  "| product | s | / torch float64 matmul |", "|---|---|---|",
                  f"| torch float64 matmul (the block peer's) | {g['torch_float64_s']:.4f} | 1 |",
                  f"| numpy float64 matmul (the BLAS the modular tier runs on) | {g['numpy_float64_s']:.4f} | "
                  f"{g['numpy_float64_s'] / g['torch_float64_s']:.2f} |",
                  f"| exact product mod a 60-bit prime (`ModP.matmul`) | {g['exact_modp_s']:.4f} | "
                  f"**{g['exact_over_float64']}** |"]
        if "int8_gemm_s" in g:
            lines.append(f"| int8 GEMMs alone of an exact product in {g['rns_moduli']} residues (`torch._int_mm`, "
                         f"{g['rns_moduli']} x {g['int8_gemm_s']:.4f} s) | {g['rns_moduli'] * g['int8_gemm_s']:.4f} | "
                         f"{g['rns_int8_gemms_over_float64']} |")
        lines += ["", f"A trial makes five exact products (the value, the tangent's two, the backward's two) for "
                  f"each of torch's three matmuls (forward, and backward's two): its matmuls cost "
                  f"{g['matmuls_float64_route']}x torch's by the float64 route"
                  + (f", and the int8 route's GEMMs {g['matmuls_int8_route']}x before any residue is computed "
                     "or read back" if "matmuls_int8_route" in g else "") + ". (A floor under the matmuls' "
                  "share of the block ratio; the table's \"dgemms alone / torch\" is one under the whole.)", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip", action="append", default=[], choices=["commands", "reach", "mutation", "modular", "gemm", "suite"])
    args = ap.parse_args()
    from vjpcert.core.certificate import atomic_write
    out = ROOT / "reports" / "benchmarks"
    path = out / "feedback.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["machine"] = f"{platform.machine()}, {os.cpu_count()} cores (shared); Python {platform.python_version()}"
    for name, fn in (("commands", commands), ("reach", reach), ("mutation", mutation), ("modular", modular),
                     ("gemm", gemm_peers), ("suite", suite)):
        if name in args.skip:
            continue
        print(f"{name}:", flush=True)
        data[name] = fn()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1, default=str) + "\n")
    text = render(data)
    atomic_write(out / "feedback.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
