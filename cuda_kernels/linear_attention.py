"""Chunked causal linear attention with a decay, per head (spec: specs/linear_attention.py,
``linear_attention``: the recurrent form is the truth these kernels are held to).

The sequence is cut into chunks of C = cfg.attn_tile steps (8 in the simulator, 16 on a GPU), the last
one partial. With S the state before a chunk and i, j steps inside it (n steps in all), g = gamma^k:

    forward   o_i     = sum_(j <= i) g^(i-j) (q_i . k_j) v_j + g^(i+1) S^T q_i
              S'      = g^n S + sum_j g^(n-1-j) k_j v_j^T                       (the carry)
    backward  dq_i    = sum_(j <= i) g^(i-j) (do_i . v_j) k_j + g^(i+1) S do_i
              dk_j    = sum_(i >= j) g^(i-j) (do_i . v_j) q_i + g^(n-1-j) dS v_j
              dv_j    = sum_(i >= j) g^(i-j) (q_i . k_j) do_i + g^(n-1-j) dS^T k_j
              dS_prev = g^n dS + sum_i g^(i+1) q_i do_i^T                       (the carry, in reverse)

One block per head, one thread per column of the state: the forward's thread owns S[:, col] (e
columns), the backward's dq/dk thread owns row a of S and of dS (both rows evolve alone: row a of the
update reads k[:, a] only), its dv thread column col of dS. Each thread keeps its row or column in a
global scratch array nobody else touches, so there is nothing to synchronise. The powers of gamma are
rounded to float32 once on the host. The bugs chunked kernels ship with are at the chunk boundary (a
carry dropped or applied twice), so the sizes are just below, at and just above multiples of C.
"""
from __future__ import annotations

import numpy as np

from vjpcert.cuda_kernels.common import config, cuda, empty, float32, is_device, kernel, launch, to_device
from vjpcert.cuda_kernels.registry import KernelSpec, Sizes

_CACHE = {}
_F3 = "float32[:, :, ::1]"


