"""Attention kernels (spec: specs/attention.py, ops ``attention`` and ``attention_causal``).

c = 1/sqrt(d);  S = c Q K^T,  P = rowsoftmax(S) over visible keys,  O = P V;
dV = P^T dO,  dP = dO V^T,  dS = P (dP - rowsum(P dP)),  dQ = c dS K,  dK = c dS^T Q.
Causal: query i sees keys j <= i - offset; masked logits are *excluded*, and a query with no visible
key outputs 0 and passes no gradient (the spec's definition, not a large negative logit).

Two implementations of the same spec:
* plain: the matmul kernel (linear.py) and the softmax kernels (softmax.py) composed, S and P
  materialised (m x m per head);
* flash (FlashAttention-2 style): a fused forward over tiles of queries that streams tiles of keys
  with an online softmax (running max and sum, rescaling the accumulator) and saves the row
  log-sum-exp L = max + log(sum); a fused backward that recomputes P = exp(S - L) tile by tile.
  The backward is two kernels: one per key tile accumulating dK and dV over query tiles, one per
  query tile accumulating dQ over key tiles. (FlashAttention-2 adds dQ with float atomics from the
  key-tile kernel; that is not bitwise reproducible, and the checker requires reproducibility.)
  A small kernel first forms D_i = rowsum(dO * O) = rowsum(P * dP).
  Sums over keys and queries run in two levels (a partial sum per tile, then the running total),
  as in the matmul (linear.py): a single running sum over thousands of keys loses more digits.
Arrays are (heads, m, d) on the device; the numpy launchers also take the spec's (m, d).
The flash kernels themselves, their shared-memory limits and device launchers are in attention_flash.py;
this file holds the plain composition, the numpy launchers, the error models and the registration.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.attention_flash import HEAD_DIMS, build_flash, flash_bwd_dev, flash_fwd_dev, scale_of
from vjpcert.cuda_kernels.common import is_device, to_device
from vjpcert.cuda_kernels.registry import KernelSpec, Sizes, causal, fwd_bwd, kernel_law
from vjpcert.cuda_kernels.linear import matmul_dev
from vjpcert.cuda_kernels.softmax import softmax_bwd_dev, softmax_fwd_dev


# ------------------------------------------------------------------------------ device launchers (plain)
def plain_fwd_dev(d_Q, d_K, d_V, *, causal=0, offset=0, cfg=None, poison=True):
    """O via materialised S = c Q K^T and P = softmax(S) (masked rows of P are 0)."""
    H, m, d = d_Q.shape
    S = matmul_dev(d_Q, d_K, tb=True, alpha=scale_of(d), cfg=cfg, poison=poison)
    P = softmax_fwd_dev(S.reshape((H * m, m)), causal=causal, offset=offset, m=m, cfg=cfg, poison=poison)
    return matmul_dev(P.reshape((H, m, m)), d_V, cfg=cfg, poison=poison)


def plain_bwd_dev(d_Q, d_K, d_V, d_dO, *, causal=0, offset=0, cfg=None, poison=True):
    H, m, d = d_Q.shape
    c = scale_of(d)
    S = matmul_dev(d_Q, d_K, tb=True, alpha=c, cfg=cfg, poison=poison)
    S2 = S.reshape((H * m, m))
    P = softmax_fwd_dev(S2, causal=causal, offset=offset, m=m, cfg=cfg, poison=poison).reshape((H, m, m))
    dV = matmul_dev(P, d_dO, ta=True, cfg=cfg, poison=poison)
    dP = matmul_dev(d_dO, d_V, tb=True, cfg=cfg, poison=poison)
    dS = softmax_bwd_dev(S2, dP.reshape((H * m, m)), causal=causal, offset=offset, m=m, cfg=cfg,
                         poison=poison).reshape((H, m, m))
    dQ = matmul_dev(dS, d_K, alpha=c, cfg=cfg, poison=poison)
    dK = matmul_dev(dS, d_Q, ta=True, alpha=c, cfg=cfg, poison=poison)
    return dQ, dK, dV


# ------------------------------------------------------------------------------ numpy launchers
def _heads(*arrays):
    """Device (heads, m, d) arrays from (m, d) or (heads, m, d) numpy arrays; whether to squeeze."""
    if is_device(arrays[0]):
        return list(arrays), False
    a0 = np.asarray(arrays[0])
    squeeze = a0.ndim == 2
    out = []
    for a in arrays:
        a = np.asarray(a, np.float32)
        out.append(to_device(a[None] if squeeze else a.reshape((-1,) + a.shape[-2:])))
    return out, squeeze


def _back(outs, squeeze, like):
    if is_device(like):
        return outs
    res = tuple(o.copy_to_host() for o in (outs if isinstance(outs, tuple) else (outs,)))
    res = tuple(r[0] if squeeze else r.reshape(np.shape(like)[:-2] + r.shape[-2:]) for r in res)
    return res if isinstance(outs, tuple) else res[0]


def attention_fwd(Q, K, V, *, causal=0, offset=0, poison=True):
    (q, k, v), sq = _heads(Q, K, V)
    return _back(plain_fwd_dev(q, k, v, causal=causal, offset=offset, poison=poison), sq, Q)


def attention_bwd(Q, K, V, dy, *, causal=0, offset=0, poison=True):
    (q, k, v, g), sq = _heads(Q, K, V, dy)
    return _back(plain_bwd_dev(q, k, v, g, causal=causal, offset=offset, poison=poison), sq, Q)


def flash_attention_fwd(Q, K, V, *, causal=0, offset=0, return_lse=False, poison=True):
    (q, k, v), sq = _heads(Q, K, V)
    O, L = flash_fwd_dev(q, k, v, causal=causal, offset=offset, poison=poison)
    if is_device(Q):
        return (O, L) if return_lse else O
    o = _back(O, sq, Q)
    return (o, L.copy_to_host()[0] if sq else L.copy_to_host()) if return_lse else o


def flash_attention_bwd(Q, K, V, dy, *, causal=0, offset=0, poison=True):
    (q, k, v, g), sq = _heads(Q, K, V, dy)
    return _back(flash_bwd_dev(q, k, v, g, causal=causal, offset=offset, poison=poison), sq, Q)


def attention_causal_fwd(Q, K, V, *, offset=0, poison=True):
    return attention_fwd(Q, K, V, causal=1, offset=offset, poison=poison)


def attention_causal_bwd(Q, K, V, dy, *, offset=0, poison=True):
    return attention_bwd(Q, K, V, dy, causal=1, offset=offset, poison=poison)


def saved_statistics(Q, K, V):
    """The forward's O and row log-sum-exp L of (..., m, d) inputs (every key visible), computed in
    float64: what an exact forward would save for the backward."""
    Q, K, V = (np.asarray(a, np.float64) for a in (Q, K, V))
    S = (Q @ np.swapaxes(K, -1, -2)) / math.sqrt(Q.shape[-1])
    mx = S.max(-1, keepdims=True)
    E = np.exp(S - mx)
    l = E.sum(-1, keepdims=True)
    return (E / l) @ V, (mx + np.log(l))[..., 0]


def flash_attention_bwd_saved(Q, K, V, dy, *, poison=True):
    """The flash backward kernels alone, handed the forward's O and L as float32 roundings of their
    float64 values: the backward's own error, without the forward's."""
    O, L = saved_statistics(Q, K, V)
    (q, k, v, g, o), sq = _heads(Q, K, V, dy, O.astype(np.float32))
    d_L = to_device(np.ascontiguousarray(L.astype(np.float32).reshape(q.shape[:2])))
    return _back(flash_bwd_dev(q, k, v, g, d_O=o, d_L=d_L, poison=poison), sq, Q)


def flash_attention_causal_fwd(Q, K, V, *, offset=0, poison=True):
    return flash_attention_fwd(Q, K, V, causal=1, offset=offset, poison=poison)


def flash_attention_causal_bwd(Q, K, V, dy, *, offset=0, poison=True):
    return flash_attention_bwd(Q, K, V, dy, causal=1, offset=offset, poison=poison)


# ------------------------------------------------------------------------------ kernel laws
def values_shift_through(B, Q, K, V, forward):
    """O(Q, K, V + 1) = O(Q, K, V) + 1 when every query sees a key: the rows of P sum to 1."""
    return forward(Q, K, V + 1), forward(Q, K, V) + 1


# ------------------------------------------------------------------------------ error models
def _valid(m: int, causal, offset) -> np.ndarray:
    i, c = np.arange(m)[:, None], np.arange(m)[None, :]
    return (c <= i - offset) if causal else np.ones((m, m), bool)


def _plain_scores(cfg, Q, K, causal, offset):
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels.linear import matmul_model
    from vjpcert.cuda_kernels.softmax import softmax_fwd_model
    m, d = np.shape(Q)
    S = matmul_model(cfg, em.exact(Q), em.exact(np.asarray(K).T), alpha=1 / math.sqrt(d))
    P = softmax_fwd_model(cfg, S, causal=causal, offset=offset, m=m)
    return S, P


def attention_fwd_model(cfg, Q, K, V, *, causal=0, offset=0):
    """plain_fwd_dev: S = c Q K^T and O = P V by the matmul kernel, P by the softmax kernel."""
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels.linear import matmul_model
    _, P = _plain_scores(cfg, Q, K, causal, offset)
    return matmul_model(cfg, P, em.exact(V))


def attention_bwd_model(cfg, Q, K, V, dy, *, causal=0, offset=0):
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels.linear import matmul_model
    from vjpcert.cuda_kernels.softmax import softmax_bwd_model
    m, d = np.shape(Q)
    S, P = _plain_scores(cfg, Q, K, causal, offset)
    dO = em.exact(dy)
    dV = matmul_model(cfg, P.swapaxes(0, 1), dO)
    dP = matmul_model(cfg, dO, em.exact(np.asarray(V).T))
    dS = softmax_bwd_model(cfg, S, dP, causal=causal, offset=offset, m=m)
    c = 1 / math.sqrt(d)
    return (matmul_model(cfg, dS, em.exact(K), alpha=c), matmul_model(cfg, dS.swapaxes(0, 1), em.exact(Q), alpha=c),
            dV)


def _flash_scores(Q, K, causal, offset):
    """s = (sum over the head width, one running sum) * c, as every flash kernel computes it."""
    from vjpcert.cuda_kernels import error_model as em
    m, d = np.shape(Q)
    S = em.constant(1 / math.sqrt(d)) * em.contract(em.exact(Q), em.exact(np.asarray(K).T), ("sequential",))
    return S, _valid(m, causal, offset)


def _flash_forward(cfg, Q, K, V, causal, offset):
    """flash_fwd, tile by tile: the running max is a shift that cancels in exact arithmetic (no error
    of its own); the rescale factor alpha = exp(old max - new max) is rounded; the tile's sum of
    exp(s - max) is a butterfly over the row's T lanes, its P V product one running sum over T."""
    from vjpcert.cuda_kernels import error_model as em
    T = cfg.attn_tile
    m, d = np.shape(Q)
    S, valid = _flash_scores(Q, K, causal, offset)
    V = em.exact(V)
    mx = np.full((m, 1), -np.inf)
    l = em.exact(np.zeros((m, 1)))
    acc = em.exact(np.zeros((m, d)))
    for c0 in range(0, m, T):
        cols = slice(c0, min(m, c0 + T))
        ok = valid[:, cols]
        if not ok.any():
            continue
        with np.errstate(invalid="ignore"):
            new = np.maximum(mx, np.where(ok, S.v[:, cols], -np.inf).max(-1, keepdims=True))
        old_f, new_f = (em.exact(np.where(np.isfinite(a), a, 0.0)) for a in (mx, new))
        # alpha = exp(old - new), rounded wherever a max existed (the kernel decides "moved" on its
        # computed scores, which may differ from the exact ones at near-ties); before any visible
        # key l and acc are 0 and alpha multiplies nothing
        alpha = em.exp(old_f - new_f).where(np.isfinite(mx), 1.0)
        p = em.exp(S[:, cols] - new_f).where(ok)
        l = l * alpha + em.reduce_sum(p, ("butterfly", T))       # the row's T lanes, by shuffles
        acc = acc * alpha + em.contract(p, V[cols, :], ("sequential",))
        mx = new
    seen = l.v > 0
    O = (acc / l).where(seen)
    L = (em.exact(np.where(np.isfinite(mx), mx, 0.0)) + em.log(l)).where(seen, -np.inf)
    return O, L, S, valid


