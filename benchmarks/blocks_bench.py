"""Benchmark of the whole blocks: compositional proofs at realistic dims, cold.

- the Llama-style block (RMSNorm, causal GQA with RoPE, SwiGLU MLP): every claim proved-compositional
  at its compositional_dims, cold (node every-size proofs included), target <= 60 s on 2 cores;
- the GPT-2-style block, the two-block GPT-2 stack and the SwiGLU MLP, the same;
- the every-size proofs the blocks rest on that are new here (GQA, PyTorch-style attention).
Writes reports/benchmarks/blocks.json and .md. Run: python benchmarks/blocks_bench.py [op ...]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.core.certificate import atomic_write  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.symbolic.composition.compose import _CACHE, prove_compositional  # noqa: E402
from vjpcert.symbolic.every_size.general import prove_general  # noqa: E402

TARGETS = {"llama_block": "<= 60 s"}
# Larger than the op's compositional_dims, measured here only (the certificates stay at the op's own):
# Llama-like proportions, 4 query and 2 key/value heads of width 64, F = 8 D / 3 rounded up to 16.
LARGER = {"llama_block": {"m": 64, "D": 256, "Dkv": 128, "F": 688}}
BLOCKS = ("llama_block", "gpt2_block", "gpt2_stack", "swiglu_mlp", "lm_loss_head")
GENERAL = ("gqa_causal", "sdpa_causal")


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t, 2)


def main(names):
    ops = builtin_ops()
    rows = []
    for name in names:
        o = ops[name]
        vjps = [c for c in o.claims() if c.startswith("vjp[")]
        for dims in o.compositional_dims:
            _CACHE.clear()                       # cold: the nodes' every-size proofs are part of the time
            certs, s = timed(lambda: [prove_compositional(o, c, dims) for c in vjps])
            ok = sum(c.verdict == "proved-compositional" for c in certs)
            wiring = max(c.evidence["wiring"].get("node_calls", 0) for c in certs)
            rows.append({"what": f"{name}: all {len(vjps)} VJP claims at {dims} (cold)",
                         "target": TARGETS.get(name, "-"), "seconds": s,
                         "detail": f"{ok}/{len(vjps)} proved-compositional; {wiring} node calls in the wiring"})
            print(rows[-1], flush=True)
            for key in [k for k in _CACHE if k[0] == "wiring"]:
                del _CACHE[key]                  # the node proofs stay cached: the wiring alone
            certs, s = timed(lambda: [prove_compositional(o, c, dims) for c in vjps])
            rows.append({"what": f"... {name} again, node proofs cached (the wiring alone)", "target": "-",
                         "seconds": s, "detail": f"{sum(c.verdict == 'proved-compositional' for c in certs)}"
                                                 f"/{len(vjps)}"})
            print(rows[-1], flush=True)
        if name in LARGER:
            dims = LARGER[name]
            certs, s = timed(lambda: [prove_compositional(o, c, dims) for c in vjps])
            rows.append({"what": f"{name}: all {len(vjps)} VJP claims at {dims} (node every-size proofs "
                                 f"cached from the row above)", "target": "-", "seconds": s,
                         "detail": f"{sum(c.verdict == 'proved-compositional' for c in certs)}/{len(vjps)} "
                                   f"proved-compositional"})
            print(rows[-1], flush=True)
    for name in GENERAL:
        if name not in names and names != list(BLOCKS):
            continue
        o = ops[name]
        certs, s = timed(lambda: [prove_general(o, c) for c in o.general])
        rows.append({"what": f"{name}: every-size claims {', '.join(o.general)}", "target": "-", "seconds": s,
                     "detail": ", ".join(c.verdict for c in certs)})
        print(rows[-1], flush=True)
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "blocks.json", json.dumps(rows, indent=2) + "\n")
    lines = ["# Whole blocks benchmark", "",
             "Command: `python benchmarks/blocks_bench.py` (2 cores, one process).", "",
             "| what | target | seconds | result |", "|---|---|---|---|"]
    lines += [f"| {r['what']} | {r['target']} | {r['seconds']} | {r['detail']} |" for r in rows]
    atomic_write(out / "blocks.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:] or list(BLOCKS))
