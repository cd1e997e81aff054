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

The faults of issue 17, each invisible to the checks as they were (standard-normal inputs only, the
simulator's launch configuration only, a tolerance of k x numpy's float32 error):
    softmax_no_max        exp(x) without the row maximum: NaN at a large offset  -> NaN poison
    flash_fwd_no_running_max  flash forward without its running max: NaN for
                          logits of a few hundred (large magnitudes)             -> NaN poison
    layernorm_one_pass_variance  E[x^2] - E[x]^2: cancels at |mean| >> std      -> tolerance (large offset)
    flash_dq_accumulator_too_small  dQ's accumulator holds 4 columns per thread:
                          out of bounds at d = 128, tile 16 (fine at d <= 64)    -> kernel raised (GPU launch)
    flash_any_head_width  the flash backward without the launcher's refusal: at
                          d = 192 its tiles need 51 584 bytes of static shared memory -> kernel raised
    matmul_one_running_sum  one running sum over k instead of per-tile partials  -> tolerance (error model)
    rmsnorm_sequential_sum_of_squares  thread 0 sums the row's squares alone    -> tolerance (error model)
    rope_angle_shifted    the angle off by 1e-4 (still a rotation: the rotation
                          laws cannot see it)                                    -> tolerance (error model)
    rope_short_sincos     sin/cos polynomials one term short (~3e-5)             -> tolerance (error model)
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (FULL_MASK, GPU_CONFIG, MODE, NEG_INF, block_max, block_sum, call,
                                         config, cuda, elem_grid, empty, float32, int32, kernel, launch, row_grid,
                                         to_device, warps)
from vjpcert.cuda_kernels.registry import KERNELS, KernelSpec

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


# ------------------------------------------------------------------------------ faults the issue named
# Each is the real kernel with one mistake that real kernels have shipped with; each must go red,
# and tests/test_kernels.py says at which case, size and launch configuration.
_FAULTS = {}


def _fault_row_kernels(block: int):
    """Row kernels with a numerical fault (same launch shape as the real ones)."""
    if ("rows", block) in _FAULTS:
        return _FAULTS[("rows", block)]
    BLOCK = block
    NWARP = warps(block)

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
                                                           "layernorm_one_pass": layernorm_one_pass,
                                                           "rmsnorm_sequential": rmsnorm_sequential})
    return ns


def softmax_no_max(x, *, poison=True):
    cfg = config()
    k = _fault_row_kernels(cfg.block).softmax_no_max

    def dev(d_x):
        d_y = empty(d_x.shape, poison)
        launch(k, row_grid(d_x.shape[0], cfg), cfg.block, d_x, d_y)
        return d_y
    return call(dev, (x,))


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


