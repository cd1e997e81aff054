"""ReLU kernels (spec: specs/relu.py), elementwise, grid-strided.

    y = x where x > 0, else 0          dx = dy where x > 0, else 0
The mask is the strict x > 0 of the spec's step, so relu'(0) = 0 as in PyTorch; both kernels are
exact (a selection, no rounding), and the input case ``on_kinks`` (exact zeros) holds them to the
convention where a ``>=`` would differ.
"""
from __future__ import annotations

import numpy as np

from vjpcert.cuda_kernels.common import call, config, cuda, elem_grid, empty, kernel, launch
from vjpcert.cuda_kernels.registry import ROWS, fwd_bwd

ZERO = np.float32(0)
_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]

    @kernel("void(float32[::1], float32[::1])", threads=cfg.block)
    def relu_fwd(x, y):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            y[i] = v if v > ZERO else ZERO

    @kernel("void(float32[::1], float32[::1], float32[::1])", threads=cfg.block)
    def relu_bwd(x, dy, dx):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            dx[i] = dy[i] if x[i] > ZERO else ZERO

    _CACHE[cfg.block] = ns = type("ReluKernels", (), {"fwd": relu_fwd, "bwd": relu_bwd})
    return ns


def elementwise(kernel_of, arrays, poison):
    """Launch an elementwise kernel (``kernel_of(cfg)``) over the flattened arrays; out: their shape."""
    cfg = config()
    k = kernel_of(cfg)

    def dev(*rows):
        flat = [a.reshape(a.size) for a in rows]
        out = empty((flat[0].size,), poison)
        launch(k, elem_grid(flat[0].size, cfg), cfg.block, *flat, out)
        return out.reshape(rows[0].shape)
    return call(dev, arrays)


def relu_fwd(x, *, poison=True):
    return elementwise(lambda cfg: build(cfg).fwd, (x,), poison)


def relu_bwd(x, dy, *, poison=True):
    return elementwise(lambda cfg: build(cfg).bwd, (x, dy), poison)


# ------------------------------------------------------------------------------ error models
def relu_fwd_model(cfg, x):
    from vjpcert.cuda_kernels import error_model as em
    v = np.asarray(x, np.float64)
    return em.exact(np.where(v > 0, v, 0.0))                  # a selection: no rounding


def relu_bwd_model(cfg, x, dy):
    from vjpcert.cuda_kernels import error_model as em
    return em.exact(np.where(np.asarray(x, np.float64) > 0, np.asarray(dy, np.float64), 0.0))


# ------------------------------------------------------------------------------ registration
KERNELS = fwd_bwd("relu", relu_fwd, relu_bwd, models=(relu_fwd_model, relu_bwd_model),
                  fwd_laws=("odd_part_is_identity", "idempotent"), bwd_laws=("gradient_is_a_mask",),
                  doc="elementwise, exact")
SIZES = {"relu": ROWS}
