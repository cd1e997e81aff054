"""Wrong Huber and smooth-L1 backwards, from the bugs clamped gradients invite."""
from vjpcert.specs.huber import clamp, elementwise_huber, huber, smooth_l1


@huber.mutant("gradient_not_clipped", kills=["vjp[x]", "vjp[t]", "at_the_kink"])
def _(B, x, t, delta, dy):
    """The squared error's gradient r everywhere: the linear branch forgotten."""
    g = dy * (x - t) / x.size
    return g, -g


@huber.mutant("linear_branch_scaled_by_the_residual", kills=["vjp[x]", "vjp[t]", "at_the_kink"])
def _(B, x, t, delta, dy):
    """delta r beyond the threshold, where delta sign(r) was meant."""
    r = x - t
    above, below = B.step(r - delta), B.step(-r - delta)
    g = dy * ((1 - above - below) * r + (above + below) * delta * r) / x.size
    return g, -g


@smooth_l1.mutant("beta_not_divided_in_the_quadratic_branch", kills=["vjp[x]", "vjp[t]", "at_the_kink"])
def _(B, x, t, beta, dy):
    """huber's gradient clamp(r, -beta, beta) for smooth L1's clamp(r, -beta, beta) / beta: right only
    at beta = 1."""
    g = dy * clamp(B, x - t, beta) / x.size
    return g, -g


@smooth_l1.mutant("target_gradient_not_negated", kills=["vjp[t]", "at_the_kink"])
def _(B, x, t, beta, dy):
    g = dy * clamp(B, x - t, beta) / beta / x.size
    return g, g


@huber.mutant("lower_linear_branch_forgotten", replaces="forward",
              kills=["vjp[x]", "vjp[t]", "symmetric", "at_the_kink"])
def _(B, x, t, delta):
    """Quadratic below -delta too: the clamp written as min(r, delta) only."""
    r = x - t
    above = B.step(r - delta)
    per = (1 - above) * r * r / 2 + above * delta * (r - delta / 2)
    return per.sum(keepdims=True).reshape(1) / x.size


@smooth_l1.mutant("target_ignored_in_the_forward", replaces="forward",
                  kills=["vjp[x]", "vjp[t]", "shift_invariant", "at_the_kink"])
def _(B, x, t, beta):
    """The loss of x alone, as if the target were 0 (an argument dropped on the way to the kernel)."""
    return elementwise_huber(B, x, beta).sum(keepdims=True).reshape(1) / x.size / beta


def _boundary_to_the_negative_branch(B, r, delta):
    """PyTorch-style nested selects with strict comparisons, where(|r| < delta, r, where(r > delta,
    delta, -delta)): the clamp everywhere but at r = delta, where neither strict test holds and the
    gradient is -delta -- written as clamp - 2 delta [r = delta]."""
    on_the_upper_kink = 1 - B.step(r - delta) - B.step(delta - r)
    return clamp(B, r, delta) - 2 * delta * on_the_upper_kink


@huber.mutant("boundary_falls_to_the_negative_branch", kills=["at_the_kink"])
def _(B, x, t, delta, dy):
    """Right on every region; -delta on the kink r = delta, where the loss' derivative is delta."""
    g = dy * _boundary_to_the_negative_branch(B, x - t, delta) / x.size
    return g, -g


@smooth_l1.mutant("boundary_falls_to_the_negative_branch", kills=["at_the_kink"])
def _(B, x, t, beta, dy):
    g = dy * _boundary_to_the_negative_branch(B, x - t, beta) / beta / x.size
    return g, -g
