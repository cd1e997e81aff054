"""The flash attention kernels (FlashAttention-2 style) of cuda_kernels/attention.py, which registers
them: their compile-time tiles, the static shared memory each declares and the shapes a GPU refuses
(``check_flash_shape``, one line naming the limit), the Numba kernels themselves (``build_flash``) and
their device launchers. The algorithm, its sums and why dQ has its own kernel: attention.py's docstring.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import FULL_MASK, NEG_INF, config, cuda, empty, float32, kernel, launch, min_blocks

_FLASH = {}
MAX_STATIC_SHARED = 48 * 1024       # bytes of static shared memory a block may declare (every GPU here)
MAX_GRID_Y = 65535                  # heads run on grid.y
HEAD_DIMS = (64, 128)               # the flash kernels are compiled for these head widths (resource table)


def head_dim_padded(d: int, T: int) -> int:
    """The compile-time head width of the shared tiles: d rounded up to a multiple of the tile."""
    return T * max(1, math.ceil(d / T))


def flash_shared_bytes(T: int, D: int) -> dict:
    """Static shared memory of each flash kernel at tile T and padded width D (what the PTX
    declares; ``tests/test_kernels.py`` compares it with the sm_90 compile). Rows of the (T, D)
    tiles are D + 1 floats long, so the 16 threads of a row reading column kk of 16 different
    rows hit 16 different banks (a row stride of 64 floats put them all in one bank)."""
    tile = T * (D + 1) * 4
    return {"flash_fwd": 3 * tile + T * T * 4,
            "flash_bwd_pre": 0,
            "flash_bwd_dkdv": 4 * tile + 2 * T * 4 + 2 * T * T * 4,
            "flash_bwd_dq": 4 * tile + 2 * T * 4 + T * T * 4}


def max_head_dim(T: int, backward: bool = True) -> int:
    """The widest head the flash kernels link for at tile T (the backward's tiles are the larger)."""
    names = ("flash_fwd", "flash_bwd_dkdv", "flash_bwd_dq") if backward else ("flash_fwd",)
    D = T
    while max(flash_shared_bytes(T, D + T)[k] for k in names) <= MAX_STATIC_SHARED:
        D += T
    return D


class LaunchError(ValueError):
    """A shape a kernel cannot run on the device (one line, naming the limit)."""


def check_flash_shape(H: int, m: int, d: int, T: int, backward: bool) -> None:
    """Refuse what a GPU cannot run, before anything is launched (the simulator would run it)."""
    D = head_dim_padded(d, T)
    need = flash_shared_bytes(T, D)
    names = ("flash_fwd", "flash_bwd_dkdv", "flash_bwd_dq") if backward else ("flash_fwd",)
    worst = max(names, key=lambda k: need[k])
    if need[worst] > MAX_STATIC_SHARED:
        raise LaunchError(f"flash attention{' backward' if backward else ''}: head width d = {d} needs "
                          f"{need[worst]} bytes of static shared memory per block in {worst} at tile {T} "
                          f"(limit {MAX_STATIC_SHARED}); the widest head it handles is d = {max_head_dim(T, backward)}")
    if H > MAX_GRID_Y:
        raise LaunchError(f"flash attention: {H} heads; the grid's y dimension holds at most {MAX_GRID_Y}")


def build_flash(T: int, D: int):
    """Flash kernels for tile T (block of T x T threads) and padded head width D (a multiple of T)."""
    if (T, D) in _FLASH:
        return _FLASH[(T, D)]
    ND = D // T       # accumulator columns per thread: thread x owns columns x, x + T, ...
    DP = D + 1        # shared row length: a stride that is not a multiple of the 32 banks
    HALF = T // 2     # the T threads of a row are T consecutive lanes of one warp (T <= 32)
    BLOCKS = min_blocks(T * T)      # launch bounds: blocks per SM the registers must allow
    if T > 32 or T & (T - 1):
        raise ValueError(f"flash attention tile {T}: a power of two up to a warp (32)")

    @cuda.jit(device=True)
    def row_max(v):
        """Maximum over the T threads of this row (lanes l ^ T/2, ..., ^ 1 by shuffles)."""
        m = HALF
        while m > 0:
            other = cuda.shfl_xor_sync(FULL_MASK, v, m)
            if other > v:
                v = other
            m //= 2
        return v

    @cuda.jit(device=True)
    def row_sum(v):
        m = HALF
        while m > 0:
            v += cuda.shfl_xor_sync(FULL_MASK, v, m)
            m //= 2
        return v

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
            "float32[:, ::1], float32, int32, int32)",
            threads=T * T, min_blocks=BLOCKS)
    def flash_fwd(Q, K, V, O, L, scale, causal, offset):
        """Thread (x, y) owns query row r0 + y: its score with key x of each key tile, and columns
        x, x + T, ... of the output. The row's running max and sum live in registers (the row's T
        threads hold the same values) and meet by warp shuffles: no shared memory, no barrier."""
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
        mrow = NEG_INF            # running max of row i
        lrow = float32(0)         # running sum of exp(s - mrow)
        kv_end = m
        if causal != 0:           # the last query of this tile sees keys < r0 + T - offset
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
            sv = s if valid else NEG_INF
            mx = row_max(sv)
            if mrow > mx:
                mx = mrow
            if mx == NEG_INF:          # nothing visible yet: nothing to rescale, nothing to add
                alpha = float32(1)
                p = float32(0)
            else:
                alpha = float32(math.exp(mrow - mx))
                p = float32(math.exp(sv - mx)) if valid else float32(0)
            sS[ty, tx] = p
            lrow = lrow * alpha + row_sum(p)
            mrow = mx
            cuda.syncthreads()
            for jj in range(ND):
                kk = tx + jj * T
                part = float32(0)
                for cc in range(T):
                    part += sS[ty, cc] * sV[cc, kk]
                acc[jj] = acc[jj] * alpha + part
            cuda.syncthreads()
        if i < m:
            for jj in range(ND):
                kk = tx + jj * T
                if kk < d:
                    O[hd, i, kk] = acc[jj] / lrow if lrow > float32(0) else float32(0)
            if tx == 0:
                L[hd, i] = mrow + float32(math.log(lrow)) if lrow > float32(0) else NEG_INF

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, ::1])")
    def flash_bwd_pre(dO, O, Di):
        """D_i = sum_k dO[i, k] O[i, k], one thread per row."""
        H = O.shape[0]
        m = O.shape[1]
        d = O.shape[2]
        for p in range(cuda.grid(1), H * m, cuda.gridsize(1)):
            hd = p // m
            i = p - hd * m
            a = float32(0)
            for kk in range(d):
                a += dO[hd, i, kk] * O[hd, i, kk]
            Di[hd, i] = a

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
            "float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32[:, :, ::1], float32, int32, int32)",
            threads=T * T, min_blocks=BLOCKS)
    def flash_bwd_dkdv(Q, K, V, dO, L, Di, dK, dV, scale, causal, offset):
        """One block per key tile: thread (x, y) owns key row c0 + y, columns x, x + T, ... of dK and
        dV, and sums over every query tile that can see the key tile."""
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
        if causal != 0:          # the first query that sees key c0 is c0 + offset
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
                pv = float32(0)
                pk = float32(0)
                for ii in range(T):
                    pv += sP[ii, ty] * sdO[ii, kk]
                    pk += sdS[ii, ty] * sQ[ii, kk]
                accV[jj] += pv
                accK[jj] += pk
            cuda.syncthreads()
        if cr < m:
            for jj in range(ND):
                kk = tx + jj * T
                if kk < d:
                    dK[hd, cr, kk] = scale * accK[jj]
                    dV[hd, cr, kk] = accV[jj]

    @kernel("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
            "float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32, int32, int32)",
            threads=T * T, min_blocks=BLOCKS)
    def flash_bwd_dq(Q, K, V, dO, L, Di, dQ, scale, causal, offset):
        """One block per query tile: thread (x, y) owns query row r0 + y, columns x, x + T, ... of
        dQ, and sums over every key tile the query tile can see."""
        sQ = cuda.shared.array((T, DP), float32)
        sdO = cuda.shared.array((T, DP), float32)
        sK = cuda.shared.array((T, DP), float32)
        sV = cuda.shared.array((T, DP), float32)
        sLse = cuda.shared.array(T, float32)
        sDi = cuda.shared.array(T, float32)
        sdS = cuda.shared.array((T, T), float32)
        acc = cuda.local.array(ND, float32)
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

    _FLASH[(T, D)] = ns = type("FlashKernels", (), {"fwd": flash_fwd, "bwd_pre": flash_bwd_pre,
                                                    "bwd_dkdv": flash_bwd_dkdv, "bwd_dq": flash_bwd_dq})
    return ns


