"""Cross-entropy over logits, mean over weighted rows (PyTorch's and Liger's `reduction="mean"`).

    lse_r = log sum_i exp(x_ri)
    loss  = sum_r w_r sum_i t_ri (lse_r - x_ri) / sum_r w_r
    dx_ri = dy * w_r / W * (softmax(x_r)_i * sum_j t_rj - t_ri),      W = sum_r w_r

Labels are not compared, so the proof covers every labelling: the targets t are a real,
non-differentiated input (one-hot rows for hard labels; label smoothing eps is the soft target
(1 - eps) one_hot + eps / n), and so are the row weights w (ignore_index: weight 0; PyTorch's mean
divides by the number of rows not ignored, which is W for 0/1 weights). Harnesses turn integer labels
into (t, w). The loss is one number: the output has shape (1,).
"""
import numpy as np

from vjpcert.core.registry import op
from vjpcert.specs.softmax import softmax


def _sample_targets(rng, shape):
    """Rows of positive weights summing to 1 (a smoothed or soft label)."""
    t = rng.random(shape) + 0.05
    return t / t.sum(-1, keepdims=True)


def _sample_row_weights(rng, shape):
    """0/1 weights as ignore_index makes them, with at least one row kept."""
    w = rng.integers(0, 2, shape).astype(float)
    w[0] = 1.0
    return w


@op(inputs={"x": ("rows", "n")}, nondiff={"t": ("rows", "n"), "w": ("rows",)}, output=(1,),
    dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 3, "n": 5}], large_dims=[{"rows": 4, "n": 64}],
    check_dims={"rows": 4, "n": 7},
    sample={"t": _sample_targets, "w": _sample_row_weights})
def cross_entropy(B, x, t, w):
    m = B.max_shift(x)                # 0 in exact arithmetic; the row max in floats (no overflow)
    lse = m + B.log(B.exp(x - m).sum(-1, keepdims=True))
    nll = (t * (lse - x)).sum(-1)
    return (w * nll).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)


@cross_entropy.defvjp
def cross_entropy_vjp(B, x, t, w, dy):
    scale = dy * w / w.sum(-1, keepdims=True)
    return (scale[:, None] * (softmax(B, x) * t.sum(-1, keepdims=True) - t),)


@cross_entropy.law
def cotangent_sums_to_zero(B, x, t, w, dy, backward):
    """sum_i dx_ri = 0 for every row and every target: adding a constant to a row's logits moves
    lse_r by the same constant, so the loss cannot change."""
    (dx,) = backward(x, t, w, dy)
    return dx.sum(-1)


def _with_ignored_row(x, t, w):
    """The batch with one more row, of weight 0 (an ignore_index label), whatever its logits."""
    return (np.concatenate([x, x[:1] + 1], axis=0), np.concatenate([t, t[:1]], axis=0),
            np.concatenate([w, w[:1] * 0], axis=0))


@cross_entropy.law
def ignored_row_leaves_the_loss(B, x, t, w, forward):
    """Appending a row of weight 0 changes neither the sum nor the count the mean divides by."""
    return forward(*_with_ignored_row(x, t, w)), forward(x, t, w)


@cross_entropy.law
def ignored_row_gets_no_gradient(B, x, t, w, dy, backward):
    """A row of weight 0 gets zero gradient, and every other row keeps its own."""
    (dx2,) = backward(*_with_ignored_row(x, t, w), dy)
    (dx,) = backward(x, t, w, dy)
    return dx2, np.concatenate([dx, x[:1] * 0], axis=0)


@cross_entropy.law
def label_smoothing_mixes_losses(B, x, t, w, forward):
    """Label smoothing eps is the soft target (1 - eps) t + eps u, u uniform, and the loss is affine
    in the target: loss((1 - eps) t + eps u) = (1 - eps) loss(t) + eps loss(u)."""
    eps = B.c("0.1")
    u = softmax(B, x * 0)             # exactly 1/n in every entry
    return forward(x, (1 - eps) * t + eps * u, w), (1 - eps) * forward(x, t, w) + eps * forward(x, u, w)


# Proved for every size: the statement is derived from the code above (symbolic.every_size.shape_trace).
cross_entropy.every_size("vjp[x]", "cotangent_sums_to_zero", "ignored_row_leaves_the_loss",
                         "ignored_row_gets_no_gradient", "label_smoothing_mixes_losses")
