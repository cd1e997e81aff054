"""Negative controls of the row kernels (softmax, LayerNorm, RMSNorm: one block per row): planted
reduction bugs the race detector and the tolerance must catch, a softmax backward without its row
term, and the numerical faults (no row maximum, a one-pass variance, a sequential sum of squares).
Indexed, with what catches each, in controls.py.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (NEG_INF, block_max, block_sum, call, config, cuda, empty, float32, kernel,
                                         launch, row_grid, warps)

_CACHE = {}


def _row_softmax_kernels(block: int):
    """Softmax forward kernels with planted reduction bugs (one block per row, as the real one)."""
    if block in _CACHE:
        return _CACHE[block]
    BLOCK = block
    NWARP = warps(block)

    @cuda.jit(device=True)
    def sum_missing_sync(sm, t, v):
        sm[t] = v
        cuda.syncthreads()
        s = sm.shape[0] // 2
        while s > 0:
            if t < s:
                sm[t] += sm[t + s]
            s //= 2                       # BUG: no syncthreads between levels
        r = sm[0]
        cuda.syncthreads()
        return r

    @cuda.jit(device=True)
    def sum_half_partials(sm, t, v):
        sm[t] = v
        cuda.syncthreads()
        s = sm.shape[0] // 4              # BUG: should start at BLOCK / 2
        while s > 0:
            if t < s:
                sm[t] += sm[t + s]
            cuda.syncthreads()
            s //= 2
        r = sm[0]
        cuda.syncthreads()
        return r

    def make(which):
        @kernel("void(float32[:, ::1], float32[:, ::1])")
        def softmax_bug(x, y):
            wm = cuda.shared.array(NWARP, float32)        # block_max's slots, one per warp
            sm = cuda.shared.array(BLOCK, float32)        # the planted tree sums' slots
            part = cuda.shared.array(BLOCK, float32)      # only the uninitialised-read variant uses it
            t = cuda.threadIdx.x
            rows = x.shape[0]
            n = x.shape[1]
            for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
                mx = NEG_INF
                for j in range(t, n, BLOCK):
                    if x[r, j] > mx:
                        mx = x[r, j]
                mx = block_max(wm, t, mx)
                acc = float32(0)
                for j in range(t, n, BLOCK):
                    acc += float32(math.exp(x[r, j] - mx))
                if which == 0:
                    total = sum_missing_sync(sm, t, acc)
                elif which == 1:
                    total = sum_half_partials(sm, t, acc)
                else:
                    if t < n:                 # BUG: threads past the row never write their slot
                        part[t] = acc
                    cuda.syncthreads()
                    if t == 0:                # ... and thread 0 adds all BLOCK slots
                        tot = float32(0)
                        for k in range(BLOCK):
                            tot += part[k]
                        part[0] = tot
                    cuda.syncthreads()
                    total = part[0]
                    cuda.syncthreads()
                for j in range(t, n, BLOCK):
                    y[r, j] = float32(math.exp(x[r, j] - mx)) / total
        return softmax_bug

    @kernel("void(float32[:, ::1], float32[:, ::1])")
    def divergent(x, y):
        sm = cuda.shared.array(BLOCK, float32)
        t = cuda.threadIdx.x
        rows = x.shape[0]
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            for j in range(t, n, BLOCK):
                y[r, j] = float32(1) / float32(n)
        if t == 0:
            return                        # BUG: thread 0 skips the barrier below
        sm[t] = float32(0)
        cuda.syncthreads()

    ns = type("Controls", (), {"missing_sync": make(0), "half_partials": make(1), "uninit": make(2),
                               "divergent": divergent})
    _CACHE[block] = ns
    return ns


def _softmax_launcher(which):
    def softmax_fwd(x, *, poison=True):
        cfg = config()
        k = getattr(_row_softmax_kernels(cfg.block), which)

        def dev(d_x):
            d_y = empty(d_x.shape, poison)
            launch(k, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_y)
            return d_y
        return call(dev, (x,))
    return softmax_fwd


def softmax_bwd_no_dot(x, dy, *, poison=True):
    """dx = y * dy (the - sum(y dy) term dropped), from the real forward kernel."""
    from vjpcert.cuda_kernels.softmax import softmax_fwd
    y = softmax_fwd(x, poison=poison)
    return (y * np.asarray(dy, np.float32)).astype(np.float32)


# The faults: each is the real kernel with one mistake that real kernels have shipped with; each must
# go red, and tests/test_kernels.py says at which case, size and launch configuration.
_FAULTS = {}


def _fault_row_kernels(block: int):
    """Row kernels with a numerical fault (same launch shape as the real ones)."""
    if ("rows", block) in _FAULTS:
        return _FAULTS[("rows", block)]
    BLOCK = block
    NWARP = warps(block)

    @cuda.jit(device=True)
    def row_max(x, r, stop, sm, t):
        """The block's maximum of x[r, :stop]."""
        mx = NEG_INF
        for j in range(t, stop, BLOCK):
            if x[r, j] > mx:
                mx = x[r, j]
        return block_max(sm, t, mx)

    @cuda.jit(device=True)
    def exp_sum(x, r, mx, t):
        """This thread's share of sum_j exp(x[r, j] - mx)."""
        acc = float32(0)
        for j in range(t, x.shape[1], BLOCK):
            acc += float32(math.exp(x[r, j] - mx))
        return acc

    @kernel("void(float32[:, ::1], float32[:, ::1])", threads=BLOCK)
    def softmax_no_max(x, y):
        """softmax without subtracting the row maximum: exp(x) overflows for x > 88.7."""
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        for r in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
            acc = float32(0)
            for j in range(t, x.shape[1], BLOCK):
                acc += float32(math.exp(x[r, j]))          # BUG: no - max
            total = block_sum(sm, t, acc)
            for j in range(t, x.shape[1], BLOCK):
                y[r, j] = float32(math.exp(x[r, j])) / total

    @kernel("void(float32[:, ::1], float32[:, ::1])", threads=BLOCK)
    def softmax_max_over_full_blocks(x, y):
        """softmax whose row maximum skips the row's last, partial block once there is a full one
        (harmless in exact arithmetic: softmax is shift invariant; exp overflows when the row's
        largest entry, by some 88, lies in that tail)."""
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        n = x.shape[1]
        full = n - n % BLOCK if n >= BLOCK else n                # BUG: the tail is not looked at
        for r in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
            mx = row_max(x, r, full, sm, t)
            total = block_sum(sm, t, exp_sum(x, r, mx, t))
            for j in range(t, n, BLOCK):
                y[r, j] = float32(math.exp(x[r, j] - mx)) / total

    @kernel("void(float32[:, ::1], float32[:, ::1], float32[::1])", threads=BLOCK)
    def softmax_global_total_racy(x, y, total):
        """softmax whose row sum goes to global memory: thread 0 zeroes total[r] with a plain store while
        every thread atomically adds its partial sum, nothing ordering the store before the adds. Right
        when thread 0 runs first (the simulator's order); on a GPU, or with the threads in another
        order, the store can erase partial sums already added."""
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
            mx = row_max(x, r, n, sm, t)
            acc = exp_sum(x, r, mx, t)
            if t == 0:
                total[r] = float32(0)                            # BUG: no barrier before the adds
            cuda.atomic.add(total, r, acc)
            cuda.syncthreads()
            for j in range(t, n, BLOCK):
                y[r, j] = float32(math.exp(x[r, j] - mx)) / total[r]

    @kernel("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], float32)", threads=BLOCK)
    def layernorm_one_pass(x, gamma, beta, y, eps):
        """LayerNorm with the one-pass variance E[x^2] - E[x]^2: cancels to nothing when |mean| >> std."""
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
            s1 = float32(0)
            s2 = float32(0)
            for j in range(t, n, BLOCK):
                s1 += x[r, j]
                s2 += x[r, j] * x[r, j]
            mu = block_sum(sm, t, s1) / float32(n)
            var = block_sum(sm, t, s2) / float32(n) - mu * mu     # BUG: one pass
            if var < float32(0):
                var = float32(0)
            rstd = float32(1) / float32(math.sqrt(var + eps))
            for j in range(t, n, BLOCK):
                y[r, j] = (x[r, j] - mu) * rstd * gamma[j] + beta[j]

    @kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32)", threads=BLOCK)
    def rmsnorm_sequential(x, gamma, y, eps):
        """RMSNorm whose sum of squares is one running sum by thread 0 (then shared): correct in exact
        arithmetic, ~sqrt(n) times the rounding of the block's strided sums and tree."""
        sm = cuda.shared.array(1, float32)
        t = cuda.threadIdx.x
        n = x.shape[1]
        for r in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
            if t == 0:
                acc = float32(0)
                for j in range(n):                           # BUG: sequential over the whole row
                    acc += x[r, j] * x[r, j]
                sm[0] = acc
            cuda.syncthreads()
            rstd = float32(1) / float32(math.sqrt(sm[0] / float32(n) + eps))
            cuda.syncthreads()
            for j in range(t, n, BLOCK):
                y[r, j] = x[r, j] * rstd * gamma[j]

    _FAULTS[("rows", block)] = ns = type("FaultRows", (), {"softmax_no_max": softmax_no_max,
                                                           "softmax_max_over_full_blocks": softmax_max_over_full_blocks,
                                                           "softmax_global_total_racy": softmax_global_total_racy,
                                                           "layernorm_one_pass": layernorm_one_pass,
                                                           "rmsnorm_sequential": rmsnorm_sequential})
    return ns


