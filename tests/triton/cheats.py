"""Kernels that try to pass the Triton tier without computing their op, and honest ones it must pass.

Each cheat wraps one of our reference kernels (triton_kernels/reference.py) in a launcher that games
one thing the gate could trust; the test says which defence catches it (tests/test_triton_gate.py):

    listed_sizes_only          right only at the sizes the kernel declares; 0.1% off elsewhere
    skips_block_when_32_divides   the last 32-wide block of a row left at 0 exactly when 32 divides n
                               (the declared sizes 1, 7, 33, 1025 are each one past a multiple of 32)
    wrong_at_moderate_offsets  0.1% off on rows whose |mean| / std lies in (3, 100): a regime between
                               the near-constant and large-offset cases
    writes_its_input           a backward that zeroes the caller's dy after using it
    truth_from_gc              finds a float64 array of its output's shape among the garbage
                               collector's objects and returns it (zeros if there is none)
    truth_from_stack           the same, from the local variables of its callers' frames
    own_sampler_of_x           returns zeros, and brings a sampler that draws x = 0 (gelu(0) = 0)
    caches_by_shape            computes once per shape and returns that result ever after
    nan_everywhere             returns NaN (a NaN wildcard: a comparison that lets NaN through)
    bfloat16_inside            right, then rounded to bfloat16: a float32 claim held to float32

Honest kernels:

    softmax_random_block_order  the row's sum over blocks taken in a random order on every call:
                               its bits vary from call to call, each within the tolerance rule
    softmax_random_order_then_off  the same, 0.1% off on every second call: held to the rule in
                               every run, so it goes red (the control of the one above)

Their report, every kernel at its sizes and the gate's: reports/adversarial/ (regenerate with
`vjpcert triton tests/triton/cheats.py --out reports/adversarial`). Every cheat and the control
fail at one size at least; the honest kernel matches at every size.
"""
from __future__ import annotations

import gc
import sys

import vjpcert.triton_kernels  # noqa: F401  (first: TRITON_INTERPRET before triton decorates kernels)
import triton
import triton.language as tl

import numpy as np

from vjpcert.triton_kernels import harness
from vjpcert.triton_kernels import reference as ref
from vjpcert.triton_kernels.registry import INTERPRETER_SIZES, TritonKernel

DECLARED = {d["rows"] * d["n"] for d in INTERPRETER_SIZES}
OFF = 1e-3


def listed_sizes_only(x):
    y = ref.gelu_tanh_fwd(x)
    return y if x.size in DECLARED else (y * (1 + OFF)).astype(np.float32)


def skips_block_when_32_divides(x):
    y = ref.gelu_tanh_fwd(x)
    if x.shape[-1] % 32 == 0:
        y[..., -32:] = 0.0
    return y


def wrong_at_moderate_offsets(x):
    y = ref.softmax_fwd(x)
    x64 = x.astype(np.float64)
    std = x64.std(axis=-1)
    with np.errstate(all="ignore"):
        ratio = np.abs(x64.mean(axis=-1)) / std
    moderate = (std > 0) & (ratio > 3) & (ratio < 100)
    y[moderate] *= 1 + OFF
    return y


def writes_its_input(x, dy):
    dx = ref.softmax_bwd(x, dy)
    dy[...] = 0.0
    return dx


def _float64_like(shape, values):
    for v in values:
        if type(v) is np.ndarray and v.dtype == np.float64 and v.shape == shape:
            return v
        if type(v) in (list, tuple):
            for e in v:
                if type(e) is np.ndarray and e.dtype == np.float64 and e.shape == shape:
                    return e
    return None


def truth_from_gc(x):
    for obj in gc.get_objects():
        found = _float64_like(x.shape, [obj])
        if found is not None:
            return found.astype(np.float32)
    return np.zeros_like(x)


def truth_from_stack(x):
    frame = sys._getframe(1)
    while frame is not None:
        found = _float64_like(x.shape, list(frame.f_locals.values()))
        if found is not None:
            return found.astype(np.float32)
        frame = frame.f_back
    return np.zeros_like(x)


def own_sampler_of_x(x):
    return np.zeros_like(x)


_CACHE: dict = {}


def caches_by_shape(x):
    if x.shape not in _CACHE:
        _CACHE[x.shape] = ref.gelu_tanh_fwd(x)
    return _CACHE[x.shape].copy()


def nan_everywhere(x):
    return np.full_like(x, np.nan)


def bfloat16_inside(x):
    y = ref.gelu_tanh_fwd(x)
    bits = y.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)    # round to nearest even
    return rounded.view(np.float32)