def build(cfg):
    key = (cfg.block, cfg.attn_tile)
    if key in _CACHE:
        return _CACHE[key]
    BLOCK, C = cfg.block, cfg.attn_tile

    @kernel(f"void({_F3}, {_F3}, {_F3}, float32[::1], {_F3}, {_F3})", threads=BLOCK)
    def linear_attention_fwd(q, k, v, g, y, S):
        H, T, d, e = q.shape[0], q.shape[1], q.shape[2], v.shape[2]
        for hh in range(cuda.blockIdx.x, H, cuda.gridDim.x):
            for col in range(cuda.threadIdx.x, e, BLOCK):
                for a in range(d):
                    S[hh, a, col] = float32(0)
                for c0 in range(0, T, C):
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

    @kernel(f"void({_F3}, {_F3}, {_F3}, {_F3}, float32[::1], {_F3}, {_F3}, {_F3}, {_F3})", threads=BLOCK)
    def linear_attention_bwd_qk(q, k, v, dy, g, dq, dk, S, dS):
        """dq in a forward sweep (it reads the state before each chunk), dk in a reverse one (it reads
        the state's cotangent after each chunk); thread a owns row a of both."""
        H, T, d, e = q.shape[0], q.shape[1], q.shape[2], v.shape[2]
        for hh in range(cuda.blockIdx.x, H, cuda.gridDim.x):
            for a in range(cuda.threadIdx.x, d, BLOCK):
                for col in range(e):
                    S[hh, a, col] = float32(0)
                    dS[hh, a, col] = float32(0)
                for c0 in range(0, T, C):
                    n = min(C, T - c0)
                    for i in range(n):
                        acc = float32(0)
                        for j in range(i + 1):
                            dov = float32(0)
                            for col in range(e):
                                dov += dy[hh, c0 + i, col] * v[hh, c0 + j, col]
                            acc += g[i - j] * dov * k[hh, c0 + j, a]
                        r = float32(0)
                        for col in range(e):
                            r += S[hh, a, col] * dy[hh, c0 + i, col]
                        dq[hh, c0 + i, a] = acc + g[i + 1] * r
                    for col in range(e):
                        s = g[n] * S[hh, a, col]
                        for j in range(n):
                            s += g[n - 1 - j] * k[hh, c0 + j, a] * v[hh, c0 + j, col]
                        S[hh, a, col] = s
                last = (T - 1) // C * C
                for c0 in range(last, -1, -C):
                    n = min(C, T - c0)
                    for j in range(n):
                        acc = float32(0)
                        for i in range(j, n):
                            dov = float32(0)
                            for col in range(e):
                                dov += dy[hh, c0 + i, col] * v[hh, c0 + j, col]
                            acc += g[i - j] * dov * q[hh, c0 + i, a]
                        r = float32(0)
                        for col in range(e):
                            r += dS[hh, a, col] * v[hh, c0 + j, col]
                        dk[hh, c0 + j, a] = acc + g[n - 1 - j] * r
                    for col in range(e):
                        s = g[n] * dS[hh, a, col]
                        for i in range(n):
                            s += g[i + 1] * q[hh, c0 + i, a] * dy[hh, c0 + i, col]
                        dS[hh, a, col] = s

    @kernel(f"void({_F3}, {_F3}, {_F3}, float32[::1], {_F3}, {_F3})", threads=BLOCK)
    def linear_attention_bwd_v(q, k, dy, g, dv, dS):
        """dv in a reverse sweep; thread col owns column col of the state's cotangent."""
        H, T, d, e = q.shape[0], q.shape[1], q.shape[2], dy.shape[2]
        for hh in range(cuda.blockIdx.x, H, cuda.gridDim.x):
            for col in range(cuda.threadIdx.x, e, BLOCK):
                for a in range(d):
                    dS[hh, a, col] = float32(0)
                last = (T - 1) // C * C
                for c0 in range(last, -1, -C):
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
                    for a in range(d):
                        s = g[n] * dS[hh, a, col]
                        for i in range(n):
                            s += g[i + 1] * q[hh, c0 + i, a] * dy[hh, c0 + i, col]
                        dS[hh, a, col] = s

    _CACHE[key] = ns = type("LinearAttentionKernels", (), {"fwd": linear_attention_fwd,
                                                          "bwd_qk": linear_attention_bwd_qk,
                                                          "bwd_v": linear_attention_bwd_v})
    return ns


def powers(gamma: float, C: int) -> np.ndarray:
    """gamma^0 .. gamma^C, each computed in float64 and rounded to float32 once."""
    return (float(gamma) ** np.arange(C + 1, dtype=np.float64)).astype(np.float32)


def _run(dev_fn, arrays):
    """numpy arrays in, numpy out (device arrays pass through, as the other launchers')."""
    if is_device(arrays[0]):
        return dev_fn(*arrays)
    out = dev_fn(*(to_device(np.asarray(a, np.float32)) for a in arrays))
    return tuple(o.copy_to_host() for o in out) if isinstance(out, tuple) else out.copy_to_host()


def _grid(H: int, cfg) -> int:
    return max(1, min(H, cfg.grid_cap))


def linear_attention_fwd(q, k, v, *, gamma, poison=True, cfg=None, kernels=None):
    """(h, T, d), (h, T, d), (h, T, e) -> (h, T, e). ``kernels``: another build (a control's)."""
    cfg = cfg or config()
    ks = (kernels or build)(cfg)

    def dev(q_, k_, v_):
        H, T, d = q_.shape
        y = empty((H, T, v_.shape[2]), poison)
        S = empty((H, d, v_.shape[2]), poison)
        launch(ks.fwd, _grid(H, cfg), cfg.block, q_, k_, v_, to_device(powers(gamma, cfg.attn_tile)), y, S)
        return y
    return _run(dev, (q, k, v))


