"""BatchNorm kernels in training mode (spec: specs/batchnorm.py), one block per channel, channels
looped by a capped grid: a channel's statistics are a reduction over the batch, the column of x.

    forward   mu_c = mean_n x,  rstd_c = 1 / sqrt(mean_n (x - mu)^2 + eps)  (two passes),
              xh = (x - mu) rstd,  y = xh * gamma + beta
    backward  g = dy * gamma,  dx = rstd * (g - mean_n g - xh * mean_n(g xh))   (the three terms)
              dgamma_c = sum_n dy * xh,  dbeta_c = sum_n dy: block sums of the same block, in a fixed
              order (deterministic; no atomics)
LayerNorm's arithmetic along the other axis: the error models are LayerNorm's on the transpose.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (RESIDENT_THREADS_HEAVY, block_sum, call, config, cuda, empty, float32, kernel,
                                         launch, min_blocks, row_grid, warps)
from vjpcert.cuda_kernels.registry import Sizes, fwd_bwd

_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]
    BLOCK = cfg.block
    NWARP = warps(BLOCK)
    BLOCKS = min_blocks(BLOCK)
    BLOCKS_HEAVY = min_blocks(BLOCK, RESIDENT_THREADS_HEAVY)   # the backward keeps six sums live: fewer blocks

    @cuda.jit(device=True)
    def channel_stats(x, c, sm, t, batch, eps):
        """(mean, rstd) of channel c over the batch, every thread gets both."""
        acc = float32(0)
        for r in range(t, batch, BLOCK):
            acc += x[r, c]
        mu = block_sum(sm, t, acc) / float32(batch)
        acc = float32(0)
        for r in range(t, batch, BLOCK):
            d = x[r, c] - mu
            acc += d * d
        var = block_sum(sm, t, acc) / float32(batch)
        return mu, float32(1) / float32(math.sqrt(var + eps))

    @kernel("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], float32)",
            threads=BLOCK, min_blocks=BLOCKS)
    def batchnorm_fwd(x, gamma, beta, y, eps):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        batch = x.shape[0]
        for c in range(cuda.blockIdx.x, x.shape[1], cuda.gridDim.x):
            mu, rstd = channel_stats(x, c, sm, t, batch, eps)
            for r in range(t, batch, BLOCK):
                y[r, c] = (x[r, c] - mu) * rstd * gamma[c] + beta[c]

    @kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32[:, ::1], float32[::1], float32[::1], "
            "float32)", threads=BLOCK, min_blocks=BLOCKS_HEAVY)
    def batchnorm_bwd(x, gamma, dy, dx, dgamma, dbeta, eps):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        batch = x.shape[0]
        for c in range(cuda.blockIdx.x, x.shape[1], cuda.gridDim.x):
            mu, rstd = channel_stats(x, c, sm, t, batch, eps)
            sg = float32(0)
            sgx = float32(0)
            sdy = float32(0)
            for r in range(t, batch, BLOCK):
                g = dy[r, c] * gamma[c]
                sg += g
                sgx += g * (x[r, c] - mu) * rstd
                sdy += dy[r, c]
            mg = block_sum(sm, t, sg) / float32(batch)
            mgx = block_sum(sm, t, sgx) / float32(batch)
            sb = block_sum(sm, t, sdy)
            for r in range(t, batch, BLOCK):
                xh = (x[r, c] - mu) * rstd
                dx[r, c] = rstd * (dy[r, c] * gamma[c] - mg - xh * mgx)
            acc = float32(0)
            for r in range(t, batch, BLOCK):
                acc += dy[r, c] * ((x[r, c] - mu) * rstd)
            sgam = block_sum(sm, t, acc)
            if t == 0:
                dgamma[c] = sgam
                dbeta[c] = sb

    _CACHE[cfg.block] = ns = type("BatchnormKernels", (), {"fwd": batchnorm_fwd, "bwd": batchnorm_bwd})
    return ns


def batchnorm_fwd(x, gamma, beta, *, eps=1e-5, poison=True):
    cfg = config()

    def dev(d_x, d_gamma, d_beta):
        d_y = empty(d_x.shape, poison)
        launch(build(cfg).fwd, row_grid(d_x.shape[1], cfg), cfg.block, d_x, d_gamma, d_beta, d_y, np.float32(eps))
        return d_y
    return call(dev, (x,), (gamma, beta))


def batchnorm_bwd(x, gamma, beta, dy, *, eps=1e-5, poison=True):
    """(dx, dgamma, dbeta); beta is not read (the backward does not depend on it)."""
    cfg = config()

    def dev(d_x, d_dy, d_gamma):
        d_dx = empty(d_x.shape, poison)
        d_dgamma, d_dbeta = empty((d_x.shape[1],), poison), empty((d_x.shape[1],), poison)
        launch(build(cfg).bwd, row_grid(d_x.shape[1], cfg), cfg.block, d_x, d_gamma, d_dy, d_dx, d_dgamma,
               d_dbeta, np.float32(eps))
        return d_dx, d_dgamma, d_dbeta
    return call(dev, (x, dy), (gamma,))


# ------------------------------------------------------------------------------ error models
def batchnorm_fwd_model(cfg, x, gamma, beta, *, eps=1e-5):
    """LayerNorm's model on the transpose: each channel a row."""
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels.layernorm import _stats_model
    c, rstd = _stats_model(em.exact(np.asarray(x).T), eps, cfg.block)
    return (c * rstd * em.exact(np.asarray(gamma)[:, None]) + em.exact(np.asarray(beta)[:, None])).swapaxes(0, 1)


