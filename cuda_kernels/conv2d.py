"""2-d convolution kernels, 3x3, padding 1, stride 1, NCHW (spec: specs/conv2d.py, conv2d), as
implicit GEMMs: one tiled kernel gathers the matrices of each product on the fly (no im2col buffer).

    forward  y[(n,h,w), o]  = sum_{(c,i,j)} xp[n, c, h+i, w+j] w[o, c, i, j] + b[o]
    dx       dx[(n,h,w), c] = sum_{(o,i,j)} dy[n, o, h+1-i, w+1-j] w[o, c, i, j]   (a correlation with the
             kernel flipped: the transposed convolution)
    dW       dw[o, (c,i,j)] = sum_{(n,h,w)} dy[n, o, h, w] xp[n, c, h+i, w+j]
    db       db[o]          = sum_{(n,h,w)} 1 * dy[n, o, h, w]
Entries outside the input (the padding) are gathered as exact zeros. Each output element is one
thread's sum over k, in tiles (each tile's products into a partial sum, the partial sums into the
total), as the linear kernel's matmul: the error model is the same contraction of the gathered
matrices, built here in float64.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import call, config, cuda, empty, float32, kernel, launch
from vjpcert.cuda_kernels.registry import Sizes, fwd_bwd

FORWARD, INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD = 0, 1, 2, 3
_CACHE = {}


def build(cfg):
    if cfg.tile in _CACHE:
        return _CACHE[cfg.tile]
    T = cfg.tile

    @cuda.jit(device=True)
    def image_at(a, n, c, C, h, w, H, W):
        """a[n, c, h, w] of a flat NCHW array, 0 outside the image (the padding)."""
        if h < 0 or h >= H or w < 0 or w >= W:
            return float32(0)
        return a[((n * C + c) * H + h) * W + w]

    @cuda.jit(device=True)
    def a_at(P, mode, r, k, Nb, C, O, H, W):
        """Row r, column k of the product's left matrix."""
        if mode == WEIGHT_GRAD:                     # dy[n, o=r, h, w], k = (n, h, w)
            return P[((k // (H * W) * O + r) * H * W) + k % (H * W)]
        if mode == BIAS_GRAD:
            return float32(1)
        n, hw = r // (H * W), r % (H * W)
        h, w = hw // W, hw % W
        t = k % 9
        i, j = t // 3, t % 3
        if mode == FORWARD:                         # x[n, c, h+i-1, w+j-1], k = (c, i, j)
            return image_at(P, n, k // 9, C, h + i - 1, w + j - 1, H, W)
        return image_at(P, n, k // 9, O, h + 1 - i, w + 1 - j, H, W)      # dy, k = (o, i, j)

    @cuda.jit(device=True)
    def b_at(Q, mode, k, col, Nb, C, O, H, W):
        """Row k, column col of the product's right matrix."""
        if mode == FORWARD:                         # w[o=col, (c, i, j)=k]
            return Q[col * C * 9 + k]
        if mode == INPUT_GRAD:                      # w[o, c=col, i, j], k = (o, i, j)
            return Q[((k // 9) * C + col) * 9 + k % 9]
        n, hw = k // (H * W), k % (H * W)
        if mode == BIAS_GRAD:                       # dy[n, o=col, h, w]
            return Q[(n * O + col) * H * W + hw]
        t = col % 9                                 # x[n, c, h+i-1, w+j-1], col = (c, i, j)
        return image_at(Q, n, col // 9, C, hw // W + t // 3 - 1, hw % W + t % 3 - 1, H, W)

    @kernel("void(float32[::1], float32[::1], float32[::1], float32[::1], int32, int32, int32, int32, int32, "
            "int32, int32, int32)", threads=T * T)
    def conv_gemm(P, Q, bias, out, mode, Nb, C, O, H, W, M, K):
        sA = cuda.shared.array((T, T), float32)
        sB = cuda.shared.array((T, T), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        cols = O if mode == FORWARD else (C if mode == INPUT_GRAD else (C * 9 if mode == WEIGHT_GRAD else O))
        r = cuda.blockIdx.y * T + ty
        col = cuda.blockIdx.x * T + tx
        acc = float32(0)
        for k0 in range(0, K, T):
            ka = k0 + tx
            sA[ty, tx] = a_at(P, mode, r, ka, Nb, C, O, H, W) if (r < M and ka < K) else float32(0)
            kb = k0 + ty
            sB[ty, tx] = b_at(Q, mode, kb, col, Nb, C, O, H, W) if (kb < K and col < cols) else float32(0)
            cuda.syncthreads()
            part = float32(0)
            for kk in range(T):
                part += sA[ty, kk] * sB[kk, tx]
            acc += part
            cuda.syncthreads()
        if r < M and col < cols:
            if mode == FORWARD:                     # y[n, o, h, w]
                out[((r // (H * W)) * O + col) * H * W + r % (H * W)] = acc + bias[col]
            elif mode == INPUT_GRAD:                # dx[n, c, h, w]
                out[((r // (H * W)) * C + col) * H * W + r % (H * W)] = acc
            elif mode == WEIGHT_GRAD:               # dw[o, (c, i, j)]
                out[r * C * 9 + col] = acc
            else:
                out[col] = acc

    _CACHE[cfg.tile] = ns = type("Conv2dKernels", (), {"gemm": conv_gemm})
    return ns


def _gemm(mode, P, Q, bias, shape, M, K, cols, dims, cfg, poison):
    out = empty((int(np.prod(shape)),), poison)
    T = cfg.tile
    launch(build(cfg).gemm, (math.ceil(cols / T), math.ceil(M / T)), (T, T), P, Q, bias, out, mode, *dims, M, K)
    return out.reshape(shape)


def conv2d_fwd(x, w, b, *, poison=True):
    N, C, H, W = x.shape
    O = w.shape[0]
    cfg = config()

    def dev(d_x, d_w, d_b):
        return _gemm(FORWARD, d_x.reshape(d_x.size), d_w.reshape(d_w.size), d_b, (N, O, H, W), N * H * W, C * 9, O,
                     (N, C, O, H, W), cfg, poison)
    return call(dev, (x,), (w, b))


def conv2d_bwd(x, w, b, dy, *, poison=True):
    """(dx, dw, db); b is not read."""
    N, C, H, W = x.shape
    O = w.shape[0]
    cfg = config()
    dims = (N, C, O, H, W)

    def dev(d_x, d_w, d_dy):
        fx, fw, fdy = d_x.reshape(d_x.size), d_w.reshape(d_w.size), d_dy.reshape(d_dy.size)
        dx = _gemm(INPUT_GRAD, fdy, fw, fw, (N, C, H, W), N * H * W, O * 9, C, dims, cfg, poison)
        dw = _gemm(WEIGHT_GRAD, fdy, fx, fw, (O, C, 3, 3), O, N * H * W, C * 9, dims, cfg, poison)
        db = _gemm(BIAS_GRAD, fdy, fdy, fw, (O,), 1, N * H * W, O, dims, cfg, poison)
        return dx, dw, db
    return call(dev, (x,), (w, dy))


# ------------------------------------------------------------------------------ error models
def _padded(a):
    return np.pad(np.asarray(a, np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))


def _patches(a, flip=False):
    """(N H W, C 9): row (n, h, w), column (c, i, j) holds a padded by 1 at [n, c, h+i, w+j] (flipped:
    [n, c, h+2-i, w+2-j], the dx gather dy[n, o, h+1-i, w+1-j])."""
    ap = _padded(a)
    N, C, H, W = np.shape(a)
    taps = [ap[:, :, (2 - i if flip else i):(2 - i if flip else i) + H, (2 - j if flip else j):(2 - j if flip else j) + W]
            for i in range(3) for j in range(3)]
    return np.stack(taps, axis=2).transpose(0, 3, 4, 1, 2).reshape(N * H * W, C * 9)


def _to_nchw(t, N, H, W):
    """(N H W, K) -> (N, K, H, W) of a Tracked."""
    K = t.shape[-1]
    return t.reshape(N, H * W, K).swapaxes(1, 2).reshape(N, K, H, W)


def conv2d_fwd_model(cfg, x, w, b):
    from vjpcert.cuda_kernels import error_model as em
    N, C, H, W = np.shape(x)
    c = em.contract(em.exact(_patches(x)), em.exact(np.asarray(w, np.float64).reshape(len(w), -1).T),
                    ("tiles", cfg.tile))
    return _to_nchw(c + em.exact(b), N, H, W)


def conv2d_bwd_model(cfg, x, w, b, dy):
    from vjpcert.cuda_kernels import error_model as em
    N, C, H, W = np.shape(x)
    O = len(w)
    wf = np.asarray(w, np.float64)
    dx = em.contract(em.exact(_patches(dy, flip=True)), em.exact(wf.transpose(0, 2, 3, 1).reshape(O * 9, C)),
                     ("tiles", cfg.tile))
    dyr = np.asarray(dy, np.float64).transpose(1, 0, 2, 3).reshape(O, N * H * W)
    dw = em.contract(em.exact(dyr), em.exact(_patches(x)), ("tiles", cfg.tile))
    db = em.contract(em.exact(np.ones((1, N * H * W))), em.exact(dyr.T), ("tiles", cfg.tile))
    return _to_nchw(dx, N, H, W), dw.reshape(O, C, 3, 3), db.reshape(O)


# ------------------------------------------------------------------------------ registration
KERNELS = fwd_bwd("conv2d", conv2d_fwd, conv2d_bwd, models=(conv2d_fwd_model, conv2d_bwd_model),
                  fwd_laws=("linear_in_the_input",), cots=("dx", "dw", "db"),
                  doc="implicit GEMM, tiled: y, dx (the transposed convolution), dw, db")
# products whose rows, columns and sums cross the simulator's 8 x 8 tiles; ResNet-50's stage-2 3x3
SIZES = {"conv2d": Sizes(
    simulator=({"N": 1, "C": 1, "O": 1, "H": 2, "W": 2}, {"N": 2, "C": 3, "O": 5, "H": 3, "W": 4},
               {"N": 1, "C": 2, "O": 9, "H": 5, "W": 7}),
    gpu=({"N": 1, "C": 1, "O": 1, "H": 2, "W": 2}, {"N": 2, "C": 17, "O": 33, "H": 9, "W": 7},
         {"N": 8, "C": 64, "O": 64, "H": 56, "W": 56}),
    gpu_launch=({"N": 1, "C": 2, "O": 17, "H": 5, "W": 4},))}
