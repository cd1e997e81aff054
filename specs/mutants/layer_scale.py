"""Wrong layer-scale backwards."""
from vjpcert.specs.layer_scale import layer_scale


@layer_scale.mutant("gain_gradient_of_the_mean_row", kills=["vjp[gamma]"])
def _(B, x, gamma, dy):
    """dgamma averaged over the rows instead of summed (a mean where the batch reduction is a sum)."""
    return dy * gamma, (dy * x).mean(0)


@layer_scale.mutant("input_gradient_without_the_gain", kills=["vjp[x]"])
def _(B, x, gamma, dy):
    """dy passed through as if the gain were 1."""
    return dy, (dy * x).sum(0)