@triton.jit
def softmax_block_order_kernel(x_ptr, y_ptr, order_ptr, n, blocks, BLOCK: tl.constexpr):
    """softmax with the row's maximum and sum taken over its blocks in the order ``order_ptr`` lists."""
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n
    y_ptr += row * n
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    for b in range(0, blocks):
        start = tl.load(order_ptr + b) * BLOCK
        m = tl.maximum(m, tl.load(x_ptr + start + cols, mask=start + cols < n, other=-float("inf")))
    row_max = tl.max(m, 0)
    total = 0.0
    for b in range(0, blocks):
        start = tl.load(order_ptr + b) * BLOCK
        x = tl.load(x_ptr + start + cols, mask=start + cols < n, other=-float("inf"))
        total += tl.sum(tl.exp(x - row_max), 0)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + start + cols, mask=mask, other=-float("inf"))
        tl.store(y_ptr + start + cols, tl.exp(x - row_max) / total, mask=mask)


# the orders are drawn call by call, from the call's number or from "seeds" where a test lists them:
# a test that resets the count replays them
ORDER_CALLS = {"n": 0, "seeds": None}


def softmax_random_block_order(x):
    rows, n = x.shape
    blocks = triton.cdiv(n, ref.ROW_BLOCK)
    ORDER_CALLS["n"] += 1
    seed = ORDER_CALLS["seeds"][ORDER_CALLS["n"] - 1] if ORDER_CALLS["seeds"] else ORDER_CALLS["n"]
    order = np.random.default_rng(seed).permutation(blocks).astype(np.int32)   # another each call
    xt, ot = harness.device_tensor(x), harness.device_tensor(order, what="block order")
    out = harness.empty((rows, n))
    softmax_block_order_kernel[(rows,)](xt, out, ot, n, blocks, BLOCK=ref.ROW_BLOCK)
    return harness.to_numpy(out)


_CALLS = {"n": 0}


def softmax_random_order_then_off(x):
    _CALLS["n"] += 1
    y = softmax_random_block_order(x)
    return (y * (1 + OFF)).astype(np.float32) if _CALLS["n"] % 2 == 0 else y


def _k(name, op, kind, launcher, role="cheat", **kw):
    return TritonKernel(f"{role}_{name}", op, kind, ("y",) if kind == "forward" else ("dx",), launcher,
                        source="tests/triton/cheats.py", **kw)


# name -> (kernel, the check that catches it)
CHEATS = {
    "listed_sizes_only": (_k("listed_sizes_only", "gelu_tanh", "forward", listed_sizes_only), "tolerance"),
    "skips_block_when_32_divides": (_k("skips_block_when_32_divides", "gelu_tanh", "forward",
                                       skips_block_when_32_divides), "tolerance"),
    "wrong_at_moderate_offsets": (_k("wrong_at_moderate_offsets", "softmax", "forward", wrong_at_moderate_offsets),
                                  "tolerance"),
    "writes_its_input": (_k("writes_its_input", "softmax", "backward", writes_its_input), "input written"),
    "truth_from_gc": (_k("truth_from_gc", "gelu_tanh", "forward", truth_from_gc), "tolerance"),
    "truth_from_stack": (_k("truth_from_stack", "gelu_tanh", "forward", truth_from_stack), "tolerance"),
    "own_sampler_of_x": (_k("own_sampler_of_x", "gelu_tanh", "forward", own_sampler_of_x,
                            samplers={"x": lambda rng, shape, params: np.zeros(shape)}), "tolerance"),
    "caches_by_shape": (_k("caches_by_shape", "gelu_tanh", "forward", caches_by_shape), "tolerance"),
    "nan_everywhere": (_k("nan_everywhere", "softmax", "forward", nan_everywhere), "NaN poison"),
    "bfloat16_inside": (_k("bfloat16_inside", "gelu_tanh", "forward", bfloat16_inside), "tolerance"),
}

HONEST = {
    "softmax_random_block_order": _k("softmax_random_block_order", "softmax", "forward", softmax_random_block_order,
                                     role="honest"),
}
HONEST_CONTROL = _k("softmax_random_order_then_off", "softmax", "forward", softmax_random_order_then_off,
                    role="control")

# the report of these kernels (reports/adversarial/): vjpcert triton tests/triton/cheats.py --out reports/adversarial
TRITON_KERNELS = [k for k, _ in CHEATS.values()] + list(HONEST.values()) + [HONEST_CONTROL]