def batchnorm_bwd_model(cfg, x, gamma, beta, dy, *, eps=1e-5):
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels.layernorm import _stats_model
    block = ("block", cfg.block)
    dyT, gamma = em.exact(np.asarray(dy).T), em.exact(np.asarray(gamma)[:, None])
    c, rstd = _stats_model(em.exact(np.asarray(x).T), eps, cfg.block)
    n = em.exact(float(np.shape(x)[0]))
    g = dyT * gamma
    mg = em.reduce_sum(g, block) / n
    xh = c * rstd
    mgx = em.reduce_sum(g * c * rstd, block) / n
    dx = rstd * (g - mg - xh * mgx)
    return (dx.swapaxes(0, 1), em.reduce_sum(dyT * xh, block, keepdims=False),
            em.reduce_sum(dyT, block, keepdims=False))


# ------------------------------------------------------------------------------ registration
# dx_orthogonal_to_xhat (at eps = 0) is not among the laws run on its outputs: at a batch of 7 under
# large magnitudes its residual comes out 1.15 x the differential law bound (k x numpy's own float32
# residual) while dx itself is inside this kernel's error model. Run with the law, that case is
# `inconclusive`: the residual (9.5e-5) is within what outputs each inside their any-order rounding
# bound can give the law (3.4e-3), so at those inputs the law cannot tell a wrong kernel from rounding;
# dx is held to the error model there instead. (LayerNorm's kernel meets it at 63% of its bound.)
KERNELS = fwd_bwd("batchnorm", batchnorm_fwd, batchnorm_bwd, models=(batchnorm_fwd_model, batchnorm_bwd_model),
                  bwd_laws=("dx_sums_to_zero_over_the_batch",), cots=("dx", "dgamma", "dbeta"),
                  doc="one block per channel, two-pass variance; dgamma, dbeta by block sums")
# batches that cross the simulator's 32-thread blocks (33, 1025) and more channels than its grid cap
SIZES = {"batchnorm": Sizes(simulator=({"batch": 1, "channels": 1}, {"batch": 33, "channels": 7},
                                       {"batch": 7, "channels": 33}, {"batch": 1025, "channels": 3}),
                            gpu=({"batch": 1, "channels": 1}, {"batch": 1025, "channels": 33},
                                 {"batch": 25088, "channels": 256}),          # ResNet-50 stage 2: 8 x 56 x 56
                            gpu_launch=({"batch": 4097, "channels": 2},))}
