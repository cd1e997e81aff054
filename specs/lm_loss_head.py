"""A language-model loss head (Llama's): final RMSNorm, the vocabulary projection (no bias), and the
mean cross-entropy over the tokens that count, as a composite.

    N = RMSNorm(H),   logits = N W^T  (m x vocab),   loss = cross_entropy(logits, t, w)
t are the soft targets (one-hot rows for labels, smoothed rows for label smoothing) and w the row
weights (0 for ignore_index), non-differentiated inputs of specs/cross_entropy.py, so the proof covers
every labelling. The backward: dlogits = cross_entropy^T(dy), dN, dW = projection^T(dlogits),
dH, dg = RMSNorm^T(dN).
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op
from vjpcert.specs.cross_entropy import _sample_row_weights, _sample_targets, cross_entropy
from vjpcert.specs.linear import linear
from vjpcert.specs.rmsnorm import rmsnorm
from vjpcert.specs.swiglu_mlp import no_bias


@op(inputs={"H": ("m", "D"), "g": ("D",), "W": ("vocab", "D")}, nondiff={"t": ("m", "vocab"), "w": ("m",)},
    output=(1,), params={"eps": Param(Fraction(1, 10**6), positive=True, doc="RMSNorm's eps")},
    nodes={"norm": rmsnorm, "lm_head": linear, "loss": cross_entropy}, proofs=("compositional",),
    dims=[{"m": 2, "D": 2, "vocab": 3}], large_dims=[{"m": 3, "D": 4, "vocab": 5}],
    compositional_dims=[{"m": 16, "D": 64, "vocab": 512}], check_dims={"m": 3, "D": 4, "vocab": 5},
    sample={"t": _sample_targets, "w": _sample_row_weights})
def lm_loss_head(B, H, g, W, t, w, eps, nodes):
    return nodes.loss(nodes.lm_head(nodes.norm(H, g, eps=eps), W, no_bias(B, W)), t, w)


@lm_loss_head.defvjp
def lm_loss_head_vjp(B, H, g, W, t, w, eps, dy, nodes):
    N = nodes.norm(H, g, eps=eps)
    logits = nodes.lm_head(N, W, no_bias(B, W))
    (dlogits,) = nodes.loss.vjp(logits, t, w, dy)
    dN, dW, _ = nodes.lm_head.vjp(N, W, no_bias(B, W), dlogits)
    dH, dg = nodes.norm.vjp(H, g, dN, eps=eps)
    return dH, dg, dW