def _fault_matmul(T: int):
    if ("matmul", T) in _FAULTS:
        return _FAULTS[("matmul", T)]

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[::1], float32[:, :, ::1], "
            "int32, int32, int32, float32)", threads=T * T)
    def matmul_one_sum(A, B, bias, C, ta, tb, has_bias, alpha):
        """The tiled matmul with one running sum over all of k (no per-tile partial sums)."""
        sA = cuda.shared.array((T, T), float32)
        sB = cuda.shared.array((T, T), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        z = cuda.blockIdx.z
        M = C.shape[1]
        N = C.shape[2]
        K = A.shape[1] if ta != 0 else A.shape[2]
        i = cuda.blockIdx.y * T + ty
        j = cuda.blockIdx.x * T + tx
        acc = float32(0)
        for k0 in range(0, K, T):
            ka = k0 + tx
            if i < M and ka < K:
                sA[ty, tx] = A[z, ka, i] if ta != 0 else A[z, i, ka]
            else:
                sA[ty, tx] = float32(0)
            kb = k0 + ty
            if kb < K and j < N:
                sB[ty, tx] = B[z, j, kb] if tb != 0 else B[z, kb, j]
            else:
                sB[ty, tx] = float32(0)
            cuda.syncthreads()
            for kk in range(T):
                acc += sA[ty, kk] * sB[kk, tx]                # BUG: no partial sum per tile
            cuda.syncthreads()
        if i < M and j < N:
            C[z, i, j] = alpha * acc + bias[j] if has_bias != 0 else alpha * acc

    _FAULTS[("matmul", T)] = matmul_one_sum
    return matmul_one_sum


def linear_one_running_sum(x, W, b, *, poison=True):
    """y = x W^T + b through the single-running-sum matmul."""
    cfg = config()
    T = cfg.tile
    k = _fault_matmul(T)

    def dev(d_x, d_W, d_b):
        rows, n_in = d_x.shape
        n_out = d_W.shape[0]
        d_y = empty((1, rows, n_out), poison)
        launch(k, (math.ceil(n_out / T), math.ceil(rows / T), 1), (T, T), d_x.reshape((1, rows, n_in)),
               d_W.reshape((1, n_out, n_in)), d_b, d_y, 0, 1, 1, np.float32(1))
        return d_y.reshape((rows, n_out))
    return call(dev, (x,), (W, b))


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


def _fault_flash(T: int, D: int):
    """The flash forward without the running maximum, and the dQ kernel with its accumulator sized for
    d <= 4 T (64 at tile 16) instead of D."""
    if ("flash", T, D) in _FAULTS:
        return _FAULTS[("flash", T, D)]
    from vjpcert.cuda_kernels.attention import build_flash
    ND = D // T
    DP = D + 1
    HALF_T = T // 2

    @cuda.jit(device=True)
    def row_sum(v):
        m = HALF_T
        while m > 0:
            v += cuda.shfl_xor_sync(FULL_MASK, v, m)
            m //= 2
        return v

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
            "float32[:, ::1], float32, int32, int32)", threads=T * T)
    def flash_fwd_no_max(Q, K, V, O, L, scale, causal, offset):
        sQ = cuda.shared.array((T, DP), float32)
        sK = cuda.shared.array((T, DP), float32)
        sV = cuda.shared.array((T, DP), float32)
        sS = cuda.shared.array((T, T), float32)
        acc = cuda.local.array(ND, float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        hd = cuda.blockIdx.y
        m = Q.shape[1]
        d = Q.shape[2]
        r0 = cuda.blockIdx.x * T
        i = r0 + ty
        for kk in range(tx, D, T):
            sQ[ty, kk] = Q[hd, i, kk] if (i < m and kk < d) else float32(0)
        for jj in range(ND):
            acc[jj] = float32(0)
        lrow = float32(0)
        kv_end = m
        if causal != 0:
            kv_end = min(m, max(0, r0 + T - offset))
        cuda.syncthreads()
        for c0 in range(0, kv_end, T):
            cr = c0 + ty
            for kk in range(tx, D, T):
                if cr < m and kk < d:
                    sK[ty, kk] = K[hd, cr, kk]
                    sV[ty, kk] = V[hd, cr, kk]
                else:
                    sK[ty, kk] = float32(0)
                    sV[ty, kk] = float32(0)
            cuda.syncthreads()
            c = c0 + tx
            s = float32(0)
            for kk in range(d):
                s += sQ[ty, kk] * sK[tx, kk]
            s = s * scale
            valid = i < m and c < m and (causal == 0 or c <= i - offset)
            p = float32(math.exp(s)) if valid else float32(0)     # BUG: no running max subtracted
            sS[ty, tx] = p
            lrow += row_sum(p)
            cuda.syncthreads()
            for jj in range(ND):
                kk = tx + jj * T
                part = float32(0)
                for cc in range(T):
                    part += sS[ty, cc] * sV[cc, kk]
                acc[jj] += part
            cuda.syncthreads()
        if i < m:
            for jj in range(ND):
                kk = tx + jj * T
                if kk < d:
                    O[hd, i, kk] = acc[jj] / lrow if lrow > float32(0) else float32(0)
            if tx == 0:
                L[hd, i] = float32(math.log(lrow)) if lrow > float32(0) else NEG_INF

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
            "float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32, int32, int32)", threads=T * T)
    def flash_bwd_dq_small_acc(Q, K, V, dO, L, Di, dQ, scale, causal, offset):
        sQ = cuda.shared.array((T, DP), float32)
        sdO = cuda.shared.array((T, DP), float32)
        sK = cuda.shared.array((T, DP), float32)
        sV = cuda.shared.array((T, DP), float32)
        sLse = cuda.shared.array(T, float32)
        sDi = cuda.shared.array(T, float32)
        sdS = cuda.shared.array((T, T), float32)
        acc = cuda.local.array(4, float32)                 # BUG: sized for D <= 4 T, not ND = D / T
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        hd = cuda.blockIdx.y
        m = Q.shape[1]
        d = Q.shape[2]
        r0 = cuda.blockIdx.x * T
        i = r0 + ty
        for kk in range(tx, D, T):
            if i < m and kk < d:
                sQ[ty, kk] = Q[hd, i, kk]
                sdO[ty, kk] = dO[hd, i, kk]
            else:
                sQ[ty, kk] = float32(0)
                sdO[ty, kk] = float32(0)
        if tx == 0:
            sLse[ty] = L[hd, i] if i < m else float32(0)
            sDi[ty] = Di[hd, i] if i < m else float32(0)
        for jj in range(ND):
            acc[jj] = float32(0)
        kv_end = m
        if causal != 0:
            kv_end = min(m, max(0, r0 + T - offset))
        cuda.syncthreads()
        for c0 in range(0, kv_end, T):
            cr = c0 + ty
            for kk in range(tx, D, T):
                if cr < m and kk < d:
                    sK[ty, kk] = K[hd, cr, kk]
                    sV[ty, kk] = V[hd, cr, kk]
                else:
                    sK[ty, kk] = float32(0)
                    sV[ty, kk] = float32(0)
            cuda.syncthreads()
            c = c0 + tx
            s = float32(0)
            dp = float32(0)
            for kk in range(d):
                s += sQ[ty, kk] * sK[tx, kk]
                dp += sdO[ty, kk] * sV[tx, kk]
            s = s * scale
            valid = i < m and c < m and (causal == 0 or c <= i - offset)
            p = float32(math.exp(s - sLse[ty])) if valid else float32(0)
            sdS[ty, tx] = p * (dp - sDi[ty])
            cuda.syncthreads()
            for jj in range(ND):
                kk = tx + jj * T
                part = float32(0)
                for cc in range(T):
                    part += sdS[ty, cc] * sK[cc, kk]
                acc[jj] += part
            cuda.syncthreads()
        if i < m:
            for jj in range(ND):
                kk = tx + jj * T
                if kk < d:
                    dQ[hd, i, kk] = scale * acc[jj]

    real = build_flash(T, D)
    _FAULTS[("flash", T, D)] = ns = type("FaultFlash", (), {"fwd_no_max": flash_fwd_no_max,
                                                            "dq_small_acc": flash_bwd_dq_small_acc,
                                                            "bwd_pre": real.bwd_pre, "bwd_dkdv": real.bwd_dkdv,
                                                            "fwd": real.fwd})
    return ns


