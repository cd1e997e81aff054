"""The any-order rounding bound, measured: what it costs and how tight it is, against peers in the same run.

For softmax's forward at rows x n input sizes up to ``ANALYSIS_MAX_ELEMENTS``:
  * cost: seconds of the any-order analysis (``core.kernel_bounds.any_order_bounds``: arrays of Python
    numbers) as a ratio to the spec's own float32 evaluation on numpy at the same inputs;
  * tightness: per element, the bound over the actual error of float32 evaluations in three summation
    orders (a sequential sum over each row as given, reversed, shuffled), the smallest ratio over the
    elements (below 1 the bound would be wrong: the script exits 1) and the median;
  * in bfloat16 storage (a kernel's outputs rounded to bfloat16): the same, the bound with any
    intermediate rounded to bfloat16 and sums in float32.

Writes reports/benchmarks/any_order.json and .md. Run: python benchmarks/any_order_bench.py
"""
from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZES = ((4, 64), (8, 512), (16, 1024), (32, 2048))      # rows x n; the largest is the analysis' limit


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _orders(x: np.ndarray, fn):
    """The float32 evaluation ``fn`` in three summation orders: as given, each row reversed, shuffled."""
    rng = np.random.default_rng(1)
    perm = rng.permutation(x.shape[-1])
    inv = np.argsort(perm)
    return [fn(x), fn(x[..., ::-1])[..., ::-1], fn(x[..., perm])[..., inv]]


def _softmax32(x):
    x = x.astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    s = np.zeros(x.shape[:-1] + (1,), np.float32)
    for j in range(x.shape[-1]):                       # a sequential sum: an order numpy does not use
        s = (s + e[..., j:j + 1]).astype(np.float32)
    return e / s


def measure(rows: int, n: int, storage: str) -> dict:
    from vjpcert.core.kernel_bounds import any_order_bounds, undocumented_casting
    from vjpcert.core.kernel_checks import reference
    from vjpcert.core.low_precision import rounded
    from vjpcert.specs import resolve_op
    op = resolve_op("softmax")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    if storage != "float32":
        x = rounded(x, storage).astype(np.float32)
    truth = reference(op, "forward", {"x": x}, None, np.float64)[0]
    t_float = _seconds(lambda: reference(op, "forward", {"x": x}, None, np.float32))
    casting = undocumented_casting(storage)
    box = {}
    t_bound = _seconds(lambda: box.update(b=any_order_bounds(op, "forward", {"x": x}, None, storage=storage,
                                                              casting=casting)[0]))
    bound = box["b"]
    ratios = []
    for y in _orders(x, _softmax32):
        y = rounded(y, storage) if storage != "float32" else y.astype(np.float64)
        err = np.abs(y - truth)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(np.where(err > 0, bound / err, np.inf))
    r = np.concatenate([a.ravel() for a in ratios])
    finite = r[np.isfinite(r)]
    return {"rows": rows, "n": n, "storage": storage, "elements": rows * n,
            "bound_seconds": round(t_bound, 3), "float_seconds": round(t_float, 5),
            "cost_vs_float": round(t_bound / max(t_float, 1e-9), 1),
            "bound_over_error_min": float(finite.min()) if finite.size else None,
            "bound_over_error_median": float(np.median(finite)) if finite.size else None}


def main() -> int:
    sys.path.insert(0, str(ROOT))
    rows = [measure(r, n, s) for r, n in SIZES for s in ("float32", "bfloat16")]
    out = ROOT / "reports" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    data = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(), "rows": rows}
    (out / "any_order.json").write_text(json.dumps(data, indent=1))
    lines = ["# The any-order rounding bound: cost and tightness", "",
             "softmax forward, standard-normal rows; `python benchmarks/any_order_bench.py`. Cost: the analysis "
             "(arrays of Python numbers) against numpy's float32 evaluation of the spec in the same run. Tightness: "
             "the bound over the actual error of float32 evaluations in three summation orders, per element "
             "(min >= 1: the bound holds; the median says how loose it is).", "",
             "| rows x n | storage | bound s | float32 s | cost ratio | bound / error: min | median |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rows']} x {r['n']} | {r['storage']} | {r['bound_seconds']} | {r['float_seconds']} | "
                     f"{r['cost_vs_float']} | {r['bound_over_error_min']:.3g} | {r['bound_over_error_median']:.3g} |")
    (out / "any_order.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all((r["bound_over_error_min"] or 1) >= 1 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
