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


# ------------------------------------------------------------------ general forms (every size n)
def general_rmsnorm(G):
    """RMSNorm in index form with symbolic n and rows (the formulas of the docstring, entry by entry)."""
    n, rows = G.dim("n"), G.dim("rows")
    x, gamma, dy, eps = G.array("x"), G.array("gamma"), G.array("dy"), G.param("eps")

    @G.let("rstd")
    def rstd(r):
        return 1 / G.sqrt(G.mean(lambda k: x[r, k] * x[r, k], n) + eps)

    def y(r, i):
        return x[r, i] * rstd(r) * gamma[i]

    def dx(s, j):
        def g(l):
            return dy[s, l] * gamma[l]
        return rstd(s) * (g(j) - x[s, j] * rstd(s) * rstd(s) * G.mean(lambda l: g(l) * x[s, l], n))

    def dgamma(j):
        return G.sum(lambda r: dy[r, j] * x[r, j] * rstd(r), rows)
    return dict(n=n, rows=rows, x=x, gamma=gamma, dy=dy, eps=eps, rstd=rstd, y=y, dx=dx, dgamma=dgamma)


@rmsnorm.general_form("vjp[x]")
def _(G):
    f = general_rmsnorm(G)
    return G.vjp("x", forward=f["y"], backward=f["dx"])


@rmsnorm.general_form("vjp[gamma]")
def _(G):
    f = general_rmsnorm(G)
    return G.vjp("gamma", forward=f["y"], backward=f["dgamma"])
