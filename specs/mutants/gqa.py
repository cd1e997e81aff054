"""Wrong GQA backwards: the shared key/value heads' cotangents."""
from vjpcert.specs.gqa import gqa, gqa_causal, shared
import numpy as np

from vjpcert.specs.sdpa import attend, attend_vjp, coefficient, keys_t, visible

KILLS = ["vjp[K]", "vjp[V]", "shared_head_cotangents_are_group_sums"]


def _mutants(o, causal):
    def per_head(B, Q, K, V, scale, dy):
        return attend_vjp(B, Q, shared(K), shared(V), scale, visible(Q.shape[2], K.shape[1], causal), dy)

    @o.mutant("shared_heads_not_summed", kills=KILLS)
    def _(B, Q, K, V, scale, dy):
        """dK, dV of a key/value head taken from the first query head of its group only: the backward
        forgets that g query heads read it (right for MHSA, g = 1)."""
        dQ, dK, dV = per_head(B, Q, K, V, scale, dy)
        return dQ, dK[:, 0], dV[:, 0]

    @o.mutant("shared_heads_averaged", kills=KILLS)
    def _(B, Q, K, V, scale, dy):
        """The group's cotangents averaged instead of summed (a mean where the fan-out needs a sum)."""
        dQ, dK, dV = per_head(B, Q, K, V, scale, dy)
        return dQ, dK.mean(1), dV.mean(1)


_mutants(gqa, None)
_mutants(gqa_causal, "top_left")


def _more(o, causal):
    def mask(Q, K):
        return visible(Q.shape[2], K.shape[1], causal)

    @o.mutant("dQ_reads_the_first_key_head", kills=["vjp[Q]", "shared_head_cotangents_are_group_sums"])
    def _(B, Q, K, V, scale, dy):
        """Every query head's dQ computed against key/value head 0 (a broadcast over the wrong axis)."""
        dQ, dK, dV = attend_vjp(B, Q, shared(K), shared(V), scale, mask(Q, K), dy)
        dQ0, _, _ = attend_vjp(B, Q, shared(K[:1]), shared(V[:1]), scale, mask(Q, K), dy)
        return dQ0, dK.sum(1), dV.sum(1)

    @o.mutant("query_heads_read_the_next_group", replaces="forward",
              kills=["vjp[Q]", "vjp[K]", "vjp[V]", "equals_mha_with_repeated_kv"])
    def _(B, Q, K, V, scale):
        """Query head (k, r) reads key/value head k + 1 (mod hk): PyTorch's h // g mapping broken."""
        Kr, Vr = np.concatenate([K[1:], K[:1]]), np.concatenate([V[1:], V[:1]])
        return attend(B, Q, shared(Kr), shared(Vr), scale, mask(Q, K))

    @o.mutant("denominator_unshifted", replaces="forward", kills=["max_shift_free"])
    def _(B, Q, K, V, scale):
        m = mask(Q, K)
        S = coefficient(B, Q.shape[-1], scale) * (Q @ keys_t(shared(K)))
        e = np.where(m, B.exp(S - B.max_shift(S, m)), B.c(0))
        Z = np.where(m, B.exp(S), B.c(0)).sum(-1, keepdims=True)
        return (e / np.where(m.any(-1, keepdims=True), Z, B.c(1))) @ shared(V)


_more(gqa, None)
_more(gqa_causal, "top_left")
