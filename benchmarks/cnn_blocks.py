"""The convolutional blocks: compositional proofs at realistic dims, the modular test at production dims.

For each block (a ResNet-50 bottleneck, a MobileNetV2 inverted residual, a ConvNeXt block):
- every VJP claim proved-compositional at the op's compositional_dims, cold (the nodes' proofs --
  every-size where the node has one, fixed-dims at exactly the dims the block calls it with -- part
  of the time);
- every VJP claim checked mod p at the op's modular_dims (the production sizes, batch 8: one joint run
  for all the claims, as many trials as the false-pass bound asks for), and, as the peer in the same
  run, the spec's own float64 forward + backward at the same dims (numpy, ``core.reference``).
Writes reports/benchmarks/cnn_blocks.{json,md}. Run: python benchmarks/cnn_blocks.py [op ...]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.core import reference  # noqa: E402
from vjpcert.core.certificate import atomic_write  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.symbolic.composition.compose import _CACHE, prove_compositional  # noqa: E402
from vjpcert.symbolic.modular.check import check_modular  # noqa: E402

BLOCKS = ("resnet_bottleneck", "inverted_residual", "convnext_block")


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t, 2)


def float64_seconds(op, dims) -> float:
    """The spec's float64 forward and backward at ``dims``, best of two."""
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal([dims[d] if isinstance(d, str) else d for d in decl])
              for k, decl in op.inputs.items()}
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        y = reference.forward(op, **arrays)
        reference.vjp(op, rng.standard_normal(y.shape), **arrays)
        best = min(best, time.perf_counter() - t)
    return round(best, 2)


def main(names):
    ops = builtin_ops()
    rows = []
    for name in names:
        o = ops[name]
        vjps = [c for c in o.claims() if c.startswith("vjp[")]
        for dims in o.compositional_dims:
            _CACHE.clear()
            certs, s = timed(lambda: [prove_compositional(o, c, dims) for c in vjps])
            ok = sum(c.verdict == "proved-compositional" for c in certs)
            rests = sorted({f"{n['node']}: {n['rests_on']}" for c in certs for n in c.evidence["nodes"]})
            rows.append({"op": name, "what": f"all {len(vjps)} VJP claims, compositional, cold", "dims": dims,
                         "seconds": s, "peer_seconds": None,
                         "detail": f"{ok}/{len(vjps)} proved-compositional; nodes rest on {', '.join(rests)}"})
            print(rows[-1], flush=True)
        for dims in o.modular_dims:
            certs, s = timed(lambda: [check_modular(o, c, dims) for c in vjps])
            ok = sum(c.verdict == "checked-probabilistic" for c in certs)
            trials = certs[0].evidence.get("timings", {}).get("seconds_per_trial", [])
            peer = float64_seconds(o, dims)
            rows.append({"op": name, "what": f"all {len(vjps)} VJP claims mod p (one joint run)", "dims": dims,
                         "seconds": s, "peer_seconds": peer,
                         "detail": f"{ok}/{len(vjps)} checked-probabilistic; {len(trials)} trials, "
                                   f"{round(sum(trials) / max(len(trials), 1), 2)} s each "
                                   f"(the false-pass bound sets the count); "
                                   f"false pass <= {certs[0].evidence.get('false_pass_probability')}"})
            print(rows[-1], flush=True)
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "cnn_blocks.json", json.dumps(rows, indent=2) + "\n")
    lines = ["# Convolutional blocks benchmark", "",
             "Command: `python benchmarks/cnn_blocks.py` (2 cores, one process). The peer: the spec's own "
             "float64 forward + backward at the same dims (numpy), in the same run.", "",
             "| op | what | dims | seconds | float64 peer (s) | ratio | result |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['seconds'] / r['peer_seconds']:.0f}x" if r["peer_seconds"] else "-"
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines.append(f"| {r['op']} | {r['what']} | {dims} | {r['seconds']} | {r['peer_seconds'] or '-'} | "
                     f"{ratio} | {r['detail']} |")
    atomic_write(out / "cnn_blocks.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:] or list(BLOCKS))
