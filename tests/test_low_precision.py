"""Low-precision kernels and the bound that holds for every summation order.

* ``core/any_order.py``: the bound holds for a cancelling sum in random trees and in the worst order
  (positives first), where the spec's own sequential running bound does not; a sum that drops a term
  is outside it.
* bfloat16 in Triton's interpreter (``triton_kernels/bfloat16.py``): arithmetic on values, not bits,
  and conversions that round to nearest even.
* The gate in bfloat16: an honest bfloat16 kernel passes, a float32 kernel that computes in bfloat16
  fails, a kernel whose outputs are not in its dtype fails; a casting that changes the function is
  refused; Liger's RMSNorm casting modes are told apart.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import optional

from vjpcert.core.any_order import AnyOrderBackend
from vjpcert.core.kernel_bounds import Casting
from vjpcert.core.low_precision import storage_dtype
from vjpcert.core.rounding import RoundingBackend

BF16 = storage_dtype("bfloat16")


def _cancelling(n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) + 100).astype(np.float32)
    x[::2] *= -1
    return x


def _sum_in_tree(x, rng):
    vals = [np.float32(v) for v in rng.permutation(x)]
    while len(vals) > 1:
        i = int(rng.integers(len(vals) - 1))
        a, b = vals.pop(i), vals.pop(i)
        vals.insert(i, np.float32(a + b))
    return float(vals[0])


def test_the_any_order_bound_holds_in_every_order_where_the_sequential_bound_does_not():
    x = _cancelling()
    exact = float(np.sum(x.astype(np.float64)))       # 400 float32 values: float64 sums them exactly
    bound = AnyOrderBackend(np.float32).input(x).sum().e
    sequential = RoundingBackend(np.float32).input(x).sum().e
    rng = np.random.default_rng(1)
    assert all(abs(_sum_in_tree(x, rng) - exact) <= bound for _ in range(200))
    positives_first = np.float32(0)
    for v in np.sort(x)[::-1]:
        positives_first = np.float32(positives_first + v)
    error = abs(float(positives_first) - exact)
    assert error <= bound
    assert error > sequential, "the order-specific bound must not hold for every order (else this test shows nothing)"
    # negative control: a sum that drops one term is outside the bound
    assert abs(float(np.sum(x[1:].astype(np.float64))) - exact) > bound


def test_storage_rounding_and_comparisons_in_the_any_order_backend():
    B = AnyOrderBackend(np.float32, BF16)
    y = B.stored(B.input(np.array([1 / 3], np.float32)))[0]
    assert y.v == float(np.float32(1 / 3).astype(BF16)) and abs(y.v - 1 / 3) <= y.e <= 2 ** -8 * 0.34 + 1e-30
    # a value within 2e of 0 is undecided: two evaluations may lie on the two sides of the kink
    near = B.input(np.array([1e-9], np.float32))[0] + B.input(np.array([1.0], np.float32))[0] - 1
    assert B.step1(near).e == 1.0 and B.step1(B.input(np.array([0.5], np.float32))[0]).e == 0.0


# ------------------------------------------------------------------------------ bfloat16, Triton
_needs_triton = optional.needs_triton
_check = optional.check_triton


def _softmax(x, dtype):
    """softmax over the last axis computed in ``dtype`` throughout, as float64 numbers."""
    x = np.asarray(x, np.float64).astype(dtype)
    e = np.exp((x - x.max(-1, keepdims=True)).astype(dtype)).astype(dtype)
    s = e.astype(dtype).sum(-1, keepdims=True, dtype=dtype)
    return (e / s).astype(dtype)


def _kernel(name, launcher, dtype="float32"):
    from vjpcert.triton_kernels.registry import TritonKernel
    return TritonKernel(name, "softmax", "forward", ("y",), launcher, dtype=dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_an_honest_low_precision_kernel_matches_and_its_inputs_are_in_its_dtype(dtype):
    low = storage_dtype(dtype)
    seen = []

    def launcher(x):
        seen.append(x.dtype)
        return _softmax(x, np.float32).astype(low)
    cert = _check(_kernel(f"softmax_f32_arith_{dtype}_io", launcher, dtype), {"rows": 3, "n": 33})
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    assert set(seen) == {low} and cert.evidence["dtype"] == dtype
    assert any(f"{dtype} inputs and outputs" in a for a in cert.assumptions)


def test_a_float32_kernel_that_computes_in_bfloat16_fails_with_the_bound():
    def launcher(x):
        return _softmax(x, BF16).astype(np.float32)
    cert = _check(_kernel("softmax_in_bf16_claims_f32", launcher), {"rows": 3, "n": 33})
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "tolerance"
    beyond = cert.evidence["witness"]["outside_any_order_bound"]
    assert beyond["error"] > beyond["factor"] * beyond["bound_any_order"]


def test_a_kernel_whose_outputs_are_not_in_its_dtype_fails():
    cert = _check(_kernel("softmax_f32_out", lambda x: _softmax(x, np.float32), "bfloat16"), {"rows": 3, "n": 7})
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "dtype"


def test_a_casting_that_changes_the_function_is_refused():
    from vjpcert.core.registry import SpecError

    def wrong(B, x, stored):
        return stored(B.exp(x))            # not the softmax
    kernel = dataclasses.replace(_kernel("softmax_bf16", lambda x: _softmax(x, np.float32).astype(BF16), "bfloat16"),
                                 casting=Casting("says it computes exp", "float32", wrong))
    with pytest.raises(SpecError, match="does not compute the spec"):
        _check(kernel, {"rows": 2, "n": 7})


def test_the_interpreter_computes_bfloat16_values_and_rounds_to_nearest_even():
    _needs_triton()
    import torch
    import triton
    import triton.language as tl

    from vjpcert.triton_kernels import harness
    from vjpcert.triton_kernels.interpreter import faithful, interpreting
    if not interpreting():
        pytest.skip("Triton's interpreter only (TRITON_INTERPRET=1)")

    @triton.jit
    def square_and_halve(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < n)
        tl.store(y_ptr + i, x * x, mask=i < n)                                  # bfloat16 arithmetic
        tl.store(z_ptr + i, (x.to(tl.float32) / 3.0).to(tl.bfloat16), mask=i < n)   # a rounding conversion

    x = np.array([1.5, -3.0, 0.1, 7.0, -0.33], np.float32).astype(BF16)

    def run():
        xt = harness.device_tensor(x)
        y, z = torch.empty_like(xt), torch.empty_like(xt)
        square_and_halve[(1,)](xt, y, z, x.size, BLOCK=8)
        return harness.to_numpy(y), harness.to_numpy(z)
    with faithful():
        y, z = run()
    x64 = x.astype(np.float64)
    square, third = (x64 * x64).astype(np.float32).astype(BF16), (x.astype(np.float32) / np.float32(3.0)).astype(BF16)
    assert np.array_equal(y, square) and np.array_equal(z, third)
    # Triton's own interpreter squares the raw bits and truncates the conversion
    y, z = run()
    assert not np.array_equal(y, square) and not np.array_equal(z, third)


@pytest.fixture(scope="module")
def liger():
    _needs_triton()
    optional.importorskip("liger_kernel", reason="Liger-Kernel's kernels: pip install -e '.[triton]'")
    from vjpcert.triton_kernels.registry import discover
    return discover()[0]


@pytest.mark.parametrize("mode,claimed,red", [
    ("llama", "llama", False), ("gemma", "gemma", False), ("none", "none", False),
    ("llama", "gemma", True),      # llama rounds x rstd before the gain: outside gemma's single rounding
    ("none", "llama", True),       # none sums in bfloat16: outside a float32 statistic
])
def test_the_rmsnorm_casting_modes_are_told_apart(liger, mode, claimed, red):
    from vjpcert.triton_kernels.liger import RMSNORM_CASTINGS
    kernel = dataclasses.replace(liger[f"liger_rmsnorm_{mode}_bf16_fwd"], casting=RMSNORM_CASTINGS[claimed][0])
    cert = _check(kernel, {"rows": 3, "n": 33})
    if red:
        assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "casting", cert.evidence.get("witness")
    else:
        assert cert.verdict in ("kernel-match", "inconclusive"), cert.evidence.get("witness")


# ------------------------------------------------------------------------------ vjpcert check --impl --dtype
def _softmax_vjp(dtype, arithmetic):
    def impl(x, dy):
        assert x.dtype == dtype and dy.dtype == dtype
        y = _softmax(x, arithmetic)
        d = np.asarray(dy, np.float64).astype(arithmetic)
        return ((y * (d - (y * d).sum(-1, keepdims=True, dtype=arithmetic))).astype(dtype),)
    return impl


@pytest.mark.torch          # check_backward runs the implementation through the torch bridge
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_check_impl_in_low_precision_checks_an_honest_backward_and_fails_a_lower_one(dtype):
    from vjpcert.impl import check_backward
    from vjpcert.specs import resolve_op
    low = storage_dtype(dtype)
    op = resolve_op("softmax")
    honest = check_backward(op, _softmax_vjp(low, np.float32), name="honest", dtype=low)
    assert honest.verdict == "checked" and honest.evidence["dtype"] == dtype, honest.evidence.get("witness")
    if dtype == "float16":
        # computed in bfloat16 arithmetic (8 bits): outside the rule; a float16 implementation that documents
        # no casting may round any intermediate to float16, whose bound is loose enough to leave this
        # inconclusive (with the condition number), never checked
        cert = check_backward(op, _softmax_vjp(low, BF16), name="lower", dtype=low)
        assert cert.verdict == "inconclusive" and all(e["condition_number"] for e in cert.evidence["ill_conditioned"])
    # a float32 claim is held to float32 arithmetic: computing in bfloat16 fails, with the bound
    cert = check_backward(op, _softmax_vjp(np.dtype(np.float32), BF16), name="bf16_inside", dtype=np.float32)
    assert cert.verdict == "failed" and "outside_any_order_bound" in cert.evidence["witness"]
    # a float32 answer in a low-precision check is float32 code
    leak = check_backward(op, lambda x, dy: tuple(o.astype(np.float32) for o in _softmax_vjp(low, np.float32)(x, dy)),
                          name="leak", dtype=low)
    assert leak.verdict == "failed" and "returned float32" in leak.evidence["witness"]["dtype"]


# ------------------------------------------------------------------------------ float16 in the CUDA tier
HALF_FILE = '''
import math

import numpy as np

from vjpcert.cuda_kernels.common import call, cuda, empty, kernel, launch
from vjpcert.cuda_kernels.registry import KernelSpec, Sizes

ACC = np.ACCUMULATE


@kernel("void(float16[:, ::1], float16[:, ::1])", threads=32)
def softmax_half(x, y):
    """One thread per row: float16 in and out, the arithmetic in float32, the sum in ACC."""
    r = cuda.grid(1)
    if r < x.shape[0]:
        n = x.shape[1]
        m = np.float32(x[r, 0])
        for j in range(1, n):
            m = max(m, np.float32(x[r, j]))
        s = ACC(0)
        for j in range(n):
            s = ACC(s + ACC(math.exp(np.float32(x[r, j]) - m)))
        for j in range(n):
            y[r, j] = np.float32(math.exp(np.float32(x[r, j]) - m)) / np.float32(s)


def softmax_half_fwd(x):
    def dev(rows):
        out = empty(rows.shape, True, np.float16)
        launch(softmax_half, max(1, (rows.shape[0] + 31) // 32), 32, rows, out)
        return out
    return call(dev, (x,), dtype=np.float16)


KERNELS = [KernelSpec("softmax_half_fwd", "softmax", "forward", ("y",), softmax_half_fwd, dtype="float16")]
SIZES = {"softmax": Sizes(simulator=({"rows": 3, "n": 1025},), gpu=({"rows": 33, "n": 4097},))}
'''


def _half_kernel(tmp_path, accumulate: str):
    from vjpcert.cuda_kernels.check import detect_mode
    if detect_mode() != "simulator":
        pytest.skip("the CUDA simulator (numba-cuda)")
    from vjpcert.triton_report import load_user_module
    path = tmp_path / f"half_{accumulate}.py"
    path.write_text(HALF_FILE.replace("ACCUMULATE", accumulate))
    return load_user_module(path, "half").KERNELS[0]


@pytest.mark.parametrize("accumulate, verdict", [("float32", "kernel-match"), ("float16", "failed")])
def test_a_float16_cuda_kernel_is_checked_in_float16_and_a_sum_kept_in_float16_fails(tmp_path, accumulate, verdict):
    from vjpcert.cuda_kernels.check import check_kernel_claim
    kernel = _half_kernel(tmp_path, accumulate)
    cert = check_kernel_claim("softmax", kernel.claim, {"rows": 3, "n": 1025}, kernel=kernel,
                              cases=("random", "large_magnitude"))
    assert cert.verdict == verdict, cert.evidence.get("witness")
    assert any("float16 inputs and outputs" in a for a in cert.assumptions)
    if verdict == "failed":   # the kernel declares float32 sums: a float16 one is outside that bound
        assert cert.evidence["witness"]["check"] == "tolerance"
        assert "outside_any_order_bound" in cert.evidence["witness"]


def test_a_law_residual_that_rounding_explains_is_inconclusive_and_a_biased_gradient_still_fails(liger):
    """RMSNorm's <dx, x> = 0 at eps = 0 on a row of one element of 98: Liger's dx is one rounding of 0,
    times x: outside the law rule (the float32 spec's residual is exactly 0), inside what outputs each
    within its any-order bound can give the law. The same kernel with dx off by 1e-3 fails the law."""
    kernel = liger["liger_rmsnorm_gemma_bwd"]
    cert = _check(kernel, {"rows": 1, "n": 1}, cases=("huge_in_last_block",))
    assert cert.verdict == "inconclusive", cert.evidence.get("witness")
    law = cert.evidence["ill_conditioned"][0]
    assert law["check"] == "law" and law["residual"] > law["bound"] and law["ill_conditioned"]["law_bound_any_order"]

    def biased(**kw):
        dx, dgamma = kernel.launcher(**kw)
        return (dx + np.float32(1e-3)).astype(np.float32), dgamma
    cert = _check(dataclasses.replace(kernel, name="biased_rmsnorm_bwd", launcher=biased), {"rows": 1, "n": 1},
                  cases=("huge_in_last_block",))
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] in ("law", "tolerance")


@pytest.mark.triton         # vjpcert.testing loads the Triton tier with its fixtures
def test_the_fixtures_take_a_low_precision_dtype():
    from vjpcert.testing import CertificationError, assert_matches_spec, assert_triton_matches
    assert_matches_spec("softmax", lambda x: _softmax(x, np.float32).astype(BF16), kind="forward", dtype="bfloat16")
    with pytest.raises(CertificationError, match="returned float32"):
        assert_matches_spec("softmax", lambda x: _softmax(x, np.float32), kind="forward", dtype="bfloat16")
    _needs_triton()
    certs = assert_triton_matches("softmax", lambda x: _softmax(x, np.float32).astype(BF16), kind="forward",
                                  dims={"rows": 3, "n": 7}, dtype="bfloat16")
    assert all(c.evidence["dtype"] == "bfloat16" for c in certs)


def test_above_the_analysis_size_a_rule_failure_stands_and_the_certificate_says_so(monkeypatch):
    """The any-order analysis runs on arrays of Python numbers, up to ANALYSIS_MAX_ELEMENTS input
    elements; above it an honest kernel outside the rule fails (never passes), and says why."""
    from test_triton_gate import _sequential_layernorm     # the ill-conditioned honest kernel there

    from vjpcert.core import kernel_bounds
    from vjpcert.triton_kernels.registry import TritonKernel
    honest = TritonKernel("sequential_layernorm", "layernorm", "forward", ("y",), _sequential_layernorm)
    assert _check(honest, {"rows": 5, "n": 33}, cases=("large_offset",)).verdict == "inconclusive"
    monkeypatch.setattr(kernel_bounds, "ANALYSIS_MAX_ELEMENTS", 16)
    cert = _check(honest, {"rows": 5, "n": 33}, cases=("large_offset",))
    assert cert.verdict == "failed" and "not computed" in cert.evidence["any_order_bound"]



def test_an_arithmetic_less_precise_than_the_dtype_is_refused():
    """A float32 kernel that declares bfloat16 sums, or a bfloat16 casting, would be judged as a
    bfloat16 one: bad input, never a looser bound."""
    from vjpcert.core.registry import SpecError
    honest = _kernel("softmax_f32", lambda x: _softmax(x, np.float32))
    for kernel in (dataclasses.replace(honest, accumulate="bfloat16"),
                   dataclasses.replace(honest, casting=Casting("says bfloat16", "bfloat16", None))):
        with pytest.raises(SpecError, match="less precise than its dtype"):
            _check(kernel, {"rows": 2, "n": 7})


@pytest.mark.torch          # check_backward runs the implementation through the torch bridge
def test_a_low_precision_implementation_gets_its_positions_as_the_spec_reads_them():
    """RoPE in bfloat16: x and dy in bfloat16, the positions (non-differentiable) in float32 -- positions
    past 256 are not bfloat16 numbers, and rounding them would check another function."""
    from vjpcert.impl import check_backward
    from vjpcert.specs import resolve_op
    seen = {}

    def rope_half_vjp(x, pos, dy, base):
        seen.update(x=x.dtype, pos=pos.dtype, dy=dy.dtype)
        d = x.shape[-1]
        th = pos.astype(np.float64)[:, None] * float(base) ** (-2.0 * np.arange(d // 2) / d)
        cos, sin = np.concatenate([np.cos(th)] * 2, -1), np.concatenate([np.sin(th)] * 2, -1)
        g = dy.astype(np.float64)
        h = d // 2
        rot = np.concatenate([-(g * sin)[:, h:], (g * sin)[:, :h]], axis=-1)
        return ((g * cos - rot).astype(BF16),)
    cert = check_backward(resolve_op("rope_half"), rope_half_vjp, name="rope_bf16", dtype="bfloat16",
                          dims={"rows": 7, "d": 8})
    assert seen == {"x": BF16, "pos": np.dtype(np.float32), "dy": BF16}
    assert cert.verdict == "checked", cert.evidence.get("witness")


def test_bfloat16_dot_max_and_where_in_the_interpreter():
    """What bfloat16 kernels do besides arithmetic: tl.dot (float32 accumulation, within gamma_n of the
    exact products), tl.max (exact), tl.where and a conversion (one rounding)."""
    _needs_triton()
    import torch
    import triton
    import triton.language as tl

    from vjpcert.triton_kernels import harness
    from vjpcert.triton_kernels.interpreter import faithful, interpreting
    if not interpreting():
        pytest.skip("Triton's interpreter only (TRITON_INTERPRET=1)")

    @triton.jit
    def ops(a_ptr, b_ptr, c_ptr, m_ptr, e_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(a_ptr + i[:, None] * N + i[None, :])
        b = tl.load(b_ptr + i[:, None] * N + i[None, :])
        tl.store(c_ptr + i[:, None] * N + i[None, :], tl.dot(a, b))
        tl.store(m_ptr + i, tl.max(a, axis=1))
        e = tl.where(a > 0, tl.exp(a.to(tl.float32)), -a.to(tl.float32))
        tl.store(e_ptr + i[:, None] * N + i[None, :], e.to(tl.bfloat16))

    n = 16
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32).astype(BF16) for _ in range(2))
    with faithful():
        at, bt = harness.device_tensor(a), harness.device_tensor(b)
        c, e = torch.empty((n, n), dtype=torch.float32), torch.empty((n, n), dtype=torch.bfloat16)
        m = torch.empty(n, dtype=torch.bfloat16)
        ops[(1,)](at, bt, c, m, e, N=n)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(harness.to_numpy(c) - a64 @ b64) <= n * 2 ** -24 * (np.abs(a64) @ np.abs(b64)))
    assert np.array_equal(harness.to_numpy(m).astype(np.float64), a64.max(1))
    expected = np.where(a64 > 0, np.exp(a64), -a64).astype(np.float32).astype(BF16)
    assert np.array_equal(harness.to_numpy(e), expected)