def flash_attention_fwd_model(cfg, Q, K, V, *, causal=0, offset=0):
    return _flash_forward(cfg, Q, K, V, causal, offset)[0]


def flash_attention_bwd_model(cfg, Q, K, V, dy, *, causal=0, offset=0):
    """flash_bwd_dev after flash_fwd_dev: D_i, then P = exp(s - L) recomputed with the forward's
    scores (the same code, the same roundings); dK, dV summed over query tiles and dQ over key tiles
    in two levels."""
    O, L, S, valid = _flash_forward(cfg, Q, K, V, causal, offset)
    return _flash_backward(cfg, Q, K, V, dy, O, L, S, valid)


def flash_attention_bwd_saved_model(cfg, Q, K, V, dy):
    """flash_attention_bwd_saved: the backward of flash_attention_bwd_model with O and L each rounded
    once to float32 from their exact values (no forward error)."""
    from vjpcert.cuda_kernels import error_model as em
    O, L = saved_statistics(Q, K, V)
    S, valid = _flash_scores(Q, K, 0, 0)
    return _flash_backward(cfg, Q, K, V, dy, em.round_(em.exact(O)), em.round_(em.exact(L[:, None])), S, valid)


def _flash_backward(cfg, Q, K, V, dy, O, L, S, valid):
    """The backward kernels given the forward's O and L (Tracked, L as a column): D_i, P recomputed,
    dK and dV summed over query tiles, dQ over key tiles, each in two levels."""
    from vjpcert.cuda_kernels import error_model as em
    T = cfg.attn_tile
    m, d = np.shape(Q)
    dO = em.exact(dy)
    Di = em.reduce_sum(dO * O, ("sequential",))
    dP = em.contract(dO, em.exact(np.asarray(V).T), ("sequential",))
    Lf = em.Tracked(np.where(np.isfinite(L.v), L.v, 0.0), L.p1, L.p2, L.s1, L.s2)
    P = em.exp(S - Lf).where(valid)
    dS = (P * (dP - Di)).where(valid)
    c = em.constant(1 / math.sqrt(d))
    dV = em.contract(P.swapaxes(0, 1), dO, ("tiles", T))
    dK = c * em.contract(dS.swapaxes(0, 1), em.exact(Q), ("tiles", T))
    dQ = c * em.contract(dS, em.exact(K), ("tiles", T))
    return dQ, dK, dV


