"""Causal linear attention with a decay, per head, in its recurrent and its chunked form:

    S_t = gamma S_(t-1) + k_t v_t^T  (S_0 = 0),   o_t = S_t^T q_t
        = sum_(s <= t) gamma^(t - s) (q_t . k_s) v_s

gamma = 1 is plain causal linear attention (the law below). The recurrent form is the reference; its
backward is the reverse loop people write (the state's cotangent dS_t = q_t do_t^T + gamma dS_(t+1)).
The chunked form cuts the sequence into chunks of C steps (the last one partial): inside a chunk the
quadratic form (Q K^T masked by the decays) V, across chunks the state carried from chunk to chunk;
its backward runs the chunks in reverse with the state's cotangent carried between them. Its law says
the chunked forward is the recurrent one, for every chunk size at each length of the ladder (a chunk
of C >= T steps is the whole sequence).
"""
from fractions import Fraction

import numpy as np

from vjpcert.core.registry import Param, op

SHAPES = dict(inputs={"q": ("h", "T", "d"), "k": ("h", "T", "d"), "v": ("h", "T", "e")}, output=("h", "T", "e"),
              modular_dims=[{"h": 4, "T": 2048, "d": 64, "e": 64}])
DECAY = Param(Fraction(9, 10), positive=True, doc="the state's decay per step (1: none)")


def _outer(a, b):
    """Per head: a (h, d), b (h, e) -> (h, d, e)."""
    return a[:, :, None] * b[:, None, :]


def _read(S, a):
    """Per head: S^T a, S (h, d, e), a (h, d) -> (h, e)."""
    return (S * a[:, :, None]).sum(1)


def states(B, k, v, gamma):
    """S_1 .. S_T, the recurrent form's states."""
    S = B.zeros((k.shape[0], k.shape[2], v.shape[2]))
    out = []
    for t in range(k.shape[1]):
        S = gamma * S + _outer(k[:, t], v[:, t])
        out.append(S)
    return out


def recurrent(B, q, k, v, gamma):
    return np.stack([_read(S, q[:, t]) for t, S in enumerate(states(B, k, v, gamma))], axis=1)


@op(**SHAPES, params={"gamma": DECAY},
    dims=[{"h": 1, "T": 1, "d": 2, "e": 2}, {"h": 1, "T": 3, "d": 2, "e": 1}, {"h": 2, "T": 4, "d": 1, "e": 2}],
    check_dims={"h": 2, "T": 9, "d": 3, "e": 2})
def linear_attention(B, q, k, v, gamma):
    return recurrent(B, q, k, v, gamma)


@linear_attention.defvjp
def _(B, q, k, v, gamma, dy):
    S = states(B, k, v, gamma)
    dq, dk, dv = [None] * q.shape[1], [None] * q.shape[1], [None] * q.shape[1]
    dS = B.zeros(S[0].shape)
    for t in reversed(range(q.shape[1])):
        dS = dS + _outer(q[:, t], dy[:, t])              # o_t = S_t^T q_t
        dq[t] = (S[t] * dy[:, t][:, None, :]).sum(2)     # S_t do_t
        dk[t] = (dS * v[:, t][:, None, :]).sum(2)        # dS_t v_t
        dv[t] = _read(dS, k[:, t])                       # dS_t^T k_t
        dS = gamma * dS                                  # S_t = gamma S_(t-1) + ...
    return np.stack(dq, axis=1), np.stack(dk, axis=1), np.stack(dv, axis=1)


@linear_attention.law(params={"gamma": 1})
def without_decay_it_is_causal_attention_without_softmax(B, q, k, v, forward):
    """At gamma = 1, o_t = sum_(s <= t) (q_t . k_s) v_s: the causally masked (Q K^T) V."""
    A = q @ k.transpose(0, 2, 1)
    mask = np.tril(np.ones((q.shape[1], q.shape[1]), dtype=bool))
    return forward(q, k, v), np.where(mask, A, B.c(0)) @ v


# ------------------------------------------------------------------------------ the chunked form
def _powers(B, gamma, n):
    """gamma^0 .. gamma^(n-1), as an array of length n."""
    p = [B.c(1)]
    for _ in range(n - 1):
        p.append(p[-1] * gamma)
    return np.stack(p)


def _chunks(T, C):
    return [(s, min(s + C, T)) for s in range(0, T, C)]


def next_state(S, K, V, g):
    """The state after a chunk of n = len(g) - 1 steps: gamma^n S + sum_j gamma^(n-1-j) k_j v_j^T."""
    n = len(g) - 1
    return g[n] * S + (K * (g[n] / g[1:])[:, None]).transpose(0, 2, 1) @ V


