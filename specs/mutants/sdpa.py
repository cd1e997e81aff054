"""Wrong backwards (and forwards) of PyTorch-style attention: the mask alignment, padding, the scale."""
import numpy as np

from vjpcert.specs.sdpa import attend, attend_vjp, coefficient, sdpa, sdpa_causal, sdpa_causal_bottom_right, visible


@sdpa_causal_bottom_right.mutant("bottom_right_mask_applied_top_left",
                                 kills=["vjp[Q]", "vjp[K]", "vjp[V]"])
def _(B, Q, K, V, scale, dy):
    """The KV-cache (bottom-right) mask replaced by PyTorch's is_causal (top-left) one in the backward:
    the two agree when mq = mk, so only a rectangle tells them apart."""
    return attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "top_left"), dy)


@sdpa_causal_bottom_right.mutant("bottom_right_forward_applied_top_left", replaces="forward",
                                 kills=["vjp[Q]", "vjp[K]", "vjp[V]", "last_query_sees_every_key"])
def _(B, Q, K, V, scale):
    """The forward aligns the mask top-left: the newest query no longer sees the whole cache."""
    return attend(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "top_left"))


@sdpa_causal.mutant("top_left_mask_applied_bottom_right", kills=["vjp[Q]", "vjp[K]", "vjp[V]"])
def _(B, Q, K, V, scale, dy):
    """The converse: is_causal's backward with the decoding alignment."""
    return attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "bottom_right"), dy)


@sdpa_causal.mutant("first_query_sees_all_keys", replaces="forward",
                    kills=["vjp[Q]", "vjp[K]", "vjp[V]", "first_query_sees_only_the_first_key"])
def _(B, Q, K, V, scale):
    """The forward without its mask (the backward keeps it)."""
    return attend(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0]))


@sdpa.mutant("padding_ignored_in_backward", kills=["vjp[Q]", "vjp[K]", "vjp[V]", "padded_keys_are_inert"])
def _(B, Q, K, V, scale, pad, dy):
    """The backward recomputes P over every key, padded ones included."""
    return attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0]), dy)


@sdpa.mutant("dQ_scale_is_one_over_sqrt_d", kills=["vjp[Q]"])
def _(B, Q, K, V, scale, pad, dy):
    """dQ multiplied by PyTorch's default 1/sqrt(d) instead of the scale in use: right at scale = 1
    only, so only a proof for every scale (a symbol) catches it."""
    dQ, dK, dV = attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], pad=pad), dy)
    return dQ / scale, dK, dV


def _common(o, mask_of, dv_kills=()):
    """Mutants every op of the family gets, with its own mask."""
    def mask(Q, K, pad=1):
        return mask_of(Q.shape[0], K.shape[0], pad)

    @o.mutant("dV_uses_logits_not_probabilities", kills=["vjp[V]", "dV_rows_follow_P", *dv_kills])
    def _(B, Q, K, V, scale, dy):
        """dV = S^T dO with the scaled logits S instead of the probabilities P."""
        dQ, dK, _ = attend_vjp(B, Q, K, V, scale, mask(Q, K), dy)
        return dQ, dK, (coefficient(B, Q.shape[-1], scale) * (Q @ K.T)).T @ dy

    @o.mutant("denominator_unshifted", replaces="forward", kills=["max_shift_free"])
    def _(B, Q, K, V, scale):
        """The row maximum subtracted in the numerator only: right at shift 0 (every exact backend),
        wrong wherever floats shift."""
        m = mask(Q, K)
        S = coefficient(B, Q.shape[-1], scale) * (Q @ K.T)
        e = np.where(m, B.exp(S - B.max_shift(S, m)), B.c(0))
        Z = np.where(m, B.exp(S), B.c(0)).sum(-1, keepdims=True)
        return (e / np.where(m.any(-1, keepdims=True), Z, B.c(1))) @ V


_common(sdpa, lambda mq, mk, pad: visible(mq, mk, pad=pad), dv_kills=["padded_keys_are_inert"])
_common(sdpa_causal, lambda mq, mk, pad: visible(mq, mk, "top_left"))
_common(sdpa_causal_bottom_right, lambda mq, mk, pad: visible(mq, mk, "bottom_right"))
