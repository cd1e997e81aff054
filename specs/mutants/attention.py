"""Wrong attention backwards: missing scale, transposes, softmax factor, causal mask."""
import numpy as np

from vjpcert.specs.attention import attention, attention_causal, causal_mask, masked_softmax, scale


def _back(B, Q, K, V, dy, mask, *, dk_scale=True, dv_transposed=False, s_factor=True, back_mask=None):
    c = scale(B, Q.shape[-1])
    P = masked_softmax(B, c * (Q @ K.T), mask if back_mask is None else back_mask)
    dP = dy @ V.T
    dS = P * (dP - (P * dP).sum(-1, keepdims=True)) if s_factor else dP - (P * dP).sum(-1, keepdims=True)
    dV = (P @ dy) if dv_transposed else P.T @ dy
    return c * (dS @ K), (c if dk_scale else 1) * (dS.T @ Q), dV


def _full(Q, K):
    return np.ones((Q.shape[0], K.shape[0]), dtype=bool)


@attention.mutant("dK_missing_scale", kills=["vjp[K]"])
def _(B, Q, K, V, dy):
    return _back(B, Q, K, V, dy, _full(Q, K), dk_scale=False)


@attention.mutant("transposed_dV", kills=["vjp[V]", "dV_rows_follow_P"])
def _(B, Q, K, V, dy):
    """P dO instead of P^T dO: same shape when Q and K have the same length."""
    return _back(B, Q, K, V, dy, _full(Q, K), dv_transposed=True)


@attention.mutant("softmax_jacobian_missing_P", kills=["vjp[Q]", "vjp[K]"])
def _(B, Q, K, V, dy):
    return _back(B, Q, K, V, dy, _full(Q, K), s_factor=False)


@attention_causal.mutant("mask_in_forward_only", kills=["vjp[Q]", "vjp[K]", "vjp[V]",
                                                        "fully_masked_row_is_zero"])
def _(B, Q, K, V, offset, dy):
    """The backward recomputes P without the causal mask."""
    return _back(B, Q, K, V, dy, causal_mask(Q, K, offset), back_mask=_full(Q, K))


@attention_causal.mutant("mask_not_excluded", replaces="forward",
                         kills=["vjp[Q]", "vjp[K]", "vjp[V]", "first_row_sees_only_itself",
                                "fully_masked_row_is_zero"])
def _(B, Q, K, V, offset):
    """Masked logits set to exp(-8) instead of excluded: they still take probability mass."""
    m = causal_mask(Q, K, offset)
    e = np.where(m, B.exp(scale(B, Q.shape[-1]) * (Q @ K.T)), B.exp(B.c(-8)))
    return (e / e.sum(-1, keepdims=True)) @ V


@attention.mutant("dV_uses_logits_not_probabilities", kills=["vjp[V]", "dV_rows_follow_P"])
def _(B, Q, K, V, dy):
    """dV = S^T dO with the scaled logits S instead of the probabilities P."""
    dQ, dK, _ = _back(B, Q, K, V, dy, _full(Q, K))
    S = scale(B, Q.shape[-1]) * (Q @ K.T)
    return dQ, dK, S.T @ dy


def _unshifted_denominator(B, Q, K, V, mask):
    """Masked softmax with the row maximum subtracted in the numerator only."""
    S = scale(B, Q.shape[-1]) * (Q @ K.T)
    e = np.where(mask, B.exp(S - B.max_shift(S, mask)), B.c(0))
    Z = np.where(mask, B.exp(S), B.c(0)).sum(-1, keepdims=True)
    return (e / np.where(mask.any(-1, keepdims=True), Z, B.c(1))) @ V


@attention.mutant("denominator_unshifted", replaces="forward", kills=["max_shift_free"])
def _(B, Q, K, V):
    return _unshifted_denominator(B, Q, K, V, _full(Q, K))


@attention_causal.mutant("denominator_unshifted", replaces="forward", kills=["max_shift_free"])
def _(B, Q, K, V, offset):
    return _unshifted_denominator(B, Q, K, V, causal_mask(Q, K, offset))
