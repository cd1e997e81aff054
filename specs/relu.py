"""ReLU and leaky ReLU, elementwise: the kink of the spec language (``B.step``, [a > 0]).

    relu(x)       = x step(x)                        dx = dy step(x)
    leaky_relu(x) = alpha x + (1 - alpha) relu(x)    dx = dy (alpha + (1 - alpha) step(x))

The VJP claims are proved on every open region of the inputs' signs (each step a free Boolean of the
exact ring). On the kink itself the derivative does not exist, and what a backward returns there is
a convention: PyTorch's and JAX's relu backward passes the gradient where x > 0, so relu'(0) = 0 and
leaky_relu'(0) = alpha -- the claim ``at_the_kink`` checks the backward against it at exact points
on the kink. The numeric tier keeps its points away from the kink, where a finite difference
measures no derivative.
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op

SHAPES = dict(inputs={"x": ("rows", "n")}, output=("rows", "n"),
              dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}], large_dims=[{"rows": 4, "n": 64}],
              check_dims={"rows": 3, "n": 7})


@op(**SHAPES)
def relu(B, x):
    return B.relu(x)


@relu.defvjp
def relu_vjp(B, x, dy):
    return (dy * B.step(x),)


@relu.law
def odd_part_is_identity(B, x, forward):
    """relu(x) - relu(-x) = x: the two regions together."""
    return forward(x) - forward(-x), x


@relu.law
def idempotent(B, x, forward):
    """relu(relu(x)) = relu(x)."""
    return forward(forward(x)), forward(x)


@relu.law
def gradient_is_a_mask(B, x, backward):
    """The backward of dy = 1 is 0 or 1 on every entry: b^2 = b."""
    (d,) = backward(x, dy=x * 0 + 1)
    return d * d, d


@op(**SHAPES, params={"alpha": Param(Fraction(1, 100), positive=True, doc="the slope for x < 0")})
def leaky_relu(B, x, alpha):
    return alpha * x + (1 - alpha) * B.relu(x)


@leaky_relu.defvjp
def leaky_relu_vjp(B, x, alpha, dy):
    return (dy * (alpha + (1 - alpha) * B.step(x)),)


@leaky_relu.law
def positively_homogeneous(B, x, forward):
    """leaky_relu(2x) = 2 leaky_relu(x): the slope of each region, scaled."""
    return forward(2 * x), 2 * forward(x)
