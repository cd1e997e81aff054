"""Every number the kernel checker decides with, and where it comes from (the rule's k and floor are
the project's one tolerance rule, core/tolerance.py).


The rule (FlashAttention's, as in its test suite and DESIGN.md "Kernels"): for every output,

    max |kernel - spec_f64|  <=  k * max |spec_f32 - spec_f64|  +  floor,
    floor = FLOOR_ROUNDINGS * u * max |spec_f64|,           u = 2^-24 (float32 unit roundoff)

with k = K_FORWARD for forward kernels and K_BACKWARD for backward kernels. spec_f64 and spec_f32
are the op's own spec evaluated on the numpy backends (vjpcert.core.reference) at the *same* float32
inputs the kernel gets, so the float32 baseline is what a straightforward float32 implementation of
the spec achieves at these inputs, and a kernel may be a small factor worse (another summation
order, recomputation from the log-sum-exp, fused steps).
"""
from __future__ import annotations

import numpy as np

from vjpcert.core import tolerance as _rule

# k and the floor are the project's one tolerance rule (core/tolerance.py, shared with checks of
# other implementations); what follows here is what only the kernel checker needs.
K_FORWARD = _rule.K_FORWARD
K_BACKWARD = _rule.K_BACKWARD
FLOOR_ROUNDINGS = _rule.FLOOR_ROUNDINGS
UNIT_ROUNDOFF = _rule.unit_roundoff(np.float32)

# Laws checked on kernel outputs (e.g. softmax dx sums to 0 per row) are evaluated in float64 on the
# kernel's float32 outputs, and compared in the same way with the same law evaluated on the float32
# spec's outputs: residual <= k * residual_f32 + LAW_FLOOR_ROUNDINGS * u * law_scale. A law reads
# many outputs per component (a row sum reads n of them), each of which may carry the output floor,
# so law_scale = max(|lhs|, |rhs|, R * max|outputs read|) with R the outputs read per component (the
# worst-case accumulation of per-entry errors, as in the gamma_n bound of a sum); the factor 8 is
# the output floor (4) doubled for the float32 rounding of inputs that a law builds in float64
# (x - x_0, -pos, 2 x) before handing them to a kernel.
LAW_FLOOR_ROUNDINGS = 8

# Inputs: standard normal (signed, never constant: an all-ones cotangent makes softmax's correct
# VJP identically zero, so a wrong one would pass); non-differentiable inputs use the spec's own
# samplers (RoPE positions are integers in [0, 4096)).
INPUT_DISTRIBUTION = "standard normal, float32"

# Determinism: two launches on the same inputs must agree bit for bit (no float atomics here).
DETERMINISM_RUNS = 2


def k_for(kind: str) -> float:
    if kind not in ("forward", "backward"):
        raise ValueError(f"kernel kind must be forward or backward, not {kind!r}")
    return _rule.k_for(kind == "backward")


def floor(ref: np.ndarray) -> float:
    """The rounding floor at float32 for an output whose float64 reference is ``ref``."""
    return _rule.floor(np.float32, float(np.max(np.abs(ref))) if np.size(ref) else 0.0)


def bound(kind: str, baseline_error: float, ref: np.ndarray) -> float:
    """k * baseline + floor. With a zero baseline the floor alone decides; with an all-zero
    reference (a fully masked output) the bound is 0 and only an exact kernel passes."""
    return _rule.bound(baseline_error, backward=kind == "backward", dtype=np.float32,
                       scale=float(np.max(np.abs(ref))) if np.size(ref) else 0.0)


def law_bound(kind: str, baseline_residual: float, law_scale: float) -> float:
    return k_for(kind) * float(baseline_residual) + LAW_FLOOR_ROUNDINGS * UNIT_ROUNDOFF * float(law_scale)


RULE_IN_WORDS = (f"max|kernel - spec_f64| <= k * max|spec_f32 - spec_f64| + {FLOOR_ROUNDINGS} u max|spec_f64| "
                 f"per output (k = {K_FORWARD:g} forward, {K_BACKWARD:g} backward; u = 2^-24; spec_f32 and "
                 f"spec_f64 = the op's spec on numpy float32 / float64 at the kernel's float32 inputs)")
