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
    softmax_split_racy       a row split over programs (BLOCK_SPLIT columns each); each program writes
                             its partial max and sum to scratch, and the row's last program combines
                             them with nothing to make it wait for the others: right whenever the
                             programs run in grid order (the interpreter's), wrong under any order that
                             runs the last program before the others        -> program order
    softmax_split_atomic_racy   the same race with the row's total made by float atomic_add: atomics
                             make an order's rounding legitimately different, not a program that reads
                             the total before the others added to it              -> program order

Correct twins (``TWINS``), which must stay kernel-match:

    softmax_split_two_pass   the split softmax with the combine in a second launch: every program of
                             a launch writes its own entries, so every order gives the same bits
    softmax_split_atomic     the row's total by float atomic_add in one launch, read in the next: the
                             order changes the total's rounding (within the tolerance rule), nothing else
"""
from __future__ import annotations

import vjpcert.triton_kernels  # noqa: F401  (first: TRITON_INTERPRET before triton decorates kernels)
import triton
import triton.language as tl

import numpy as np

from vjpcert.triton_kernels import harness
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


BLOCK_SPLIT = 16               # columns per program of the split softmaxes: n = 33 is 3 programs a row


@triton.jit
def _split_partials(x_ptr, max_ptr, sum_ptr, n, splits, BLOCK: tl.constexpr):
    """This program's chunk of its row: its max and sum exp(x - max), to scratch (its own entries)."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    cols = s * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    m = tl.max(x, 0)
    tl.store(max_ptr + row * splits + s, m)
    tl.store(sum_ptr + row * splits + s, tl.sum(tl.exp(x - m), 0))


@triton.jit
def _split_combine(max_ptr, sum_ptr, row, splits, SPLITS: tl.constexpr):
    k = tl.arange(0, SPLITS)
    ms = tl.load(max_ptr + row * splits + k, mask=k < splits, other=-float("inf"))
    ts = tl.load(sum_ptr + row * splits + k, mask=k < splits, other=0.0)
    row_max = tl.max(ms, 0)
    return row_max, tl.sum(ts * tl.exp(ms - row_max), 0)


@triton.jit
def softmax_split_racy_kernel(x_ptr, y_ptr, max_ptr, sum_ptr, n, splits, BLOCK: tl.constexpr,
                              SPLITS: tl.constexpr):
    _split_partials(x_ptr, max_ptr, sum_ptr, n, splits, BLOCK)
    row = tl.program_id(0).to(tl.int64)
    if tl.program_id(1) == splits - 1:      # FAULT: nothing makes the row's other programs finish first
        row_max, total = _split_combine(max_ptr, sum_ptr, row, splits, SPLITS)
        cols = tl.arange(0, BLOCK)
        for start in range(0, n, BLOCK):
            mask = start + cols < n
            x = tl.load(x_ptr + row * n + start + cols, mask=mask, other=-float("inf"))
            tl.store(y_ptr + row * n + start + cols, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def split_partials_kernel(x_ptr, max_ptr, sum_ptr, n, splits, BLOCK: tl.constexpr):
    _split_partials(x_ptr, max_ptr, sum_ptr, n, splits, BLOCK)


@triton.jit
def split_output_kernel(x_ptr, y_ptr, max_ptr, sum_ptr, n, splits, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """Every program combines its row's partials (read only) and writes its own chunk of y."""
    row = tl.program_id(0).to(tl.int64)
    row_max, total = _split_combine(max_ptr, sum_ptr, row, splits, SPLITS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    tl.store(y_ptr + row * n + cols, tl.exp(x - row_max) / total, mask=cols < n)


@triton.jit
def _row_max_of_partials(max_ptr, row, splits, SPLITS: tl.constexpr):
    k = tl.arange(0, SPLITS)
    return tl.max(tl.load(max_ptr + row * splits + k, mask=k < splits, other=-float("inf")), 0)


@triton.jit
def split_atomic_total_kernel(x_ptr, max_ptr, total_ptr, n, splits, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """Each program adds its chunk's sum exp(x - row max) to its row's total with a float atomic."""
    row = tl.program_id(0).to(tl.int64)
    row_max = _row_max_of_partials(max_ptr, row, splits, SPLITS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    tl.atomic_add(total_ptr + row, tl.sum(tl.exp(x - row_max), 0))


@triton.jit
def split_atomic_output_kernel(x_ptr, y_ptr, max_ptr, total_ptr, n, splits, BLOCK: tl.constexpr,
                               SPLITS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_max = _row_max_of_partials(max_ptr, row, splits, SPLITS)
    total = tl.load(total_ptr + row)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    tl.store(y_ptr + row * n + cols, tl.exp(x - row_max) / total, mask=cols < n)


@triton.jit
def split_atomic_racy_kernel(x_ptr, y_ptr, max_ptr, total_ptr, n, splits, BLOCK: tl.constexpr,
                             SPLITS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_max = _row_max_of_partials(max_ptr, row, splits, SPLITS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    tl.atomic_add(total_ptr + row, tl.sum(tl.exp(x - row_max), 0))
    if tl.program_id(1) == splits - 1:      # FAULT: the atomics make each add whole, not the others done
        total = tl.load(total_ptr + row)
        every = tl.arange(0, BLOCK)
        for start in range(0, n, BLOCK):
            mask = start + every < n
            xs = tl.load(x_ptr + row * n + start + every, mask=mask, other=-float("inf"))
            tl.store(y_ptr + row * n + start + every, tl.exp(xs - row_max) / total, mask=mask)


def _split_scratch(x):
    rows, n = x.shape
    splits = triton.cdiv(n, BLOCK_SPLIT)
    scratch = [harness.device_tensor(np.zeros((rows, splits), np.float32), "scratch") for _ in range(2)]
    return rows, n, splits, harness.device_tensor(x), harness.empty((rows, n)), scratch


def softmax_split_racy(x):
    rows, n, splits, xt, y, (maxes, sums) = _split_scratch(x)
    softmax_split_racy_kernel[(rows, splits)](xt, y, maxes, sums, n, splits, BLOCK=BLOCK_SPLIT,
                                              SPLITS=triton.next_power_of_2(splits))
    return harness.to_numpy(y)


def softmax_split_two_pass(x):
    rows, n, splits, xt, y, (maxes, sums) = _split_scratch(x)
    split_partials_kernel[(rows, splits)](xt, maxes, sums, n, splits, BLOCK=BLOCK_SPLIT)
    split_output_kernel[(rows, splits)](xt, y, maxes, sums, n, splits, BLOCK=BLOCK_SPLIT,
                                        SPLITS=triton.next_power_of_2(splits))
    return harness.to_numpy(y)


def _softmax_split_atomic(x, racy: bool):
    rows, n, splits, xt, y, (maxes, sums) = _split_scratch(x)
    total = harness.device_tensor(np.zeros(rows, np.float32), "scratch")
    p2 = triton.next_power_of_2(splits)
    split_partials_kernel[(rows, splits)](xt, maxes, sums, n, splits, BLOCK=BLOCK_SPLIT)
    if racy:
        split_atomic_racy_kernel[(rows, splits)](xt, y, maxes, total, n, splits, BLOCK=BLOCK_SPLIT, SPLITS=p2)
    else:
        split_atomic_total_kernel[(rows, splits)](xt, maxes, total, n, splits, BLOCK=BLOCK_SPLIT, SPLITS=p2)
        split_atomic_output_kernel[(rows, splits)](xt, y, maxes, total, n, splits, BLOCK=BLOCK_SPLIT, SPLITS=p2)
    return harness.to_numpy(y)


def softmax_split_atomic(x):
    return _softmax_split_atomic(x, racy=False)


def softmax_split_atomic_racy(x):
    return _softmax_split_atomic(x, racy=True)


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
    "softmax_split_racy": (TritonKernel("control_softmax_split_racy", "softmax", "forward", ("y",),
                                        softmax_split_racy), {"rows": 5, "n": 33}, "program order"),
    "softmax_split_atomic_racy": (TritonKernel("control_softmax_split_atomic_racy", "softmax", "forward", ("y",),
                                               softmax_split_atomic_racy), {"rows": 5, "n": 33}, "program order"),
}

# name -> a correct kernel that must stay kernel-match (the twins of the controls above)
TWINS = {
    "softmax_split_two_pass": TritonKernel("twin_softmax_split_two_pass", "softmax", "forward", ("y",),
                                           softmax_split_two_pass),
    "softmax_split_atomic": TritonKernel("twin_softmax_split_atomic", "softmax", "forward", ("y",),
                                         softmax_split_atomic),
}
