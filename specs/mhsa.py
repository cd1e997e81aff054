"""Multi-head self-attention over X of shape m x D, with `heads` heads of width dh = D / heads.

    Q = X Wq^T + bq,  K = X Wk^T + bk,  V = X Wv^T + bv          (linear nodes)
    A_h = attention(Q[:, h], K[:, h], V[:, h])  for each head h    (c = 1/sqrt(dh))
    Y = concat_h(A_h) Wo^T + bo
The backward is written the way kernels compute it: the output projection's backward, a per-head
attention backward, then *separate* Wq^T / Wk^T / Wv^T projection backwards whose input cotangents
are summed (the fan-in of X). Its claims prove it equals the VJP of the whole MHSA.
"""
import numpy as np

from vjpcert.specs.attention import attention
from vjpcert.specs.linear import linear
from vjpcert.core.registry import Param, op

WEIGHTS = {"X": ("m", "D"), "Wq": ("D", "D"), "bq": ("D",), "Wk": ("D", "D"), "bk": ("D",),
           "Wv": ("D", "D"), "bv": ("D",), "Wo": ("D", "D"), "bo": ("D",)}


def head_slices(D, heads):
    dh = D // heads
    return [slice(h * dh, (h + 1) * dh) for h in range(heads)]


def _heads_ok(dims, heads=2):
    return None if dims["D"] % heads == 0 else f"D = {dims['D']} is not a multiple of {heads} heads"


@op(inputs=WEIGHTS, output=("m", "D"), params={"heads": Param(2, symbolic=False, doc="number of heads")},
    nodes={"q_proj": linear, "k_proj": linear, "v_proj": linear, "attn": attention, "o_proj": linear},
    proofs=("monolithic", "compositional"),
    dims=[{"m": 2, "D": 2}, {"m": 2, "D": 4}], large_dims=[{"m": 3, "D": 4}],
    check_dims={"m": 3, "D": 4}, constraints=_heads_ok)
def mhsa(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, nodes):
    Q, K, V = nodes.q_proj(X, Wq, bq), nodes.k_proj(X, Wk, bk), nodes.v_proj(X, Wv, bv)
    A = np.concatenate([nodes.attn(Q[:, s], K[:, s], V[:, s]) for s in head_slices(X.shape[1], heads)], -1)
    return nodes.o_proj(A, Wo, bo)


@mhsa.defvjp
def mhsa_vjp(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes):
    Q, K, V = nodes.q_proj(X, Wq, bq), nodes.k_proj(X, Wk, bk), nodes.v_proj(X, Wv, bv)
    slices = head_slices(X.shape[1], heads)
    A = np.concatenate([nodes.attn(Q[:, s], K[:, s], V[:, s]) for s in slices], -1)
    dA, dWo, dbo = nodes.o_proj.vjp(A, Wo, bo, dy)
    per_head = [nodes.attn.vjp(Q[:, s], K[:, s], V[:, s], dA[:, s]) for s in slices]
    dQ, dK, dV = (np.concatenate([g[i] for g in per_head], -1) for i in range(3))
    dXq, dWq, dbq = nodes.q_proj.vjp(X, Wq, bq, dQ)
    dXk, dWk, dbk = nodes.k_proj.vjp(X, Wk, bk, dK)
    dXv, dWv, dbv = nodes.v_proj.vjp(X, Wv, bv, dV)
    return dXq + dXk + dXv, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo
