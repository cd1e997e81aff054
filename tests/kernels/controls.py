"""Negative controls for the kernel tier: deliberately broken kernels, each of which one check must
turn red. They are real kernels (same conventions as cuda_kernels/), launched through the same
checker as the registry's, via ``check_kernel_claim(..., kernel=<KernelSpec>)``.

    missing_sync          a tree reduction without the barrier between levels   -> race detector
    uninitialised_read    threads beyond the row read shared slots nobody wrote -> race detector
    divergent_barrier     thread 0 leaves before the block's last barrier       -> race detector
    half_partials         the tree starts at BLOCK/4: half the partial sums lost -> tolerance at n = 1025
                          (and invisible at n = 7, where only the lower half holds data)
    skips_last            the elementwise loop stops one element short         -> NaN poison
    float64_gelu          a float32 GELU written with float literals (0.5, 1.0) -> .f64 in the PTX
                          (and numerically fine: the simulator alone cannot see it)
    wrong_dK              attention's dK = c dS Q instead of c dS^T Q            -> tolerance
    nondeterministic      output bits depend on the run (as float atomics do)   -> determinism
    softmax_bwd_no_dot    dx = y * dy, the row term dropped                     -> law cotangent_sums_to_zero
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (GPU_CONFIG, MODE, NEG_INF, block_max, call, config, cuda, elem_grid, empty,
                                 float32, kernel, launch, row_grid)
from vjpcert.cuda_kernels.registry import KERNELS, KernelSpec

_CACHE = {}


def _row_softmax_kernels(block: int):
    """Softmax forward kernels with planted reduction bugs (one block per row, as the real one)."""
    if block in _CACHE:
        return _CACHE[block]
    BLOCK = block

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
            sm = cuda.shared.array(BLOCK, float32)
            part = cuda.shared.array(BLOCK, float32)      # only the uninitialised-read variant uses it
            t = cuda.threadIdx.x
            rows = x.shape[0]
            n = x.shape[1]
            for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
                mx = NEG_INF
                for j in range(t, n, BLOCK):
                    if x[r, j] > mx:
                        mx = x[r, j]
                mx = block_max(sm, t, mx)
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

    _ELEM[block] = ns = type("Elem", (), {"skips_last": gelu_skips_last, "float64": gelu_float64})
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


def attention_bwd_wrong_dK(Q, K, V, dy, *, poison=True):
    """The plain attention backward with dK = c dS Q (not transposed): a classic wrong gradient."""
    from vjpcert.cuda_kernels import attention as A
    from vjpcert.cuda_kernels.linear import matmul_dev
    from vjpcert.cuda_kernels.softmax import softmax_bwd_dev, softmax_fwd_dev
    (q, k, v, g), sq = A._heads(Q, K, V, dy)
    H, m, d = q.shape
    c = A.scale_of(d)
    S = matmul_dev(q, k, tb=True, alpha=c, poison=poison)
    P = softmax_fwd_dev(S.reshape((H * m, m)), m=m, poison=poison).reshape((H, m, m))
    dV = matmul_dev(P, g, ta=True, poison=poison)
    dP = matmul_dev(g, v, tb=True, poison=poison)
    dS = softmax_bwd_dev(S.reshape((H * m, m)), dP.reshape((H * m, m)), m=m, poison=poison).reshape((H, m, m))
    dQ = matmul_dev(dS, k, alpha=c, poison=poison)
    dK = matmul_dev(dS, q, ta=False, alpha=c, poison=poison)          # BUG: ta should be True
    return A._back((dQ, dK, dV), sq, Q)


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


def softmax_bwd_no_dot(x, dy, *, poison=True):
    """dx = y * dy (the - sum(y dy) term dropped), from the real forward kernel."""
    from vjpcert.cuda_kernels.softmax import softmax_fwd
    y = softmax_fwd(x, poison=poison)
    return (y * np.asarray(dy, np.float32)).astype(np.float32)


def _spec(base: str, launcher, name: str) -> KernelSpec:
    k = KERNELS[base]
    return KernelSpec(name, k.op, k.kind, k.outputs, launcher, k.laws, k.forward, doc="negative control")


CONTROLS = {
    "missing_sync": _spec("softmax_fwd", _softmax_launcher("missing_sync"), "softmax_fwd~missing_sync"),
    "uninitialised_read": _spec("softmax_fwd", _softmax_launcher("uninit"), "softmax_fwd~uninitialised_read"),
    "divergent_barrier": _spec("softmax_fwd", _softmax_launcher("divergent"), "softmax_fwd~divergent_barrier"),
    "half_partials": _spec("softmax_fwd", _softmax_launcher("half_partials"), "softmax_fwd~half_partials"),
    "skips_last": _spec("gelu_erf_fwd", _gelu_launcher("skips_last"), "gelu_erf_fwd~skips_last"),
    "float64_gelu": _spec("gelu_erf_fwd", _gelu_launcher("float64"), "gelu_erf_fwd~float64"),
    "wrong_dK": _spec("attention_bwd", attention_bwd_wrong_dK, "attention_bwd~wrong_dK"),
    "nondeterministic": _spec("gelu_erf_fwd", gelu_nondeterministic, "gelu_erf_fwd~nondeterministic"),
    "softmax_bwd_no_dot": _spec("softmax_bwd", softmax_bwd_no_dot, "softmax_bwd~no_dot"),
}


def ptx_controls():
    """Controls for the PTX check, at the GPU configuration (compile mode): the float64 GELU (.f64),
    the FlashAttention dK/dV kernel capped at 32 registers (spills), a kernel with 52 000 bytes of
    static shared memory (over 48 KiB), and one clean kernel (must report no problem)."""
    assert MODE == "compile", MODE
    from vjpcert.cuda_kernels.attention import build_flash
    from vjpcert.cuda_kernels.common import PtxKernel
    e = _elementwise_kernels(GPU_CONFIG.block)
    dkdv = build_flash(GPU_CONFIG.attn_tile, 64).bwd_dkdv
    return [e.float64, e.skips_last, PtxKernel("flash_bwd_dkdv[maxreg=32]", dkdv.py_func, dkdv.sig, 32),
            _too_much_shared()]


def _too_much_shared():
    N = 13000                              # 52 000 bytes of float32 > 48 KiB

    @kernel("void(float32[::1])")
    def too_much_shared(a):
        sm = cuda.shared.array(N, float32)
        t = cuda.threadIdx.x
        for i in range(t, N, cuda.blockDim.x):
            sm[i] = a[i]
        cuda.syncthreads()
        for i in range(t, N, cuda.blockDim.x):
            a[i] = sm[N - 1 - i]
    return too_much_shared
