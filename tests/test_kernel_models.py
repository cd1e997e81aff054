"""The machinery under the kernel tier's verdicts, tested on its own: the rounding-error model
(cuda_kernels/error_model.py) against float32 arithmetic actually carried out, and the simulator's
additions (greenlet threads, warp shuffles, device limits, GPU math). Fast: no kernel sweep here."""
import math

import numpy as np
import pytest

from vjpcert.cuda_kernels import error_model as em
# module globals, as in kernel files: the simulator swaps ``cuda`` and ``math`` in a kernel's globals
from vjpcert.cuda_kernels.common import cuda, float32, launch, to_device
from vjpcert.cuda_kernels import settings as tol
from vjpcert.cuda_kernels.check import detect_mode
from vjpcert.cuda_kernels.registry import KERNELS

SIM = detect_mode() == "simulator"
U = tol.UNIT_ROUNDOFF


def _float32_sum(terms: np.ndarray, order: tuple) -> np.ndarray:
    """The kernels' summation orders carried out in float32 (numpy scalars round like the GPU)."""
    kind = order[0]
    t = terms.astype(np.float32)
    if kind == "sequential":
        acc = np.zeros(t.shape[:-1], np.float32)
        for k in range(t.shape[-1]):
            acc = acc + t[..., k]
        return acc
    if kind in ("block", "strided_tree"):
        B = order[1]
        lead = np.zeros(t.shape[:-1] + (B,), np.float32)
        for j in range(t.shape[-1]):
            lead[..., j % B] = lead[..., j % B] + t[..., j]
        groups = [lead] if kind == "strided_tree" or B <= 32 else None
        if groups is None:                       # a tree within each warp of 32, then over the warps
            w = lead.reshape(lead.shape[:-1] + (B // 32, 32))
            while w.shape[-1] > 1:
                h = w.shape[-1] // 2
                w = w[..., :h] + w[..., h:]
            lead = w[..., 0]
        while lead.shape[-1] > 1:
            h = lead.shape[-1] // 2
            lead = lead[..., :h] + lead[..., h:]
        return lead[..., 0]
    if kind == "tiles":
        T = order[1]
        acc = np.zeros(t.shape[:-1], np.float32)
        for k0 in range(0, t.shape[-1], T):
            part = np.zeros(t.shape[:-1], np.float32)
            for k in range(k0, min(k0 + T, t.shape[-1])):
                part = part + t[..., k]
            acc = acc + part
        return acc
    raise ValueError(order)


@pytest.mark.parametrize("order", [("sequential",), ("block", 32), ("block", 256), ("strided_tree", 8), ("tiles", 16)],
                         ids=lambda o: "-".join(map(str, o)))
@pytest.mark.parametrize("case", ["random", "near_constant", "mixed_magnitude", "positive"])
def test_a_sum_in_float32_stays_within_its_model(order, case):
    """Real float32 sums in each kernel order: the error never exceeds u ||c||_1, and stays within
    lambda u ||c||_2 where the model claims the probabilistic bound (independent roundings)."""
    rng = np.random.default_rng(7)
    z = rng.standard_normal((64, 777))
    x = {"random": z, "near_constant": 0.3 + 1e-6 * z, "mixed_magnitude": z * 10 ** rng.uniform(-3, 3, z.shape),
         "positive": z * z}[case].astype(np.float32).astype(np.float64)
    t = em.reduce_sum(em.exact(x), order, keepdims=False)
    assert np.allclose(t.v, x.sum(-1), rtol=1e-12, atol=1e-300)
    err = np.abs(_float32_sum(x, order).astype(np.float64) - t.v)
    assert np.all(err <= U * t.l1()), np.max(err / (U * t.l1()))
    if case != "near_constant":
        assert np.all(err <= tol.LAMBDA * U * t.l2())


def test_the_model_of_a_sum_sees_the_order():
    """A sequential sum of 4096 squares rounds ~sqrt(4096) times the block order's l2 and ~B times its l1."""
    x = np.random.default_rng(1).standard_normal((1, 4096)) ** 2
    seq = em.reduce_sum(em.exact(x), ("sequential",))
    blk = em.reduce_sum(em.exact(x), ("block", 256))
    assert seq.p2.item() > 20 * blk.p2.item() and seq.p1.item() > 100 * blk.p1.item()


def test_tracked_arithmetic_is_first_order_propagation():
    a, b = em.exact(3.0), em.Tracked(2.0, 1.0, 1.0)         # b carries one rounding of size u
    c = a * b                                               # |d(ab)/db| = 3, then one rounding of 6
    assert c.v == 6 and c.p1 == 3 + 6 and np.isclose(c.p2, np.hypot(3, 6))
    assert (em.exact(4.0) * em.exact(0.5)).p1 == 0           # a power of two scales exactly
    assert em.constant(0.5).l1() == 0 and em.constant(0.1).s1 == pytest.approx(0.1)
    d = em.exact(np.ones(3)) + em.Tracked(np.array([1.0]), 1.0, 1.0)   # a broadcast operand is shared
    assert np.all(d.s1 == 1) and np.all(d.p1 == 2)
    assert em.bound(em.Tracked(1.0, 10.0, 1.0), "probabilistic") == pytest.approx(tol.LAMBDA * U)
    assert em.bound(em.Tracked(1.0, 10.0, 1.0), "deterministic") == pytest.approx(10 * U)


def test_every_kernel_has_a_model_and_every_case_a_bound():
    assert all(k.model is not None for k in KERNELS.values())
    assert set(tol.MODEL_FOR_CASE) == {*tol.CASES, *tol.KINK_CASES, *tol.ORDER_CASES}


def test_a_model_of_another_formula_makes_the_claim_inconclusive():
    """If a kernel's model does not compute the spec (a forgotten term), its bound is about something
    else: the checker refuses to decide rather than pass or fail by it."""
    from dataclasses import replace

    from vjpcert.cuda_kernels.check import check_kernel_claim
    from vjpcert.specs import builtin_ops
    real = KERNELS["gelu_erf_fwd"]

    def wrong_model(cfg, x):
        return real.model(cfg, x) * em.exact(1.001)
    spec = replace(real, name="gelu_erf_fwd~wrong_model", model=wrong_model)
    cert = check_kernel_claim(builtin_ops()["gelu_erf"], spec.claim, {"rows": 1, "n": 7}, kernel=spec,
                              cases=("random",))
    assert cert.verdict == "inconclusive" and "does not reproduce the spec" in cert.evidence["reason"]


# ------------------------------------------------------------------------------ the simulator
needs_sim = pytest.mark.skipif(not SIM, reason="simulator behaviour")


@needs_sim
def test_warp_shuffles_in_the_simulator():
    from vjpcert.cuda_kernels.simulator import race_detector

    @cuda.jit
    def warp_total(x, out):
        t = cuda.threadIdx.x
        v = x[t]
        m = 16
        while m > 0:
            v += cuda.shfl_xor_sync(0xFFFFFFFF, v, m)
            m //= 2
        out[t] = v + cuda.shfl_down_sync(0xFFFFFFFF, x[t], 1) * 0 + cuda.shfl_sync(0xFFFFFFFF, x[t], 0) * 0

    x = np.arange(64, dtype=np.float32)
    out = to_device(np.zeros(64, np.float32))
    with race_detector():
        launch(warp_total, 1, 64, to_device(x), out)
    got = out.copy_to_host()
    assert np.all(got[:32] == x[:32].sum()) and np.all(got[32:] == x[32:].sum())

    @cuda.jit
    def divergent(x, out):
        t = cuda.threadIdx.x
        v = x[t]
        if t < 16:
            v = cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)
        cuda.syncthreads()
        out[t] = v
    with pytest.raises(RuntimeError, match="waits at a shuffle that some of its lanes never reach"):
        launch(divergent, 1, 32, to_device(x[:32]), out)


@needs_sim
def test_the_simulator_enforces_the_device_limits_and_math():
    @cuda.jit
    def big_shared(a):
        sm = cuda.shared.array(13000, float32)          # 52 000 bytes > 48 KiB
        sm[cuda.threadIdx.x] = a[0]
        a[0] = sm[0]

    with pytest.raises(RuntimeError, match="static shared memory 52000 bytes > 49152"):
        launch(big_shared, 1, 32, to_device(np.ones(1, np.float32)))

    @cuda.jit
    def nothing(a):
        a[0] = 1
    with pytest.raises(RuntimeError, match="at most 1024 threads per block"):
        launch(nothing, 1, 2048, to_device(np.ones(1, np.float32)))

    @cuda.jit
    def overflow(a, out):
        out[0] = float32(math.exp(a[0]))
        out[1] = float32(math.log(a[1]))
        out[2] = float32(math.sqrt(a[2]))

    out = to_device(np.zeros(3, np.float32))
    launch(overflow, 1, 1, to_device(np.array([1000, 0, -1], np.float32)), out)
    got = out.copy_to_host()
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])
