"""A Llama-style decoder block over tokens X (m x D): pre-RMSNorm, causal grouped-query attention with
rotary positions, SwiGLU MLP, no biases.

    N1 = RMSNorm(X)
    Q = N1 Wq^T,  K = N1 Wk^T,  V = N1 Wv^T                        (heads of width dh = D / heads;
    Q, K rotated per head by RoPE (half-split layout) at pos          kv_heads key/value heads, each
    O = causal GQA(Q, K, V),  Y = X + O Wo^T                          shared by heads / kv_heads)
    Z = Y + SwiGLU-MLP(RMSNorm(Y))
The backward runs the residual fan-ins by hand: dY = dZ + RMSNorm^T(MLP^T(dZ)),
dX = dY + RMSNorm^T(Wq-, Wk-, Wv-backwards of RoPE^T / GQA^T (dY Wo)), the three projections' input
cotangents summed. The composite's own code is linear wiring: head layouts are reshapes and transposes,
RoPE runs once per projection on all heads (rows m * heads, positions repeated per head), and the
bias-free projections are linear nodes called with a constant zero bias.
Certified compositionally: the wiring proved at the stated dims, each node on its every-size proof.
"""
from fractions import Fraction

import numpy as np

from vjpcert.core.registry import Param, op
from vjpcert.specs.gqa import gqa_causal
from vjpcert.specs.linear import linear
from vjpcert.specs.rmsnorm import rmsnorm
from vjpcert.specs.rope import rope_half
from vjpcert.specs.swiglu_mlp import no_bias, swiglu_mlp

INPUTS = {"X": ("m", "D"), "g1": ("D",), "Wq": ("D", "D"), "Wk": ("Dkv", "D"), "Wv": ("Dkv", "D"),
          "Wo": ("D", "D"), "g2": ("D",), "Wg": ("F", "D"), "Wu": ("F", "D"), "Wd": ("D", "F")}
HEADS, KV_HEADS = 4, 2


def _heads_ok(dims, heads=HEADS, kv_heads=KV_HEADS):
    D, Dkv = dims["D"], dims["Dkv"]
    if D % (2 * heads):
        return f"D = {D} is not {heads} heads of an even width (RoPE)"
    if Dkv * heads != D * kv_heads:
        return f"Dkv = {Dkv} is not {kv_heads} key/value heads of width D / {heads}"
    return None


