"""Grouped-query attention (GQA; MQA is hk = 1): hk key/value heads, each shared by a group of g query
heads, as PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)`` computes it.

Q is hk x g x mq x d (PyTorch's hq = hk * g query heads, query head h = k g + r reading key/value head
k = h // g: ``Q.reshape(hk, g, mq, d)`` of PyTorch's hq x mq x d), K is hk x mk x d, V is hk x mk x dv.
Per query head, the attention of specs/sdpa.py (c = scale / sqrt(d), masked logits excluded):

    O[k, r] = attention(Q[k, r], K[k], V[k])
    dQ[k, r] = its dQ,   dK[k] = sum_r (its dK),   dV[k] = sum_r (its dV)
A key/value head feeds g query heads, so its cotangent is the sum over its group: the fan-out of K and
V in the forward is a sum in the backward. ``gqa_causal`` is the decoder's: top-left causal (PyTorch's
is_causal), query i sees keys j <= i.
"""
import numpy as np

from vjpcert.core.registry import op
from vjpcert.specs.sdpa import SCALE, attend, attend_vjp, visible

SHAPES = dict(inputs={"Q": ("hk", "g", "mq", "d"), "K": ("hk", "mk", "d"), "V": ("hk", "mk", "dv")},
              output=("hk", "g", "mq", "dv"), params={"scale": SCALE},
              dims=[{"hk": 1, "g": 2, "mq": 2, "mk": 3, "d": 1, "dv": 1},
                    {"hk": 2, "g": 2, "mq": 2, "mk": 2, "d": 2, "dv": 1}],
              large_dims=[{"hk": 2, "g": 3, "mq": 3, "mk": 4, "d": 2, "dv": 2}],
              check_dims={"hk": 2, "g": 2, "mq": 3, "mk": 3, "d": 2, "dv": 2})


def shared(K):
    """A key/value head broadcast to its group of query heads (hk x 1 x mk x d)."""
    return K[:, None]


def gqa_attend(B, Q, K, V, scale, mask):
    return attend(B, Q, shared(K), shared(V), scale, mask)


def gqa_attend_vjp(B, Q, K, V, scale, mask, dy):
    dQ, dK, dV = attend_vjp(B, Q, shared(K), shared(V), scale, mask, dy)
    return dQ, dK.sum(1), dV.sum(1)              # the group's query heads all read K[k], V[k]


@op(**SHAPES)
def gqa(B, Q, K, V, scale):
    return gqa_attend(B, Q, K, V, scale, visible(Q.shape[2], K.shape[1]))


@gqa.defvjp
def gqa_vjp(B, Q, K, V, scale, dy):
    return gqa_attend_vjp(B, Q, K, V, scale, visible(Q.shape[2], K.shape[1]), dy)


@op(**SHAPES)
def gqa_causal(B, Q, K, V, scale):
    return gqa_attend(B, Q, K, V, scale, visible(Q.shape[2], K.shape[1], "top_left"))


@gqa_causal.defvjp
def gqa_causal_vjp(B, Q, K, V, scale, dy):
    return gqa_attend_vjp(B, Q, K, V, scale, visible(Q.shape[2], K.shape[1], "top_left"), dy)


# ------------------------------------------------------------------ laws: GQA is MHSA with repeated K/V
def _as_mha(Q, K, V, dy=None):
    """PyTorch's layout with the key/value heads repeated (``repeat_interleave(g, dim=0)``): plain
    multi-head attention over hq = hk g heads."""
    hk, g = Q.shape[0], Q.shape[1]
    out = [Q.reshape(hk * g, *Q.shape[2:]), np.repeat(K, g, axis=0), np.repeat(V, g, axis=0)]
    return out if dy is None else [*out, dy.reshape(hk * g, *dy.shape[2:])]


def _laws(o, causal):
    def mask(Q, K):
        return visible(Q.shape[2], K.shape[1], causal)

    @o.law(name="equals_mha_with_repeated_kv")
    def _forward(B, Q, K, V, scale, forward):
        """O equals multi-head attention whose key/value heads are repeated g times."""
        Qm, Km, Vm = _as_mha(Q, K, V)
        return forward(Q, K, V), attend(B, Qm, Km, Vm, scale, mask(Q, K)).reshape(forward(Q, K, V).shape)

    @o.law(name="shared_head_cotangents_are_group_sums")
    def _backward(B, Q, K, V, scale, dy, backward):
        """dQ is the repeated-heads MHA's dQ; dK[k], dV[k] are the sums of its dK, dV over the g query
        heads of group k."""
        dQ, dK, dV = backward(Q, K, V, dy)
        Qm, Km, Vm, dym = _as_mha(Q, K, V, dy)
        mQ, mK, mV = attend_vjp(B, Qm, Km, Vm, scale, mask(Q, K), dym)
        hk, g = Q.shape[0], Q.shape[1]
        return (np.concatenate([dQ.ravel(), dK.ravel(), dV.ravel()]),
                np.concatenate([mQ.ravel(), mK.reshape(hk, g, *mK.shape[1:]).sum(1).ravel(),
                                mV.reshape(hk, g, *mV.shape[1:]).sum(1).ravel()]))


_laws(gqa, None)
_laws(gqa_causal, "top_left")

# Proved for every hk, g, mq, mk, d, dv: the statements are derived from the code above
# (symbolic.every_size.shape_trace). The laws use np.repeat and a reshape that merges two symbolic axes (PyTorch's
# head layout), which the trace does not follow: they are proved at the dims of the ladder.
gqa.every_size("vjp[Q]", "vjp[K]", "vjp[V]")
gqa_causal.every_size("vjp[Q]", "vjp[K]", "vjp[V]")