# ------------------------------------------------------------------------------ registration
KERNELS = [
    *fwd_bwd("attention", attention_fwd, attention_bwd, models=(attention_fwd_model, attention_bwd_model),
             fwd_laws=(kernel_law(values_shift_through),), bwd_laws=("dV_rows_follow_P",),
             cots=("dQ", "dK", "dV"), doc="plain: matmul + softmax kernels, S and P materialised"),
    *fwd_bwd("attention", flash_attention_fwd, flash_attention_bwd,
             models=(flash_attention_fwd_model, flash_attention_bwd_model),
             prefix="flash_attention", fwd_laws=(kernel_law(values_shift_through),),
             bwd_laws=("dV_rows_follow_P",), cots=("dQ", "dK", "dV"),
             doc="fused, tiled, online softmax, saved log-sum-exp; backward dK/dV and dQ kernels"),
    # no laws: a law's residual is read against the any-order bound of outputs computed from the
    # inputs alone, and L rounded on its own to float32 (|L| ~ 1e6 at a large offset: 0.1 absolute)
    # moves P more than that allows; the laws hold the end-to-end flash backward above
    KernelSpec("flash_attention_bwd_saved", "attention", "backward", ("dQ", "dK", "dV"), flash_attention_bwd_saved,
               forward="flash_attention_fwd", model=flash_attention_bwd_saved_model,
               doc="the flash backward kernels alone, handed O and L rounded once from their exact values: "
                   "a bound without the forward's error, tight enough to tell summation orders apart"),
    *fwd_bwd("attention_causal", attention_causal_fwd, attention_causal_bwd,
             models=(causal(attention_fwd_model), causal(attention_bwd_model)),
             fwd_laws=("first_row_sees_only_itself", kernel_law(values_shift_through)),
             bwd_laws=("fully_masked_row_is_zero",), cots=("dQ", "dK", "dV"),
             doc="plain, masked logits excluded"),
    *fwd_bwd("attention_causal", flash_attention_causal_fwd, flash_attention_causal_bwd,
             models=(causal(flash_attention_fwd_model), causal(flash_attention_bwd_model)),
             prefix="flash_attention_causal",
             fwd_laws=("first_row_sees_only_itself", kernel_law(values_shift_through)),
             bwd_laws=("fully_masked_row_is_zero",), cots=("dQ", "dK", "dV"),
             doc="fused; key tiles past the diagonal are skipped, masked logits excluded"),
]
_ATTN = Sizes(simulator=({"m": 1, "d": 1}, {"m": 7, "d": 3}, {"m": 33, "d": 4}, {"m": 17, "d": 9}),
              gpu=({"m": 1, "d": 1}, {"m": 33, "d": 9}, {"m": 1025, "d": 64}),
              gpu_launch=({"m": 17, "d": 64}, {"m": 17, "d": 128}))
