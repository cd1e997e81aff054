"""Negative controls for the Triton tier: our reference kernels (triton_kernels/reference.py) with one
fault planted each. Each must go red in Triton's interpreter, by the check named:

    softmax_bwd_no_dot       dx = y * dy, the row term y * sum(y dy) dropped   -> tolerance (and the law
                             cotangent_sums_to_zero)
    gelu_skips_last_block    grid = size // BLOCK instead of cdiv: the last, partial block is never
                             launched                                           -> NaN poison
    softmax_unmasked_load    the max pass loads whole blocks with no mask: the last row's last block
                             reads past the end of x (other rows read the next row, which softmax's
                             shift invariance forgives; the fence's NaN, which tl.maximum ignores)
                                                                                -> fence read (the
                             output changes when the fences hold 3e38 instead of NaN)
    gelu_unmasked_store      the store has no mask: the last block writes past the end of y -> fence
"""
from __future__ import annotations

import vjpcert.triton_kernels  # noqa: F401  (first: TRITON_INTERPRET before triton decorates kernels)
import triton
import triton.language as tl

from vjpcert.triton_kernels import reference as ref
from vjpcert.triton_kernels.registry import TritonKernel


@triton.jit
def softmax_bwd_no_dot_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    dy_ptr += row * n
    dx_ptr += row * n
    cols = tl.arange(0, BLOCK)
    row_max, total = ref.row_max_and_total(x_ptr, n, cols, BLOCK)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + start + cols, mask=mask, other=-float("inf"))
        dy = tl.load(dy_ptr + start + cols, mask=mask, other=0.0)
        tl.store(dx_ptr + start + cols, tl.exp(x - row_max) / total * dy, mask=mask)     # FAULT: no "- dot"


@triton.jit
def softmax_unmasked_load_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    y_ptr += row * n
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    for start in range(0, n, BLOCK):
        m = tl.maximum(m, tl.load(x_ptr + start + cols))                                  # FAULT: no mask
    row_max = tl.max(m, 0)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        s += tl.exp(tl.load(x_ptr + start + cols, mask=start + cols < n, other=-float("inf")) - row_max)
    total = tl.sum(s, 0)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + start + cols, mask=mask, other=-float("inf"))
        tl.store(y_ptr + start + cols, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def gelu_unmasked_store_kernel(x_ptr, y_ptr, size, C: tl.constexpr, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    t = ref._tanh(C * (x + K * x * x * x))
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t))                                          # FAULT: no mask


def softmax_bwd_no_dot(x, dy):
    return (ref.row_launch(softmax_bwd_no_dot_kernel, x, dy),)


def softmax_unmasked_load(x):
    return ref.row_launch(softmax_unmasked_load_kernel, x)


def gelu_skips_last_block(x):
    return ref.element_launch(ref.gelu_tanh_fwd_kernel, x, grid=(x.size // ref.ELEMENT_BLOCK,))  # FAULT: floor


def gelu_unmasked_store(x):
    return ref.element_launch(gelu_unmasked_store_kernel, x)


# name -> (the faulty kernel, dims where it shows, the check that must fire)
CONTROLS = {
    "softmax_bwd_no_dot": (TritonKernel("control_softmax_bwd_no_dot", "softmax", "backward", ("dx",),
                                        softmax_bwd_no_dot, ("cotangent_sums_to_zero",)),
                           {"rows": 3, "n": 33}, "tolerance"),
    "gelu_skips_last_block": (TritonKernel("control_gelu_skips_last_block", "gelu_tanh", "forward", ("y",),
                                           gelu_skips_last_block), {"rows": 5, "n": 33}, "NaN poison"),
    "softmax_unmasked_load": (TritonKernel("control_softmax_unmasked_load", "softmax", "forward", ("y",),
                                           softmax_unmasked_load), {"rows": 3, "n": 33}, "fence read"),
    "gelu_unmasked_store": (TritonKernel("control_gelu_unmasked_store", "gelu_tanh", "forward", ("y",),
                                         gelu_unmasked_store), {"rows": 5, "n": 33}, "fence"),
}
