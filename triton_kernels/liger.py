"""Liger-Kernel (``liger-kernel`` on PyPI: Triton kernels for LLM training) against the vjpcert specs.

Each launcher calls Liger's own ``torch.autograd.Function`` as a model would (forward: ``apply``;
backward: ``apply`` then ``backward(dy)``), on fresh, fenced copies of the inputs (Liger's SwiGLU,
GeGLU and cross-entropy write gradients into their inputs), with every ``torch.empty`` of the call
NaN-poisoned (``triton_kernels.harness``), in Triton's interpreter made faithful to compiled Triton
(``triton_kernels.interpreter``: fp32 scalar arguments, libdevice ``rsqrt``/``tanh``).

How each Liger op meets its spec:
  RMSNorm        ``LigerRMSNormFunction(X, W, eps, offset, casting_mode)`` -> ``rmsnorm`` (x, gamma, eps,
                 offset): y = x rstd (offset + gamma). Gemma's ``offset = 1`` is the spec's ``offset``
                 param; the casting modes ("llama": rstd in fp32; "gemma": everything in fp32; "none")
                 are where the kernel rounds, not what it computes: at float32 inputs the three modes
                 give the same numbers (a row per mode). In bfloat16 each mode's kernel is held to the
                 bound of the casting Liger documents for it (``RMSNORM_CASTINGS``), which tells them
                 apart.

Every kernel is registered twice: in float32, and in bfloat16 (``*_bf16_*``: Liger's kernels take the
dtype of their inputs).
  LayerNorm      ``LigerLayerNormFunction(X, W, B, eps)`` -> ``layernorm``.
  softmax        ``LigerSoftmaxFunction(x)`` -> ``softmax`` (rows of one block; Liger's multi-block path is
                 for rows over 65536 entries, beyond what the interpreter runs in minutes).
  RoPE           ``LigerRopeFunction(q, k, cos, sin)`` -> ``rope_half`` (Liger's layout is HF's rotate_half).
                 q is the spec's x as (1 batch, 1 head, rows = positions, d); k is a second copy, whose
                 result must equal q's bit for bit. cos/sin are the caller's (HF computes them): here
                 from the spec's angles in float64, rounded once to float32, so the kernel is judged on
                 its rotation and not on an angle table it does not compute.
  SwiGLU         ``LigerSiLUMulFunction(a, b)`` -> ``swiglu``.
  GeGLU          ``LigerGELUMulFunction(a, b)`` -> ``geglu`` (GELU's tanh form).
  cross-entropy  ``LigerCrossEntropyFunction(x, labels, None, ignore_index, 0, label_smoothing, "mean")``
                 -> ``cross_entropy`` (x, t, w): the harness turns the spec's targets into Liger's integer
                 labels (row r: argmax t_r, or ignore_index where w_r = 0), after checking that every row
                 of t is exactly what Liger's label smoothing makes of that label ((1 - eps) one_hot +
                 eps / n) and w is 0/1; a target Liger cannot take is bad input, never a silent change.
                 Checked at eps = 0 and eps = 0.1.
"""
from __future__ import annotations

from fractions import Fraction
from importlib import metadata

import numpy as np

import liger_kernel  # noqa: F401  (ImportError here: the registry reports the file as not loaded)
from liger_kernel.ops import cross_entropy as _ce
from liger_kernel.ops import geglu as _geglu
from liger_kernel.ops import layer_norm as _ln
from liger_kernel.ops import rms_norm as _rms
from liger_kernel.ops import rope as _rope
from liger_kernel.ops import softmax as _softmax
from liger_kernel.ops import swiglu as _swiglu

from vjpcert.core.kernel_bounds import Casting
from vjpcert.core.kernel_checks import bits_differ
from vjpcert.core.registry import SpecError
from vjpcert.triton_kernels import harness
from vjpcert.triton_kernels.interpreter import faithful
from vjpcert.triton_kernels.registry import TritonKernel

VERSION = metadata.version("liger-kernel")
SOURCE = f"liger-kernel {VERSION}"
MODULES = (_ce, _geglu, _ln, _rms, _rope, _softmax, _swiglu)
IGNORE_INDEX = -100
LABEL_SMOOTHING_TOLERANCE = 1e-6      # a target row may differ from Liger's by float32 rounding only

