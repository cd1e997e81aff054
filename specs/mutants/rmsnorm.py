"""Wrong RMSNorm backwards."""
from vjpcert.specs.rmsnorm import rmsnorm


def _back(B, x, gamma, eps, offset, dy, *, rstd=None, projection=True, use_gamma=True, dgamma_rstd=True,
          use_offset=True):
    if rstd is None:
        rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    gain = offset + gamma if use_offset else gamma
    g = dy * gain if use_gamma else dy
    dx = rstd * g
    if projection:
        dx = dx - rstd * x * rstd * rstd * (g * x).mean(-1, keepdims=True)
    dgamma = (dy * x * (rstd if dgamma_rstd else 1)).sum(0)
    return dx, dgamma


@rmsnorm.mutant("eps_outside_sqrt", kills=["vjp[x]", "vjp[gamma]"])
def _(B, x, gamma, eps, offset, dy):
    """1 / (sqrt(mean x^2) + eps): wrong by ~eps / rms, one part in 10^6 at the default eps."""
    return _back(B, x, gamma, eps, offset, dy, rstd=1 / (B.sqrt((x * x).mean(-1, keepdims=True)) + eps))


@rmsnorm.mutant("dropped_projection_term", kills=["vjp[x]", "dx_orthogonal_to_x"])
def _(B, x, gamma, eps, offset, dy):
    return _back(B, x, gamma, eps, offset, dy, projection=False)


@rmsnorm.mutant("missing_gamma_in_dx", kills=["vjp[x]"])
def _(B, x, gamma, eps, offset, dy):
    return _back(B, x, gamma, eps, offset, dy, use_gamma=False)


@rmsnorm.mutant("dgamma_missing_rstd", kills=["vjp[gamma]"])
def _(B, x, gamma, eps, offset, dy):
    return _back(B, x, gamma, eps, offset, dy, dgamma_rstd=False)


@rmsnorm.mutant("mean_square_as_sum_in_backward", kills=["vjp[x]", "vjp[gamma]", "dx_orthogonal_to_x"])
def _(B, x, gamma, eps, offset, dy):
    """The backward recomputes rms with sum(x^2) instead of mean(x^2): a missing 1/n."""
    return _back(B, x, gamma, eps, offset, dy, rstd=1 / B.sqrt((x * x).sum(-1, keepdims=True) + eps))


@rmsnorm.mutant("offset_missing_in_dx", kills=["vjp[x]", "offset_is_a_gain_shift"])
def _(B, x, gamma, eps, offset, dy):
    """dx scaled by gamma alone, as if offset were 0 (Gemma's 1 + w forgotten in the backward): right at
    the default offset 0, wrong for every other -- which the proof, with offset a symbol, covers."""
    return _back(B, x, gamma, eps, offset, dy, use_offset=False)


@rmsnorm.mutant("branch_on_equal_rows", refused=True)
def _(B, x, gamma, eps, offset, dy):
    """Doubles dx when the first two rows are equal -- wrong only there. The comparison is caught
    even though the spec swallows the refusal and carries on."""
    from vjpcert.specs.rmsnorm import rmsnorm_vjp
    dx, dgamma = rmsnorm_vjp(B, x, gamma, eps, offset, dy)
    try:
        same = bool((x[0] == x[-1]).all())
    except Exception:
        same = False
    return (2 * dx if same else dx), dgamma
