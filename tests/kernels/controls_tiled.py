"""Negative controls of the tiled kernels (linear's matmul, attention): a matmul with one running sum
over k, the plain attention backward with dK untransposed, and the flash faults (no running max, a dQ
accumulator sized for narrow heads, head widths the launcher should refuse, a dK/dV kernel with one
running sum over every query). Indexed, with what
catches each, in controls.py.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels import attention as A
from vjpcert.cuda_kernels import attention_flash as F
from vjpcert.cuda_kernels.common import (FULL_MASK, NEG_INF, call, config, cuda, elem_grid, empty, float32, kernel,
                                         launch, to_device)
from vjpcert.cuda_kernels.linear import matmul_dev
from vjpcert.cuda_kernels.softmax import softmax_bwd_dev, softmax_fwd_dev

# The faults: each is the real kernel with one mistake that real kernels have shipped with; each must
# go red, and tests/test_kernels.py says at which case, size and launch configuration.
_FAULTS = {}


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


def attention_bwd_wrong_dK(Q, K, V, dy, *, poison=True):
    """The plain attention backward with dK = c dS Q (not transposed): a classic wrong gradient."""
    (q, k, v, g), sq = A._heads(Q, K, V, dy)
    H, m, d = q.shape
    c = F.scale_of(d)
    S = matmul_dev(q, k, tb=True, alpha=c, poison=poison)
    P = softmax_fwd_dev(S.reshape((H * m, m)), m=m, poison=poison).reshape((H, m, m))
    dV = matmul_dev(P, g, ta=True, poison=poison)
    dP = matmul_dev(g, v, tb=True, poison=poison)
    dS = softmax_bwd_dev(S.reshape((H * m, m)), dP.reshape((H * m, m)), m=m, poison=poison).reshape((H, m, m))
    dQ = matmul_dev(dS, k, alpha=c, poison=poison)
    dK = matmul_dev(dS, q, ta=False, alpha=c, poison=poison)          # BUG: ta should be True
    return A._back((dQ, dK, dV), sq, Q)


def _fault_flash(T: int, D: int):
    """The flash forward without the running maximum, and the dQ kernel with its accumulator sized for
    d <= 4 T (64 at tile 16) instead of D."""
    if ("flash", T, D) in _FAULTS:
        return _FAULTS[("flash", T, D)]
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

    real = F.build_flash(T, D)
    _FAULTS[("flash", T, D)] = ns = type("FaultFlash", (), {"fwd_no_max": flash_fwd_no_max,
                                                            "dq_small_acc": flash_bwd_dq_small_acc,
                                                            "bwd_pre": real.bwd_pre, "bwd_dkdv": real.bwd_dkdv,
                                                            "fwd": real.fwd})
    return ns


def flash_attention_fwd_no_max(Q, K, V, *, poison=True):
    (q, k, v), sq = A._heads(Q, K, V)
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    F.check_flash_shape(H, m, d, T, backward=False)
    ks = _fault_flash(T, F.head_dim_padded(d, T))
    d_O, d_L = empty((H, m, d), poison), empty((H, m), poison)
    launch(ks.fwd_no_max, (math.ceil(m / T), H), (T, T), q, k, v, d_O, d_L, F.scale_of(d), 0, 0)
    return A._back(d_O, sq, Q)


def _backward_launches(pre, dkdv, dq, q, k, v, g, d_O, d_L, cfg, poison):
    """(dQ, dK, dV) by the flash backward's three launches, with these kernels (a fault swaps one)."""
    H, m, d = q.shape
    T = cfg.attn_tile
    d_Di = empty((H, m), poison)
    launch(pre, max(1, min(math.ceil(H * m / cfg.block), cfg.grid_cap)), cfg.block, g, d_O, d_Di)
    dQ, dK, dV = (empty((H, m, d), poison) for _ in range(3))
    sc = F.scale_of(d)
    launch(dkdv, (math.ceil(m / T), H), (T, T), q, k, v, g, d_L, d_Di, dK, dV, sc, 0, 0)
    launch(dq, (math.ceil(m / T), H), (T, T), q, k, v, g, d_L, d_Di, dQ, sc, 0, 0)
    return dQ, dK, dV


def flash_attention_bwd_small_dq_acc(Q, K, V, dy, *, poison=True):
    """The flash backward with the dQ kernel whose accumulator holds 4 columns per thread."""
    (q, k, v, g), sq = A._heads(Q, K, V, dy)
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    F.check_flash_shape(H, m, d, T, backward=True)
    ks = _fault_flash(T, F.head_dim_padded(d, T))
    d_O, d_L = F.flash_fwd_dev(q, k, v, poison=poison)
    return A._back(_backward_launches(ks.bwd_pre, ks.bwd_dkdv, ks.dq_small_acc, q, k, v, g, d_O, d_L, cfg, poison),
                   sq, Q)


def flash_attention_bwd_any_width(Q, K, V, dy, *, poison=True):
    """The real flash backward kernels launched without the launcher's refusal of head widths whose
    tiles do not fit the static shared memory (the launcher before this check existed: at tile 16 the
    dK/dV kernel needs 51 584 bytes for d = 192)."""
    (q, k, v, g), sq = A._heads(Q, K, V, dy)
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    ks = F.build_flash(T, F.head_dim_padded(d, T))               # BUG: no check_flash_shape
    d_O, d_L = empty((H, m, d), poison), empty((H, m), poison)
    launch(ks.fwd, (math.ceil(m / T), H), (T, T), q, k, v, d_O, d_L, F.scale_of(d), 0, 0)
    return A._back(_backward_launches(ks.bwd_pre, ks.bwd_dkdv, ks.bwd_dq, q, k, v, g, d_O, d_L, cfg, poison), sq, Q)


