"""Log-softmax over the last axis.

    y_i  = x_i - log sum_j exp(x_j)
    dx_i = dy_i - softmax(x)_i * sum_j dy_j
"""
from vjpcert.core.registry import op
from vjpcert.specs.softmax import softmax


@op(inputs={"x": ("rows", "n")}, output=("rows", "n"),
    dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 1, "n": 16}], large_dims=[{"rows": 1, "n": 128}],
    check_dims={"rows": 3, "n": 7})
def log_softmax(B, x):
    m = B.max_shift(x)                # 0 in exact arithmetic; the row max in floats (no overflow)
    return x - m - B.log(B.exp(x - m).sum(-1, keepdims=True))


@log_softmax.defvjp
def log_softmax_vjp(B, x, dy):
    return (dy - softmax(B, x) * dy.sum(-1, keepdims=True),)


@log_softmax.law
def cotangent_sums_to_zero(B, x, dy, backward):
    """sum_i dx_i = 0: y - c(x) keeps the row's logsumexp at 0, so shifting x changes nothing."""
    (dx,) = backward(x, dy)
    return dx.sum(-1)


@log_softmax.law
def exp_rows_sum_to_one(B, x, forward):
    """sum_i exp(y_i) = 1: log-softmax is the log of a probability vector."""
    return B.exp(forward(x)).sum(-1), x[..., 0] * 0 + 1


# Proved for every size n and rows: the statement is derived from the code above (symbolic.every_size.shape_trace).
log_softmax.every_size("vjp[x]", "cotangent_sums_to_zero", "exp_rows_sum_to_one")
