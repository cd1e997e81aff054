"""BatchNorm in training mode over a batch of feature vectors: each channel is normalised by the
statistics of the batch (mean and biased variance over the rows), then scaled by gamma and shifted by
beta. The running statistics a framework also updates are not differentiated and not modelled.

    mu_c = mean_n x_nc,  xc = x - mu,  rstd_c = 1 / sqrt(mean_n xc_nc^2 + eps),  xh = xc * rstd
    y  = gamma * xh + beta
    g  = dy * gamma
    dx = rstd * (g - mean_n g - xh * mean_n(g xh))      -- the three terms; the last two cancel the
                                                          batch statistics' own dependence on x
    dgamma = sum_n dy * xh,   dbeta = sum_n dy
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op
from vjpcert.specs.layernorm import input_grad, normalise


@op(inputs={"x": ("batch", "channels"), "gamma": ("channels",), "beta": ("channels",)},
    output=("batch", "channels"),
    params={"eps": Param(Fraction(1, 10**5), positive=True, doc="added to the variance")},
    dims=[{"batch": 2, "channels": 1}, {"batch": 3, "channels": 2}], large_dims=[{"batch": 16, "channels": 2}],
    check_dims={"batch": 7, "channels": 3})
def batchnorm(B, x, gamma, beta, eps):
    xh, _ = normalise(B, x, eps, axis=0)
    return xh * gamma + beta


@batchnorm.defvjp
def batchnorm_vjp(B, x, gamma, beta, eps, dy):
    xh, rstd = normalise(B, x, eps, axis=0)
    return input_grad(dy * gamma, xh, rstd, axis=0), (dy * xh).sum(0), dy.sum(0)


@batchnorm.law
def dx_sums_to_zero_over_the_batch(B, x, gamma, beta, dy, backward):
    """sum_n dx_nc = 0: shifting a channel of the whole batch changes nothing."""
    dx, _, _ = backward(x, gamma, beta, dy=dy)
    return dx.sum(0)


@batchnorm.law(params={"eps": 0})
def dx_orthogonal_to_xhat(B, x, gamma, beta, dy, backward):
    """At eps = 0 scaling a channel of the whole batch changes nothing: <dx, xc> = 0 per channel."""
    dx, _, _ = backward(x, gamma, beta, dy=dy)
    xc = x - x.mean(0, keepdims=True)
    return (dx * xc).sum(0)


# ----------------------------------------------------------------- on images, as the nodes of a block
def rows(a):
    """(N, C, H, W) -> (N H W, C): BatchNorm's batch of channel vectors."""
    N, C, H, W = a.shape
    return a.transpose(0, 2, 3, 1).reshape(N * H * W, C)


def images(r, like):
    """The inverse of ``rows``: (N H W, C) -> the shape of ``like``."""
    N, C, H, W = like.shape
    return r.reshape(N, H, W, C).transpose(0, 3, 1, 2)


def norm(bn, a, gamma, beta, eps):
    """BatchNorm2d through the node ``bn``: each channel normalised over the batch and the image."""
    return images(bn(rows(a), gamma, beta, eps=eps), a)


def norm_vjp(bn, a, gamma, beta, da, eps):
    dr, dgamma, dbeta = bn.vjp(rows(a), gamma, beta, rows(da), eps=eps)
    return images(dr, a), dgamma, dbeta


batchnorm.every_size("vjp[x]", "vjp[gamma]", "vjp[beta]", "dx_sums_to_zero_over_the_batch",
                     "dx_orthogonal_to_xhat")
