"""The kernel registry: every kernel, the spec op it implements, what it outputs, its launcher, its
tolerance kind and the laws checked on its outputs at run time.

A launcher takes the spec's argument names (inputs, non-differentiable inputs, ``dy`` for a
backward, the op's params such as ``eps``/``base``/``offset``) as numpy arrays and returns numpy
arrays: the forward output, or the cotangents in the order of the spec's differentiable inputs.

Laws are named by the spec (``specs/<op>.py``: evaluated with this kernel as the op's forward or
backward, so the spec stays the one statement of what must hold) or are kernel laws defined in the
kernel's own file (facts about outputs the spec's laws do not state, e.g. softmax rows sum to 1).
A law that calls ``backward`` is checked with the backward kernel; one that calls only ``forward``
with the forward kernel. ``forward`` names the forward kernel a backward kernel's laws use.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from vjpcert.cuda_kernels import attention, gelu, layernorm, linear, rmsnorm, rope, softmax
from vjpcert.core.registry import Law


def kernel_law(fn, params=None) -> Law:
    """A law defined next to a kernel (same conventions as a spec law)."""
    import inspect
    return Law(fn.__name__, fn, inspect.getdoc(fn) or "", dict(params or {}),
               "dy" in inspect.signature(fn).parameters)


@dataclass(frozen=True)
class KernelSpec:
    name: str                       # the claim is "kernel:<name>"
    op: str                         # the spec op it implements
    kind: str                       # "forward" (tolerance k = 2) or "backward" (k = 3)
    outputs: tuple                  # ("y",) or the cotangents ("dx", "dgamma", ...) in spec order
    launcher: Callable
    laws: tuple = ()                # spec law names and kernel Law objects
    forward: str | None = None      # for a backward kernel: the forward kernel its laws use
    doc: str = ""
    extra: dict = field(default_factory=dict)
    # The kernel's rounding-error model (cuda_kernels/error_model.py): model(cfg, <the launcher's
    # arguments>) -> one Tracked per output, restating the kernel's arithmetic in its own order.
    model: Callable | None = None

    @property
    def claim(self) -> str:
        return f"kernel:{self.name}"


def _fwd_bwd(op, fwd, bwd, *, models, fwd_laws=(), bwd_laws=(), cots=("dx",), prefix=None, doc=""):
    prefix = prefix or op
    return [KernelSpec(f"{prefix}_fwd", op, "forward", ("y",), fwd, tuple(fwd_laws), doc=doc, model=models[0]),
            KernelSpec(f"{prefix}_bwd", op, "backward", tuple(cots), bwd, tuple(bwd_laws),
                       forward=f"{prefix}_fwd", doc=doc, model=models[1])]


def _causal(model):
    return functools.partial(model, causal=1)


_ROPE_FWD_LAWS = ("inverse_rotation", "preserves_norm")
_ROPE_BWD_LAWS = ("backward_inverts_forward",)

KERNELS: dict[str, KernelSpec] = {k.name: k for k in [
    *_fwd_bwd("softmax", softmax.softmax_fwd, softmax.softmax_bwd,
              models=(softmax.softmax_fwd_model, softmax.softmax_bwd_model),
              fwd_laws=("shift_invariance", kernel_law(softmax.rows_sum_to_one)),
              bwd_laws=("cotangent_sums_to_zero",), doc="one block per row; max-subtracted"),
    *_fwd_bwd("rope_pair", rope.rope_pair_fwd, rope.rope_pair_bwd, fwd_laws=_ROPE_FWD_LAWS,
              models=(rope.rope_pair_fwd_model, rope.rope_pair_bwd_model),
              bwd_laws=_ROPE_BWD_LAWS, doc="the interleaved kernel at d = 2, pos = theta"),
    *_fwd_bwd("rope_interleaved", rope.rope_interleaved_fwd, rope.rope_interleaved_bwd,
              models=(rope.rope_interleaved_fwd_model, rope.rope_interleaved_bwd_model),
              fwd_laws=_ROPE_FWD_LAWS, bwd_laws=_ROPE_BWD_LAWS, doc="one thread per pair"),
    *_fwd_bwd("rope_half", rope.rope_half_fwd, rope.rope_half_bwd,
              models=(rope.rope_half_fwd_model, rope.rope_half_bwd_model),
              fwd_laws=_ROPE_FWD_LAWS, bwd_laws=_ROPE_BWD_LAWS, doc="one thread per pair"),
    *_fwd_bwd("rmsnorm", rmsnorm.rmsnorm_fwd, rmsnorm.rmsnorm_bwd,
              models=(rmsnorm.rmsnorm_fwd_model, rmsnorm.rmsnorm_bwd_model),
              fwd_laws=(kernel_law(rmsnorm.scale_invariant, {"eps": 0}),),
              bwd_laws=("dx_orthogonal_to_x",), cots=("dx", "dgamma"),
              doc="one block per row; dgamma by deterministic column sums"),
    *_fwd_bwd("layernorm", layernorm.layernorm_fwd, layernorm.layernorm_bwd,
              models=(layernorm.layernorm_fwd_model, layernorm.layernorm_bwd_model),
              fwd_laws=(kernel_law(layernorm.shift_invariant),),
              bwd_laws=("dx_sums_to_zero", "dx_orthogonal_to_xhat"), cots=("dx", "dgamma", "dbeta"),
              doc="one block per row, two-pass variance; dgamma, dbeta by column sums"),
    *_fwd_bwd("gelu_erf", gelu.gelu_erf_fwd, gelu.gelu_erf_bwd, fwd_laws=("odd_part_is_identity",),
              models=(gelu.gelu_erf_fwd_model, gelu.gelu_erf_bwd_model),
              bwd_laws=("derivative_formula",), doc="elementwise"),
    *_fwd_bwd("gelu_tanh", gelu.gelu_tanh_fwd, gelu.gelu_tanh_bwd, fwd_laws=("odd_part_is_identity",),
              models=(gelu.gelu_tanh_fwd_model, gelu.gelu_tanh_bwd_model),
              bwd_laws=("derivative_formula",), doc="elementwise"),
    *_fwd_bwd("linear", linear.linear_fwd, linear.linear_bwd,
              models=(linear.linear_fwd_model, linear.linear_bwd_model),
              fwd_laws=(kernel_law(linear.homogeneous_in_x),), bwd_laws=("adjoint_x", "adjoint_W"),
              cots=("dx", "dW", "db"), doc="tiled matmul for y, dx, dW; column sums for db"),
    *_fwd_bwd("attention", attention.attention_fwd, attention.attention_bwd,
              models=(attention.attention_fwd_model, attention.attention_bwd_model),
              fwd_laws=(kernel_law(attention.values_shift_through),), bwd_laws=("dV_rows_follow_P",),
              cots=("dQ", "dK", "dV"), doc="plain: matmul + softmax kernels, S and P materialised"),
    *_fwd_bwd("attention", attention.flash_attention_fwd, attention.flash_attention_bwd,
              models=(attention.flash_attention_fwd_model, attention.flash_attention_bwd_model),
              prefix="flash_attention", fwd_laws=(kernel_law(attention.values_shift_through),),
              bwd_laws=("dV_rows_follow_P",), cots=("dQ", "dK", "dV"),
              doc="fused, tiled, online softmax, saved log-sum-exp; backward dK/dV and dQ kernels"),
    *_fwd_bwd("attention_causal", attention.attention_causal_fwd, attention.attention_causal_bwd,
              models=(_causal(attention.attention_fwd_model), _causal(attention.attention_bwd_model)),
              fwd_laws=("first_row_sees_only_itself", kernel_law(attention.values_shift_through)),
              bwd_laws=("fully_masked_row_is_zero",), cots=("dQ", "dK", "dV"),
              doc="plain, masked logits excluded"),
    *_fwd_bwd("attention_causal", attention.flash_attention_causal_fwd, attention.flash_attention_causal_bwd,
              models=(_causal(attention.flash_attention_fwd_model), _causal(attention.flash_attention_bwd_model)),
              prefix="flash_attention_causal",
              fwd_laws=("first_row_sees_only_itself", kernel_law(attention.values_shift_through)),
              bwd_laws=("fully_masked_row_is_zero",), cots=("dQ", "dK", "dV"),
              doc="fused; key tiles past the diagonal are skipped, masked logits excluded"),
]}


# Sizes. Simulator: rows and widths that cross the simulator's block sizes (32 threads per row
# block, 8 x 8 tiles): 1, 7, 33 and 1025 (a planted reduction bug that dropped half the partial
# sums showed only at 1025), as far as the simulator's speed allows (one Python thread per CUDA
# thread). GPU: large sizes, still checked against the float64 spec on the host.
_ROWS_SIM = [{"rows": 1, "n": 1}, {"rows": 7, "n": 33}, {"rows": 33, "n": 7}, {"rows": 3, "n": 1025}]
_ROWS_GPU = [{"rows": 1, "n": 1}, {"rows": 33, "n": 1025}, {"rows": 2048, "n": 4097}]
_ROPE_SIM = [{"rows": 1, "d": 2}, {"rows": 7, "d": 34}, {"rows": 33, "d": 8}, {"rows": 3, "d": 1026}]
_ROPE_GPU = [{"rows": 1, "d": 2}, {"rows": 4096, "d": 128}, {"rows": 33, "d": 1026}]
_ATTN_SIM = [{"m": 1, "d": 1}, {"m": 7, "d": 3}, {"m": 33, "d": 4}, {"m": 17, "d": 9}]
_ATTN_GPU = [{"m": 1, "d": 1}, {"m": 33, "d": 9}, {"m": 1025, "d": 64}]

# The GPU's own launch configuration (GPU_CONFIG: blocks of 256, 16 x 16 tiles), run in the simulator
# too, at one or two affordable sizes per op that cross its block and tile sizes: rows of 4097 (16
# full strides of 256 threads and one more), head widths 64 and 128, 17 queries (two tiles of 16).
# Faults that hide at the simulator's small configuration show here: an accumulator sized for the
# simulator's tiles, a reduction that assumes one warp, a single running sum (error model).
_ROWS_GPU_LAUNCH = [{"rows": 2, "n": 4097}]
_ATTN_GPU_LAUNCH = [{"m": 17, "d": 64}, {"m": 17, "d": 128}]

DIMS = {
    "simulator": {
        "softmax": _ROWS_SIM, "rmsnorm": _ROWS_SIM, "layernorm": _ROWS_SIM,
        "gelu_erf": _ROWS_SIM, "gelu_tanh": _ROWS_SIM,
        "rope_pair": [{"rows": 1}, {"rows": 33}, {"rows": 1025}],
        "rope_interleaved": _ROPE_SIM, "rope_half": _ROPE_SIM,
        "linear": [{"rows": 1, "n_in": 1, "n_out": 1}, {"rows": 7, "n_in": 33, "n_out": 5},
                   {"rows": 33, "n_in": 7, "n_out": 9}, {"rows": 2, "n_in": 1025, "n_out": 3}],
        "attention": _ATTN_SIM, "attention_causal": _ATTN_SIM,
    },
    "gpu": {
        "softmax": _ROWS_GPU, "rmsnorm": _ROWS_GPU, "layernorm": _ROWS_GPU,
        "gelu_erf": _ROWS_GPU, "gelu_tanh": _ROWS_GPU,
        "rope_pair": [{"rows": 1}, {"rows": 1 << 20}],
        "rope_interleaved": _ROPE_GPU, "rope_half": _ROPE_GPU,
        "linear": [{"rows": 1, "n_in": 1, "n_out": 1}, {"rows": 33, "n_in": 1025, "n_out": 7},
                   {"rows": 512, "n_in": 1024, "n_out": 768}],
        "attention": _ATTN_GPU, "attention_causal": _ATTN_GPU,
    },
    "simulator_gpu_launch": {
        "softmax": _ROWS_GPU_LAUNCH, "rmsnorm": _ROWS_GPU_LAUNCH, "layernorm": _ROWS_GPU_LAUNCH,
        "gelu_erf": _ROWS_GPU_LAUNCH, "gelu_tanh": _ROWS_GPU_LAUNCH,
        "rope_pair": [{"rows": 1025}],
        "rope_interleaved": [{"rows": 17, "d": 128}], "rope_half": [{"rows": 17, "d": 64}],
        "linear": [{"rows": 17, "n_in": 260, "n_out": 33}],
        "attention": _ATTN_GPU_LAUNCH, "attention_causal": _ATTN_GPU_LAUNCH,
        # a kernel name overrides its op: the plain attention kernels are the matmul and softmax
        # kernels composed (checked at the GPU's launch on their own ops), one size is enough
        **{f"attention{c}_{k}": [{"m": 17, "d": 64}] for c in ("", "_causal") for k in ("fwd", "bwd")},
    },
}


def kernels_for(op_name: str) -> list[KernelSpec]:
    return [k for k in KERNELS.values() if k.op == op_name]
