"""Wrong BatchNorm backwards and forwards, modelled on the bugs hand-written ones have had."""
from vjpcert.specs.batchnorm import batchnorm
from vjpcert.specs.layernorm import input_grad, normalise


@batchnorm.mutant("mean_of_gradient_term_missing", kills=["vjp[x]", "dx_sums_to_zero_over_the_batch"])
def _(B, x, gamma, beta, eps, dy):
    """dx without - mean_n g: the batch mean's dependence on x forgotten."""
    xh, rstd = normalise(B, x, eps, axis=0)
    g = dy * gamma
    return rstd * (g - xh * (g * xh).mean(0, keepdims=True)), (dy * xh).sum(0), dy.sum(0)


@batchnorm.mutant("variance_term_missing", kills=["vjp[x]", "dx_orthogonal_to_xhat"])
def _(B, x, gamma, beta, eps, dy):
    """dx = rstd (g - mean g): the batch variance treated as a constant."""
    xh, rstd = normalise(B, x, eps, axis=0)
    g = dy * gamma
    return rstd * (g - g.mean(0, keepdims=True)), (dy * xh).sum(0), dy.sum(0)


@batchnorm.mutant("statistics_over_channels", kills=["vjp[x]", "dx_sums_to_zero_over_the_batch",
                                                     "dx_orthogonal_to_xhat"])
def _(B, x, gamma, beta, eps, dy):
    """LayerNorm's backward (means over the channel axis) for BatchNorm's forward."""
    xh, rstd = normalise(B, x, eps, axis=0)
    return input_grad(dy * gamma, xh, rstd, axis=1), (dy * xh).sum(0), dy.sum(0)


@batchnorm.mutant("eps_outside_the_root", replaces="forward", kills=["vjp[x]", "vjp[gamma]"])
def _(B, x, gamma, beta, eps):
    """xc / (sqrt(var) + eps)."""
    xc = x - x.mean(0, keepdims=True)
    return xc / (B.sqrt((xc * xc).mean(0, keepdims=True)) + eps) * gamma + beta


@batchnorm.mutant("beta_gradient_averaged", kills=["vjp[beta]"])
def _(B, x, gamma, beta, eps, dy):
    """dbeta as the batch mean of dy, not its sum."""
    xh, rstd = normalise(B, x, eps, axis=0)
    return input_grad(dy * gamma, xh, rstd, axis=0), (dy * xh).sum(0), dy.mean(0)
