"""Benchmark of the numeric tier (issue: high-precision gradient checks).

For every built-in op: digits of agreement and time of `check` at tiny shapes (each op's smallest
dims) and at default shapes; and, where PyTorch is installed, torch.autograd.gradcheck (default
settings, float64) on the same ops and shapes, in the same run, with its time and the digits of its
own finite-difference Jacobian (central differences, eps = 1e-6, as gradcheck computes it).

Writes reports/benchmarks/numeric.json and numeric.md. Run: python benchmarks/numeric_bench.py
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vjpcert.numeric.check import check_claim  # noqa: E402
from vjpcert.numeric.sampling import sample_point  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.core.backends import F64  # noqa: E402
from vjpcert.core.certificate import atomic_write  # noqa: E402

try:
    import torch  # noqa: F401

    from vjpcert.numeric import torch_bridge
except ImportError:
    torch_bridge = None


def ours(op, dims) -> dict:
    t = time.perf_counter()
    certs = [check_claim(op, c, dims, cases=("random",)) for c in op.claims()]
    return {"seconds": round(time.perf_counter() - t, 4), "min_digits": min(c.evidence["digits"] for c in certs),
            "verdicts": sorted({c.verdict for c in certs})}


def gradcheck_row(op, dims) -> dict:
    point = sample_point(op, dims, "random", 0)
    t = time.perf_counter()
    ok = torch_bridge.gradcheck(op, point)
    seconds = time.perf_counter() - t
    # the digits gradcheck's own numerical Jacobian reaches: central differences, eps = 1e-6, relative
    # to the largest Jacobian entry over all inputs (a key bias's Jacobian is exactly 0)
    worst, errs, scale = math.inf, [], 0.0
    for wrt in op.inputs:
        x = point[wrt]
        vals = {**point, **{k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()}}
        y = np.asarray(op.bind(op.forward, F64, vals))
        J = np.empty((y.size, x.size))
        for j in range(x.size):
            e = np.zeros(x.size)
            e[j] = 1e-6
            e = e.reshape(x.shape)
            J[:, j] = ((np.asarray(op.bind(op.forward, F64, {**vals, wrt: x + e}))
                        - np.asarray(op.bind(op.forward, F64, {**vals, wrt: x - e}))) / 2e-6).ravel()
        A = np.empty_like(J)
        for i in range(y.size):
            dy = np.zeros(y.size)
            dy[i] = 1
            A[i] = np.asarray(op.bind(op.vjp, F64, {**vals, "dy": dy.reshape(y.shape)})[list(op.inputs).index(wrt)]).ravel()
        errs.append(np.abs(J - A).max())
        scale = max(scale, np.abs(A).max())
    err = max(errs) / max(scale, 1e-300)
    worst = -math.log10(err) if err > 0 else 16
    return {"pass": bool(ok), "seconds": round(seconds, 4), "digits": round(worst, 1)}


def main():
    ops = builtin_ops()
    rows = {}
    for name, op in ops.items():
        tiny = op.resolve_dims(op.dims[0])
        row = {"tiny_dims": tiny, "ours_tiny": ours(op, tiny), "default_dims": op.check_dims,
               "ours_default": ours(op, op.check_dims)}
        if torch_bridge is not None:
            row["gradcheck_default"] = gradcheck_row(op, op.check_dims)
        rows[name] = row
    result = {"torch": getattr(sys.modules.get("torch"), "__version__", None), "ops": rows}
    out = ROOT / "reports" / "benchmarks"
    atomic_write(out / "numeric.json", json.dumps(result, indent=2, default=str) + "\n")
    lines = ["# Numeric tier benchmark", "", "Command: `python benchmarks/numeric_bench.py` (2 cores); "
             "ours: mpmath.diff at 50 digits, all claims of the op, random inputs.", "",
             "| op | tiny dims | ours: s (all claims) | ours: min digits | default dims | ours: s | ours: digits "
             "| gradcheck: pass | gradcheck: s | gradcheck FD digits |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        g = r.get("gradcheck_default", {})
        lines.append(f"| {name} | {r['tiny_dims']} | {r['ours_tiny']['seconds']:.3f} | {r['ours_tiny']['min_digits']} "
                     f"| {r['default_dims']} | {r['ours_default']['seconds']:.3f} | {r['ours_default']['min_digits']} "
                     f"| {g.get('pass', 'no torch')} | {g.get('seconds', '-')} | {g.get('digits', '-')} |")
    if torch_bridge is None:
        lines += ["", "PyTorch is not installed: the gradcheck columns are empty (pip install torch==2.13.0)."]
    atomic_write(out / "numeric.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
