"""A GPT-2-style block over tokens X (m x D): pre-LayerNorm, causal multi-head attention with one fused
QKV projection (GPT-2's c_attn), a GELU-tanh MLP (c_fc, gelu_new, c_proj), biases everywhere.

    N1 = LN1(X),  [Q K V] = N1 Wqkv^T + bqkv,  O = causal MHA(Q, K, V),  Y = X + O Wo^T + bo
    Z = Y + gelu_tanh(LN2(Y) Wfc^T + bfc) Wpr^T + bpr
Multi-head attention is GQA with groups of one (kv_heads = heads). GPT-2's learned positions are added
to the token embeddings once, before the first block: they belong to the stack (specs/gpt2_stack.py),
not to a block. The backward runs the residual fan-ins and the fused projection by hand:
dQKV = [dQ dK dV]. Certified compositionally, each node on its every-size proof.
"""
from fractions import Fraction

import numpy as np

from vjpcert.core.registry import Param, op
from vjpcert.specs.gelu import gelu_tanh
from vjpcert.specs.gqa import gqa_causal
from vjpcert.specs.layernorm import layernorm
from vjpcert.specs.linear import linear

INPUTS = {"X": ("m", "D"), "g1": ("D",), "be1": ("D",), "Wqkv": ("3*D", "D"), "bqkv": ("3*D",),
          "Wo": ("D", "D"), "bo": ("D",), "g2": ("D",), "be2": ("D",),
          "Wfc": ("F", "D"), "bfc": ("F",), "Wpr": ("D", "F"), "bpr": ("D",)}
HEADS = 4


def _heads_ok(dims, heads=HEADS):
    return None if dims["D"] % heads == 0 else f"D = {dims['D']} is not a multiple of {heads} heads"


def split_heads(A, heads):
    """(m, heads * dh) -> (heads, 1, m, dh): GQA's layout with groups of one."""
    m, D = A.shape
    return A.reshape(m, heads, 1, D // heads).transpose(1, 2, 0, 3)


def kv_heads(A, heads):
    """(m, heads * dh) -> (heads, m, dh)."""
    m, D = A.shape
    return A.reshape(m, heads, D // heads).transpose(1, 0, 2)


def merge_heads(H):
    """(heads, 1, m, dh) or (heads, m, dh) -> (m, heads * dh)."""
    H = H.reshape(H.shape[0], H.shape[-2], H.shape[-1])
    return H.transpose(1, 0, 2).reshape(H.shape[1], -1)


def qkv(B, X, g1, be1, Wqkv, bqkv, heads, eps, nodes):
    D = X.shape[1]
    N1 = nodes.ln1(X, g1, be1, eps=eps)
    QKV = nodes.c_attn(N1, Wqkv, bqkv)
    return N1, split_heads(QKV[:, :D], heads), kv_heads(QKV[:, D:2 * D], heads), kv_heads(QKV[:, 2 * D:], heads)


GPT2 = dict(inputs=INPUTS, output=("m", "D"),
            params={"heads": Param(HEADS, symbolic=False, doc="attention heads"),
                    "eps": Param(Fraction(1, 10**5), positive=True, doc="LayerNorm's eps")},
            nodes={"ln1": layernorm, "c_attn": linear, "attn": gqa_causal, "attn_proj": linear,
                   "ln2": layernorm, "c_fc": linear, "act": gelu_tanh, "mlp_proj": linear},
            proofs=("compositional",),
            dims=[{"m": 2, "D": 4, "F": 3}], large_dims=[{"m": 3, "D": 8, "F": 6}],
            compositional_dims=[{"m": 16, "D": 64, "F": 256}],
            # GPT-2 small: the randomised exact test at production size (vjpcert prove --modular)
            modular_dims=[{"m": 1024, "D": 768, "F": 3072, "heads": 12}],
            check_dims={"m": 3, "D": 8, "F": 8}, constraints=_heads_ok)


@op(**GPT2)
def gpt2_block(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, nodes):
    _, Qh, Kh, Vh = qkv(B, X, g1, be1, Wqkv, bqkv, heads, eps, nodes)
    Y = X + nodes.attn_proj(merge_heads(nodes.attn(Qh, Kh, Vh)), Wo, bo)
    return Y + nodes.mlp_proj(nodes.act(nodes.c_fc(nodes.ln2(Y, g2, be2, eps=eps), Wfc, bfc)), Wpr, bpr)


@gpt2_block.defvjp
def gpt2_block_vjp(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes):
    N1, Qh, Kh, Vh = qkv(B, X, g1, be1, Wqkv, bqkv, heads, eps, nodes)
    A = merge_heads(nodes.attn(Qh, Kh, Vh))
    Y = X + nodes.attn_proj(A, Wo, bo)
    N2 = nodes.ln2(Y, g2, be2, eps=eps)
    H = nodes.c_fc(N2, Wfc, bfc)
    G = nodes.act(H)
    dG, dWpr, dbpr = nodes.mlp_proj.vjp(G, Wpr, bpr, dy)
    (dH,) = nodes.act.vjp(H, dG)
    dN2, dWfc, dbfc = nodes.c_fc.vjp(N2, Wfc, bfc, dH)
    dYb, dg2, dbe2 = nodes.ln2.vjp(Y, g2, be2, dN2, eps=eps)
    dY = dy + dYb                                                     # residual fan-in
    dA, dWo, dbo = nodes.attn_proj.vjp(A, Wo, bo, dY)
    dQh, dKh, dVh = nodes.attn.vjp(Qh, Kh, Vh, split_heads(dA, heads))
    dQKV = np.concatenate([merge_heads(dQh), merge_heads(dKh), merge_heads(dVh)], -1)   # the fused c_attn
    dN1, dWqkv, dbqkv = nodes.c_attn.vjp(N1, Wqkv, bqkv, dQKV)
    dXb, dg1, dbe1 = nodes.ln1.vjp(X, g1, be1, dN1, eps=eps)
    return dY + dXb, dg1, dbe1, dWqkv, dbqkv, dWo, dbo, dg2, dbe2, dWfc, dbfc, dWpr, dbpr
