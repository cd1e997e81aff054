"""Benchmark of the vectorised modular evaluator (symbolic.modular) at production dims.

- seconds per trial (one joint trial: every VJP claim of the block at once, forward on dual numbers,
  backward, residual) for the ViT-Tiny block (197 tokens, width 192, 3 heads, MLP 768; target <= 2 s),
  the GPT-2-small block (1024 tokens, width 768, 12 heads, MLP 3072; target <= 30 s) and a small
  Llama-style block (512 tokens, width 512, 8 query heads, 2 KV heads, SwiGLU 1376), with the peak
  memory of the process and the false-pass bound one trial states;
- the blocks' four named mutants at production size, each beside its correct op (a negative control: the
  correct backward must vanish at the same dims): a GQA backward that forgets to sum shared heads, a
  bottom-right causal mask applied top-left, a cross-entropy backward that ignores ignore_index, a
  SwiGLU backward with sigmoid' in place of silu'.
Each case runs in its own process (its peak memory is its own), on every core (BLAS and the fused loops
of symbolic/modular/kernels.py); each block also runs one trial on one thread beside it, the peer the
speed-up is measured against in the same run. Writes reports/benchmarks/modular.json and .md.
Run: python benchmarks/modular_bench.py [--only NAME ...] [--trials N] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BLOCKS = [
    # name, op, dims (with structural params), target seconds per trial
    ("ViT-Tiny block", "vit_block", {"m": 197, "D": 192, "F": 768, "heads": 3}, 2.0),
    ("GPT-2-small block", "gpt2_block", {"m": 1024, "D": 768, "F": 3072, "heads": 12}, 30.0),
    ("Llama-style block (small)", "llama_block",
     {"m": 512, "D": 512, "Dkv": 128, "F": 1376, "heads": 8, "kv_heads": 2}, None),
]
MUTANTS = [
    # name, op, mutant, dims: the sizes of the Llama-style block (and a KV cache twice the queries)
    ("GQA: shared heads not summed", "gqa_causal", "shared_heads_not_summed",
     {"hk": 2, "g": 4, "mq": 512, "mk": 512, "d": 64, "dv": 64}),
    ("SDPA: bottom-right mask applied top-left", "sdpa_causal_bottom_right", "bottom_right_mask_applied_top_left",
     {"mq": 512, "mk": 1024, "d": 64, "dv": 64}),
    ("cross-entropy: ignore_index ignored", "cross_entropy", "ignores_ignore_index", {"rows": 512, "n": 32000}),
    ("SwiGLU: sigmoid' for silu'", "swiglu", "sigmoid_prime_for_silu_prime", {"rows": 512, "n": 1376}),
]


def one(kind: str, index: int, trials: int, single: bool = False) -> dict:
    """Run one case in this process and return its figures (``single``: one trial, however large the
    stated false pass stays -- the one-thread peer's timing)."""
    from vjpcert.symbolic import settings as tol
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic.modular.check import check_vjps, false_pass_bound, split_dims
    dgemm = [0.0]
    if single:
        tol.MODULAR_MAX_TRIALS = 1
        _time_dgemms(dgemm)
    ops = builtin_ops()
    if kind == "block":
        label, name, entry, target = BLOCKS[index]
        runs = [(name, ops[name], entry)]
    else:
        label, name, mutant, entry = MUTANTS[index]
        op = ops[name]
        m = next(m for m in op.mutants if m.name == mutant)
        runs = [(name, op, entry), (f"{name}~{mutant}", op.with_mutant(m), entry)]
    out = {"case": label, "dims": entry}
    for tag, op, entry in runs:
        dims, params = split_dims(op, entry)
        start = time.perf_counter()
        run = check_vjps(op, dims, params, trials=trials)
        seconds = time.perf_counter() - start
        roots = max((len(F._roots) for F in run["fields"]), default=0)
        bound = false_pass_bound(run["bound"], run["fields"], max(1, run["trials"]), roots)
        failed = sorted(c for c, r in run["claims"].items() if r["status"] == "nonzero")
        out[tag] = {
            "seconds_per_trial": [round(s, 2) for s in run["seconds_per_trial"]],
            "seconds_total": round(seconds, 2), "trials": run["trials"], "primes": run["primes"],
            "trials_thrown_away": run["trials_thrown_away"],
            # the trials' atom digests, taken where a second trial is compared (none in a one-trial run)
            "seconds_digesting_atoms": round(sum(F.digest_seconds for F in run["fields"]), 3),
            **({"dgemm_seconds": round(dgemm[0], 3)} if single else {}),
            "claims": len(run["claims"]), "failed": failed,
            "witness": {c: run["claims"][c]["witness"] for c in failed[:2]},
            "false_pass_per_trial": f"{bound['per_trial']:.3g}", "false_pass_total": f"{bound['total']:.3g}",
            "degree_bound": f"{bound['degree']:.3g}", "atoms": bound["atoms"],
        }
        if failed and bound["atoms"]:      # with atoms, `failed` needs mpmath at a real point to agree
            from vjpcert.symbolic.modular.confirm import confirm_residual
            out[tag]["real_point"] = {}
            for c in failed:
                real = confirm_residual(op, dims, params, c[4:-1], 0)
                out[tag]["real_point"][c] = {
                    "confirmed": real["confirmed"], "float64_relative": real["float64"]["relative_residual"],
                    "mpmath": real["mpmath"].get("relative_residual", real["mpmath"].get("status"))}
    out["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    if kind == "block":
        out["target_seconds_per_trial"] = target
    return out


def _time_dgemms(total: list) -> None:
    """Add the seconds of the float64 dgemms of the exact matmuls (``arith``'s np.matmul) to total[0]:
    the floor under a trial's time, whatever the rest costs. The module's numpy is wrapped, not
    numpy's own function (numpy's dispatch tables hold that one)."""
    import types
    from vjpcert.symbolic.modular import arith

    def matmul(*args, **kw):
        t = time.perf_counter()
        out = np.matmul(*args, **kw)
        total[0] += time.perf_counter() - t
        return out
    np = arith.np
    arith.np = types.SimpleNamespace(**{**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")},
                                        "matmul": matmul})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("KIND", "INDEX"), help=argparse.SUPPRESS)
    ap.add_argument("--only", action="append", default=[], help="op names to run (default: all)")
    ap.add_argument("--trials", type=int, default=1, help="trials per case (default 1: seconds per trial)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per case")
    ap.add_argument("--render", action="store_true", help="only re-render modular.md from modular.json")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="BLAS and Numba threads per case (default: every core)")
    ap.add_argument("--peer-threads", type=int, default=1,
                    help="threads of each block's one-trial peer run (default 1; 0: none)")
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.render:
        data = json.loads((ROOT / "reports" / "benchmarks" / "modular.json").read_text())
        render(data)
        return
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.trials, args.single)))
        return
    results = []
    cases = [("block", i, b[1], b[0]) for i, b in enumerate(BLOCKS)] + \
            [("mutant", i, m[1], m[0]) for i, m in enumerate(MUTANTS)]
    for kind, i, name, label in cases:
        if args.only and name not in args.only:
            continue
        t = time.perf_counter()
        res = _case(kind, i, label, args.trials, args.threads, args.timeout)
        if kind == "block" and args.peer_threads and args.peer_threads != args.threads and "error" not in res:
            peer = _case(kind, i, label, 1, args.peer_threads, args.timeout, single=True)
            x = next((v for v in peer.values() if isinstance(v, dict) and "seconds_per_trial" in v), None)
            res["peer"] = {"threads": args.peer_threads,
                           **({"error": peer.get("error", "no trial")} if x is None else
                              {"seconds_per_trial": x["seconds_per_trial"], "failed": x["failed"]})}
        res["kind"] = kind
        results.append(res)
        print(f"{res.get('case')}: {round(time.perf_counter() - t, 1)} s  "
              + json.dumps({k: v for k, v in res.items() if k not in ('case', 'kind')})[:600], flush=True)
    write(results, args)


