"""Wrong linear-layer backwards."""
from vjpcert.specs.linear import linear


@linear.mutant("weight_gradient_reshaped_not_transposed", kills=["vjp[W]", "adjoint_W"])
def _(B, x, W, b, dy):
    """(x^T dy).reshape(W.shape): a transpose written as a reshape (equal only when a side is 1)."""
    return dy @ W, (x.T @ dy).reshape(W.shape), dy.sum(0)


@linear.mutant("input_gradient_reshaped_weight", kills=["vjp[x]", "adjoint_x"])
def _(B, x, W, b, dy):
    return dy @ W.T.reshape(W.shape), dy.T @ x, dy.sum(0)


@linear.mutant("bias_gradient_mean_not_sum", kills=["vjp[b]"])
def _(B, x, W, b, dy):
    return dy @ W, dy.T @ x, dy.mean(0)


@linear.mutant("sign_flip_dx", kills=["vjp[x]", "adjoint_x"])
def _(B, x, W, b, dy):
    return -(dy @ W), dy.T @ x, dy.sum(0)


@linear.mutant("weight_gradient_off_by_1e-90", kills=["vjp[W]", "adjoint_W"], exact_only=True)
def _(B, x, W, b, dy):
    """dW off by 1e-90 x: far below any rounding, so numerics agree to 80+ digits; but the claim is
    rational, and an exact rational witness disproves it however small the error."""
    return dy @ W, dy.T @ x + B.c(1, 10**90) * W, dy.sum(0)
