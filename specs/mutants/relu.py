"""Wrong ReLU backwards, modelled on the bugs kinks invite."""
from vjpcert.specs.relu import leaky_relu, relu, relu6


@relu.mutant("gradient_at_zero_is_one", kills=["at_the_kink"])
def _(B, x, dy):
    """[x >= 0] for [x > 0]: right on every open region, relu'(0) = 1 on the kink itself."""
    return (dy * (1 - B.step(-x)),)


@relu.mutant("mask_of_the_other_side", kills=["vjp[x]", "at_the_kink"])
def _(B, x, dy):
    """The mask of x < 0: the gradient passes where the output is constant."""
    return (dy * B.step(-x),)


@relu.mutant("mask_from_the_gradient", kills=["vjp[x]", "at_the_kink"])
def _(B, x, dy):
    """The mask read off dy instead of x (a saved tensor mixed up)."""
    return (dy * B.step(dy),)


@leaky_relu.mutant("slope_on_the_wrong_side", kills=["vjp[x]", "at_the_kink"])
def _(B, x, alpha, dy):
    """alpha for x > 0 and 1 for x < 0."""
    return (dy * (1 - (1 - alpha) * B.step(x)),)


@leaky_relu.mutant("slope_missing", kills=["vjp[x]", "at_the_kink"])
def _(B, x, alpha, dy):
    """The backward of relu: no gradient at all for x < 0."""
    return (dy * B.step(x),)


@relu.mutant("forward_leaks_below_zero", replaces="forward",
             kills=["vjp[x]", "odd_part_is_identity", "idempotent", "at_the_kink"])
def _(B, x):
    """A leaky relu where relu was meant: x / 100 below zero."""
    return B.relu(x) + x * B.c(1, 100)


@relu.mutant("output_saved_as_the_mask", kills=["vjp[x]", "gradient_is_a_mask", "at_the_kink"])
def _(B, x, dy):
    """The saved output y = relu(x) multiplied in where its mask [y > 0] was meant."""
    return (dy * B.relu(x),)


@leaky_relu.mutant("slope_read_as_an_offset", replaces="forward",
                   kills=["vjp[x]", "positively_homogeneous", "at_the_kink"])
def _(B, x, alpha):
    """alpha added below zero instead of multiplied: relu(x) + alpha."""
    return B.relu(x) + alpha


@relu6.mutant("difference_of_steps", kills=["at_the_kink"])
def _(B, x, dy):
    """dy (step(x) - step(x - 6)): right on every open region, 1 at the upper kink x = 6 where
    hardtanh's backward passes nothing."""
    return (dy * (B.step(x) - B.step(x - 6)),)


@relu6.mutant("upper_clamp_forgotten", kills=["vjp[x]", "at_the_kink"], evades=("random",))
def _(B, x, dy):
    """The backward of relu: the gradient passes above 6 too."""
    return (dy * B.step(x),)


@relu6.mutant("slope_below_zero", replaces="forward",
              kills=["vjp[x]", "symmetric_about_three", "clamps_once", "at_the_kink"])
def _(B, x):
    """A leaky relu6: x / 100 below zero (the negative slope of another activation kept)."""
    return x * B.step(x) * B.step(6 - x) + 6 * (1 - B.step(6 - x)) + x * B.step(-x) / 100
