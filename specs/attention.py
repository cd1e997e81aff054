"""Scaled dot-product attention, one head, Q K V of shape m x d, with c = 1/sqrt(d).

    S = c Q K^T,   P = rowsoftmax(S),   O = P V
    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(P * dP)),   dQ = c dS K,   dK = c dS^T Q
Causal variant: query i sees keys j <= i - offset. Queries and keys have one length m here (the
ops MHSA and the ViT block are built on); specs/sdpa.py has m_q != m_k, an explicit scale, both causal
alignments and key padding. Masked logits are *excluded* from the softmax
(not set to a large negative number); a row with no visible key outputs 0 and passes no gradient.
"""
import numpy as np

from vjpcert.core.registry import Param, op

ATTENTION = dict(inputs={"Q": ("m", "d"), "K": ("m", "d"), "V": ("m", "d")}, output=("m", "d"),
                 dims=[{"m": 2, "d": 1}, {"m": 2, "d": 3}, {"m": 3, "d": 2}],
                 large_dims=[{"m": 8, "d": 8}], check_dims={"m": 5, "d": 3})


def scale(B, d):
    return 1 / B.sqrt(B.c(d))


def masked_softmax(B, S, mask):
    """Row softmax over the entries where mask is True; all-masked rows give 0 (not NaN)."""
    e = np.where(mask, B.exp(S - B.max_shift(S, mask)), B.c(0))    # shift: 0 exactly, row max in floats
    Z = e.sum(-1, keepdims=True)
    return e / np.where(mask.any(-1, keepdims=True), Z, B.c(1))


def causal_mask(Q, K, offset):
    """Query i sees key j <= i - offset, on the (len(Q), len(K)) rectangle (top-left aligned); the ops
    here have len(Q) = len(K), the rectangular ones with both alignments are in specs/sdpa.py."""
    return np.tril(np.ones((Q.shape[0], K.shape[0]), dtype=bool), k=-offset)


def _forward(B, Q, K, V, mask):
    P = masked_softmax(B, scale(B, Q.shape[-1]) * (Q @ K.T), mask)
    return P @ V


def _backward(B, Q, K, V, dy, mask):
    c = scale(B, Q.shape[-1])
    P = masked_softmax(B, c * (Q @ K.T), mask)
    dP = dy @ V.T
    dS = P * (dP - (P * dP).sum(-1, keepdims=True))
    return c * (dS @ K), c * (dS.T @ Q), P.T @ dy


@op(**ATTENTION)
def attention(B, Q, K, V):
    return _forward(B, Q, K, V, np.ones((Q.shape[0], K.shape[0]), dtype=bool))


@attention.defvjp
def attention_vjp(B, Q, K, V, dy):
    return _backward(B, Q, K, V, dy, np.ones((Q.shape[0], K.shape[0]), dtype=bool))


@attention.law
def dV_rows_follow_P(B, Q, K, V, dy, backward):
    """sum_i dV[i, :] = sum_i dO[i, :]: P's rows sum to 1, so V's cotangent keeps dO's column sums."""
    _, _, dV = backward(Q, K, V, dy)
    return dV.sum(0), dy.sum(0)


@op(**{**ATTENTION, "params": {"offset": Param(0, symbolic=False, doc="query i sees keys j <= i - offset")}})
def attention_causal(B, Q, K, V, offset):
    return _forward(B, Q, K, V, causal_mask(Q, K, offset))


@attention_causal.defvjp
def attention_causal_vjp(B, Q, K, V, offset, dy):
    return _backward(B, Q, K, V, dy, causal_mask(Q, K, offset))


@attention_causal.law
def first_row_sees_only_itself(B, Q, K, V, forward):
    """With offset 0, query 0 sees key 0 only, so O[0] = V[0]."""
    return forward(Q, K, V)[0], V[0]


@attention_causal.law(params={"offset": 1})
def fully_masked_row_is_zero(B, Q, K, V, dy, forward, backward):
    """With offset 1, query 0 sees no key: its output row and its dQ row are exactly 0."""
    dQ, _, _ = backward(Q, K, V, dy=dy)
    return np.concatenate([forward(Q, K, V)[0], dQ[0]])


# Proved for every m and d: the statement is derived from the code above (symbolic.every_size.shape_trace).
attention.every_size("vjp[Q]", "vjp[K]", "vjp[V]")
# Causal: every m and d at the default offset 0, and the fully-masked-row law at offset 1. The mask
# becomes an indicator [j <= i - offset] in the statement, decided by the index bounds where they
# decide it (symbolic.every_size.normal.Ind).
attention_causal.every_size("vjp[Q]", "vjp[K]", "vjp[V]", "first_row_sees_only_itself",
                            "fully_masked_row_is_zero")
