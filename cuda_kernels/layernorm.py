"""LayerNorm kernels (spec: specs/layernorm.py), one block per row, rows looped by a capped grid.

    forward   mu = mean x,  rstd = 1 / sqrt(mean (x - mu)^2 + eps)   (two passes, as the spec: the
              one-pass E[x^2] - mu^2 loses the variance to cancellation when |mu| >> std),
              xh = (x - mu) rstd,  y = xh * gamma + beta
    backward  g = dy * gamma,  dx = rstd * (g - mean g - xh * mean(g xh))
              dgamma = sum_rows dy * xh,  dbeta = sum_rows dy: the row kernel writes dy * xh per
              element; column-sum kernels add rows in a fixed order (deterministic; no atomics).
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (block_sum, call, colsum, config, cuda, empty, float32, kernel, launch,
                                         row_grid, warps, min_blocks, RESIDENT_THREADS_HEAVY)
from vjpcert.cuda_kernels.registry import ROWS, fwd_bwd, kernel_law

_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]
    BLOCK = cfg.block
    NWARP = warps(BLOCK)        # block_sum/block_max: one shared slot per warp
    BLOCKS = min_blocks(BLOCK)  # launch bounds: blocks per SM the registers must allow
    BLOCKS_HEAVY = min_blocks(BLOCK, RESIDENT_THREADS_HEAVY)

    @cuda.jit(device=True)
    def row_stats(x, r, sm, t, n, eps):
        """(mean, rstd) of row r, every thread gets both."""
        acc = float32(0)
        for j in range(t, n, BLOCK):
            acc += x[r, j]
        mu = block_sum(sm, t, acc) / float32(n)
        acc = float32(0)
        for j in range(t, n, BLOCK):
            c = x[r, j] - mu
            acc += c * c
        var = block_sum(sm, t, acc) / float32(n)
        return mu, float32(1) / float32(math.sqrt(var + eps))

    @kernel("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], float32)",
            threads=BLOCK, min_blocks=BLOCKS)
    def layernorm_fwd(x, gamma, beta, y, eps):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            mu, rstd = row_stats(x, r, sm, t, n, eps)
            for j in range(t, n, BLOCK):
                y[r, j] = (x[r, j] - mu) * rstd * gamma[j] + beta[j]

    @kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], float32)",
            threads=BLOCK, min_blocks=BLOCKS_HEAVY)
    def layernorm_bwd(x, gamma, dy, dx, gxh, eps):
        """dx, and gxh = dy * xh (summed over rows into dgamma by colsum)."""
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            mu, rstd = row_stats(x, r, sm, t, n, eps)
            sg = float32(0)
            sgx = float32(0)
            for j in range(t, n, BLOCK):
                g = dy[r, j] * gamma[j]
                sg += g
                sgx += g * (x[r, j] - mu) * rstd
            mg = block_sum(sm, t, sg) / float32(n)
            mgx = block_sum(sm, t, sgx) / float32(n)
            for j in range(t, n, BLOCK):
                xh = (x[r, j] - mu) * rstd
                g = dy[r, j] * gamma[j]
                dx[r, j] = rstd * (g - mg - xh * mgx)
                gxh[r, j] = dy[r, j] * xh

    _CACHE[cfg.block] = ns = type("LayernormKernels", (), {"fwd": layernorm_fwd, "bwd": layernorm_bwd})
    return ns


def layernorm_fwd_dev(d_x, d_gamma, d_beta, *, eps, cfg=None, poison=True):
    cfg = cfg or config()
    d_y = empty(d_x.shape, poison)
    launch(build(cfg).fwd, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_gamma, d_beta, d_y,
           np.float32(eps))
    return d_y


def layernorm_bwd_dev(d_x, d_dy, d_gamma, *, eps, cfg=None, poison=True):
    cfg = cfg or config()
    d_dx = empty(d_x.shape, poison)
    d_gxh = empty(d_x.shape, poison)
    launch(build(cfg).bwd, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_gamma, d_dy, d_dx, d_gxh,
           np.float32(eps))
    return d_dx, colsum(d_gxh, cfg, poison=poison), colsum(d_dy, cfg, poison=poison)


def layernorm_fwd(x, gamma, beta, *, eps=1e-5, poison=True):
    return call(lambda a, g, b: layernorm_fwd_dev(a, g, b, eps=eps, poison=poison), (x,), (gamma, beta))


def layernorm_bwd(x, gamma, beta, dy, *, eps=1e-5, poison=True):
    """(dx, dgamma, dbeta); beta is not read (the backward does not depend on it)."""
    return call(lambda a, d, g: layernorm_bwd_dev(a, d, g, eps=eps, poison=poison), (x, dy), (gamma,))


# ------------------------------------------------------------------------------ kernel laws
def shift_invariant(B, x, gamma, beta, forward):
    """y(x + 1) = y(x) for every eps: the mean is subtracted before anything else."""
    return forward(x + 1, gamma, beta), forward(x, gamma, beta)


# ------------------------------------------------------------------------------ error model
def _stats_model(x, eps, block):
    """(x - mu, rstd) as row_stats computes them: two passes, each a block sum."""
    from vjpcert.cuda_kernels import error_model as em
    n = em.exact(float(x.shape[-1]))
    mu = em.reduce_sum(x, ("block", block)) / n
    c = x - mu
    var = em.reduce_sum(c * c, ("block", block)) / n
    return c, 1 / em.sqrt(var + em.constant(eps))


def layernorm_fwd_model(cfg, x, gamma, beta, *, eps=1e-5):
    from vjpcert.cuda_kernels import error_model as em
    c, rstd = _stats_model(em.exact(x), eps, cfg.block)
    return c * rstd * em.exact(gamma) + em.exact(beta)


def layernorm_bwd_model(cfg, x, gamma, beta, dy, *, eps=1e-5):
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels.rmsnorm import colsum_model
    dy, gamma = em.exact(dy), em.exact(gamma)
    c, rstd = _stats_model(em.exact(x), eps, cfg.block)
    n = em.exact(float(x.shape[-1]))
    g = dy * gamma
    mg = em.reduce_sum(g, ("block", cfg.block)) / n
    mgx = em.reduce_sum(g * c * rstd, ("block", cfg.block)) / n
    xh = c * rstd
    dx = rstd * (g - mg - xh * mgx)
    return dx, colsum_model(cfg, dy * xh), colsum_model(cfg, dy)


# ------------------------------------------------------------------------------ registration
KERNELS = fwd_bwd("layernorm", layernorm_fwd, layernorm_bwd, models=(layernorm_fwd_model, layernorm_bwd_model),
                  fwd_laws=(kernel_law(shift_invariant),),
                  bwd_laws=("dx_sums_to_zero", "dx_orthogonal_to_xhat"), cots=("dx", "dgamma", "dbeta"),
                  doc="one block per row, two-pass variance; dgamma, dbeta by column sums")
SIZES = {"layernorm": ROWS}