# Interpreter sizes: rows of one program and several, widths that are not powers of two (Liger pads a
# row to the next power of two and masks the rest) and one over 1024 (BLOCK_SIZE 2048, 8 warps).
ROWS = ({"rows": 1, "n": 1}, {"rows": 3, "n": 7}, {"rows": 5, "n": 33}, {"rows": 2, "n": 1025})
ROPE_SIZES = ({"rows": 1, "d": 2}, {"rows": 3, "d": 8}, {"rows": 5, "d": 34}, {"rows": 2, "d": 130})
CE_SIZES = ({"rows": 1, "n": 2}, {"rows": 4, "n": 7}, {"rows": 5, "n": 33}, {"rows": 3, "n": 1025})


def _grads(tensors):
    return tuple(harness.to_numpy(t.grad) for t in tensors)


def _autograd(apply, diff: list, rest: tuple = (), dy=None):
    """Liger's Function on fenced copies: the forward output, or (with dy) the gradients of ``diff``."""
    with faithful(MODULES):
        return _autograd_run(apply, diff, rest, dy)


def _autograd_run(apply, diff, rest, dy):
    tensors = [harness.device_tensor(a).requires_grad_(dy is not None) for a in diff]
    y = apply(*tensors, *rest)
    if dy is None:
        return harness.to_numpy(y)
    y.backward(harness.device_tensor(dy))
    return _grads(tensors)


# ------------------------------------------------------------------------------ RMSNorm
def _rmsnorm(casting_mode):
    def fwd(x, gamma, eps, offset=0.0):
        return _autograd(_rms.LigerRMSNormFunction.apply, [x, gamma], (eps, offset, casting_mode))

    def bwd(x, gamma, dy, eps, offset=0.0):
        return _autograd(_rms.LigerRMSNormFunction.apply, [x, gamma], (eps, offset, casting_mode), dy)
    return fwd, bwd


# Where each casting mode rounds (Liger's kernel, rms_norm.py, and its comments): the formula of the
# kernel, over B, with stored(v) where it rounds v to the input dtype. Checked to compute the spec's
# function (core.kernel_bounds.check_casting); in float32 every B.stored is exact and the modes agree.
def _liger_rmsnorm_backward(stores_x_rstd: bool):
    """Liger's backward: dx = rstd m - rstd ((1/n) rstd^2 sum(m x)) x with m = dy (w + offset);
    dgamma sums dy (x rstd) over rows in float32; in llama mode x rstd is cast to the input dtype
    first, and its product with dy is computed in the input dtype."""
    def backward(B, x, gamma, eps, offset, dy, stored):
        n = x.shape[-1]
        rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
        m = dy * (gamma + offset)
        dx = rstd * m + rstd * (B.c(Fraction(-1, n)) * rstd * rstd * (m * x).sum(-1, keepdims=True) * x)
        if stores_x_rstd:       # dy (input dtype) times x rstd cast to it: a product in the input dtype
            return dx, stored(dy * stored(x * rstd)).sum(0)
        return dx, (dy * (x * rstd)).sum(0)
    return backward


def _llama_forward(B, x, gamma, eps, offset, stored):
    """Llama: rstd in float32; x rstd cast to the input dtype before the gain multiplies it."""
    rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return stored(x * rstd) * (offset + gamma)


RMSNORM_CASTINGS = {
    "llama": (Casting("Liger's llama casting: rstd in float32, x rstd cast to the input dtype before the gain "
                      "(and before dgamma's product)", "float32", _llama_forward),
              Casting("Liger's llama casting, backward: float32, but dgamma's terms dy (x rstd) computed in the "
                      "input dtype from x rstd cast to it",
                      "float32", _liger_rmsnorm_backward(True))),
    "gemma": (Casting("Liger's gemma casting: everything in float32, the output cast once", "float32", None),
              Casting("Liger's gemma casting, backward: everything in float32, the outputs cast once",
                      "float32", _liger_rmsnorm_backward(False))),
    "none": (Casting("Liger's none casting: everything in the input dtype", "bfloat16", None),
             Casting("Liger's none casting, backward: rstd from the forward's input-dtype arithmetic (bounded "
                     "as if every step ran in it)", "bfloat16", _liger_rmsnorm_backward(False))),
}


# ------------------------------------------------------------------------------ the others
def layernorm_fwd(x, gamma, beta, eps):
    return _autograd(_ln.LigerLayerNormFunction.apply, [x, gamma, beta], (eps,))


def layernorm_bwd(x, gamma, beta, dy, eps):
    return _autograd(_ln.LigerLayerNormFunction.apply, [x, gamma, beta], (eps,), dy)


def softmax_fwd(x):
    return _autograd(_softmax.LigerSoftmaxFunction.apply, [x])


def softmax_bwd(x, dy):
    return _autograd(_softmax.LigerSoftmaxFunction.apply, [x], (), dy)


