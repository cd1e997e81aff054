"""Negative controls of the chunked kernels (causal linear attention): the carry between chunks
dropped in the forward (each chunk starts from a zero state, as a kernel that forgets to load the
previous chunk's state does) and the state's cotangent not carried back between chunks in the
backward's dv kernel. Both are right whenever the sequence is one chunk (T <= C) and wrong from
T = C + 1 on. Indexed, with what catches each, in controls.py.
"""
from __future__ import annotations

from vjpcert.cuda_kernels import linear_attention as LA
from vjpcert.cuda_kernels.common import cuda, float32, kernel

_F3 = "float32[:, :, ::1]"
_FAULTS = {}


def _faulty(cfg):
    """The real kernels, with the forward and the dv kernel replaced by their faulty twins."""
    key = (cfg.block, cfg.attn_tile)
    if key in _FAULTS:
        return _FAULTS[key]
    BLOCK, C = cfg.block, cfg.attn_tile
    real = LA.build(cfg)

    @kernel(f"void({_F3}, {_F3}, {_F3}, float32[::1], {_F3}, {_F3})", threads=BLOCK)
    def fwd_carry_dropped(q, k, v, g, y, S):
        H, T, d, e = q.shape[0], q.shape[1], q.shape[2], v.shape[2]
        for hh in range(cuda.blockIdx.x, H, cuda.gridDim.x):
            for col in range(cuda.threadIdx.x, e, BLOCK):
                for c0 in range(0, T, C):
                    for a in range(d):
                        S[hh, a, col] = float32(0)         # the fault: the previous chunk's state is lost
                    n = min(C, T - c0)
                    for i in range(n):
                        acc = float32(0)
                        for j in range(i + 1):
                            dot = float32(0)
                            for a in range(d):
                                dot += q[hh, c0 + i, a] * k[hh, c0 + j, a]
                            acc += g[i - j] * dot * v[hh, c0 + j, col]
                        r = float32(0)
                        for a in range(d):
                            r += S[hh, a, col] * q[hh, c0 + i, a]
                        y[hh, c0 + i, col] = acc + g[i + 1] * r
                    for a in range(d):
                        s = g[n] * S[hh, a, col]
                        for j in range(n):
                            s += g[n - 1 - j] * k[hh, c0 + j, a] * v[hh, c0 + j, col]
                        S[hh, a, col] = s

    @kernel(f"void({_F3}, {_F3}, {_F3}, float32[::1], {_F3}, {_F3})", threads=BLOCK)
    def bwd_v_carry_dropped(q, k, dy, g, dv, dS):
        H, T, d, e = q.shape[0], q.shape[1], q.shape[2], dy.shape[2]
        for hh in range(cuda.blockIdx.x, H, cuda.gridDim.x):
            for col in range(cuda.threadIdx.x, e, BLOCK):
                last = (T - 1) // C * C
                for c0 in range(last, -1, -C):
                    for a in range(d):
                        dS[hh, a, col] = float32(0)        # the fault: the later chunks' cotangent is lost
                    n = min(C, T - c0)
                    for j in range(n):
                        acc = float32(0)
                        for i in range(j, n):
                            qk = float32(0)
                            for a in range(d):
                                qk += q[hh, c0 + i, a] * k[hh, c0 + j, a]
                            acc += g[i - j] * qk * dy[hh, c0 + i, col]
                        r = float32(0)
                        for a in range(d):
                            r += dS[hh, a, col] * k[hh, c0 + j, a]
                        dv[hh, c0 + j, col] = acc + g[n - 1 - j] * r

    _FAULTS[key] = ns = type("FaultyLinearAttention", (), {"fwd": fwd_carry_dropped, "bwd_qk": real.bwd_qk,
                                                          "bwd_v": bwd_v_carry_dropped})
    return ns


def linear_attention_fwd_carry_dropped(q, k, v, *, gamma, poison=True):
    return LA.linear_attention_fwd(q, k, v, gamma=gamma, poison=poison, kernels=_faulty)


def linear_attention_bwd_carry_dropped(q, k, v, dy, *, gamma, poison=True):
    return LA.linear_attention_bwd(q, k, v, dy, gamma=gamma, poison=poison, kernels=_faulty)
