"""ReLU and leaky ReLU, elementwise: the kink of the spec language (``B.step``, [a > 0]).

    relu(x)       = x step(x)                        dx = dy step(x)
    leaky_relu(x) = alpha x + (1 - alpha) relu(x)    dx = dy (alpha + (1 - alpha) step(x))
    relu6(x)      = x step(x) step(6 - x) + 6 (1 - step(6 - x))      dx = dy step(x) step(6 - x)

The VJP claims are proved on every open region of the inputs' signs (each step a free Boolean of the
exact ring). On the kink itself the derivative does not exist, and what a backward returns there is
a convention: PyTorch's and JAX's relu backward passes the gradient where x > 0, so relu'(0) = 0 and
leaky_relu'(0) = alpha; relu6 is hardtanh(x, 0, 6), whose backward passes it where 0 < x < 6, so
relu6' is 0 at both kinks. The value on a kink is read off the forward as written (its derivative
with step(0) = 0), so relu6 is written as the clamp with PyTorch's derivative at both ends; as
relu(x) - relu(x - 6) it would state relu6'(6) = 1 -- the claim ``at_the_kink`` checks the backward against it at exact points
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


@op(**SHAPES)
def relu6(B, x):
    return x * B.step(x) * B.step(6 - x) + 6 * (1 - B.step(6 - x))


@relu6.defvjp
def relu6_vjp(B, x, dy):
    return (dy * B.step(x) * B.step(6 - x),)


@relu6.law
def symmetric_about_three(B, x, forward):
    """relu6(x) + relu6(6 - x) = 6: the clamp to [0, 6] is symmetric about its middle."""
    return forward(x) + forward(6 - x), x * 0 + 6


@relu6.law
def clamps_once(B, x, forward):
    """relu6(relu6(x)) = relu6(x): a kink of a kink, each step of the outer split on the inner's."""
    return forward(forward(x)), forward(x)


# ----------------------------------------------------------------- on images, as the nodes of a block
def act(f, a):
    """An elementwise node on (N, C, H, W), seen as rows of W."""
    return f(a.reshape(-1, a.shape[3])).reshape(a.shape)


def act_vjp(f, a, da):
    (d,) = f.vjp(a.reshape(-1, a.shape[3]), da.reshape(-1, a.shape[3]))
    return d.reshape(a.shape)


# Proved for every size, region by region: the statements are derived from the code above
# (symbolic.every_size.shape_trace), each step a Boolean atom of the region.
relu.every_size("vjp[x]", "odd_part_is_identity", "gradient_is_a_mask")
leaky_relu.every_size("vjp[x]", "positively_homogeneous")
relu6.every_size("vjp[x]")
