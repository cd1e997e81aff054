"""LayerNorm over the last axis, with gain gamma, bias beta and eps > 0.

    mu = mean_j x_j,  xc = x - mu,  rstd = 1 / sqrt(mean_j xc_j^2 + eps),  xh = xc * rstd
    y  = gamma * xh + beta
    g  = dy * gamma
    dx = rstd * (g - mean_j g_j - xh * mean_j(g_j xh_j))
    dgamma = sum_rows dy * xh,   dbeta = sum_rows dy
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op


def normalise(B, x, eps, axis=-1):
    """(xh, rstd) with the statistics over ``axis`` (BatchNorm normalises over the batch the same way)."""
    xc = x - x.mean(axis, keepdims=True)
    rstd = 1 / B.sqrt((xc * xc).mean(axis, keepdims=True) + eps)
    return xc * rstd, rstd


def input_grad(g, xh, rstd, axis=-1):
    """dx = rstd (g - mean g - xh mean(g xh)), g = dy * gamma: the three terms."""
    return rstd * (g - g.mean(axis, keepdims=True) - xh * (g * xh).mean(axis, keepdims=True))


@op(inputs={"x": ("rows", "n"), "gamma": ("n",), "beta": ("n",)}, output=("rows", "n"),
    params={"eps": Param(Fraction(1, 10**5), positive=True, doc="added to the variance")},
    dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 1, "n": 8}],
    large_dims=[{"rows": 1, "n": 32}], check_dims={"rows": 3, "n": 7})
def layernorm(B, x, gamma, beta, eps):
    xh, _ = normalise(B, x, eps)
    return xh * gamma + beta


@layernorm.defvjp
def layernorm_vjp(B, x, gamma, beta, eps, dy):
    xh, rstd = normalise(B, x, eps)
    return input_grad(dy * gamma, xh, rstd), (dy * xh).sum(0), dy.sum(0)


@layernorm.law
def dx_sums_to_zero(B, x, gamma, beta, dy, backward):
    """sum_j dx_j = 0 for every eps: y(x + c) = y(x), so the all-ones direction is in J's kernel."""
    dx, _, _ = backward(x, gamma, beta, dy=dy)
    return dx.sum(-1)


@layernorm.law(params={"eps": 0})
def dx_orthogonal_to_xhat(B, x, gamma, beta, dy, backward):
    """At eps = 0, y(a x) = y(x) for a > 0, so <dx, xhat> = 0 per row (false for eps > 0)."""
    dx, _, _ = backward(x, gamma, beta, dy=dy)
    xc = x - x.mean(-1, keepdims=True)
    return (dx * xc).sum(-1)


# Proved for every size n and rows: the statement is derived from the code above (symbolic.every_size.shape_trace).
layernorm.every_size("vjp[x]", "vjp[gamma]", "vjp[beta]", "dx_sums_to_zero", "dx_orthogonal_to_xhat")