# The plain attention kernels are the matmul and softmax kernels composed (checked at the GPU's launch
# on their own ops): one size at the GPU's launch is enough for them.
_PLAIN = Sizes(simulator=(), gpu=(), gpu_launch=({"m": 17, "d": 64},))
SIZES = {"attention": _ATTN, "attention_causal": _ATTN,
         **{f"attention{c}_{k}": _PLAIN for c in ("", "_causal") for k in ("fwd", "bwd")},
         # dK and dV sum over 512 queries in 64 tiles of 8 (the simulator's), 32 of 16 (a GPU's): equal
         # terms there err by ~m u / 4 in one running sum, by (T + m / T) / 2 u at most in the tiles
         "flash_attention_bwd_saved": Sizes(simulator=(), gpu=(), orders=({"m": 512, "d": 8},))}


def ptx_kernels(cfg) -> list:
    """The flash kernels for the sm_90 resource table, compiled at every head width of HEAD_DIMS (the
    plain kernels are the matmul and softmax kernels, compiled with theirs)."""
    from vjpcert.cuda_kernels.common import PtxKernel
    out = []
    for D in HEAD_DIMS:
        for v in vars(build_flash(cfg.attn_tile, D)).values():
            if isinstance(v, PtxKernel):
                out.append(PtxKernel(f"{v.name}[d<={D}]", v.py_func, v.sig, threads=v.threads,
                                     launch_bounds=v.launch_bounds))
    return out
