"""Benchmark of attention and the composites (issue: attention, tape theorem, MHSA, MLP, ViT).

- attention dQ, dK, dV proved exactly at m = d = 8 (target <= 10 s), and the causal variant;
- the seed theorem (attention tape) proved at m = 3, d = 2;
- every ViT-block claim proved-compositional at its default dims (target <= 30 s, all 17 claims);
- the mpmath check of a ViT block with 4 tokens, width 8, 2 heads, MLP 16 (target <= 10 s, >= 40 digits);
- the full-gradient check of attention at m = d = 8 at 50 digits (target <= 2 s; issue: numeric tier).
Writes reports/benchmarks/composite.json and .md. Run: python benchmarks/composite_bench.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.numeric.check import check_claim  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.core.certificate import atomic_write  # noqa: E402
from vjpcert.symbolic.composition.compose import _CACHE, prove_compositional  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t, 3)


def main():
    ops = builtin_ops()
    rows = []

    def add(what, target, seconds, detail):
        rows.append({"what": what, "target": target, "seconds": seconds, "detail": detail})

    for name in ("attention", "attention_causal"):
        certs, s = timed(lambda: [prove_claim(ops[name], c, {"m": 8, "d": 8}) for c in ("vjp[Q]", "vjp[K]", "vjp[V]")])
        add(f"{name} dQ, dK, dV proved exactly at m=d=8", "<= 10 s", s, ", ".join(c.verdict for c in certs))
    certs, s = timed(lambda: [prove_claim(ops["attention_tape"], c, {"m": 3, "d": 2}) for c in ops["attention_tape"].claims()])
    add("seed theorem: attention tape, backprop = adjoint of d(eval), m=3 d=2", "-", s,
        ", ".join(f"{c.claim} {c.verdict}" for c in certs))
    vit = ops["vit_block"]
    _CACHE.clear()
    certs, s = timed(lambda: [prove_compositional(vit, c, vit.dims[0]) for c in vit.claims()])
    add(f"ViT block, all {len(certs)} claims proved-compositional at {vit.dims[0]} (cold)", "<= 30 s", s,
        f"{sum(c.verdict == 'proved-compositional' for c in certs)}/{len(certs)} proved-compositional")
    for big in vit.compositional_dims:
        _CACHE.clear()
        certs, s = timed(lambda: [prove_compositional(vit, c, big) for c in vit.claims()])
        add(f"ViT block at realistic dims {big}, {vit.params['heads'].default} heads: all {len(certs)} claims "
            f"(wiring proved there, nodes on every-size proofs; cold)", "-", s,
            f"{sum(c.verdict == 'proved-compositional' for c in certs)}/{len(certs)} proved-compositional")
        certs, s = timed(lambda: [prove_compositional(vit, c, big) for c in vit.claims()])
        add("... the same, node proofs cached (the wiring alone)", "-", s,
            f"{sum(c.verdict == 'proved-compositional' for c in certs)}/{len(certs)}")
    dims = {"m": 4, "D": 8, "F": 16}
    certs, s = timed(lambda: [check_claim(vit, c, dims, cases=("random",)) for c in vit.claims()])
    add(f"ViT block mpmath check, 4 tokens, width 8, {vit.params['heads'].default} heads, MLP 16, 50 digits, all 17 cotangents",
        "<= 10 s, >= 40 digits", s, f"min digits {min(c.evidence['digits'] for c in certs)}, "
        f"{sum(c.verdict == 'checked' for c in certs)}/{len(certs)} checked")
    att = ops["attention"]
    certs, s = timed(lambda: [check_claim(att, c, {"m": 8, "d": 8}, cases=("random",)) for c in ("vjp[Q]", "vjp[K]", "vjp[V]")])
    add("attention full-gradient check (dQ, dK, dV) at m=d=8, 50 digits", "<= 2 s", s,
        f"min digits {min(c.evidence['digits'] for c in certs)}")
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "composite.json", json.dumps(rows, indent=2) + "\n")
    lines = ["# Attention and composites benchmark", "", "Command: `python benchmarks/composite_bench.py` (2 cores).", "",
             "| what | target | seconds | result |", "|---|---|---|---|"]
    lines += [f"| {r['what']} | {r['target']} | {r['seconds']} | {r['detail']} |" for r in rows]
    atomic_write(out / "composite.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