def flash_attention_fwd_no_max(Q, K, V, *, poison=True):
    from vjpcert.cuda_kernels import attention as A
    (q, k, v), sq = A._heads(Q, K, V)
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    A.check_flash_shape(H, m, d, T, backward=False)
    ks = _fault_flash(T, A.head_dim_padded(d, T))
    d_O, d_L = empty((H, m, d), poison), empty((H, m), poison)
    launch(ks.fwd_no_max, (math.ceil(m / T), H), (T, T), q, k, v, d_O, d_L, A.scale_of(d), 0, 0)
    return A._back(d_O, sq, Q)


def flash_attention_bwd_small_dq_acc(Q, K, V, dy, *, poison=True):
    """The flash backward with the dQ kernel whose accumulator holds 4 columns per thread."""
    from vjpcert.cuda_kernels import attention as A
    (q, k, v, g), sq = A._heads(Q, K, V, dy)
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    A.check_flash_shape(H, m, d, T, backward=True)
    ks = _fault_flash(T, A.head_dim_padded(d, T))
    d_O, d_L = A.flash_fwd_dev(q, k, v, poison=poison)
    d_Di = empty((H, m), poison)
    launch(ks.bwd_pre, max(1, min(math.ceil(H * m / cfg.block), cfg.grid_cap)), cfg.block, g, d_O, d_Di)
    dQ, dK, dV = (empty((H, m, d), poison) for _ in range(3))
    sc = A.scale_of(d)
    launch(ks.bwd_dkdv, (math.ceil(m / T), H), (T, T), q, k, v, g, d_L, d_Di, dK, dV, sc, 0, 0)
    launch(ks.dq_small_acc, (math.ceil(m / T), H), (T, T), q, k, v, g, d_L, d_Di, dQ, sc, 0, 0)
    return A._back((dQ, dK, dV), sq, Q)


