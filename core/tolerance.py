"""The tolerance rule for implementations compared with a spec, in one place: the kernel tier and
checks of other implementations (``vjpcert check --impl``, the pytest plugin) both use it, with the
precision (float32, float64) and the implementation's rounding-error model as parameters.

    without a model (FlashAttention's rule):
        max |impl - spec_f64|  <=  k * max |spec_dtype - spec_f64|  +  FLOOR_ROUNDINGS * u(dtype) * scale
    with a model (a kernel whose arithmetic is restated in its own summation order,
    cuda_kernels/error_model.py), per element:
        |impl_i - spec_f64_i|  <=  max(model_i, |spec_dtype_i - spec_f64_i|)  +  ABSOLUTE_FLOOR

A model says what this implementation's own arithmetic can lose, so it replaces the factor k; the
dtype spec's error stays as a floor (an element where a straightforward evaluation of the formula
is worse than the model is never held against the implementation).

``spec_f64`` is the truth (the spec in float64, or in mpmath rounded to float64); ``spec_dtype`` is the
op's own spec evaluated at the implementation's precision on the *same* inputs -- what a
straightforward implementation of the formula achieves there -- and an implementation may be k times
as inexact as that, and no more (another summation order, recomputation from a saved log-sum-exp,
fused steps).
"""
from __future__ import annotations

import numpy as np

# k: FlashAttention's tests (Dao-AILab/flash-attention, tests/test_flash_attn.py) assert
#   (out - out_ref).abs().max() <= 2 * (out_pt - out_ref).abs().max()
# with out_pt the reference run in the kernel's dtype. We take k = 2 forward and k = 3
# backward: backward kernels recompute P from the saved log-sum-exp and sum dK, dV, dQ, dgamma in
# orders of their own, which costs a little more than the forward.
K_FORWARD = 2.0
K_BACKWARD = 3.0

# The floor guards the case where the baseline is exact or nearly so at these inputs (softmax of one
# element is exactly 1; an all-masked row is exactly 0; a GELU that rounds the same way as the spec).
# A correct implementation cannot be asked to do better than its own rounding: its output is rounded
# once (u |y|), and the last few operations before it (a multiply, an add, a transcendental) each add
# about u |y|. Four roundings of the output scale is that allowance, far below what real bugs produce
# (O(1) relative errors, NaN, a dropped term). FlashAttention's newer tests add the same kind of floor.
FLOOR_ROUNDINGS = 4

# With a model: an output may be flushed to 0 below the smallest normal number (libdevice's expf
# inside erff runs with flush-to-zero), an absolute error no relative model describes; 2^-100 is far
# below any error at the inputs checked.
ABSOLUTE_FLOOR = 2.0 ** -100


# Laws checked on an implementation's outputs (e.g. softmax dx sums to 0 per row) are evaluated in
# float64 on its float outputs and compared with the same law evaluated on the dtype spec's outputs:
# residual <= k * residual_dtype + LAW_FLOOR_ROUNDINGS * u * law_scale. A law reads many outputs per
# component (a row sum reads n of them), each of which may carry the output floor, so law_scale =
# max(|lhs|, |rhs|, R * max|outputs read|) with R the outputs read per component (the worst-case
# accumulation of per-entry errors, as in the gamma_n bound of a sum); the factor 8 is the output
# floor (4 roundings) doubled for the rounding of inputs that a law builds in float64 (x - x_0,
# -pos, 2 x) before handing them to an implementation.
LAW_FLOOR_ROUNDINGS = 8


# The spec's float path against the exact function it computes (``core.rounding.float_path_errors``:
# the numeric tier's `reference` claim and the replay of every traced claim, ``core.replay``). A
# first-order running error bound is rigorous up to O(u^2) terms and the rounding of the bound itself;
# this relative slack covers both.
BOUND_SLACK = 1e-6
# ... and never below a few roundings of the output's own scale (an output that is exact in floats).
REFERENCE_FLOOR_ROUNDINGS = 4
# The running bound is rigorous; the output floor enters the float path's own check at this fraction
# only (an exact-in-floats output still passes; a float path off by a rounding of the scale does not).
REFERENCE_FLOOR_SHARE_FOR_BOUND = 1e-3


def unit_roundoff(dtype) -> float:
    """u: half an ulp of 1; a value rounded once to ``dtype`` is off by at most u |v|."""
    return float(np.finfo(dtype).eps) / 2


def k_for(backward: bool) -> float:
    return K_BACKWARD if backward else K_FORWARD


def floor(dtype, scale: float) -> float:
    return FLOOR_ROUNDINGS * unit_roundoff(dtype) * max(float(scale), 0.0)


def bound(baseline_error, *, backward: bool = False, dtype, scale: float = 0.0, model=None):
    """The largest error allowed: k * baseline + floor without a model; per element
    max(model, baseline) + ABSOLUTE_FLOOR with one (``model`` and ``baseline_error`` arrays)."""
    if model is None:
        return k_for(backward) * float(baseline_error) + floor(dtype, scale)
    return np.maximum(np.asarray(model, dtype=np.float64), np.asarray(baseline_error, dtype=np.float64)) + ABSOLUTE_FLOOR


