"""Wrong Huber and smooth-L1 backwards, from the bugs clamped gradients invite."""
from vjpcert.specs.huber import clamp, huber, smooth_l1


@huber.mutant("gradient_not_clipped", kills=["vjp[x]", "vjp[t]"])
def _(B, x, t, delta, dy):
    """The squared error's gradient r everywhere: the linear branch forgotten."""
    g = dy * (x - t) / x.size
    return g, -g


@huber.mutant("linear_branch_scaled_by_the_residual", kills=["vjp[x]", "vjp[t]"])
def _(B, x, t, delta, dy):
    """delta r beyond the threshold, where delta sign(r) was meant."""
    r = x - t
    above, below = B.step(r - delta), B.step(-r - delta)
    g = dy * ((1 - above - below) * r + (above + below) * delta * r) / x.size
    return g, -g


@smooth_l1.mutant("beta_not_divided_in_the_quadratic_branch", kills=["vjp[x]", "vjp[t]"])
def _(B, x, t, beta, dy):
    """huber's gradient clamp(r, -beta, beta) for smooth L1's clamp(r, -beta, beta) / beta: right only
    at beta = 1."""
    g = dy * clamp(B, x - t, beta) / x.size
    return g, -g


@smooth_l1.mutant("target_gradient_not_negated", kills=["vjp[t]"])
def _(B, x, t, beta, dy):
    g = dy * clamp(B, x - t, beta) / beta / x.size
    return g, g
