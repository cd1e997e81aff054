"""The Huber loss and smooth L1, mean-reduced over every entry (PyTorch's huber_loss, smooth_l1_loss):
quadratic near the target, linear beyond a threshold.

    r = x - t,  inside = [|r| <= delta] = 1 - step(r - delta) - step(-r - delta)
    huber(r)     = inside r^2 / 2 + step(r - delta) delta (r - delta/2) + step(-r - delta) delta (-r - delta/2)
    dx = -dt     = dy clamp(r, -delta, delta) / (rows n)
    smooth_l1(r) = huber(r) / beta with delta = beta,   its dx = dy clamp(r, -beta, beta) / (beta rows n)
The loss is C^1: both sides of the kink r = +-delta have the derivative +-delta, so the value on the
kink is no convention, and ``at_the_kink`` holds the backward to it (the sampler puts x on t +- delta).
The VJP claims are proved on every region of the two steps.
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op

SHAPES = dict(inputs={"x": ("rows", "n"), "t": ("rows", "n")}, output=(1,),
              dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}], check_dims={"rows": 3, "n": 4})


def elementwise_huber(B, r, delta):
    above, below = B.step(r - delta), B.step(-r - delta)
    inside = 1 - above - below
    return inside * r * r / 2 + above * delta * (r - delta / 2) + below * delta * (-r - delta / 2)


def clamp(B, r, delta):
    """clamp(r, -delta, delta), PyTorch's huber_loss_backward."""
    above, below = B.step(r - delta), B.step(-r - delta)
    return (1 - above - below) * r + (above - below) * delta


def _total(a):
    return a.sum(keepdims=True).reshape(1) / a.size


@op(**SHAPES, params={"delta": Param(Fraction(1), positive=True, doc="where the loss turns linear")})
def huber(B, x, t, delta):
    return _total(elementwise_huber(B, x - t, delta))


@huber.defvjp
def huber_vjp(B, x, t, delta, dy):
    g = dy * clamp(B, x - t, delta) / x.size
    return g, -g


@huber.law
def symmetric(B, x, t, forward):
    """huber(x, t) = huber(t, x): the loss sees |x - t| only."""
    return forward(x, t), forward(t, x)


@op(**SHAPES, params={"beta": Param(Fraction(1), positive=True, doc="where the loss turns linear")})
def smooth_l1(B, x, t, beta):
    return _total(elementwise_huber(B, x - t, beta)) / beta


@smooth_l1.defvjp
def smooth_l1_vjp(B, x, t, beta, dy):
    g = dy * clamp(B, x - t, beta) / beta / x.size          # clamp(r / beta, -1, 1), its kinks as the forward's
    return g, -g


@smooth_l1.law
def shift_invariant(B, x, t, forward):
    """smooth_l1(x + 1, t + 1) = smooth_l1(x, t)."""
    return forward(x + 1, t + 1), forward(x, t)


# Proved for every size, region by region: the statements are derived from the code above
# (symbolic.every_size.shape_trace), each step a Boolean atom of the region.
huber.every_size("vjp[x]", "vjp[t]", "symmetric")
smooth_l1.every_size("vjp[x]", "vjp[t]", "shift_invariant")