def chunked(B, q, k, v, gamma, C):
    S = B.zeros((k.shape[0], k.shape[2], v.shape[2]))
    out = []
    for s, e in _chunks(q.shape[1], C):
        Q, K, V = q[:, s:e], k[:, s:e], v[:, s:e]
        n = e - s
        g = _powers(B, gamma, n + 1)                      # gamma^0 .. gamma^n
        mask = np.tril(np.ones((n, n), dtype=bool))
        A = (Q * g[:n, None]) @ (K / g[:n, None]).transpose(0, 2, 1)     # gamma^(i - j) q_i . k_j
        inside = np.where(mask, A, B.c(0)) @ V
        before = (Q * g[1:, None]) @ S                    # gamma^(i + 1) S^T q_i
        out.append(inside + before)
        S = next_state(S, K, V, g)
    return np.concatenate(out, axis=1)


@op(**SHAPES, params={"gamma": DECAY, "C": Param(2, symbolic=False, doc="the chunk's length")},
    dims=[{"h": 1, "T": 1, "d": 2, "e": 2}, {"h": 1, "T": 3, "d": 2, "e": 1}, {"h": 2, "T": 5, "d": 1, "e": 2}],
    check_dims={"h": 2, "T": 5, "d": 3, "e": 2})     # T = 5: the laws' chunk sizes are every chunking of it
def linear_attention_chunked(B, q, k, v, gamma, C):
    return chunked(B, q, k, v, gamma, C)


def _carried_back(dS, own, decay):
    """The cotangent of the state before a chunk: the one after it, decayed across the chunk's n steps
    (decay = gamma^n), plus what the chunk's own outputs send to it."""
    return decay * dS + own


def chunked_backward(B, q, k, v, gamma, C, dy, carried_back=_carried_back):
    """The chunked form's backward: the chunks in reverse, the state's cotangent carried between them
    by ``carried_back``."""
    T = q.shape[1]
    starts = [B.zeros((k.shape[0], k.shape[2], v.shape[2]))]      # the state before each chunk
    for s, e in _chunks(T, C):
        starts.append(next_state(starts[-1], k[:, s:e], v[:, s:e], _powers(B, gamma, e - s + 1)))
    dq, dk, dv = [], [], []
    dS = B.zeros(starts[0].shape)                        # the cotangent of the state after the chunk
    for c, (s, e) in reversed(list(enumerate(_chunks(T, C)))):
        Q, K, V, dO, S = q[:, s:e], k[:, s:e], v[:, s:e], dy[:, s:e], starts[c]
        n = e - s
        g = _powers(B, gamma, n + 1)
        mask = np.tril(np.ones((n, n), dtype=bool))
        Qg, Kg = Q * g[:n, None], K / g[:n, None]
        M = np.where(mask, Qg @ Kg.transpose(0, 2, 1), B.c(0))            # inside = M V
        dM = np.where(mask, dO @ V.transpose(0, 2, 1), B.c(0))
        w = g[n] / g[1:]                          # gamma^(n-1-j): k_j's weight in the next state
        dQ = (dM @ Kg) * g[:n, None] + (dO @ S.transpose(0, 2, 1)) * g[1:, None]
        dK = (dM.transpose(0, 2, 1) @ Qg) / g[:n, None] + (V @ dS.transpose(0, 2, 1)) * w[:, None]
        dV = M.transpose(0, 2, 1) @ dO + (K * w[:, None]) @ dS
        dq.insert(0, dQ), dk.insert(0, dK), dv.insert(0, dV)
        dS = carried_back(dS, (Q * g[1:, None]).transpose(0, 2, 1) @ dO, g[n])
    return np.concatenate(dq, axis=1), np.concatenate(dk, axis=1), np.concatenate(dv, axis=1)


@linear_attention_chunked.defvjp
def _(B, q, k, v, gamma, C, dy):
    return chunked_backward(B, q, k, v, gamma, C, dy)


def _equals_the_recurrent_form(C):
    def law(B, q, k, v, gamma, forward):
        return forward(q, k, v), recurrent(B, q, k, v, gamma)
    law.__doc__ = f"Cut into chunks of {C} steps (the last one partial), the forward is the recurrent form's."
    linear_attention_chunked.law(law, params={"C": C}, name=f"chunks_of_{C}_equal_the_recurrent_form")


# Every chunking of the ladder's lengths (T <= 5): a chunk of C >= T steps is the whole sequence
for _C in range(1, 6):
    _equals_the_recurrent_form(_C)