def flash_attention_bwd_any_width(Q, K, V, dy, *, poison=True):
    """The real flash backward kernels launched without the launcher's refusal of head widths whose
    tiles do not fit the static shared memory (the launcher before this check existed: at tile 16 the
    dK/dV kernel needs 51 584 bytes for d = 192)."""
    from vjpcert.cuda_kernels import attention as A
    (q, k, v, g), sq = A._heads(Q, K, V, dy)
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    ks = A.build_flash(T, A.head_dim_padded(d, T))               # BUG: no check_flash_shape
    d_O, d_L = empty((H, m, d), poison), empty((H, m), poison)
    sc = A.scale_of(d)
    launch(ks.fwd, (math.ceil(m / T), H), (T, T), q, k, v, d_O, d_L, sc, 0, 0)
    d_Di = empty((H, m), poison)
    launch(ks.bwd_pre, max(1, min(math.ceil(H * m / cfg.block), cfg.grid_cap)), cfg.block, g, d_O, d_Di)
    dQ, dK, dV = (empty((H, m, d), poison) for _ in range(3))
    launch(ks.bwd_dkdv, (math.ceil(m / T), H), (T, T), q, k, v, g, d_L, d_Di, dK, dV, sc, 0, 0)
    launch(ks.bwd_dq, (math.ceil(m / T), H), (T, T), q, k, v, g, d_L, d_Di, dQ, sc, 0, 0)
    return A._back((dQ, dK, dV), sq, Q)


def _spec(base: str, launcher, name: str) -> KernelSpec:
    """A control impersonates a registry kernel: same op, outputs, laws and error model."""
    k = KERNELS[base]
    return KernelSpec(name, k.op, k.kind, k.outputs, launcher, k.laws, k.forward, doc="negative control",
                      model=k.model)


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
    # the faults of issue 17
    "softmax_no_max": _spec("softmax_fwd", softmax_no_max, "softmax_fwd~no_max"),
    "flash_fwd_no_running_max": _spec("flash_attention_fwd", flash_attention_fwd_no_max,
                                      "flash_attention_fwd~no_running_max"),
    "layernorm_one_pass_variance": _spec("layernorm_fwd", layernorm_one_pass, "layernorm_fwd~one_pass_variance"),
    "flash_dq_accumulator_too_small": _spec("flash_attention_bwd", flash_attention_bwd_small_dq_acc,
                                            "flash_attention_bwd~dq_accumulator_too_small"),
    "matmul_one_running_sum": _spec("linear_fwd", linear_one_running_sum, "linear_fwd~one_running_sum"),
    "rmsnorm_sequential_sum_of_squares": _spec("rmsnorm_fwd", rmsnorm_sequential,
                                               "rmsnorm_fwd~sequential_sum_of_squares"),
    "rope_angle_shifted": _spec("rope_half_fwd", _rope_launcher("angle", 1), "rope_half_fwd~angle_shifted"),
    "rope_short_sincos": _spec("rope_interleaved_fwd", _rope_launcher("short", 0), "rope_interleaved_fwd~short_sincos"),
    "flash_any_head_width": _spec("flash_attention_bwd", flash_attention_bwd_any_width,
                                  "flash_attention_bwd~any_head_width"),
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