def _softmax_fault(which: str, *, row_scratch: bool = False):
    """The launcher of a faulty softmax forward: x (rows, n) -> y, with a per-row global scratch
    buffer after y where the kernel takes one."""
    def launcher(x, *, poison=True):
        cfg = config()
        k = getattr(_fault_row_kernels(cfg.block), which)

        def dev(d_x):
            d_y = empty(d_x.shape, poison)
            scratch = (empty((d_x.shape[0],), poison),) if row_scratch else ()
            launch(k, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_y, *scratch)
            return d_y
        return call(dev, (x,))
    launcher.__name__ = which
    return launcher


softmax_no_max = _softmax_fault("softmax_no_max")
softmax_max_over_full_blocks = _softmax_fault("softmax_max_over_full_blocks")
softmax_global_total_racy = _softmax_fault("softmax_global_total_racy", row_scratch=True)


def layernorm_one_pass(x, gamma, beta, *, eps=1e-5, poison=True):
    cfg = config()
    k = _fault_row_kernels(cfg.block).layernorm_one_pass

    def dev(d_x, d_g, d_b):
        d_y = empty(d_x.shape, poison)
        launch(k, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_g, d_b, d_y, np.float32(eps))
        return d_y
    return call(dev, (x,), (gamma, beta))


def rmsnorm_sequential(x, gamma, *, eps=1e-6, offset=0, poison=True):
    assert offset == 0, "the fault is planted in the plain RMSNorm (offset 0)"
    cfg = config()
    k = _fault_row_kernels(cfg.block).rmsnorm_sequential

    def dev(d_x, d_g):
        d_y = empty(d_x.shape, poison)
        launch(k, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_g, d_y, np.float32(eps))
        return d_y
    return call(dev, (x,), (gamma,))


