"""LayerNorm over the last axis, with gain gamma, bias beta and eps > 0.

    mu = mean_j x_j,  xc = x - mu,  rstd = 1 / sqrt(mean_j xc_j^2 + eps),  xh = xc * rstd
    y  = gamma * xh + beta
    g  = dy * gamma
    dx = rstd * (g - mean_j g_j - xh * mean_j(g_j xh_j))
    dgamma = sum_rows dy * xh,   dbeta = sum_rows dy
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op


def normalise(B, x, eps):
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / B.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    return xc * rstd, rstd


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
    g = dy * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    return dx, (dy * xh).sum(0), dy.sum(0)


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


# ------------------------------------------------------------------ general forms (every size n)
def general_layernorm(G):
    """LayerNorm in index form with symbolic n and rows (the formulas of the docstring, entry by entry)."""
    n, rows = G.dim("n"), G.dim("rows")
    x, gamma, beta, dy, eps = G.array("x"), G.array("gamma"), G.array("beta"), G.array("dy"), G.param("eps")

    @G.let("mu")
    def mu(r):
        return G.mean(lambda k: x[r, k], n)

    @G.let("rstd")
    def rstd(r):
        return 1 / G.sqrt(G.mean(lambda k: (x[r, k] - mu(r)) * (x[r, k] - mu(r)), n) + eps)

    @G.let("xhat")
    def xh(r, i):
        return (x[r, i] - mu(r)) * rstd(r)

    def y(r, i):
        return xh(r, i) * gamma[i] + beta[i]

    def dx(s, j):
        def g(l):
            return dy[s, l] * gamma[l]
        return rstd(s) * (g(j) - G.mean(g, n) - xh(s, j) * G.mean(lambda l: g(l) * xh(s, l), n))

    def dgamma(j):
        return G.sum(lambda r: dy[r, j] * xh(r, j), rows)

    def dbeta(j):
        return G.sum(lambda r: dy[r, j], rows)
    return dict(n=n, rows=rows, x=x, gamma=gamma, dy=dy, eps=eps, mu=mu, rstd=rstd, xh=xh, y=y,
                dx=dx, dgamma=dgamma, dbeta=dbeta)


@layernorm.general_form("vjp[x]")
def _(G):
    f = general_layernorm(G)
    return G.vjp("x", forward=f["y"], backward=f["dx"])


@layernorm.general_form("vjp[gamma]")
def _(G):
    f = general_layernorm(G)
    return G.vjp("gamma", forward=f["y"], backward=f["dgamma"])


@layernorm.general_form("vjp[beta]")
def _(G):
    f = general_layernorm(G)
    return G.vjp("beta", forward=f["y"], backward=f["dbeta"])
