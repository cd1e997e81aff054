"""Wrong softmax backwards."""
from vjpcert.specs.softmax import softmax


@softmax.mutant("sign_flip", kills=["vjp[x]"])
def _(B, x, dy):
    y = softmax(B, x)
    return (-y * (dy - (y * dy).sum(-1, keepdims=True)),)


@softmax.mutant("missing_s_factor", kills=["vjp[x]", "cotangent_sums_to_zero"])
def _(B, x, dy):
    y = softmax(B, x)
    return (dy - (y * dy).sum(-1, keepdims=True),)


@softmax.mutant("dropped_mean_term", kills=["vjp[x]", "cotangent_sums_to_zero"])
def _(B, x, dy):
    return (softmax(B, x) * dy,)


@softmax.mutant("unnormalised_forward", replaces="forward", kills=["vjp[x]", "shift_invariance"])
def _(B, x):
    """exp(x) without the division: no longer shift invariant."""
    return B.exp(x)


@softmax.mutant("fp32_accumulated_dot", kills=["vjp[x]", "cotangent_sums_to_zero"])
def _(B, x, dy):
    """sum_j y_j dy_j accumulated in float32, modelled as one relative rounding of 2^-23 (~1.2e-7):
    one part in 10^7, below what float64 finite differences resolve at large logits."""
    y = softmax(B, x)
    return (y * (dy - (y * dy).sum(-1, keepdims=True) * (1 + B.c(1, 2**23))),)


@softmax.mutant("row_sum_over_wrong_axis", kills=["vjp[x]", "cotangent_sums_to_zero"])
def _(B, x, dy):
    """sum_j y_j dy_j taken over the rows (axis 0) instead of the row's own entries."""
    y = softmax(B, x)
    return (y * (dy - (y * dy).sum(0, keepdims=True)),)


@softmax.mutant("denominator_unshifted", replaces="forward", kills=["max_shift_free"])
def _(B, x):
    """exp(x - m) / sum exp(x): the same in exact arithmetic (m = 0 there), off by exp(-m) in floats
    (and overflowing at large logits): the max_shift_free claim is what sees it exactly."""
    return B.exp(x - B.max_shift(x)) / B.exp(x).sum(-1, keepdims=True)


@softmax.mutant("backward_scaled_1e-45", kills=["vjp[x]"])
def _(B, x, dy):
    """The right backward times 1e-45: every digit wrong, yet the sum-to-zero law still holds. A
    numeric allowance taken from the backward's own magnitude would call it checked."""
    y = softmax(B, x)
    return (B.c(1, 10**45) * y * (dy - (y * dy).sum(-1, keepdims=True)),)


@softmax.mutant("branch_on_zero_logit", refused=True)
def _(B, x, dy):
    """np.where(x == 0, ...): `==` on a traced value cannot be followed (it would be object identity,
    always False, and the wrong branch would go unseen): refused as bad input."""
    import numpy as np
    y = softmax(B, x)
    return (np.where(x == 0, dy, y * (dy - (y * dy).sum(-1, keepdims=True))),)
