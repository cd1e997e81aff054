"""Wrong cross-entropy backwards and forwards."""
from vjpcert.specs.cross_entropy import cross_entropy
from vjpcert.specs.softmax import softmax


@cross_entropy.mutant("ignores_ignore_index", kills=["vjp[x]", "ignored_row_gets_no_gradient"])
def _(B, x, t, w, dy):
    """Every row gets the gradient of a kept row: the per-row weight (0 for ignore_index) is dropped,
    while the mean still divides by the number of kept rows."""
    scale = dy / w.sum(-1, keepdims=True)
    return (scale[:, None] * (softmax(B, x) * t.sum(-1, keepdims=True) - t),)


@cross_entropy.mutant("softmax_minus_target", kills=["vjp[x]", "cotangent_sums_to_zero"])
def _(B, x, t, w, dy):
    """softmax - t: right only for targets that sum to 1 (one-hot, or a normalised smoothing)."""
    scale = dy * w / w.sum(-1, keepdims=True)
    return (scale[:, None] * (softmax(B, x) - t),)


@cross_entropy.mutant("sum_instead_of_mean", kills=["vjp[x]"])
def _(B, x, t, w, dy):
    """The gradient of reduction="sum" under a mean forward: not divided by the kept rows."""
    return ((dy * w)[:, None] * (softmax(B, x) * t.sum(-1, keepdims=True) - t),)


@cross_entropy.mutant("mean_over_all_rows", replaces="forward",
                      kills=["vjp[x]", "ignored_row_leaves_the_loss"])
def _(B, x, t, w):
    """The mean divides by every row, ignored ones included."""
    m = B.max_shift(x)
    lse = m + B.log(B.exp(x - m).sum(-1, keepdims=True))
    return (w * (t * (lse - x)).sum(-1)).sum(-1, keepdims=True) / (w * 0 + 1).sum(-1, keepdims=True)


@cross_entropy.mutant("targets_renormalised", replaces="forward",
                      kills=["vjp[x]", "label_smoothing_mixes_losses"])
def _(B, x, t, w):
    """Targets divided by their row sum inside the loss: no longer affine in the target, so a smoothed
    label is not the mix of the two losses."""
    m = B.max_shift(x)
    lse = m + B.log(B.exp(x - m).sum(-1, keepdims=True))
    nll = (t / t.sum(-1, keepdims=True) * (lse - x)).sum(-1)
    return (w * nll).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)


@cross_entropy.mutant("lse_forgets_shift", replaces="forward", kills=["max_shift_free"])
def _(B, x, t, w):
    """log sum exp(x - m) without adding m back: right at m = 0 (exact arithmetic), off by the row
    maximum in floats."""
    m = B.max_shift(x)
    lse = B.log(B.exp(x - m).sum(-1, keepdims=True))
    return (w * (t * (lse - x)).sum(-1)).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)
