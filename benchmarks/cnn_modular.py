"""Convolutional layers from PyTorch's own backwards, checked mod p at a ResNet-50's sizes.

Each case is one PyTorch function traced as it is (``from_torch``: ``aten.convolution`` and its
backward, max-pooling with indices, relu, batch norm through PyTorch's decomposition) and checked by
the modular tier (``check_modular``: the joint VJP residual at random points mod 60-bit primes) at
the sizes a ResNet-50 runs it: the stage-2 3x3 convolution (batch 8, 64 channels, 56 x 56), the stem's
3x3/2 max-pool (112 x 112), a stage-2 relu (256 channels), stage-2 batch norm. Beside each, its float64
forward + backward in PyTorch on one thread, the peer the time is compared with in the same run.
Writes reports/benchmarks/cnn_modular.{json,md}.
Run: python benchmarks/cnn_modular.py
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "benchmarks"
NCHW = ("N", "C", "H", "W")


def cases(F):
    return [
        ("conv2d 3x3, stride 1, padding 1", lambda x, w: F.conv2d(x, w, padding=1),
         {"x": NCHW, "w": ("O", "C", 3, 3)}, {"N": 8, "C": 64, "O": 64, "H": 56, "W": 56}),
        ("max_pool2d 3x3, stride 2, padding 1", lambda x: F.max_pool2d(x, 3, 2, padding=1),
         {"x": NCHW}, {"N": 8, "C": 64, "H": 112, "W": 112}),
        ("relu", lambda x: F.relu(x), {"x": NCHW}, {"N": 8, "C": 256, "H": 56, "W": 56}),
        ("batch_norm, training", lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
         {"x": NCHW, "g": ("C",), "b": ("C",)}, {"N": 8, "C": 64, "H": 56, "W": 56}),
    ]


def torch_seconds(torch, fn, inputs, dims) -> float:
    """float64 forward and backward of every input, one thread, best of three."""
    args = [torch.randn(*[dims[d] if isinstance(d, str) else d for d in decl], dtype=torch.float64,
                        requires_grad=True) for decl in inputs.values()]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        y = fn(*args)
        torch.autograd.grad(y, args, torch.randn_like(y))
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    import torch
    import torch.nn.functional as F
    from vjpcert.frontends.pytorch import from_torch
    from vjpcert.symbolic.modular.check import check_modular
    torch.set_num_threads(1)
    rows = []
    for name, fn, inputs, dims in cases(F):
        small = {k: 1 for k in dims} | {"H": 3, "W": 3}
        op = from_torch(fn, name=name.split()[0].strip(","), inputs=inputs, dims=[small])
        t = time.perf_counter()
        cert = check_modular(op, "vjp[x]", dims)
        seconds = time.perf_counter() - t
        peer = torch_seconds(torch, fn, inputs, dims)
        rows.append({"case": name, "dims": dims, "verdict": cert.verdict, "seconds": round(seconds, 2),
                     "torch_float64_seconds": round(peer, 4), "ratio": round(seconds / peer, 1),
                     "false_pass_probability": cert.evidence.get("false_pass_probability"),
                     "reason": cert.evidence.get("reason", "")})
        print(f"{name:38s} {cert.verdict:22s} {seconds:7.1f} s  torch {peer:.3f} s", flush=True)
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version()}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cnn_modular.json").write_text(json.dumps({"meta": meta, "cases": rows}, indent=1) + "\n")
    lines = ["# Convolutional layers from PyTorch, checked mod p at ResNet-50 sizes", "",
             f"{meta['machine']}. The modular tier's joint check of every cotangent (all threads) beside PyTorch's "
             "float64 forward + backward on one thread, in the same run. Command: `python benchmarks/cnn_modular.py`.",
             "", "| case | dims | verdict | seconds | torch float64, s | ratio | false-pass bound |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines.append(f"| {r['case']} | {dims} | {r['verdict']} | {r['seconds']} | {r['torch_float64_seconds']} | "
                     f"{r['ratio']}x | {r['false_pass_probability']} |")
    notes = [r for r in rows if r["verdict"] == "inconclusive"]
    if notes:
        lines += ["", "Inconclusive:"] + [f"- {r['case']}: {r['reason']}" for r in notes]
    (OUT / "cnn_modular.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
