"""A user's own ops, in one file: certified by `vjpcert prove examples/my_ops.py` or from pytest."""
from vjpcert import op


@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 1, "n": 3}, {"rows": 2, "n": 4}])
def softplus(B, x):
    """y = log(1 + exp(x)); dy/dx = sigmoid(x) = 1 / (1 + exp(-x))."""
    return B.log(1 + B.exp(x))


@softplus.defvjp
def softplus_vjp(B, x, dy):
    return (dy / (1 + B.exp(-x)),)


@softplus.law
def difference_is_identity(B, x, forward):
    """softplus(x) - softplus(-x) = x."""
    return forward(x) - forward(-x), x
