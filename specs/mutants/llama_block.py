"""Wrong Llama-block backwards: residuals, RoPE's transpose, the MLP's point."""
from vjpcert.specs.llama_block import (attention_inputs, kv_heads_of, llama_block, merge_kv_heads,
                                       merge_query_heads, query_heads, rows)
from vjpcert.specs.swiglu_mlp import no_bias


def _back(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes,
          *, residual2=True, mlp_at_n1=False, key_rope_transposed=True):
    m = X.shape[0]
    N1, Q, K, V, pq, pk, Qh, Kh, Vh = attention_inputs(B, X, g1, Wq, Wk, Wv, pos, heads, kv_heads, eps, nodes)
    A = merge_query_heads(nodes.attn(Qh, Kh, Vh)).reshape(X.shape)
    Y = X + nodes.o_proj(A, Wo, no_bias(B, Wo))
    N2 = nodes.mlp_norm(Y, g2, eps=eps)
    dN2, dWg, dWu, dWd = nodes.mlp.vjp(N1 if mlp_at_n1 else N2, Wg, Wu, Wd, dy)
    dYb, dg2 = nodes.mlp_norm.vjp(Y, g2, dN2, eps=eps)
    dY = dy + dYb if residual2 else dYb
    dA, dWo, _ = nodes.o_proj.vjp(A, Wo, no_bias(B, Wo), dY)
    dQh, dKh, dVh = nodes.attn.vjp(Qh, Kh, Vh, query_heads(rows(dA, heads), m, kv_heads))
    (dQr,) = nodes.rope_q.vjp(rows(Q, heads), pq, merge_query_heads(dQh))
    if key_rope_transposed:
        (dKr,) = nodes.rope_k.vjp(rows(K, kv_heads), pk, merge_kv_heads(dKh))
    else:
        dKr = merge_kv_heads(dKh)
    dXq, dWq, _ = nodes.q_proj.vjp(N1, Wq, no_bias(B, Wq), dQr.reshape(Q.shape))
    dXk, dWk, _ = nodes.k_proj.vjp(N1, Wk, no_bias(B, Wk), dKr.reshape(K.shape))
    dXv, dWv, _ = nodes.v_proj.vjp(N1, Wv, no_bias(B, Wv), merge_kv_heads(dVh).reshape(V.shape))
    dXb, dg1 = nodes.attn_norm.vjp(X, g1, dXq + dXk + dXv, eps=eps)
    return dY + dXb, dg1, dWq, dWk, dWv, dWo, dg2, dWg, dWu, dWd


UPSTREAM = ["vjp[X]", "vjp[g1]", "vjp[Wq]", "vjp[Wk]", "vjp[Wv]", "vjp[Wo]"]


@llama_block.mutant("second_residual_dropped", kills=UPSTREAM)
def _(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes):
    """dY = MLP-branch cotangent only: the residual's identity path forgotten."""
    return _back(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes, residual2=False)


@llama_block.mutant("mlp_backward_at_attention_input",
                    kills=UPSTREAM + ["vjp[g2]", "vjp[Wg]", "vjp[Wu]", "vjp[Wd]"])
def _(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes):
    """The MLP's backward fed the first RMSNorm's output instead of the second's."""
    return _back(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes, mlp_at_n1=True)


@llama_block.mutant("key_rope_not_transposed", kills=["vjp[X]", "vjp[g1]", "vjp[Wk]"])
def _(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes):
    """The keys' cotangent leaves the attention still rotated: RoPE^T skipped for K."""
    return _back(B, X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd, pos, heads, kv_heads, eps, dy, nodes,
                 key_rope_transposed=False)
