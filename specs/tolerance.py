"""The tolerance rule for implementations compared with a spec (FlashAttention's), in one place.

    |impl - truth|  <=  k * |spec at the impl's dtype - truth|  +  floor(dtype)

``truth`` is the spec in float64 (or mpmath); the middle term is the error the *spec itself* makes
when evaluated at the implementation's precision, so an implementation may be k times as inexact as
a straightforward evaluation of the formula, and no more. k = 2 for forward outputs, 3 for backward
outputs (FlashAttention's test suite uses 2-3x the reference's error). The floor guards the case
where the baseline error is exactly 0 (e.g. an output the float32 spec happens to round exactly):
a few units in the last place of the outputs' scale -- the largest of the op's outputs (all its
cotangents, for a backward), because an output far smaller than its siblings (attention's dQ over
near-constant rows, 1e-12 next to a dV of 1) is computed from the same O(1) quantities and carries
their rounding, not its own.

Used by the kernel tier and by checks of user implementations (``vjpcert check --impl``).
"""
from __future__ import annotations

import numpy as np

K_FORWARD = 2
K_BACKWARD = 3
FLOOR_ULPS = 4       # four units in the last place of max|truth|: rounding of a handful of operations


def floor(dtype, scale: float) -> float:
    return FLOOR_ULPS * float(np.finfo(dtype).eps) * max(float(scale), float(np.finfo(dtype).tiny))


def bound(baseline_error: float, *, backward: bool, dtype, scale: float) -> float:
    """The largest error allowed: k * baseline + floor."""
    return (K_BACKWARD if backward else K_FORWARD) * float(baseline_error) + floor(dtype, scale)


def rule_in_words(backward: bool, dtype) -> str:
    k = K_BACKWARD if backward else K_FORWARD
    return (f"max|impl - float64 spec| <= {k} x max|{np.dtype(dtype).name} spec - float64 spec| "
            f"+ {FLOOR_ULPS} ulp({np.dtype(dtype).name}) x max|float64 spec|")


def compare(impl, truth, baseline, *, backward: bool, dtype, floor_scale: float = 0.0) -> dict:
    """Errors and bound for one output array; ``ok`` says whether the rule holds. ``floor_scale`` is
    the scale of the sibling outputs (see the module docstring)."""
    impl, truth, baseline = (np.asarray(a, dtype=np.float64) for a in (impl, truth, baseline))
    scale = max(float(np.abs(truth).max()) if truth.size else 0.0, float(floor_scale))
    err = float(np.abs(impl - truth).max()) if truth.size else 0.0
    base = float(np.abs(baseline - truth).max()) if truth.size else 0.0
    limit = bound(base, backward=backward, dtype=dtype, scale=scale)
    where = int(np.argmax(np.abs(impl - truth))) if truth.size else 0
    nonfinite = not np.all(np.isfinite(impl))
    return {"ok": bool(err <= limit and not nonfinite), "error": err, "baseline_error": base, "bound": limit,
            "scale": scale, "worst_index": where, "nonfinite": nonfinite}
