"""Negative controls of the elementwise kernels (GELU, RoPE): an elementwise loop one element short, a
float64 GELU, an output bit that depends on the run, and RoPE rotations with a fault in the angle or
in sin/cos. Indexed, with what catches each, in controls.py.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import call, config, cuda, elem_grid, empty, float32, int32, kernel, launch, to_device

_ELEM = {}


def _elementwise_kernels(block: int):
    if block in _ELEM:
        return _ELEM[block]

    @kernel("void(float32[::1], float32[::1])")
    def gelu_skips_last(x, y):
        for i in range(cuda.grid(1), x.shape[0] - 1, cuda.gridsize(1)):    # BUG: - 1
            v = x[i]
            y[i] = v * float32(0.5) * (float32(1) + float32(math.erf(v * float32(0.70710678))))

    @kernel("void(float32[::1], float32[::1])")
    def gelu_float64(x, y):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            # BUG (on a GPU): 0.5, 1.0 and math.sqrt(2.0) are float64, so this is a float64 kernel
            y[i] = v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))

    @kernel("void(float32[::1], float32[::1])")
    def gelu_cleared_by_block_0(x, y):
        if cuda.blockIdx.x == 0:                     # BUG: a clear in the same launch as the writes
            for i in range(cuda.threadIdx.x, y.shape[0], cuda.blockDim.x):
                y[i] = float32(0)
            cuda.syncthreads()                       # orders block 0's threads, not the other blocks
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            y[i] = v * float32(0.5) * (float32(1) + float32(math.erf(v * float32(0.70710678))))

    _ELEM[block] = ns = type("Elem", (), {"skips_last": gelu_skips_last, "float64": gelu_float64,
                                          "cleared_by_block_0": gelu_cleared_by_block_0})
    return ns


def _gelu_launcher(which):
    def gelu_erf_fwd(x, *, poison=True):
        cfg = config()
        k = getattr(_elementwise_kernels(cfg.block), which)

        def dev(d_x):
            flat = d_x.reshape(d_x.size)
            out = empty((flat.size,), poison)
            launch(k, elem_grid(flat.size, cfg), cfg.block, flat, out)
            return out.reshape(d_x.shape)
        return call(dev, (x,))
    return gelu_erf_fwd


_RUNS = {"n": 0}


def gelu_nondeterministic(x, *, poison=True):
    """The real GELU kernel, then one output bit that depends on the run: what float atomics (a sum
    whose order follows thread scheduling) do to a result, made certain instead of likely."""
    from vjpcert.cuda_kernels.gelu import gelu_erf_fwd
    y = np.array(gelu_erf_fwd(x, poison=poison))
    _RUNS["n"] += 1
    if _RUNS["n"] % 2:
        y.reshape(-1).view(np.uint32)[0] ^= 1
    return y


_FAULTS = {}

# RoPE: the rotation kernel with a small fault in the angle or in sin/cos. Both stay rotations of
# (nearly) unit determinant, so the rotation laws cannot see the first and barely see the second.
ANGLE_SHIFT = np.float32(1e-4)


def _fault_rope(block: int):
    if ("rope", block) in _FAULTS:
        return _FAULTS[("rope", block)]
    from vjpcert.cuda_kernels.rope import (C1, C2, FOUR_OVER_PI, HALF, ONE, PIO4_HI, PIO4_LO, PIO4_MID, S1, S2,
                                           sincos)

    @cuda.jit(device=True)
    def sincos_short(x):
        """The Cephes polynomials without their last term (the x^7 of sin, the x^8 of cos)."""
        ss = ONE
        if x < float32(0):
            x = -x
            ss = -ONE
        sc = ONE
        j = int32(x * FOUR_OVER_PI)
        y = float32(j)
        if j & 1:
            j += 1
            y += ONE
        j = j & 7
        if j > 3:
            j -= 4
            ss = -ss
            sc = -sc
        if j > 1:
            sc = -sc
        r = cuda.fma(-y, PIO4_HI, x)
        r = cuda.fma(-y, PIO4_MID, r)
        r = cuda.fma(-y, PIO4_LO, r)
        z = r * r
        ps = (S2 * z + S1) * z * r + r                       # BUG: S3 dropped
        pc = (C2 * z + C1) * z * z - HALF * z + ONE           # BUG: C3 dropped
        if j == 1 or j == 2:
            return ss * pc, sc * ps
        return ss * ps, sc * pc

    def make(which):
        @kernel("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], int32, float32)", threads=block)
        def rope_fault(x, pos, inv_freq, y, half, sign):
            rows = x.shape[0]
            d = x.shape[1]
            h = d // 2
            for p in range(cuda.grid(1), rows * h, cuda.gridsize(1)):
                r = p // h
                i = p - r * h
                theta = pos[r] * inv_freq[i]
                if which == 0:
                    s, c = sincos(theta + ANGLE_SHIFT)           # BUG: the angle off by 1e-4
                else:
                    s, c = sincos_short(theta)
                s = sign * s
                if half != 0:
                    a = i
                    b = i + h
                else:
                    a = 2 * i
                    b = 2 * i + 1
                x0 = x[r, a]
                x1 = x[r, b]
                y[r, a] = x0 * c - x1 * s
                y[r, b] = x0 * s + x1 * c
        return rope_fault

    _FAULTS[("rope", block)] = ns = type("FaultRope", (), {"angle": make(0), "short": make(1)})
    return ns


def _rope_launcher(which, half):
    def rope_fwd(x, pos, *, base=10000, poison=True):
        from vjpcert.cuda_kernels.rope import _pos_rows, inv_freq
        cfg = config()
        k = getattr(_fault_rope(cfg.block), which)

        def dev(d_x, d_pos):
            rows, d = d_x.shape
            d_y = empty(d_x.shape, poison)
            launch(k, elem_grid(rows * (d // 2), cfg), cfg.block, d_x, d_pos, to_device(inv_freq(d, base)), d_y,
                   int(half), np.float32(1))
            return d_y
        return call(dev, (x,), (_pos_rows(x, pos),))
    return rope_fwd


# The kinks: a relu backward that passes the gradient at x = 0 (>= for >), and a max-pool backward
# that sends a tie's gradient to the last maximum. Both are right wherever there is no kink or tie,
# so only the input case on_kinks (exact zeros and ties) shows them.
_KINKS = {}


def _kink_kernels(block: int):
    if block in _KINKS:
        return _KINKS[block]

    @kernel("void(float32[::1], float32[::1], float32[::1])", threads=block)
    def relu_bwd_ge(x, dy, dx):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            dx[i] = dy[i] if x[i] >= float32(0) else float32(0)          # BUG: >= passes x = 0

    @kernel("void(float32[::1], float32[::1], float32[::1], int32, int32)", threads=block)
    def max_pool_bwd_last(x, dy, dx, Ho, Wo):
        W = 2 * Wo
        for o in range(cuda.grid(1), dy.shape[0], cuda.gridsize(1)):
            nc, rest = o // (Ho * Wo), o % (Ho * Wo)
            base = nc * 4 * Ho * Wo + 2 * (rest // Wo) * W + 2 * (rest % Wo)
            best = x[base]
            arg = int32(0)
            for t in range(1, 4):
                v = x[base + (t // 2) * W + t % 2]
                if v >= best:                                            # BUG: a tie goes to the last
                    best = v
                    arg = int32(t)
            for t in range(4):
                dx[base + (t // 2) * W + t % 2] = dy[o] if t == arg else float32(0)

    _KINKS[block] = ns = type("KinkFaults", (), {"relu_ge": relu_bwd_ge, "pool_last": max_pool_bwd_last})
    return ns


def relu_bwd_ge(x, dy, *, poison=True):
    from vjpcert.cuda_kernels.relu import elementwise
    return elementwise(lambda cfg: _kink_kernels(cfg.block).relu_ge, (x, dy), poison)


def max_pool_bwd_tie_to_last(x, dy, *, poison=True):
    N, C, H, W = x.shape
    cfg = config()

    def dev(d_x, d_dy):
        out = empty((d_x.size,), poison)
        launch(_kink_kernels(cfg.block).pool_last, elem_grid(d_dy.size, cfg), cfg.block, d_x.reshape(d_x.size),
               d_dy.reshape(d_dy.size), out, H // 2, W // 2)
        return out.reshape(d_x.shape)
    return call(dev, (x,), (dy,))
