"""RMSNorm over the last axis, with gain gamma and eps > 0.

    r   = sqrt(mean_j x_j^2 + eps),    y_i = gamma_i x_i / r
    g   = dy * gamma
    dx  = (g - x * mean_j(g_j x_j) / r^2) / r
    dgamma = sum_rows dy * x / r
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op


@op(inputs={"x": ("rows", "n"), "gamma": ("n",)}, output=("rows", "n"),
    params={"eps": Param(Fraction(1, 10**6), positive=True, doc="added to the mean square")},
    dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 1, "n": 8}],
    large_dims=[{"rows": 1, "n": 32}], check_dims={"rows": 3, "n": 7})
def rmsnorm(B, x, gamma, eps):
    rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * rstd * gamma


@rmsnorm.defvjp
def rmsnorm_vjp(B, x, gamma, eps, dy):
    rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    g = dy * gamma
    dx = rstd * (g - x * rstd * rstd * (g * x).mean(-1, keepdims=True))
    dgamma = (dy * x * rstd).sum(0)
    return dx, dgamma


@rmsnorm.law(params={"eps": 0})
def dx_orthogonal_to_x(B, x, gamma, dy, backward):
    """At eps = 0, y(a x) = y(x) for a > 0, so <dx, x> = 0 per row (false for eps > 0)."""
    dx, _ = backward(x, gamma, dy=dy)
    return (dx * x).sum(-1)


# Proved for every size n and rows: the statement is derived from the code above (symbolic.shape_trace).
rmsnorm.every_size("vjp[x]", "vjp[gamma]", "dx_orthogonal_to_x")
