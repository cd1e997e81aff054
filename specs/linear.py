"""Linear layer, batched over rows:  y = x W^T + b.

    dx = dy W,   dW = dy^T x,   db = sum_rows dy
"""
from vjpcert.core.registry import op


@op(inputs={"x": ("rows", "n_in"), "W": ("n_out", "n_in"), "b": ("n_out",)}, output=("rows", "n_out"),
    dims=[{"rows": 1, "n_in": 2, "n_out": 1}, {"rows": 2, "n_in": 3, "n_out": 4}],
    large_dims=[{"rows": 8, "n_in": 16, "n_out": 12}], check_dims={"rows": 5, "n_in": 7, "n_out": 3})
def linear(B, x, W, b):
    return x @ W.T + b


@linear.defvjp
def linear_vjp(B, x, W, b, dy):
    return dy @ W, dy.T @ x, dy.sum(0)


@linear.law
def adjoint_x(B, x, W, b, dy, forward, backward):
    """<W x, dy> = <x, W^T dy>: the input gradient is the adjoint of the linear map."""
    dx, _, _ = backward(x, W, b, dy)
    return ((forward(x, W, b) - b) * dy).sum(), (x * dx).sum()


@linear.law
def adjoint_W(B, x, W, b, dy, forward, backward):
    """<W x, dy> = <W, dy^T x>: the weight gradient is the adjoint in W."""
    _, dW, _ = backward(x, W, b, dy)
    return ((forward(x, W, b) - b) * dy).sum(), (W * dW).sum()


# Proved for every shape: the statement is derived from the code above (symbolic.every_size.shape_trace).
linear.every_size("vjp[x]", "vjp[W]", "vjp[b]", "adjoint_x", "adjoint_W")
