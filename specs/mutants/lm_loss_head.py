"""Wrong loss-head backwards: the final norm's transpose, the projection's point, ignore_index."""
from vjpcert.specs.lm_loss_head import lm_loss_head
from vjpcert.specs.swiglu_mlp import no_bias


def _parts(B, H, g, W, t, w, eps, dy, nodes):
    N = nodes.norm(H, g, eps=eps)
    logits = nodes.lm_head(N, W, no_bias(B, W))
    (dlogits,) = nodes.loss.vjp(logits, t, w, dy)
    return N, dlogits


@lm_loss_head.mutant("final_norm_transpose_skipped", kills=["vjp[H]"])
def _(B, H, g, W, t, w, eps, dy, nodes):
    """dH = dN: the RMSNorm's backward left out of the input's cotangent."""
    N, dlogits = _parts(B, H, g, W, t, w, eps, dy, nodes)
    dN, dW, _ = nodes.lm_head.vjp(N, W, no_bias(B, W), dlogits)
    _, dg = nodes.norm.vjp(H, g, dN, eps=eps)
    return dN, dg, dW


@lm_loss_head.mutant("head_weight_cotangent_at_unnormalised_input", kills=["vjp[W]"])
def _(B, H, g, W, t, w, eps, dy, nodes):
    """dW = dlogits^T H with the hidden states before the final norm."""
    N, dlogits = _parts(B, H, g, W, t, w, eps, dy, nodes)
    dN, _, _ = nodes.lm_head.vjp(N, W, no_bias(B, W), dlogits)
    _, dW, _ = nodes.lm_head.vjp(H, W, no_bias(B, W), dlogits)
    dH, dg = nodes.norm.vjp(H, g, dN, eps=eps)
    return dH, dg, dW


@lm_loss_head.mutant("norm_gain_cotangent_from_the_wrong_point", kills=["vjp[g]"])
def _(B, H, g, W, t, w, eps, dy, nodes):
    """The norm's gain cotangent taken from a backward at the logits' cotangent's point (dN)
    instead of at H."""
    N, dlogits = _parts(B, H, g, W, t, w, eps, dy, nodes)
    dN, dW, _ = nodes.lm_head.vjp(N, W, no_bias(B, W), dlogits)
    dH, _ = nodes.norm.vjp(H, g, dN, eps=eps)
    _, dg = nodes.norm.vjp(N, g, dN, eps=eps)
    return dH, dg, dW