def _case(kind, i, name, trials, threads, timeout, single=False) -> dict:
    """One case in its own process with ``threads`` BLAS and Numba threads."""
    env = {**os.environ, **{v: str(threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                        "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}}
    cmd = [sys.executable, __file__, "--one", kind, str(i), "--trials", str(trials)] + (["--single"] if single else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"case": name, "error": f"timed out after {timeout:.0f} s"}
    if proc.returncode:
        return {"case": name, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(results, args):
    from vjpcert.core.certificate import atomic_write
    out_dir = ROOT / "reports" / "benchmarks"
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}; "
                       f"{os.cpu_count()} cores (shared)",
            "python": platform.python_version(), "numpy": __import__("numpy").__version__,
            "trials_per_case": args.trials, "threads": args.threads, "peer_threads": args.peer_threads}
    path = out_dir / "modular.json"
    old = json.loads(path.read_text()) if path.exists() and args.only else {"results": []}
    keep = [r for r in old.get("results", []) if r.get("case") not in {x.get("case") for x in results}]
    data = {**meta, "results": keep + results}
    atomic_write(path, json.dumps(data, indent=2) + "\n")
    render(data)


def _killed(bad) -> str:
    """The mutant's failing claims: a nonzero residual, confirmed in mpmath at a real point where atoms
    enter (symbolic/modular/confirm.py) -- unconfirmed, the certificate says inconclusive."""
    if not bad["failed"]:
        return "NOT killed"
    real = bad.get("real_point", {})
    parts = [c + (f" (mpmath confirms: relative residual {real[c]['mpmath']})"
                  if real.get(c, {}).get("confirmed") else
                  f" (not confirmed at a real point: mpmath {real[c]['mpmath']}, float64 "
                  f"{real[c]['float64_relative']}; the certificate says inconclusive)" if c in real else "")
             for c in bad["failed"]]
    return "nonzero mod p: " + ", ".join(parts)


def _peer(r, x) -> str:
    peer = r.get("peer")
    if not peer:
        return "-"
    if "error" in peer:
        return f"error: {peer['error']}"
    mine = sorted(x["seconds_per_trial"])[len(x["seconds_per_trial"]) // 2]
    theirs = peer["seconds_per_trial"][0]
    return f"{theirs} s on {peer['threads']} ({theirs / mine:.2f}x the median above)"


def render(data):
    from vjpcert.core.certificate import atomic_write
    out_dir = ROOT / "reports" / "benchmarks"
    lines = ["# The vectorised modular evaluator at production dims", "",
             "`python benchmarks/modular_bench.py` (each case in its own process). One trial = one prime in "
             "[2^59, 2^60) and one random point: the forward on dual numbers (value, J t), the backward, and "
             "the residual sum_X <backward_X, t_X> - <dy, J t> for every VJP claim of the block at once.",
             "", f"Machine: {data['machine']}; Python {data['python']}, numpy {data['numpy']}; "
                 f"{data.get('threads', 'default')} BLAS and Numba thread(s) per case; each block's peer: one "
                 f"trial on {data.get('peer_threads', '-')} thread(s), in the same run.", "",
             "## Blocks", "",
             "| block | dims | seconds per trial | target | peer: one trial, fewer threads (ratio) | peak memory | residual | stated false pass: per trial, after the trials run | degree bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["results"]:
        if r.get("kind") != "block":
            continue
        if "error" in r:
            lines.append(f"| {r['case']} | | error: {r['error']} | | | | | |")
            continue
        name = next(k for k in r if k != "peer" and isinstance(r[k], dict) and "seconds_per_trial" in r[k])
        x = r[name]
        residual = "0 in every trial" if not x["failed"] else f"nonzero: {', '.join(x['failed'])}"
        lines.append(f"| {r['case']} (`{name}`) | {r['dims']} | {', '.join(map(str, x['seconds_per_trial']))} | "
                     f"{r.get('target_seconds_per_trial') or '-'} | {_peer(r, x)} | {r['peak_rss_gib']} GiB | {residual} | "
                     f"{x['false_pass_per_trial']}, {x['false_pass_total']} ({x['trials']} trials) | {x['degree_bound']} |")
    lines += ["", "## The blocks' named mutants at production size", "",
              "| mutant | dims | correct op | mutant | seconds per trial (correct, mutant) | peak memory |",
              "|---|---|---|---|---|---|"]
    for r in data["results"]:
        if r.get("kind") != "mutant":
            continue
        if "error" in r:
            lines.append(f"| {r['case']} | | error: {r['error']} | | | |")
            continue
        keys = [k for k in r if isinstance(r[k], dict) and "seconds_per_trial" in r[k]]
        ok, bad = r[keys[0]], r[keys[1]]
        lines.append(f"| {r['case']} (`{keys[1]}`) | {r['dims']} | "
                     f"{'checked: 0 in every trial' if not ok['failed'] else 'FAILED ' + ', '.join(ok['failed'])} | "
                     f"{_killed(bad)} | "
                     f"{ok['seconds_per_trial'][0]}, {bad['seconds_per_trial'][0]} | {r['peak_rss_gib']} GiB |")
    lines += ["", "The stated bound per trial covers Schwartz-Zippel on the residual's numerator (its degree "
              "bounded from the code, each denominator tracked by its provenance: `symbolic/modular/bound.py`), "
              "the prime dividing its coefficients, and two distinct atoms of one kind colliding (every pair of "
              "atoms, an atom recomputed by the same operations counted once), over the chance of avoiding the "
              "poles. Trials are added (3 to 32 in `vjpcert prove --modular`; from 1 here) until the product "
              "is below 1e-6.", ""]
    for r in data["results"]:
        if r.get("kind") != "block" or "error" in r:
            continue
        name = next(k for k in r if k != "peer" and isinstance(r[k], dict) and "seconds_per_trial" in r[k])
        x = r[name]
        total, per = float(x["false_pass_total"]), float(x["false_pass_per_trial"])
        secs = sum(x["seconds_per_trial"]) / max(1, len(x["seconds_per_trial"]))
        if x["failed"]:
            verdict = "the residual is nonzero: `failed`"
        elif total < 1e-6:
            verdict = (f"`checked-probabilistic`: stated false pass {total:.3g} after {x['trials']} trials "
                       f"({per:.3g} per trial)")
        elif per >= 0.99:
            verdict = f"`inconclusive`: the per-trial bound ({per:.3g}) is vacuous"
        else:
            import math
            need = math.ceil(math.log(1e-6) / math.log(per))
            verdict = (f"`inconclusive` after {x['trials']} trials ({per:.3g} per trial): "
                       f"{need} trials (about {need * secs / 60:.0f} min here) would reach 1e-6")
        lines.append(f"- {r['case']}: {verdict}; {secs:.1f} s per trial"
                     + (f" (target {r['target_seconds_per_trial']} s)" if r.get("target_seconds_per_trial") else "") + ".")
    from vjpcert.symbolic.modular.arith import KARATSUBA_MIN_CONTRACTION
    lines += ["", "Where a trial's time goes (`symbolic/modular/arith.py`, `symbolic/modular/kernels.py`): "
              "exact matmuls mod p on float64 BLAS -- six dgemms of 20-bit limbs by Karatsuba for contractions "
              f"of {KARATSUBA_MIN_CONTRACTION} or more, one dgemm with the smaller operand pre-shifted below that -- and fused Numba "
              "loops for the elementwise products and recombinations, parallel on large arrays. Each forward "
              "matmul costs about five: its value, its tangent (a contraction twice as long) and the "
              "backward's two; the forward values the backward recomputes come from a per-trial cache by "
              "computation id (a matmul's product for the whole trial, an entrywise one while the spec holds it). "
              "A run's wall time is above the sum of its trials (drawing the point, validating the spec, "
              "the constant roots learned at the op's smallest dims so that no trial is thrown away).", ""]
    atomic_write(out_dir / "modular.md", "\n".join(lines))
    print(f"wrote {out_dir / 'modular.json'} and {out_dir / 'modular.md'}")


if __name__ == "__main__":
    main()
