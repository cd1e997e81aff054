"""Our own small Triton kernels: softmax (a row in blocks of BLOCK, so rows longer than one block loop)
and GELU in its tanh form (elementwise over the flattened array, one program per BLOCK elements).

They are the Triton tier's known-good kernels: the negative controls (tests/triton/controls.py) are
these with one fault planted each, and a user's Triton kernel is written the same way (a launcher
taking the spec's argument names as numpy arrays, returning numpy arrays; tensors from
``triton_kernels.harness``).
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from vjpcert.triton_kernels import harness
from vjpcert.triton_kernels.registry import TritonKernel, fwd_bwd

ROW_BLOCK = 32                  # small, so that rows of 33 and 1025 take 2 and 33 blocks
ELEMENT_BLOCK = 64
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)     # the float32 literal the kernel rounds it to
GELU_K = 0.044715


@triton.jit
def row_max_and_total(x_ptr, n, cols, BLOCK: tl.constexpr):
    """The row's maximum and sum_j exp(x_j - max), a block at a time (the two passes before the output)."""
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + start + cols, mask=start + cols < n, other=-float("inf"))
        m = tl.maximum(m, x)
    row_max = tl.max(m, 0)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + start + cols, mask=start + cols < n, other=-float("inf"))
        s += tl.exp(x - row_max)
    return row_max, tl.sum(s, 0)


@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    y_ptr += row * n
    cols = tl.arange(0, BLOCK)
    row_max, total = row_max_and_total(x_ptr, n, cols, BLOCK)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + start + cols, mask=mask, other=-float("inf"))
        tl.store(y_ptr + start + cols, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def softmax_bwd_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    """dx = y * (dy - sum_j y_j dy_j), y recomputed from x (as fused kernels do)."""
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    dy_ptr += row * n
    dx_ptr += row * n
    cols = tl.arange(0, BLOCK)
    row_max, total = row_max_and_total(x_ptr, n, cols, BLOCK)
    d = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + start + cols, mask=mask, other=-float("inf"))
        dy = tl.load(dy_ptr + start + cols, mask=mask, other=0.0)
        d += tl.exp(x - row_max) / total * dy
    dot = tl.sum(d, 0)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + start + cols, mask=mask, other=-float("inf"))
        dy = tl.load(dy_ptr + start + cols, mask=mask, other=0.0)
        tl.store(dx_ptr + start + cols, tl.exp(x - row_max) / total * (dy - dot), mask=mask)


@triton.jit
def _tanh(u):
    # tanh from exp (Triton has no tanh of its own; libdevice's is GPU-only): saturates to +-1
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(u < 0, -t, t)


@triton.jit
def gelu_tanh_fwd_kernel(x_ptr, y_ptr, size, C: tl.constexpr, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    t = _tanh(C * (x + K * x * x * x))
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


@triton.jit
def gelu_tanh_bwd_kernel(x_ptr, dy_ptr, dx_ptr, size, C: tl.constexpr, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0)
    t = _tanh(C * (x + K * x * x * x))
    du = C * (1.0 + 3.0 * K * x * x)
    tl.store(dx_ptr + offs, dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du), mask=mask)


def row_launch(kernel, *arrays, block: int = ROW_BLOCK):
    """Launch a one-program-per-row kernel on fenced copies of ``arrays`` (rows, n); returns its output."""
    rows, n = arrays[0].shape
    tensors = [harness.device_tensor(a) for a in arrays]
    out = harness.empty((rows, n))
    kernel[(rows,)](*tensors, out, n, BLOCK=block)
    return harness.to_numpy(out)


def element_launch(kernel, *arrays, block: int = ELEMENT_BLOCK, grid=None):
    size = arrays[0].size
    tensors = [harness.device_tensor(a) for a in arrays]
    out = harness.empty(arrays[0].shape)
    grid = grid if grid is not None else (triton.cdiv(size, block),)
    kernel[grid](*tensors, out, size, C=SQRT_2_OVER_PI, K=GELU_K, BLOCK=block)
    return harness.to_numpy(out)


def softmax_fwd(x):
    return row_launch(softmax_fwd_kernel, x)


def softmax_bwd(x, dy):
    return (row_launch(softmax_bwd_kernel, x, dy),)


def gelu_tanh_fwd(x):
    return element_launch(gelu_tanh_fwd_kernel, x)


def gelu_tanh_bwd(x, dy):
    return (element_launch(gelu_tanh_bwd_kernel, x, dy),)


TRITON_KERNELS: list[TritonKernel] = [
    *fwd_bwd("softmax", softmax_fwd, softmax_bwd, prefix="vjpcert_softmax", fwd_laws=("shift_invariance",),
             bwd_laws=("cotangent_sums_to_zero",), doc="softmax, a row in blocks of 32"),
    *fwd_bwd("gelu_tanh", gelu_tanh_fwd, gelu_tanh_bwd, prefix="vjpcert_gelu_tanh",
             doc="GELU (tanh form), elementwise in blocks of 64"),
]
