"""RMSNorm kernels (spec: specs/rmsnorm.py), one block per row, rows looped by a capped grid.

    forward   rstd = 1 / sqrt(mean_j x_j^2 + eps),   y = x * rstd * gamma
    backward  g = dy * gamma,  dx = rstd * (g - x * rstd^2 * mean_j(g_j x_j))
              dgamma = sum_rows dy * x * rstd: the row kernel writes dy * x * rstd per element and a
              column-sum kernel adds the rows in a fixed order (deterministic; no atomics).
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.core.registry import SpecError

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
    def row_rstd(x, r, eps, sm, t):
        """1 / sqrt(mean_j x[r, j]^2 + eps): the forward's statistic, recomputed by the backward."""
        acc = float32(0)
        for j in range(t, x.shape[1], BLOCK):
            acc += x[r, j] * x[r, j]
        ms = block_sum(sm, t, acc) / float32(x.shape[1])
        return float32(1) / float32(math.sqrt(ms + eps))

    @kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32)",
            threads=BLOCK, min_blocks=BLOCKS)
    def rmsnorm_fwd(x, gamma, y, eps):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            rstd = row_rstd(x, r, eps, sm, t)
            for j in range(t, n, BLOCK):
                y[r, j] = x[r, j] * rstd * gamma[j]

    @kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], float32)",
            threads=BLOCK, min_blocks=BLOCKS_HEAVY)
    def rmsnorm_bwd(x, gamma, dy, dx, gx, eps):
        """dx, and gx = dy * x * rstd (summed over rows into dgamma by colsum)."""
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            rstd = row_rstd(x, r, eps, sm, t)
            dot = float32(0)
            for j in range(t, n, BLOCK):
                dot += dy[r, j] * gamma[j] * x[r, j]
            mdot = block_sum(sm, t, dot) / float32(n)
            for j in range(t, n, BLOCK):
                g = dy[r, j] * gamma[j]
                dx[r, j] = rstd * (g - x[r, j] * rstd * rstd * mdot)
                gx[r, j] = dy[r, j] * x[r, j] * rstd

    _CACHE[cfg.block] = ns = type("RmsnormKernels", (), {"fwd": rmsnorm_fwd, "bwd": rmsnorm_bwd})
    return ns


def rmsnorm_fwd_dev(d_x, d_gamma, *, eps, cfg=None, poison=True):
    cfg = cfg or config()
    d_y = empty(d_x.shape, poison)
    launch(build(cfg).fwd, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_gamma, d_y, np.float32(eps))
    return d_y


def rmsnorm_bwd_dev(d_x, d_dy, d_gamma, *, eps, cfg=None, poison=True):
    cfg = cfg or config()
    d_dx = empty(d_x.shape, poison)
    d_gx = empty(d_x.shape, poison)
    launch(build(cfg).bwd, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_gamma, d_dy, d_dx, d_gx,
           np.float32(eps))
    return d_dx, colsum(d_gx, cfg, poison=poison)


def _no_offset(offset):
    # The spec's Gemma offset (y = x rstd (offset + gamma)) is not in this kernel: it implements offset 0
    if offset != 0:
        raise SpecError("rmsnorm", f"the Numba RMSNorm kernel implements offset 0 only, not {offset}")


def rmsnorm_fwd(x, gamma, *, eps=1e-6, offset=0, poison=True):
    _no_offset(offset)
    return call(lambda a, g: rmsnorm_fwd_dev(a, g, eps=eps, poison=poison), (x,), (gamma,))


def rmsnorm_bwd(x, gamma, dy, *, eps=1e-6, offset=0, poison=True):
    _no_offset(offset)
    """(dx, dgamma)."""
    return call(lambda a, d, g: rmsnorm_bwd_dev(a, d, g, eps=eps, poison=poison), (x, dy), (gamma,))


# ------------------------------------------------------------------------------ kernel laws
def scale_invariant(B, x, gamma, forward):
    """At eps = 0, y(2 x) = y(x): the norm divides the scale out (2 x is exact in float32)."""
    return forward(2 * x, gamma), forward(x, gamma)


# ------------------------------------------------------------------------------ error model
def _rstd_model(x, eps, block):
    from vjpcert.cuda_kernels import error_model as em
    n = em.exact(float(x.shape[-1]))
    ms = em.reduce_sum(x * x, ("block", block)) / n
    return 1 / em.sqrt(ms + em.constant(eps))


def rmsnorm_fwd_model(cfg, x, gamma, *, eps=1e-6, offset=0):
    _no_offset(offset)
    from vjpcert.cuda_kernels import error_model as em
    x = em.exact(x)
    return x * _rstd_model(x, eps, cfg.block) * em.exact(gamma)


def rmsnorm_bwd_model(cfg, x, gamma, dy, *, eps=1e-6, offset=0):
    _no_offset(offset)
    from vjpcert.cuda_kernels import error_model as em
    x, gamma, dy = em.exact(x), em.exact(gamma), em.exact(dy)
    rstd = _rstd_model(x, eps, cfg.block)
    g = dy * gamma
    mdot = em.reduce_sum(g * x, ("block", cfg.block)) / em.exact(float(x.shape[-1]))
    dx = rstd * (g - x * rstd * rstd * mdot)
    return dx, colsum_model(cfg, dy * x * rstd)


def colsum_model(cfg, a):
    """common.colsum: thread (cx, ry) adds rows ry, ry + RY, ... of its column, then a tree over RY."""
    from vjpcert.cuda_kernels import error_model as em
    return em.reduce_sum(em._as_tracked(a).swapaxes(0, 1), ("strided_tree", cfg.block // cfg.col_x), keepdims=False)


# ------------------------------------------------------------------------------ registration
KERNELS = fwd_bwd("rmsnorm", rmsnorm_fwd, rmsnorm_bwd, models=(rmsnorm_fwd_model, rmsnorm_bwd_model),
                  fwd_laws=(kernel_law(scale_invariant, {"eps": 0}),),
                  bwd_laws=("dx_orthogonal_to_x", "offset_is_a_gain_shift"), cots=("dx", "dgamma"),
                  doc="one block per row; dgamma by deterministic column sums")
SIZES = {"rmsnorm": ROWS}