def swiglu_fwd(a, b):
    return _autograd(_swiglu.LigerSiLUMulFunction.apply, [a, b])


def swiglu_bwd(a, b, dy):
    return _autograd(_swiglu.LigerSiLUMulFunction.apply, [a, b], (), dy)


def geglu_fwd(a, b):
    return _autograd(_geglu.LigerGELUMulFunction.apply, [a, b])


def geglu_bwd(a, b, dy):
    return _autograd(_geglu.LigerGELUMulFunction.apply, [a, b], (), dy)


def _cos_sin(pos, d, base):
    """HF's cos/sin tables (1, rows, d) for the rotate_half layout, from float64 angles rounded once."""
    inv_freq = float(base) ** (-2.0 * np.arange(d // 2) / d)
    theta = np.asarray(pos, np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([theta, theta], axis=-1)
    return np.cos(emb)[None].astype(np.float32), np.sin(emb)[None].astype(np.float32)


def _rope_run(x, pos, base, dy=None):
    with faithful(MODULES):
        return _rope_call(x, pos, base, dy)


def _rope_call(x, pos, base, dy):
    rows, d = x.shape
    cos, sin = _cos_sin(pos, d, base)
    q = harness.device_tensor(x.reshape(1, 1, rows, d)).requires_grad_(dy is not None)
    k = harness.device_tensor(x.reshape(1, 1, rows, d)).requires_grad_(dy is not None)
    qo, ko = _rope.LigerRopeFunction.apply(q, k, harness.device_tensor(cos), harness.device_tensor(sin))
    if dy is None:
        out, other = harness.to_numpy(qo), harness.to_numpy(ko)
    else:
        g = dy.reshape(1, 1, rows, d)
        (qo * harness.device_tensor(g)).sum().add((ko * harness.device_tensor(g)).sum()).backward()
        out, other = harness.to_numpy(q.grad), harness.to_numpy(k.grad)
    if bits_differ(out, other).any():
        raise RuntimeError("Liger's RoPE rotated q and k (equal inputs, equal tables) differently")
    return out.reshape(rows, d)


def rope_half_fwd(x, pos, base):
    return _rope_run(x, pos, base)


def rope_half_bwd(x, pos, dy, base):
    return (_rope_run(x, pos, base, dy),)


def labels_of(t, w, label_smoothing: float) -> np.ndarray:
    """Liger's integer labels for the spec's targets t (rows, n) and row weights w: argmax of each
    kept row, ignore_index where w = 0. Bad input unless w is 0/1 and every kept row of t is Liger's
    (1 - eps) one_hot + eps / n for its label."""
    t, w = np.asarray(t, np.float64), np.asarray(w, np.float64)
    if not np.all((w == 0) | (w == 1)):
        raise SpecError("cross_entropy", "Liger's cross-entropy weighs rows 0 (ignore_index) or 1; "
                                         f"got row weights {sorted(set(w.tolist()))}")
    labels = np.argmax(t, axis=-1)
    n = t.shape[-1]
    expected = (1 - label_smoothing) * np.eye(n)[labels] + label_smoothing / n
    bad = (w == 1) & (np.abs(t - expected).max(-1) > LABEL_SMOOTHING_TOLERANCE)
    if bad.any():
        r = int(np.argmax(bad))
        raise SpecError("cross_entropy", f"target row {r} is not a label with label smoothing {label_smoothing:g} "
                                         "(Liger takes integer labels only)")
    return np.where(w == 1, labels, IGNORE_INDEX).astype(np.int64)


def _ce_run(x, t, w, label_smoothing, dy=None):
    with faithful(MODULES):
        return _ce_call(x, t, w, label_smoothing, dy)


def _ce_call(x, t, w, label_smoothing, dy):
    labels = harness.device_tensor(labels_of(t, w, label_smoothing), what="labels")
    logits = harness.device_tensor(x).requires_grad_(dy is not None)
    loss = _ce.LigerCrossEntropyFunction.apply(logits, labels, None, IGNORE_INDEX, 0.0, label_smoothing, "mean")
    loss = loss[0] if isinstance(loss, tuple) else loss
    if dy is None:
        return harness.to_numpy(loss).reshape(1)
    loss.backward(harness.device_tensor(np.asarray(dy, np.float32).reshape(())))
    return (harness.to_numpy(logits.grad),)


def _ce_targets(label_smoothing):
    def sample(rng, shape, params):
        rows, n = shape
        labels = rng.integers(0, n, rows)
        return (1 - label_smoothing) * np.eye(n)[labels] + label_smoothing / n
    return sample


def _cross_entropy(label_smoothing, suffix):
    def fwd(x, t, w):
        return _ce_run(x, t, w, label_smoothing)

    def bwd(x, t, w, dy):
        return _ce_run(x, t, w, label_smoothing, dy)
    common = dict(source=SOURCE, modules=MODULES, sizes=CE_SIZES, samplers={"t": _ce_targets(label_smoothing)},
                  doc=f"LigerCrossEntropyFunction, reduction mean, ignore_index {IGNORE_INDEX}, "
                      f"label_smoothing {label_smoothing:g}")
    out = []
    for dtype, tag in (("float32", ""), ("bfloat16", "_bf16")):
        name = f"liger_cross_entropy{suffix}{tag}"
        out += [TritonKernel(f"{name}_fwd", "cross_entropy", "forward", ("loss",), fwd,
                             ("ignored_row_leaves_the_loss",), **common, dtype=dtype),
                TritonKernel(f"{name}_bwd", "cross_entropy", "backward", ("dx",), bwd,
                             ("cotangent_sums_to_zero", "ignored_row_gets_no_gradient"),
                             forward=f"{name}_fwd", **common, dtype=dtype)]
    return out


def _pair(op, prefix, fwd, bwd, cots, doc, sizes=ROWS, fwd_laws=(), bwd_laws=(), params=None, castings=None):
    """The kernel pair in float32, and again in bfloat16 (``<prefix>_bf16_fwd`` / ``_bwd``: inputs and
    outputs in bfloat16, held to ``castings`` (forward, backward) where Liger documents where it rounds)."""
    common = dict(source=SOURCE, modules=MODULES, sizes=sizes, doc=doc, params=dict(params or {}))
    out = []
    for dtype, suffix in (("float32", ""), ("bfloat16", "_bf16")):
        fwd_casting, bwd_casting = castings if castings and dtype != "float32" else (None, None)
        out += [TritonKernel(f"{prefix}{suffix}_fwd", op, "forward", ("y",), fwd, tuple(fwd_laws), **common,
                             dtype=dtype, casting=fwd_casting),
                TritonKernel(f"{prefix}{suffix}_bwd", op, "backward", tuple(cots), bwd, tuple(bwd_laws),
                             forward=f"{prefix}{suffix}_fwd", **common, dtype=dtype, casting=bwd_casting)]
    return out


TRITON_KERNELS: list[TritonKernel] = [
    *[k for mode in ("llama", "gemma", "none")
      for k in _pair("rmsnorm", f"liger_rmsnorm_{mode}", *_rmsnorm(mode), ("dx", "dgamma"),
                     f"LigerRMSNormFunction, casting_mode {mode!r}, offset 0",
                     bwd_laws=("dx_orthogonal_to_x",), castings=RMSNORM_CASTINGS[mode])],
    *_pair("rmsnorm", "liger_rmsnorm_gemma_offset1", *_rmsnorm("gemma"), ("dx", "dgamma"),
           "LigerRMSNormFunction as Gemma calls it: offset 1 (y = x rstd (1 + w)), casting_mode 'gemma'",
           params={"offset": 1}, bwd_laws=("dx_orthogonal_to_x", "offset_is_a_gain_shift"),
           castings=RMSNORM_CASTINGS["gemma"]),
    *_pair("layernorm", "liger_layernorm", layernorm_fwd, layernorm_bwd, ("dx", "dgamma", "dbeta"),
           "LigerLayerNormFunction", bwd_laws=("dx_sums_to_zero",)),
    *_pair("softmax", "liger_softmax", softmax_fwd, softmax_bwd, ("dx",), "LigerSoftmaxFunction",
           fwd_laws=("shift_invariance",), bwd_laws=("cotangent_sums_to_zero",)),
    *_pair("rope_half", "liger_rope", rope_half_fwd, rope_half_bwd, ("dx",),
           "LigerRopeFunction (HF rotate_half layout), cos/sin from float64 angles", sizes=ROPE_SIZES,
           fwd_laws=("preserves_norm",), bwd_laws=("backward_inverts_forward",)),
    *_pair("swiglu", "liger_swiglu", swiglu_fwd, swiglu_bwd, ("da", "db"), "LigerSiLUMulFunction",
           fwd_laws=("odd_part_is_identity",), bwd_laws=("value_cotangent_is_silu",)),
    *_pair("geglu", "liger_geglu", geglu_fwd, geglu_bwd, ("da", "db"), "LigerGELUMulFunction (tanh form)",
           bwd_laws=("value_cotangent_is_gelu",)),
    *_cross_entropy(0.0, ""),
    *_cross_entropy(0.1, "_smoothing"),
]
