"""Attention with rotary position embedding on queries and keys (one head, Llama's layout):

    Qr = RoPE(Q, pos),  Kr = RoPE(K, pos),  O = attention(Qr, Kr, V)
    dQr, dKr, dV = attention backward at (Qr, Kr, V);  dQ = RoPE^T(dQr, pos),  dK = RoPE^T(dKr, pos)
Positions are not differentiated. Proved compositionally: the wiring (every node call keyed by all of
its arguments, positions included) and each node's every-size proof.
"""

from vjpcert.core.registry import op
from vjpcert.specs.attention import attention
from vjpcert.specs.rope import rope_half


def _even(dims):
    return None if dims["d"] % 2 == 0 else "RoPE needs an even head width d"


@op(inputs={"Q": ("m", "d"), "K": ("m", "d"), "V": ("m", "d")}, nondiff={"pos": ("m",)}, output=("m", "d"),
    nodes={"rope_q": rope_half, "rope_k": rope_half, "attn": attention}, proofs=("compositional",),
    dims=[{"m": 2, "d": 2}, {"m": 3, "d": 4}], check_dims={"m": 4, "d": 4}, constraints=_even,
    sample={"pos": lambda rng, shape: rng.integers(0, 4096, shape).astype(float)})
def rotary_attention(B, Q, K, V, pos, nodes):
    return nodes.attn(nodes.rope_q(Q, pos), nodes.rope_k(K, pos), V)


@rotary_attention.defvjp
def rotary_attention_vjp(B, Q, K, V, pos, dy, nodes):
    Qr, Kr = nodes.rope_q(Q, pos), nodes.rope_k(K, pos)
    dQr, dKr, dV = nodes.attn.vjp(Qr, Kr, V, dy)
    (dQ,) = nodes.rope_q.vjp(Q, pos, dQr)
    (dK,) = nodes.rope_k.vjp(K, pos, dKr)
    return dQ, dK, dV


