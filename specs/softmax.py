"""Softmax over the last axis.

    y_i  = exp(x_i) / sum_j exp(x_j)
    dx_i = y_i * (dy_i - sum_j y_j dy_j)
"""
from vjpcert.core.registry import op


@op(inputs={"x": ("rows", "n")}, output=("rows", "n"),
    dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 1, "n": 16}],
    large_dims=[{"rows": 1, "n": 128}],
    check_dims={"rows": 3, "n": 7})
def softmax(B, x):
    e = B.exp(x - B.max_shift(x))     # 0 in exact arithmetic; the row max in floats (no overflow)
    return e / e.sum(-1, keepdims=True)


@softmax.defvjp
def softmax_vjp(B, x, dy):
    y = softmax(B, x)
    return (y * (dy - (y * dy).sum(-1, keepdims=True)),)


@softmax.law
def cotangent_sums_to_zero(B, x, dy, backward):
    """sum_i dx_i = 0: the outputs sum to the constant 1, so no input direction changes their sum."""
    (dx,) = backward(x, dy)
    return dx.sum(-1)


@softmax.law
def shift_invariance(B, x, forward):
    """softmax(x - x_0) = softmax(x): why kernels may subtract the row maximum."""
    return forward(x - x[..., :1]), forward(x)


# ------------------------------------------------------------------ general forms (every size n)
def general_softmax(G):
    """y[r, i] = exp(x[r, i]) / sum_k exp(x[r, k]) and its backward, in index form (symbolic n)."""
    n = G.dim("n")
    x, dy = G.array("x"), G.array("dy")

    @G.let("y")
    def y(r, i):
        return G.exp(x[r, i]) / G.sum(lambda k: G.exp(x[r, k]), n)

    def dx(s, j):
        return y(s, j) * (dy[s, j] - G.sum(lambda l: y(s, l) * dy[s, l], n))
    return y, dx


@softmax.general_form("vjp[x]")
def _(G):
    y, dx = general_softmax(G)
    return G.vjp("x", forward=y, backward=dx)


@softmax.general_form("cotangent_sums_to_zero")
def _(G):
    dx = G.backward("x")
    return G.law(lambda s: G.sum(lambda j: dx(s, j), G.dim("n")), over=("rows",))