def linear_attention_bwd(q, k, v, dy, *, gamma, poison=True, cfg=None, kernels=None):
    """(dq, dk, dv), by two kernels: rows of the state (dq, dk), its columns (dv)."""
    cfg = cfg or config()
    ks = (kernels or build)(cfg)

    def dev(q_, k_, v_, dy_):
        H, T, d = q_.shape
        e = v_.shape[2]
        g = to_device(powers(gamma, cfg.attn_tile))
        dq, dk, dv = empty((H, T, d), poison), empty((H, T, d), poison), empty((H, T, e), poison)
        S, dS, dSc = (empty((H, d, e), poison) for _ in range(3))
        launch(ks.bwd_qk, _grid(H, cfg), cfg.block, q_, k_, v_, dy_, g, dq, dk, S, dS)
        launch(ks.bwd_v, _grid(H, cfg), cfg.block, q_, k_, dy_, g, dv, dSc)
        return dq, dk, dv
    return _run(dev, (q, k, v, dy))


# ------------------------------------------------------------------------------ error models
def _powers_model(gamma: float, C: int):
    """The float32 powers as the kernel holds them: each one host rounding, shared by every use."""
    from vjpcert.cuda_kernels import error_model as em
    return [em.constant(float(gamma) ** i) for i in range(C + 1)]


def linear_attention_fwd_model(cfg, q, k, v, *, gamma):
    """Restates the forward kernel's float32 arithmetic in its order (Tracked, per (head, step, col))."""
    from vjpcert.cuda_kernels import error_model as em
    C = cfg.attn_tile
    Q, K, V = em.exact(q), em.exact(k), em.exact(v)
    H, T, d = q.shape
    e = v.shape[2]
    g = _powers_model(gamma, C)
    S = em.exact(np.zeros((H, d, e)))
    rows = []
    for c0 in range(0, T, C):
        n = min(C, T - c0)
        for i in range(n):
            dots = em.reduce_sum(Q[:, c0 + i:c0 + i + 1, :] * K[:, c0:c0 + i + 1, :], ("sequential",), keepdims=False)
            acc = None
            for j in range(i + 1):
                term = g[i - j] * dots[:, j:j + 1] * V[:, c0 + j, :]
                acc = term if acc is None else acc + term
            r = em.reduce_sum((S * Q[:, c0 + i, :, None]).swapaxes(1, 2), ("sequential",), keepdims=False)
            rows.append(acc + g[i + 1] * r)
        s = g[n] * S
        for j in range(n):
            s = s + g[n - 1 - j] * K[:, c0 + j, :, None] * V[:, c0 + j, None, :]
        S = s
    return _stack(rows, axis=1)