def scale_of(d: int) -> np.float32:
    """c = 1/sqrt(d), rounded once to float32."""
    return np.float32(1 / math.sqrt(d))


# ------------------------------------------------------------------------------ device launchers
def flash_fwd_dev(d_Q, d_K, d_V, *, causal=0, offset=0, cfg=None, poison=True):
    """(O, L) for (heads, m, d) device arrays; L is the row log-sum-exp (-inf for a masked row)."""
    cfg = cfg or config()
    H, m, d = d_Q.shape
    T = cfg.attn_tile
    check_flash_shape(H, m, d, T, backward=False)
    ks = build_flash(T, head_dim_padded(d, T))
    d_O = empty((H, m, d), poison)
    d_L = empty((H, m), poison)
    launch(ks.fwd, (math.ceil(m / T), H), (T, T), d_Q, d_K, d_V, d_O, d_L, scale_of(d), int(causal), int(offset))
    return d_O, d_L


def flash_bwd_dev(d_Q, d_K, d_V, d_dO, *, causal=0, offset=0, d_O=None, d_L=None, cfg=None, poison=True):
    """(dQ, dK, dV); runs the forward first unless its O and L are given."""
    cfg = cfg or config()
    H, m, d = d_Q.shape
    T = cfg.attn_tile
    check_flash_shape(H, m, d, T, backward=True)
    ks = build_flash(T, head_dim_padded(d, T))
    if d_O is None or d_L is None:
        d_O, d_L = flash_fwd_dev(d_Q, d_K, d_V, causal=causal, offset=offset, cfg=cfg, poison=poison)
    d_Di = empty((H, m), poison)
    launch(ks.bwd_pre, max(1, min(math.ceil(H * m / cfg.block), cfg.grid_cap)), cfg.block, d_dO, d_O, d_Di)
    d_dQ = empty((H, m, d), poison)
    d_dK = empty((H, m, d), poison)
    d_dV = empty((H, m, d), poison)
    sc = scale_of(d)
    launch(ks.bwd_dkdv, (math.ceil(m / T), H), (T, T), d_Q, d_K, d_V, d_dO, d_L, d_Di, d_dK, d_dV, sc,
           int(causal), int(offset))
    launch(ks.bwd_dq, (math.ceil(m / T), H), (T, T), d_Q, d_K, d_V, d_dO, d_L, d_Di, d_dQ, sc,
           int(causal), int(offset))
    return d_dQ, d_dK, d_dV
