"""Every number the kernel checker decides with, and where it comes from.

Outputs. For every element i of every output, with y_i the op's spec in float64 at the kernel's
float32 inputs:

    |kernel_i - y_i|  <=  max( model_i ,  |spec_f32_i - y_i| )  +  ABSOLUTE_FLOOR

``model_i`` is the kernel's own rounding-error model (``cuda_kernels/error_model.py``; each kernel
file restates its arithmetic in its own summation order): the first-order error coefficients
c of every float32 rounding, bounded deterministically by u ||c||_1 or, where rounding errors
behave as independent and of mean zero, by lambda u ||c||_2 (see ``MODEL_FOR_CASE``). The float32
spec's own error (numpy, on the same inputs) is a sanity floor, not the bound's source: an element
where a straightforward float32 evaluation of the formula is worse than the model says the kernel
can be (numpy adds the rows of a column one after another, our column sums use a tree) is never
held against the kernel, and the certificate counts how many elements the floor decided.

Laws checked on kernel outputs keep the differential rule of the project (core/tolerance.py): the
law's residual on the kernel's outputs, in float64, against the same law on the float32 spec's
outputs, residual <= k * residual_f32 + LAW_FLOOR_ROUNDINGS * u * law_scale.
"""
from __future__ import annotations

import numpy as np

from vjpcert.core import input_cases as _cases
from vjpcert.core import kernel_checks as _kernel_cases
from vjpcert.core import tolerance as _rule

UNIT_ROUNDOFF = _rule.unit_roundoff(np.float32)        # u = 2^-24

# ------------------------------------------------------------------------------ the error model
# lambda of the probabilistic bound lambda u ||c||_2. With independent, mean-zero roundings bounded
# by u, Hoeffding's inequality gives P(|error| > lambda u ||c||_2) <= 2 exp(-lambda^2 / 2) = 6.7e-4 per
# element at lambda = 4; that tail assumes every rounding as large as u. Round-to-nearest on data that
# are not special spreads the errors over [-u, u] (standard deviation u / sqrt(3)), and then 4 is 6.9
# standard deviations (~5e-12). Measured on the correct kernels: max |error| / (u ||c||_2) <= 1.5
# over every case and size here. Faults it is there for go red: a single running sum in the matmul
# (5.1 at n_in = 1024, tile 16), a sequential sum of squares in RMSNorm (8.8 over 64 rows of 4096,
# block 256); a deterministic bound (u ||c||_1, ~14-24 x ||c||_2 there) would pass both.
LAMBDA = 4.0

# Which bound holds for which input case. Higham and Mary's model assumes independent roundings;
# data where every term is nearly the same (near-constant rows; a large common offset, whose sums
# are sums of ~1000 again and again) round the same way step after step, and the errors add up
# linearly: there only the deterministic first-order bound is claimed.
MODEL_FOR_CASE = {
    "random": "probabilistic",
    "large_magnitude": "probabilistic",
    "mixed_magnitude": "probabilistic",
    "near_constant": "deterministic",
    "large_offset": "deterministic",
    "on_kinks": "deterministic",
    # the kernel cases (core/kernel_checks.py): rows far from zero, like the large offset; one huge
    # entry a row, whose exponentials and squares dominate their sums: no averaging is claimed
    "offset_sweep": "deterministic",
    "huge_in_last_block": "deterministic",
    # heavy tails and outlier channels: a few products dominate each sum, so no averaging is claimed
    "activations": "deterministic",
    # equal terms round the same way step after step: their errors add up linearly
    "equal_rows": "deterministic",
}

# The summation-order check. A random draw cannot tell one summation order from another once other
# roundings dominate: in flash attention's dV = P^T dO every term carries the recomputed P's rounding
# (a first-order bound of 22-53 u given L, 94-503 u with the forward's), against a running sum's extra
# sqrt(m) u, so a kernel that sums in one long running sum where its model says tiles stays inside the
# model's bound at every size (measured: 0.02-0.03 of it at m = 1024). Equal terms separate orders (Higham, ch. 4): a running sum of m equal terms errs by up to
# ~m u / 4 (each rounding in a binade is the same), a tiled one by (T + m / T) / 2 u at most. The case
# ``equal_rows``: every row (the last axis) of each differentiable input and of the cotangent is one
# standard-normal row, repeated, so every sum over rows adds equal terms. It runs at the sizes of a
# kernel's ``Sizes.orders``, alone, at this process's launch configuration (the check's launch
# "orders"), long enough for the orders to part: at m = 512, tile 8, flash attention's dV summed in one
# running sum reaches 1.2-1.9 x the tiled model's bound over seeds 0-9, the tiled kernel 0.1-0.2 x.
EQUAL_ROWS = "equal_rows"
ORDER_CASES = (EQUAL_ROWS,)