def law_bound(backward: bool, baseline_residual: float, law_scale: float, dtype) -> float:
    """The largest residual a law may have on an implementation's outputs (see LAW_FLOOR_ROUNDINGS)."""
    return k_for(backward) * float(baseline_residual) + LAW_FLOOR_ROUNDINGS * unit_roundoff(dtype) * float(law_scale)


def rule_in_words(backward: bool, dtype) -> str:
    name = np.dtype(dtype).name
    return (f"max|impl - float64 spec| <= {k_for(backward):g} x max|{name} spec - float64 spec| "
            f"+ {FLOOR_ROUNDINGS} u({name}) x max|float64 spec|")


def compare(impl, truth, baseline, *, backward: bool, dtype, floor_scale: float = 0.0) -> dict:
    """Errors and bound for one output array; ``ok`` says whether the rule holds. ``floor_scale``
    raises the floor's scale to that of sibling outputs: an output far smaller than its siblings
    (attention's dQ over near-constant rows, 1e-12 next to a dV of 1) is computed from the same O(1)
    quantities and carries their rounding, not its own."""
    impl, truth, baseline = (np.asarray(a, dtype=np.float64) for a in (impl, truth, baseline))
    scale = max(float(np.abs(truth).max()) if truth.size else 0.0, float(floor_scale))
    err = float(np.abs(impl - truth).max()) if truth.size else 0.0
    base = float(np.abs(baseline - truth).max()) if truth.size else 0.0
    limit = bound(base, backward=backward, dtype=dtype, scale=scale)
    where = int(np.argmax(np.abs(impl - truth))) if truth.size else 0
    nonfinite = not np.all(np.isfinite(impl))
    return {"ok": bool(err <= limit and not nonfinite), "error": err, "baseline_error": base, "bound": limit,
            "scale": scale, "worst_index": where, "nonfinite": nonfinite}


def digits(err, scale, dps) -> float:
    """Digits of agreement, -log10(err / scale) clipped to [0, dps], from mpmath or Python numbers
    (computed with mpmath: a float would underflow below 1e-308)."""
    import mpmath
    if err == 0:
        return float(dps)
    if scale == 0:
        return 0.0
    return max(0.0, min(float(dps), float(-mpmath.log10(err / scale))))


# A float constant in a framework graph is read as the real it is the rounding of when that real is
# within this many units in the last place: the nearest float is 1/2 ulp away, a constant a framework
# computes (sqrt(1/sqrt(d)), 1/sqrt(2) * 2/sqrt(pi)) adds about 1/2 ulp per operation, and 4 ulps is
# that for a handful of operations. The same bound says when a claim fails only by constants'
# rounding: a fit moves each rounded constant by at most this much.
CONSTANT_ROUNDING_ULPS = 4

# how much of a failing residual the fit by constants' rounding may leave unexplained (relative): the
# residual is linear in the shifts to first order, and the second order is ulp^2, 10^-16 of the first
FIT_LEFT = 1e-6


def rounding_fit(residual, sensitivity: dict) -> dict:
    """Whether a claim's failure is only the rounding of its constants. ``residual``: the claim's
    residual components (lhs - rhs, at some points); ``sensitivity``: per rounded constant, how those
    components move when the constant moves by one unit in its last place. The least-squares shifts
    that cancel the residual are ``ulps``; ``explained`` when each is at most
    CONSTANT_ROUNDING_ULPS and they leave at most FIT_LEFT of the residual (one shift per constant
    for every component at every point: a wrong formula leaves its residual standing)."""
    r = np.array([float(v) for v in residual])
    top = float(np.max(np.abs(r))) if r.size else 0.0
    names = list(sensitivity)
    if top == 0.0 or not names:
        return {"explained": False, "ulps": {}, "left": 1.0}
    S = np.array([[float(v) / top for v in sensitivity[k]] for k in names]).T
    shifts, *_ = np.linalg.lstsq(S, -r / top, rcond=None)
    left = float(np.max(np.abs(r / top + S @ shifts)))
    return {"explained": bool(np.all(np.abs(shifts) <= CONSTANT_ROUNDING_ULPS) and left <= FIT_LEFT),
            "ulps": {k: round(float(d), 3) for k, d in zip(names, shifts)}, "left": float(f"{left:.3g}")}


def rounding_words(names, fit: dict) -> str:
    """Why a claim that fails only by its constants' rounding is not `failed`, in words."""
    moves = ", ".join(f"{k} by {v:+g} ulp" for k, v in fit["ulps"].items())
    return (f"the claim fails only by the rounding of float constants read as the decimals they print as "
            f"({', '.join(names)}): moving {moves} cancels the residual at every point fitted (a fraction "
            f"{fit['left']:.3g} of it is left), so the formula is right for the reals these constants round. "
            f"Write the real in the code, or read the constant as it (--constants named, the default, names "
            f"square roots and multiples of pi within {CONSTANT_ROUNDING_ULPS} ulps)")
