"""Input cases: the values both numeric tiers (``numeric/``, 50-digit checks, and ``cuda_kernels/``,
kernels against the spec) draw their inputs from, so a case means the same in both.

Each case turns a generator and a shape into real values, for the differentiable inputs of an op
(non-differentiable inputs use the op's own samplers):

  random           standard normal: signed, never constant
  large_magnitude  LARGE_SCALE x standard normal: softmax logits ~ +-30 (exp ranges over 1e26;
                   in float32, attention logits Q K^T / sqrt(d) of several hundred overflow exp)
  near_constant    c + NEAR_CONSTANT_SPREAD x standard normal, c standard normal: softmax near-ties,
                   a norm's variance ~ 1e-12 (far below eps)
  large_offset     LARGE_OFFSET + standard normal: |mean| >> spread. exp(1000) overflows in float32
                   and float64, so a softmax that does not subtract the row maximum gives NaN; a
                   one-pass variance E[x^2] - E[x]^2 cancels 1e6 - 1e6 down to the rounding of 1e6
  mixed_magnitude  standard normal x 10^U(-MIXED_DECADES, MIXED_DECADES): entries spread over six
                   decades in one row, so sums absorb and cancel (the conditioning of a sum)
  on_kinks         integers in [-KINK_SPAN, KINK_SPAN]: exact zeros and exact ties, so a kernel of an
                   op with kinks (relu, max-pooling) meets them and is held to the spec's value there
                   (the convention: relu'(0) = 0, a tie to the first maximum); run for such ops only
"""
from __future__ import annotations

import numpy as np

LARGE_SCALE = 30.0
NEAR_CONSTANT_SPREAD = 1e-6
LARGE_OFFSET = 1000.0
MIXED_DECADES = 3.0

KINK_SPAN = 2

CASES = ("random", "large_magnitude", "near_constant", "large_offset", "mixed_magnitude")
ON_KINKS = "on_kinks"
ALL_CASES = (*CASES, ON_KINKS)


def case_values(case: str, rng: np.random.Generator, shape) -> np.ndarray:
    """float64 values of ``case`` with this shape (the first draw is always the standard normal, so
    the three original cases draw exactly what they drew before the other two existed)."""
    z = rng.standard_normal(shape)
    if case == "random":
        return z
    if case == "large_magnitude":
        return LARGE_SCALE * z
    if case == "near_constant":
        return rng.standard_normal() + NEAR_CONSTANT_SPREAD * z
    if case == "large_offset":
        return LARGE_OFFSET + z
    if case == "mixed_magnitude":
        return z * 10.0 ** rng.uniform(-MIXED_DECADES, MIXED_DECADES, np.shape(z))
    if case == ON_KINKS:
        return rng.integers(-KINK_SPAN, KINK_SPAN + 1, np.shape(z)).astype(np.float64)
    raise ValueError(f"unknown input case {case!r}; cases: {', '.join(ALL_CASES)}")