# BatchNorm's backward without its mean-of-gradient term (dx = rstd (g - xh mean(g xh))): the bug the
# spec's mutant mean_of_gradient_term_missing models, here in a kernel.
_BN = {}


def _bn_no_mean(block: int):
    if block in _BN:
        return _BN[block]
    NWARP = warps(block)

    @kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32[:, ::1], float32[::1], float32[::1], "
            "float32)", threads=block)
    def batchnorm_bwd_no_mean(x, gamma, dy, dx, dgamma, dbeta, eps):
        sm = cuda.shared.array(NWARP, float32)
        t = cuda.threadIdx.x
        batch = x.shape[0]
        for c in range(cuda.blockIdx.x, x.shape[1], cuda.gridDim.x):
            acc = float32(0)
            for r in range(t, batch, block):
                acc += x[r, c]
            mu = block_sum(sm, t, acc) / float32(batch)
            acc = float32(0)
            for r in range(t, batch, block):
                d = x[r, c] - mu
                acc += d * d
            rstd = float32(1) / float32(math.sqrt(block_sum(sm, t, acc) / float32(batch) + eps))
            sgx = float32(0)
            sdy = float32(0)
            sgam = float32(0)
            for r in range(t, batch, block):
                xh = (x[r, c] - mu) * rstd
                sgx += dy[r, c] * gamma[c] * xh
                sdy += dy[r, c]
                sgam += dy[r, c] * xh
            mgx = block_sum(sm, t, sgx) / float32(batch)
            sb = block_sum(sm, t, sdy)
            sg = block_sum(sm, t, sgam)
            for r in range(t, batch, block):
                xh = (x[r, c] - mu) * rstd
                dx[r, c] = rstd * (dy[r, c] * gamma[c] - xh * mgx)          # BUG: - mean(g) missing
            if t == 0:
                dgamma[c] = sg
                dbeta[c] = sb

    _BN[block] = batchnorm_bwd_no_mean
    return batchnorm_bwd_no_mean


def batchnorm_bwd_no_mean(x, gamma, beta, dy, *, eps=1e-5, poison=True):
    cfg = config()

    def dev(d_x, d_dy, d_gamma):
        d_dx = empty(d_x.shape, poison)
        d_dg, d_db = empty((d_x.shape[1],), poison), empty((d_x.shape[1],), poison)
        launch(_bn_no_mean(cfg.block), row_grid(d_x.shape[1], cfg), cfg.block, d_x, d_gamma, d_dy, d_dx, d_dg, d_db,
               np.float32(eps))
        return d_dx, d_dg, d_db
    return call(dev, (x, dy), (gamma,))