def rows(A, heads):
    """(m, heads * dh) -> (m * heads, dh): one row per (token, head), for the RoPE node."""
    return A.reshape(A.shape[0] * heads, A.shape[1] // heads)


def query_heads(R, m, kv_heads):
    """(m * heads, dh) -> (kv_heads, group, m, dh): GQA's layout (query head h reads kv head h // group)."""
    return R.reshape(m, kv_heads, -1, R.shape[-1]).transpose(1, 2, 0, 3)


def kv_heads_of(R, m):
    """(m * kv_heads, dh) -> (kv_heads, m, dh)."""
    return R.reshape(m, -1, R.shape[-1]).transpose(1, 0, 2)


def merge_query_heads(H):
    """(kv_heads, group, m, dh) -> (m * heads, dh), the inverse of query_heads."""
    return H.transpose(2, 0, 1, 3).reshape(-1, H.shape[-1])


def merge_kv_heads(H):
    """(kv_heads, m, dh) -> (m * kv_heads, dh), the inverse of kv_heads_of."""
    return H.transpose(1, 0, 2).reshape(-1, H.shape[-1])


def attention_inputs(B, X, g1, Wq, Wk, Wv, pos, heads, kv_heads, eps, nodes):
    """Everything the forward and the backward both recompute up to the attention node."""
    m = X.shape[0]
    N1 = nodes.attn_norm(X, g1, eps=eps)
    Q, K, V = (nodes.q_proj(N1, Wq, no_bias(B, Wq)), nodes.k_proj(N1, Wk, no_bias(B, Wk)),
               nodes.v_proj(N1, Wv, no_bias(B, Wv)))
    pq, pk = np.repeat(pos, heads), np.repeat(pos, kv_heads)       # a token's position, for each head
    Qr, Kr = nodes.rope_q(rows(Q, heads), pq), nodes.rope_k(rows(K, kv_heads), pk)
    return N1, Q, K, V, pq, pk, query_heads(Qr, m, kv_heads), kv_heads_of(Kr, m), \
        kv_heads_of(rows(V, kv_heads), m)


@op(inputs=INPUTS, nondiff={"pos": ("m",)}, output=("m", "D"),
    params={"heads": Param(HEADS, symbolic=False, doc="query heads"),
            "kv_heads": Param(KV_HEADS, symbolic=False, doc="key/value heads, each shared by heads / kv_heads"),
            "eps": Param(Fraction(1, 10**6), positive=True, doc="RMSNorm's eps")},
    nodes={"attn_norm": rmsnorm, "q_proj": linear, "k_proj": linear, "v_proj": linear,
           "rope_q": rope_half, "rope_k": rope_half, "attn": gqa_causal, "o_proj": linear,
           "mlp_norm": rmsnorm, "mlp": swiglu_mlp},
    proofs=("compositional",),
    dims=[{"m": 2, "D": 8, "Dkv": 4, "F": 3}], large_dims=[{"m": 3, "D": 16, "Dkv": 8, "F": 6}],
    compositional_dims=[{"m": 16, "D": 64, "Dkv": 32, "F": 176}],
    # a small production Llama-style block: 512 tokens, width 512, 8 query heads of 64, 2 KV heads
    modular_dims=[{"m": 512, "D": 512, "Dkv": 128, "F": 1376, "heads": 8, "kv_heads": 2}],
    check_dims={"m": 3, "D": 8, "Dkv": 4, "F": 6}, constraints=_heads_ok,
    sample={"pos": lambda rng, shape: rng.integers(0, 4096, shape).astype(float)})
def llama_block(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, nodes):
    *_, Qh, Kh, Vh = attention_inputs(B, X, g1, Wq, Wk, Wv, pos, heads, kv_heads, eps, nodes)
    A = merge_query_heads(nodes.attn(Qh, Kh, Vh)).reshape(X.shape)
    Y = X + nodes.o_proj(A, Wo, no_bias(B, Wo))
    return Y + nodes.mlp(nodes.mlp_norm(Y, g2, eps=eps), Wg, Wu, Wd)


@llama_block.defvjp
def llama_block_vjp(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes):
    m = X.shape[0]
    N1, Q, K, V, pq, pk, Qh, Kh, Vh = attention_inputs(B, X, g1, Wq, Wk, Wv, pos, heads, kv_heads, eps, nodes)
    A = merge_query_heads(nodes.attn(Qh, Kh, Vh)).reshape(X.shape)
    Y = X + nodes.o_proj(A, Wo, no_bias(B, Wo))
    N2 = nodes.mlp_norm(Y, g2, eps=eps)
    dN2, dWg, dWu, dWd = nodes.mlp.vjp(N2, Wg, Wu, Wd, dy)
    dYb, dg2 = nodes.mlp_norm.vjp(Y, g2, dN2, eps=eps)
    dY = dy + dYb                                                     # residual fan-in
    dA, dWo, _ = nodes.o_proj.vjp(A, Wo, no_bias(B, Wo), dY)
    dQh, dKh, dVh = nodes.attn.vjp(Qh, Kh, Vh, query_heads(rows(dA, heads), m, kv_heads))
    (dQr,) = nodes.rope_q.vjp(rows(Q, heads), pq, merge_query_heads(dQh))
    (dKr,) = nodes.rope_k.vjp(rows(K, kv_heads), pk, merge_kv_heads(dKh))
    dV = merge_kv_heads(dVh).reshape(V.shape)
    dXq, dWq, _ = nodes.q_proj.vjp(N1, Wq, no_bias(B, Wq), dQr.reshape(Q.shape))
    dXk, dWk, _ = nodes.k_proj.vjp(N1, Wk, no_bias(B, Wk), dKr.reshape(K.shape))
    dXv, dWv, _ = nodes.v_proj.vjp(N1, Wv, no_bias(B, Wv), dV)
    dXb, dg1 = nodes.attn_norm.vjp(X, g1, dXq + dXk + dXv, eps=eps)   # the three projections' fan-in
    return dY + dXb, dg1, dWq, dWk, dWv, dWo, dg2, dWg, dWu, dWd
