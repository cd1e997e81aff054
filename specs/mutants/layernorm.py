"""Wrong LayerNorm backwards."""
from vjpcert.specs.layernorm import layernorm, normalise


def _back(B, x, gamma, beta, eps, dy, *, rstd_eps_outside=False, mean_term=True, projection=True,
          dgamma_xhat=True, dbeta=True, mean_rounding=0):
    xh, rstd = normalise(B, x, eps)
    if rstd_eps_outside:
        xc = x - x.mean(-1, keepdims=True)
        rstd = 1 / (B.sqrt((xc * xc).mean(-1, keepdims=True)) + eps)
        xh = xc * rstd
    g = dy * gamma
    inner = g
    if mean_term:
        inner = inner - g.mean(-1, keepdims=True) * (1 + mean_rounding)
    if projection:
        inner = inner - xh * (g * xh).mean(-1, keepdims=True)
    dgamma = (dy * (xh if dgamma_xhat else x)).sum(0)
    return rstd * inner, dgamma, dy.sum(0) if dbeta else dy.sum(0) * 0


@layernorm.mutant("dropped_mean_term", kills=["vjp[x]", "dx_sums_to_zero"])
def _(B, x, gamma, beta, eps, dy):
    return _back(B, x, gamma, beta, eps, dy, mean_term=False)


@layernorm.mutant("dropped_projection_term", kills=["vjp[x]", "dx_orthogonal_to_xhat"])
def _(B, x, gamma, beta, eps, dy):
    return _back(B, x, gamma, beta, eps, dy, projection=False)


@layernorm.mutant("eps_outside_sqrt", kills=["vjp[x]", "vjp[gamma]"])
def _(B, x, gamma, beta, eps, dy):
    return _back(B, x, gamma, beta, eps, dy, rstd_eps_outside=True)


@layernorm.mutant("dgamma_uses_x_not_xhat", kills=["vjp[gamma]"])
def _(B, x, gamma, beta, eps, dy):
    return _back(B, x, gamma, beta, eps, dy, dgamma_xhat=False)


@layernorm.mutant("missing_dbeta", kills=["vjp[beta]"])
def _(B, x, gamma, beta, eps, dy):
    return _back(B, x, gamma, beta, eps, dy, dbeta=False)


@layernorm.mutant("fp32_accumulated_mean", kills=["vjp[x]", "dx_sums_to_zero"])
def _(B, x, gamma, beta, eps, dy):
    """mean(g) accumulated in float32, modelled as one relative rounding of 2^-23: one part in 10^7."""
    return _back(B, x, gamma, beta, eps, dy, mean_rounding=B.c(1, 2**23))


@layernorm.mutant("projection_sum_not_mean", kills=["vjp[x]", "dx_orthogonal_to_xhat"])
def _(B, x, gamma, beta, eps, dy):
    """sum_j g_j xh_j where mean_j g_j xh_j belongs: a missing 1/n."""
    xh, rstd = normalise(B, x, eps)
    g = dy * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).sum(-1, keepdims=True))
    return dx, (dy * xh).sum(0), dy.sum(0)


@layernorm.mutant("centred_in_place", replaces="forward", refused=True)
def _(B, x, gamma, beta, eps):
    """x -= mean(x): writing into the input would move the very leaves the proof differentiates by
    (a wrong backward proved, a right one failed): refused as bad input."""
    x -= x.mean(-1, keepdims=True)
    rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * rstd * gamma + beta