def _fault_flash_dkdv(T: int, D: int):
    """The flash dK/dV kernel with one running sum over every query (no partial sum per query tile)."""
    if ("flash_dkdv", T, D) in _FAULTS:
        return _FAULTS[("flash_dkdv", T, D)]
    ND = D // T
    DP = D + 1

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
            "float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32[:, :, ::1], float32, int32, int32)",
            threads=T * T)
    def flash_bwd_dkdv_one_sum(Q, K, V, dO, L, Di, dK, dV, scale, causal, offset):
        sK = cuda.shared.array((T, DP), float32)
        sV = cuda.shared.array((T, DP), float32)
        sQ = cuda.shared.array((T, DP), float32)
        sdO = cuda.shared.array((T, DP), float32)
        sLse = cuda.shared.array(T, float32)
        sDi = cuda.shared.array(T, float32)
        sP = cuda.shared.array((T, T), float32)
        sdS = cuda.shared.array((T, T), float32)
        accK = cuda.local.array(ND, float32)
        accV = cuda.local.array(ND, float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        hd = cuda.blockIdx.y
        m = Q.shape[1]
        d = Q.shape[2]
        c0 = cuda.blockIdx.x * T
        cr = c0 + ty
        for kk in range(tx, D, T):
            if cr < m and kk < d:
                sK[ty, kk] = K[hd, cr, kk]
                sV[ty, kk] = V[hd, cr, kk]
            else:
                sK[ty, kk] = float32(0)
                sV[ty, kk] = float32(0)
        for jj in range(ND):
            accK[jj] = float32(0)
            accV[jj] = float32(0)
        q_start = 0
        if causal != 0:
            q_start = (max(0, c0 + offset) // T) * T
        cuda.syncthreads()
        for r0 in range(q_start, m, T):
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
            sP[ty, tx] = p
            sdS[ty, tx] = p * (dp - sDi[ty])
            cuda.syncthreads()
            for jj in range(ND):
                kk = tx + jj * T
                for ii in range(T):
                    accV[jj] += sP[ii, ty] * sdO[ii, kk]        # BUG: no partial sum per query tile
                    accK[jj] += sdS[ii, ty] * sQ[ii, kk]
            cuda.syncthreads()
        if cr < m:
            for jj in range(ND):
                kk = tx + jj * T
                if kk < d:
                    dK[hd, cr, kk] = scale * accK[jj]
                    dV[hd, cr, kk] = accV[jj]

    _FAULTS[("flash_dkdv", T, D)] = flash_bwd_dkdv_one_sum
    return flash_bwd_dkdv_one_sum


def flash_attention_bwd_saved_one_running_sum(Q, K, V, dy, *, poison=True):
    """The flash backward given the exact forward's O and L (as flash_attention_bwd_saved), its dK/dV
    kernel summing every query in one running sum."""
    O, L = A.saved_statistics(Q, K, V)
    (q, k, v, g, o), sq = A._heads(Q, K, V, dy, O.astype(np.float32))
    d_L = to_device(np.ascontiguousarray(L.astype(np.float32).reshape(q.shape[:2])))
    cfg = config()
    H, m, d = q.shape
    T = cfg.attn_tile
    F.check_flash_shape(H, m, d, T, backward=True)
    D = F.head_dim_padded(d, T)
    ks = F.build_flash(T, D)
    return A._back(_backward_launches(ks.bwd_pre, _fault_flash_dkdv(T, D), ks.bwd_dq, q, k, v, g, o, d_L, cfg, poison),
                   sq, Q)


# conv2d's dx with the kernel not flipped: dy[n, o, h+i-1, w+j-1] where the transposed convolution reads
# dy[n, o, h+1-i, w+1-j] (a naive kernel, one thread per dx entry; dw and db from the real kernel).
_CONV = {}


def _conv_dx_unflipped(block: int):
    if block in _CONV:
        return _CONV[block]

    @kernel("void(float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1])", threads=block)
    def conv_dx_unflipped(dy, w, dx):
        N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
        O = dy.shape[1]
        for e in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):
            n, rest = e // (C * H * W), e % (C * H * W)
            c, hw = rest // (H * W), rest % (H * W)
            h, x_ = hw // W, hw % W
            acc = float32(0)
            for o in range(O):
                for i in range(3):
                    for j in range(3):
                        hh, ww = h + i - 1, x_ + j - 1              # BUG: h + 1 - i, w + 1 - j
                        if 0 <= hh < H and 0 <= ww < W:
                            acc += dy[n, o, hh, ww] * w[o, c, i, j]
            dx[n, c, h, x_] = acc

    _CONV[block] = conv_dx_unflipped
    return conv_dx_unflipped


def conv2d_bwd_unflipped(x, w, b, dy, *, poison=True):
    from vjpcert.cuda_kernels.conv2d import conv2d_bwd
    _, dw, db = conv2d_bwd(x, w, b, dy, poison=poison)
    cfg = config()
    d_dx = empty(np.shape(x), poison)
    launch(_conv_dx_unflipped(cfg.block), elem_grid(int(np.prod(np.shape(x))), cfg), cfg.block,
           to_device(np.asarray(dy, np.float32)), to_device(np.asarray(w, np.float32)), d_dx)
    return d_dx.copy_to_host(), dw, db
