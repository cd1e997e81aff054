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


# Proved for every size n and rows: the statement is derived from the code above (symbolic.every_size.shape_trace).
softmax.every_size("vjp[x]", "cotangent_sums_to_zero", "shift_invariance")
