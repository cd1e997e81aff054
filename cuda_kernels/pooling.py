"""Max-pooling kernels, 2x2 windows with stride 2 (spec: specs/pooling.py, max_pool2d), one thread per
output entry, grid-strided.

    forward   y[n,c,p,q] = the first maximum of x[n,c,2p+i,2q+j] in scan order (0,0) (0,1) (1,0) (1,1)
    backward  dx = dy at each window's first maximum, 0 at its other three entries
A later tap replaces the running maximum only when strictly greater, so a tie goes to the first
maximum, where PyTorch's indices send it. The windows do not overlap and cover the input (its height
and width are even), so each backward thread writes its own four entries: no atomics. Both kernels
are exact (selections); the input case ``on_kinks`` (small integers: many ties) holds them to the
tie-breaking.
"""
from __future__ import annotations

import numpy as np

from vjpcert.cuda_kernels.common import call, config, cuda, elem_grid, empty, int32, kernel, launch
from vjpcert.cuda_kernels.registry import Sizes, fwd_bwd

ZERO = np.float32(0)
_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]

    @kernel("void(float32[::1], float32[::1], int32, int32)", threads=cfg.block)
    def max_pool_fwd(x, y, Ho, Wo):
        W = 2 * Wo
        for o in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
            nc, rest = o // (Ho * Wo), o % (Ho * Wo)
            base = nc * 4 * Ho * Wo + 2 * (rest // Wo) * W + 2 * (rest % Wo)
            best = x[base]
            for t in range(1, 4):
                v = x[base + (t // 2) * W + t % 2]
                if v > best:
                    best = v
            y[o] = best

    @kernel("void(float32[::1], float32[::1], float32[::1], int32, int32)", threads=cfg.block)
    def max_pool_bwd(x, dy, dx, Ho, Wo):
        W = 2 * Wo
        for o in range(cuda.grid(1), dy.shape[0], cuda.gridsize(1)):
            nc, rest = o // (Ho * Wo), o % (Ho * Wo)
            base = nc * 4 * Ho * Wo + 2 * (rest // Wo) * W + 2 * (rest % Wo)
            best = x[base]
            arg = int32(0)
            for t in range(1, 4):
                v = x[base + (t // 2) * W + t % 2]
                if v > best:
                    best = v
                    arg = int32(t)
            for t in range(4):
                dx[base + (t // 2) * W + t % 2] = dy[o] if t == arg else ZERO

    _CACHE[cfg.block] = ns = type("MaxPoolKernels", (), {"fwd": max_pool_fwd, "bwd": max_pool_bwd})
    return ns


def _shape(x):
    N, C, H, W = x.shape
    if H % 2 or W % 2:
        raise ValueError(f"max_pool2d 2x2/2 kernels take an even height and width, not {H} x {W}")
    return N, C, H // 2, W // 2


def max_pool2d_fwd(x, *, poison=True):
    N, C, Ho, Wo = _shape(x)
    cfg = config()

    def dev(d_x):
        out = empty((N * C * Ho * Wo,), poison)
        launch(build(cfg).fwd, elem_grid(out.size, cfg), cfg.block, d_x.reshape(d_x.size), out, Ho, Wo)
        return out.reshape(N, C, Ho, Wo)
    return call(dev, (x,))


def max_pool2d_bwd(x, dy, *, poison=True):
    N, C, Ho, Wo = _shape(x)
    cfg = config()

    def dev(d_x, d_dy):
        out = empty((d_x.size,), poison)
        launch(build(cfg).bwd, elem_grid(d_dy.size, cfg), cfg.block, d_x.reshape(d_x.size),
               d_dy.reshape(d_dy.size), out, Ho, Wo)
        return out.reshape(d_x.shape)
    return call(dev, (x,), (dy,))              # dy is window-shaped, not in the input's rows


# ------------------------------------------------------------------------------ error models
def _taps(x):
    """(N, C, Ho, Wo, 4): each window's entries in scan order."""
    x = np.asarray(x, np.float64)
    return np.stack([x[:, :, i::2, j::2] for i in range(2) for j in range(2)], axis=-1)


def max_pool2d_fwd_model(cfg, x):
    from vjpcert.cuda_kernels import error_model as em
    return em.exact(_taps(x).max(axis=-1))                      # a selection: no rounding


def max_pool2d_bwd_model(cfg, x, dy):
    from vjpcert.cuda_kernels import error_model as em
    taps = _taps(x)
    win = np.argmax(taps, axis=-1)                              # numpy's argmax: the first maximum
    dx = np.zeros(np.shape(x))
    for t, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        dx[:, :, i::2, j::2] = np.where(win == t, np.asarray(dy, np.float64), 0.0)
    return em.exact(dx)


# ------------------------------------------------------------------------------ registration
KERNELS = fwd_bwd("max_pool2d", max_pool2d_fwd, max_pool2d_bwd, models=(max_pool2d_fwd_model, max_pool2d_bwd_model),
                  fwd_laws=("positively_homogeneous",), doc="one thread per window, exact")
# windows crossing the simulator's 32-thread blocks (90 and 561 outputs) and one GPU block stride
SIZES = {"max_pool2d": Sizes(simulator=({"N": 1, "C": 1, "Ho": 1, "Wo": 1}, {"N": 2, "C": 3, "Ho": 3, "Wo": 5},
                                        {"N": 1, "C": 1, "Ho": 17, "Wo": 33}),
                             gpu=({"N": 1, "C": 1, "Ho": 1, "Wo": 1}, {"N": 8, "C": 64, "Ho": 56, "Wo": 56}),
                             gpu_launch=({"N": 1, "C": 2, "Ho": 17, "Wo": 16},))}
