"""Softmax kernels (spec: specs/softmax.py), one block per row, rows looped by a capped grid.

    forward   y_j  = exp(x_j - max x) / sum_k exp(x_k - max x)       (the spec's shift_invariance law
                                                                      is why the max may be subtracted)
    backward  dx_j = y_j (dy_j - sum_k y_k dy_k), y recomputed from x (the spec's backward takes x)

Optionally causal, for attention: in row r, query i = r mod m sees columns j <= i - offset; masked
entries are *excluded* (y = 0, dx = 0), and a row with no visible column is all zeros.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (NEG_INF, block_max, block_sum, call, config, cuda, empty, float32,
                                         kernel, launch, row_grid, warps, min_blocks)
from vjpcert.cuda_kernels.registry import ROWS, fwd_bwd, kernel_law

_CACHE = {}


def build(cfg):
    """The softmax kernels for one configuration (block size is a compile-time constant)."""
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]
    BLOCK = cfg.block
    NWARP = warps(BLOCK)        # block_sum/block_max: one shared slot per warp
    BLOCKS = min_blocks(BLOCK)  # launch bounds: blocks per SM the registers must allow

    @cuda.jit(device=True)
    def visible(r, n, causal, offset, m):
        """How many leading columns row r sees (all of them unless causal)."""
        if causal != 0:
            return min(n, max(0, r % m - offset + 1))
        return n

    @cuda.jit(device=True)
    def row_max_sum(x, r, nv, sm, t):
        """The row's max over its visible columns and sum of exp(x - max): the forward's statistics,
        recomputed by the backward (the spec's backward takes x, not y)."""
        mx = NEG_INF
        for j in range(t, nv, BLOCK):
            if x[r, j] > mx:
                mx = x[r, j]
        mx = block_max(sm, t, mx)
        acc = float32(0)
        for j in range(t, nv, BLOCK):
            acc += float32(math.exp(x[r, j] - mx))
        return mx, block_sum(sm, t, acc)

    @kernel("void(float32[:, ::1], float32[:, ::1], int32, int32, int32)",
            threads=BLOCK, min_blocks=BLOCKS)
    def softmax_fwd(x, y, causal, offset, m):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            nv = visible(r, n, causal, offset, m)
            mx, total = row_max_sum(x, r, nv, sm, t)
            for j in range(t, n, BLOCK):
                if j < nv:
                    y[r, j] = float32(math.exp(x[r, j] - mx)) / total
                else:
                    y[r, j] = float32(0)

    @kernel("void(float32[:, ::1], float32[:, ::1], float32[:, ::1], int32, int32, int32)",
            threads=BLOCK, min_blocks=BLOCKS)
    def softmax_bwd(x, dy, dx, causal, offset, m):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            nv = visible(r, n, causal, offset, m)
            mx, total = row_max_sum(x, r, nv, sm, t)
            dot = float32(0)
            for j in range(t, nv, BLOCK):
                dot += float32(math.exp(x[r, j] - mx)) / total * dy[r, j]
            dot = block_sum(sm, t, dot)
            for j in range(t, n, BLOCK):
                if j < nv:
                    yj = float32(math.exp(x[r, j] - mx)) / total
                    dx[r, j] = yj * (dy[r, j] - dot)
                else:
                    dx[r, j] = float32(0)

    _CACHE[cfg.block] = ns = type("SoftmaxKernels", (), {"fwd": softmax_fwd, "bwd": softmax_bwd})
    return ns


def softmax_fwd_dev(d_x, *, causal=0, offset=0, m=1, cfg=None, poison=True):
    """Device-array launcher: d_x (rows, n) -> d_y."""
    cfg = cfg or config()
    d_y = empty(d_x.shape, poison)
    launch(build(cfg).fwd, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_y, causal, offset, max(m, 1))
    return d_y


def softmax_bwd_dev(d_x, d_dy, *, causal=0, offset=0, m=1, cfg=None, poison=True):
    cfg = cfg or config()
    d_dx = empty(d_x.shape, poison)
    launch(build(cfg).bwd, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_dy, d_dx, causal, offset, max(m, 1))
    return d_dx


def softmax_fwd(x, *, poison=True):
    """y = softmax(x) over the last axis (numpy in, numpy out; device arrays in, device out)."""
    return call(softmax_fwd_dev, (x,), poison=poison)


def softmax_bwd(x, dy, *, poison=True):
    """dx = y * (dy - sum(y * dy)) with y = softmax(x) recomputed."""
    return call(softmax_bwd_dev, (x, dy), poison=poison)


# ------------------------------------------------------------------------------ kernel laws
def rows_sum_to_one(B, x, forward):
    """sum_j y_j = 1 per row: checked on the kernel's output (the spec makes it true by construction)."""
    return forward(x).sum(-1), np.ones(x.shape[0])


# ------------------------------------------------------------------------------ error model
def _visible_mask(rows: int, n: int, causal, offset, m) -> np.ndarray:
    r = np.arange(rows)[:, None]
    nv = np.minimum(n, np.maximum(0, r % max(m, 1) - offset + 1)) if causal else np.full((rows, 1), n)
    return np.arange(n)[None, :] < nv


def _row_model(x, block, causal, offset, m):
    """The statistics both kernels compute: exp(x - max) per visible entry and their block sum. The
    row maximum is a shift that cancels in exact arithmetic (shift invariance): it carries no error."""
    from vjpcert.cuda_kernels import error_model as em
    x = em._as_tracked(x)
    mask = _visible_mask(x.shape[0], x.shape[1], causal, offset, m)
    with np.errstate(invalid="ignore"):
        mx = np.where(mask, x.v, -np.inf).max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = em.exp(x - em.exact(mx)).where(mask)
    return mask, e, em.reduce_sum(e, ("block", block))


def softmax_fwd_model(cfg, x, *, causal=0, offset=0, m=1):
    """y = exp(x - max) / total, in the forward kernel's order (x may carry errors: attention's S)."""
    mask, e, total = _row_model(x, cfg.block, causal, offset, m)
    return (e / total).where(mask)


def softmax_bwd_model(cfg, x, dy, *, causal=0, offset=0, m=1):
    """dx = y (dy - sum y dy), y recomputed as in the forward (the same roundings: the same code)."""
    from vjpcert.cuda_kernels import error_model as em
    mask, e, total = _row_model(x, cfg.block, causal, offset, m)
    y = e / total
    dy = em._as_tracked(dy)
    dot = em.reduce_sum((y * dy).where(mask), ("block", cfg.block))
    return (y * (dy - dot)).where(mask)


# ------------------------------------------------------------------------------ registration
KERNELS = fwd_bwd("softmax", softmax_fwd, softmax_bwd, models=(softmax_fwd_model, softmax_bwd_model),
                  fwd_laws=("shift_invariance", kernel_law(rows_sum_to_one)),
                  bwd_laws=("cotangent_sums_to_zero",), doc="one block per row; max-subtracted")
SIZES = {"softmax": ROWS}
