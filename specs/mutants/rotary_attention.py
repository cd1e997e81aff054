"""Wrong rotary-attention backwards: a node's backward at the wrong position, a skipped rotation."""
from vjpcert.specs.rotary_attention import rotary_attention


@rotary_attention.mutant("key_rotation_backward_at_next_position", kills=["vjp[K]"])
def _(B, Q, K, V, pos, dy, nodes):
    """RoPE's backward for K run at pos + 1 (an off-by-one in a KV-cache offset): the node is called
    with another non-differentiable input than its forward used, which the wiring proof names."""
    Qr, Kr = nodes.rope_q(Q, pos), nodes.rope_k(K, pos)
    dQr, dKr, dV = nodes.attn.vjp(Qr, Kr, V, dy)
    (dQ,) = nodes.rope_q.vjp(Q, pos, dQr)
    (dK,) = nodes.rope_k.vjp(K, pos + 1, dKr)
    return dQ, dK, dV


@rotary_attention.mutant("query_rotation_backward_skipped", kills=["vjp[Q]"])
def _(B, Q, K, V, pos, dy, nodes):
    Qr, Kr = nodes.rope_q(Q, pos), nodes.rope_k(K, pos)
    dQr, dKr, dV = nodes.attn.vjp(Qr, Kr, V, dy)
    (dK,) = nodes.rope_k.vjp(K, pos, dKr)
    return dQr, dK, dV


@rotary_attention.mutant("attention_backward_at_unrotated_inputs", kills=["vjp[Q]", "vjp[K]", "vjp[V]"])
def _(B, Q, K, V, pos, dy, nodes):
    """The attention backward evaluated at (Q, K, V) instead of (RoPE(Q), RoPE(K), V)."""
    dQr, dKr, dV = nodes.attn.vjp(Q, K, V, dy)
    (dQ,) = nodes.rope_q.vjp(Q, pos, dQr)
    (dK,) = nodes.rope_k.vjp(K, pos, dKr)
    return dQ, dK, dV