# Library functions as a GPU computes them (numba-cuda lowers math.* on float32 to libdevice; the
# PTX shows div.rn.f32 and sqrt.rn.f32, i.e. correctly rounded division and square root). Errors in
# units of u: 1 ulp <= 2 u relative. CUDA C++ Programming Guide, "Mathematical Functions", maximum
# ulp errors of the single-precision functions: expf 2, logf 1, erff 2, tanhf 2; sqrtf and
# division 0.5 ulp (correctly rounded) = 1 u. The simulator evaluates them in float64 and rounds
# once (0.5 ulp): the model is the GPU's, which is the looser.
FUNCTION_ERROR_U = {"exp": 4.0, "log": 2.0, "erf": 4.0, "tanh": 4.0, "sqrt": 1.0}

# RoPE's float32 sincos (cuda_kernels/rope.py): absolute error <= 7.6e-8 measured against float64 for
# |x| <= 1e6; 1e-7 allowed (in units of u: 1e-7 / 2^-24 = 1.68).
SINCOS_ABSOLUTE_ERROR_U = 1e-7 / UNIT_ROUNDOFF

# Underflow: a float32 result below 2^-126 may be flushed to 0 (libdevice's expf inside erff runs
# with flush-to-zero), an absolute error the relative model does not describe. exp() adds 2^-126
# absolutely, and every output may differ by ABSOLUTE_FLOOR (far below any error at the inputs here).
UNDERFLOW = 2.0 ** -126
ABSOLUTE_FLOOR = _rule.ABSOLUTE_FLOOR

# The model's exact-arithmetic values must reproduce the float64 spec: a model that follows another
# formula than the kernel's would bound the wrong thing. Allowed per element: 1e-9 of the output's
# scale (float64 rounding, ~1e-16, amplified by the conditioning of the large-offset cases), or 2^-10
# of the float32 bound the model gives there (float64 evaluates the same steps 2^29 times more
# finely; an output computed from far larger intermediates -- attention's dQ over near-constant
# rows, 1e-12 next to O(1) terms -- deviates by float64 rounding of those intermediates).
MODEL_VALUE_RTOL = 1e-9
MODEL_VALUE_OF_BOUND = 2.0 ** -10

# ------------------------------------------------------------------------------ inputs
# The input cases of core/input_cases.py (shared with the numeric tier): every kernel is checked
# at every case. Differentiable inputs follow the case; non-differentiable inputs use the spec's own
# samplers (RoPE positions are integers in [0, 4096)); the cotangent is standard normal (signed,
# never constant: an all-ones cotangent makes softmax's correct VJP identically zero).
CASES = (*_cases.CASES, *_kernel_cases.KERNEL_CASES)     # and the cases only the kernel tiers draw
KINK_CASES = (_cases.ON_KINKS,)   # added for an op with kinks: exact zeros and ties
FIRST_CASE = "random"          # the case run under the race detector and twice for determinism
# The GPU's own launch configuration in the simulator (blocks of 256 simulated threads) runs the
# random case only: it is there for faults of the configuration (accumulator sizes, tiles, warps,
# summation order), which the random case shows; every case runs at the simulator's configuration,
# and on a GPU every case runs at the GPU's.
SIMULATED_GPU_LAUNCH_CASES = ("random",)

# Determinism: two launches on the same inputs must agree bit for bit (no float atomics here).
DETERMINISM_RUNS = 2

# ------------------------------------------------------------------------------ laws
# k and the rounding floor are the project's one differential rule (core/tolerance.py).
K_FORWARD = _rule.K_FORWARD
K_BACKWARD = _rule.K_BACKWARD

# Laws checked on kernel outputs (e.g. softmax dx sums to 0 per row): the project's law rule
# (core/tolerance.py, shared with the Triton tier): residual <= k * residual_f32 +
# LAW_FLOOR_ROUNDINGS * u * law_scale.
LAW_FLOOR_ROUNDINGS = _rule.LAW_FLOOR_ROUNDINGS


def k_for(kind: str) -> float:
    if kind not in ("forward", "backward"):
        raise ValueError(f"kernel kind must be forward or backward, not {kind!r}")
    return _rule.k_for(kind == "backward")


def law_bound(kind: str, baseline_residual: float, law_scale: float) -> float:
    k_for(kind)                 # a kind other than forward/backward is refused
    return _rule.law_bound(kind == "backward", baseline_residual, law_scale, np.float32)


def element_bound(model_bound: np.ndarray, spec_f32_error: np.ndarray) -> np.ndarray:
    """The allowed error per element: the project's rule (core/tolerance.py) with the kernel's model
    (k does not enter: the model replaces it)."""
    return _rule.bound(spec_f32_error, backward=False, dtype=np.float32, model=model_bound)


RULE_IN_WORDS = (f"per element |kernel - spec_f64| <= max(model, |spec_f32 - spec_f64|) + 2^-100, model = the "
                 f"kernel's first-order rounding-error model in its own summation order (cuda_kernels/error_model.py): "
                 f"u ||c||_1 (deterministic; near-constant and large-offset inputs) or min({LAMBDA:g} u ||c||_2, "
                 f"u ||c||_1) (probabilistic: independent roundings; random, large-magnitude and mixed-magnitude "
                 f"inputs; u ||c||_1 for the equal-rows summation-order case); u = 2^-24, library functions at the CUDA "
                 f"guide's maximum ulp errors")