def linear_attention_bwd_model(cfg, q, k, v, dy, *, gamma):
    """The two backward kernels' arithmetic in their order: dq and S forwards, dk and dv with the
    state's cotangent in reverse (its rows for dk, its columns for dv: the same numbers, two threads'
    copies, each rounded the same)."""
    from vjpcert.cuda_kernels import error_model as em
    C = cfg.attn_tile
    Q, K, V, DY = em.exact(q), em.exact(k), em.exact(v), em.exact(dy)
    H, T, d = q.shape
    e = v.shape[2]
    g = _powers_model(gamma, C)
    chunks = [(c0, min(C, T - c0)) for c0 in range(0, T, C)]
    dq, dk, dv = [None] * T, [None] * T, [None] * T
    S = em.exact(np.zeros((H, d, e)))
    for c0, n in chunks:
        for i in range(n):
            dov = em.reduce_sum(DY[:, c0 + i:c0 + i + 1, :] * V[:, c0:c0 + i + 1, :], ("sequential",), keepdims=False)
            acc = None
            for j in range(i + 1):
                term = g[i - j] * dov[:, j:j + 1] * K[:, c0 + j, :]
                acc = term if acc is None else acc + term
            r = em.reduce_sum(S * DY[:, c0 + i, None, :], ("sequential",), keepdims=False)
            dq[c0 + i] = acc + g[i + 1] * r
        s = g[n] * S
        for j in range(n):
            s = s + g[n - 1 - j] * K[:, c0 + j, :, None] * V[:, c0 + j, None, :]
        S = s
    dS = em.exact(np.zeros((H, d, e)))
    for c0, n in reversed(chunks):
        for j in range(n):
            dov = em.reduce_sum(DY[:, c0 + j:c0 + n, :] * V[:, c0 + j:c0 + j + 1, :], ("sequential",), keepdims=False)
            qk = em.reduce_sum(Q[:, c0 + j:c0 + n, :] * K[:, c0 + j:c0 + j + 1, :], ("sequential",), keepdims=False)
            acc_k = acc_v = None
            for i in range(j, n):
                tk = g[i - j] * dov[:, i - j:i - j + 1] * Q[:, c0 + i, :]
                tv = g[i - j] * qk[:, i - j:i - j + 1] * DY[:, c0 + i, :]
                acc_k = tk if acc_k is None else acc_k + tk
                acc_v = tv if acc_v is None else acc_v + tv
            rk = em.reduce_sum(dS * V[:, c0 + j, None, :], ("sequential",), keepdims=False)
            rv = em.reduce_sum((dS * K[:, c0 + j, :, None]).swapaxes(1, 2), ("sequential",), keepdims=False)
            dk[c0 + j] = acc_k + g[n - 1 - j] * rk
            dv[c0 + j] = acc_v + g[n - 1 - j] * rv
        s = g[n] * dS
        for i in range(n):
            s = s + g[i + 1] * Q[:, c0 + i, :, None] * DY[:, c0 + i, None, :]
        dS = s
    return _stack(dq, axis=1), _stack(dk, axis=1), _stack(dv, axis=1)


def _stack(parts, axis):
    from vjpcert.cuda_kernels.error_model import Tracked
    return Tracked(*(np.stack([getattr(p, f) for p in parts], axis=axis) for f in ("v", "p1", "p2", "s1", "s2")))


# ------------------------------------------------------------------------------ registration
def _kernels():
    doc = "chunked: one block per head, a thread per state column (row), the carry between chunks"
    return [KernelSpec("linear_attention_fwd", "linear_attention", "forward", ("y",), linear_attention_fwd,
                       ("without_decay_it_is_causal_attention_without_softmax",), doc=doc,
                       model=linear_attention_fwd_model),
            KernelSpec("linear_attention_bwd", "linear_attention", "backward", ("dq", "dk", "dv"),
                       linear_attention_bwd, (), forward="linear_attention_fwd", doc=doc,
                       model=linear_attention_bwd_model)]


KERNELS = _kernels()
# around the chunk: the simulator's C = 8 (T = 7, 8, 9, 16, 17: partial, whole, one over, two whole,
# two and one), the GPU's C = 16 in its own launch configuration, and production heads on a GPU
SIZES = {"linear_attention": Sizes(
    simulator=({"h": 1, "T": 1, "d": 1, "e": 1}, {"h": 2, "T": 7, "d": 3, "e": 2}, {"h": 1, "T": 8, "d": 2, "e": 3},
               {"h": 2, "T": 9, "d": 3, "e": 2}, {"h": 1, "T": 16, "d": 2, "e": 2}, {"h": 1, "T": 17, "d": 3, "e": 2}),
    gpu=({"h": 4, "T": 15, "d": 64, "e": 64}, {"h": 4, "T": 17, "d": 64, "e": 64},
         {"h": 4, "T": 2048, "d": 64, "e": 64}),
    gpu_launch=({"h": 2, "T": 17, "d": 2, "e": 3}, {"h": 1, "T": 33, "d": 3, "e": 2}))}
