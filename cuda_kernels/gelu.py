"""GELU kernels (spec: specs/gelu.py), elementwise, grid-strided.

    erf form    y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
                dx = dy (Phi(x) + x phi(x)),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    tanh form   y = x (1 + tanh u) / 2,  u = sqrt(2/pi) (x + 0.044715 x^3)
                dx = dy ((1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2),  t = tanh u
The irrational constants are computed in float64 on the host and rounded once to float32 (module
globals of type np.float32 are float32 constants in a kernel).
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import call, config, cuda, elem_grid, empty, float32, kernel, launch
from vjpcert.cuda_kernels.registry import ROWS, fwd_bwd

INV_SQRT2 = np.float32(1 / math.sqrt(2))
INV_SQRT_2PI = np.float32(1 / math.sqrt(2 * math.pi))
SQRT_2_OVER_PI = np.float32(math.sqrt(2 / math.pi))
K = np.float32(0.044715)
K3 = np.float32(3 * 0.044715)
HALF = np.float32(0.5)
ONE = np.float32(1)

_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]

    @kernel("void(float32[::1], float32[::1])", threads=cfg.block)
    def gelu_erf_fwd(x, y):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            y[i] = v * HALF * (ONE + float32(math.erf(v * INV_SQRT2)))

    @kernel("void(float32[::1], float32[::1], float32[::1])", threads=cfg.block)
    def gelu_erf_bwd(x, dy, dx):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            cdf = HALF * (ONE + float32(math.erf(v * INV_SQRT2)))
            pdf = float32(math.exp(-HALF * v * v)) * INV_SQRT_2PI
            dx[i] = dy[i] * (cdf + v * pdf)

    @kernel("void(float32[::1], float32[::1])", threads=cfg.block)
    def gelu_tanh_fwd(x, y):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            t = float32(math.tanh(SQRT_2_OVER_PI * (v + K * v * v * v)))
            y[i] = v * (ONE + t) * HALF

    @kernel("void(float32[::1], float32[::1], float32[::1])", threads=cfg.block)
    def gelu_tanh_bwd(x, dy, dx):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            t = float32(math.tanh(SQRT_2_OVER_PI * (v + K * v * v * v)))
            du = SQRT_2_OVER_PI * (ONE + K3 * v * v)
            dx[i] = dy[i] * ((ONE + t) * HALF + v * (ONE - t * t) * du * HALF)

    _CACHE[cfg.block] = ns = type("GeluKernels", (), {
        "erf_fwd": gelu_erf_fwd, "erf_bwd": gelu_erf_bwd, "tanh_fwd": gelu_tanh_fwd, "tanh_bwd": gelu_tanh_bwd})
    return ns


def _elementwise(name, arrays, poison):
    cfg = config()
    k = getattr(build(cfg), name)

    def dev(*rows):
        flat = [a.reshape(a.size) for a in rows]
        out = empty((flat[0].size,), poison)
        launch(k, elem_grid(flat[0].size, cfg), cfg.block, *flat, out)
        return out.reshape(rows[0].shape)
    return call(dev, arrays)


def gelu_erf_fwd(x, *, poison=True):
    return _elementwise("erf_fwd", (x,), poison)


def gelu_erf_bwd(x, dy, *, poison=True):
    return _elementwise("erf_bwd", (x, dy), poison)


def gelu_tanh_fwd(x, *, poison=True):
    return _elementwise("tanh_fwd", (x,), poison)


def gelu_tanh_bwd(x, dy, *, poison=True):
    return _elementwise("tanh_bwd", (x, dy), poison)


# ------------------------------------------------------------------------------ error models
def gelu_erf_fwd_model(cfg, x):
    from vjpcert.cuda_kernels import error_model as em
    v = em.exact(x)
    half_v = v * em.exact(0.5)                                        # exact: a power of two
    return half_v * (em.exact(1.0) + em.erf(v * em.constant(1 / math.sqrt(2))))


def gelu_erf_bwd_model(cfg, x, dy):
    from vjpcert.cuda_kernels import error_model as em
    v = em.exact(x)
    cdf = em.exact(0.5) * (em.exact(1.0) + em.erf(v * em.constant(1 / math.sqrt(2))))
    pdf = em.exp(-em.exact(0.5) * v * v) * em.constant(1 / math.sqrt(2 * math.pi))
    return em.exact(dy) * (cdf + v * pdf)


def _tanh_arg(v):
    from vjpcert.cuda_kernels import error_model as em
    return em.tanh(em.constant(math.sqrt(2 / math.pi)) * (v + em.constant(0.044715) * v * v * v))


def gelu_tanh_fwd_model(cfg, x):
    from vjpcert.cuda_kernels import error_model as em
    v = em.exact(x)
    return v * (em.exact(1.0) + _tanh_arg(v)) * em.exact(0.5)


def gelu_tanh_bwd_model(cfg, x, dy):
    from vjpcert.cuda_kernels import error_model as em
    v = em.exact(x)
    t = _tanh_arg(v)
    du = em.constant(math.sqrt(2 / math.pi)) * (em.exact(1.0) + em.constant(3 * 0.044715) * v * v)
    one, half = em.exact(1.0), em.exact(0.5)
    return em.exact(dy) * ((one + t) * half + v * (one - t * t) * du * half)


# ------------------------------------------------------------------------------ registration
KERNELS = [*fwd_bwd("gelu_erf", gelu_erf_fwd, gelu_erf_bwd, models=(gelu_erf_fwd_model, gelu_erf_bwd_model),
                    fwd_laws=("odd_part_is_identity",), bwd_laws=("derivative_formula",), doc="elementwise"),
           *fwd_bwd("gelu_tanh", gelu_tanh_fwd, gelu_tanh_bwd, models=(gelu_tanh_fwd_model, gelu_tanh_bwd_model),
                    fwd_laws=("odd_part_is_identity",), bwd_laws=("derivative_formula",), doc="elementwise")]
SIZES = {"gelu_erf": ROWS, "gelu_tanh": ROWS}
