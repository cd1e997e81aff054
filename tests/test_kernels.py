"""The kernel tier, generically over the kernel registry: every kernel matches its spec within its
own rounding-error model at sizes crossing the block boundaries, at every input case, in the
simulator's launch configuration and in the GPU's own; bitwise deterministic, every output element
written (NaN poison), its runtime laws holding, the shared-memory race detector clean (simulator),
and compiled for sm_90 without spills, over-limit shared memory or float64 instructions. Then the
negative controls: each check goes red on a kernel built to break it, among them the faults of
the adversarial kernel checks (overflow, cancellation, summation order, accumulator sizes, shapes that do not link).

In the simulator (no GPU here) the whole file takes a few minutes on two cores.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vjpcert.cuda_kernels import attention_flash, resources
from vjpcert.cuda_kernels import settings as tol
from vjpcert.cuda_kernels.check import (ORDERS, check_kernel_claim, check_law, detect_mode, kernel_claims, kernel_dims,
                                        kernel_launches, law_objects, sample_inputs)
from vjpcert.cuda_kernels.registry import KERNELS
from vjpcert.specs import builtin_ops

ROOT = Path(__file__).resolve().parents[1]
OPS = builtin_ops()
MODE = detect_mode()
SIM = MODE == "simulator"


def _load_controls():
    spec = importlib.util.spec_from_file_location("kernel_controls", ROOT / "tests" / "kernels" / "controls.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CONTROLS = _load_controls().CONTROLS
CASES = [(k.name, d, launch) for k in KERNELS.values() for d, launch in kernel_launches(k.op, MODE, k.claim)]


def _case_id(name, dims, launch):
    return f"{name}-{'-'.join(f'{k}{v}' for k, v in dims.items())}" + ("-gpu_launch" if launch else "")


def test_there_is_cuda_to_run_on():
    """Here: the simulator (no GPU); on a GPU machine: the GPU. Never 'none' in CI."""
    assert MODE in ("simulator", "gpu")


def _default_size(name, dims) -> bool:
    """The one size each kernel is checked at in the default run: the first of its ladder that
    crosses a warp (a dim above 32) with several rows or queries, or its only one."""
    sizes = [d for n, d, launch in CASES if n == name and not launch]
    crossing = [d for d in sizes if max(d.values()) > 32 and min(d.values()) > 1]
    return dims == (crossing or sizes)[0]


def _slow(name, dims, launch) -> bool:
    """In the simulator (one Python thread per CUDA thread) the default run checks each kernel at one
    size that crosses a warp (attention at m = 7: m x m scores) and each op's forward kernels at the
    GPU's launch (a backward there is seconds of simulated block reductions; linear's contraction of
    1024 there is its negative control's size, red by default); --slow at every size
    and launch (the committed kernel certificates hold every size)."""
    if MODE == "gpu":
        return False
    if launch == ORDERS:        # the summation-order check: seconds at m = 512 (its control runs by default)
        return True
    if launch:      # plain attention at the GPU's launch is m x m threads: its flash twin stands for it,
        # at its narrower head width (the wider one is the same tiles, twice the simulated threads)
        return name.endswith("_bwd") or (KERNELS[name].op.startswith("attention") and not name.startswith("flash")) \
            or (name.startswith("flash") and dims.get("d", 0) > 64) or dims.get("n_in", 0) >= 1024
    if KERNELS[name].op.startswith("attention"):
        return dims.get("m") != 7
    return not _default_size(name, dims)


@pytest.mark.parametrize("name,dims,launch", [pytest.param(*c, marks=pytest.mark.slow if _slow(*c) else ())
                                              for c in CASES], ids=[_case_id(*c) for c in CASES])
def test_every_kernel_matches_its_spec(name, dims, launch):
    spec = KERNELS[name]
    cert = check_kernel_claim(OPS[spec.op], spec.claim, dims, seed=0, launch=launch)
    assert cert.verdict == "kernel-match", json.dumps(cert.evidence, default=str)[:3000]
    ev = cert.evidence
    if launch == ORDERS:        # one run, equal rows only: races and determinism are the other sizes'
        assert list(ev["per_case"]) == list(tol.ORDER_CASES) and not ev["race_detector"]["ran"]
        assert cert.method.endswith("-summation-order") and any("summation-order case" in a for a in cert.assumptions)
        assert ev["launch_config"]["block"] == (32 if SIM else 256)
        assert all(o["worst_error_over_bound"] <= 1 for o in ev["per_case"][tol.EQUAL_ROWS]["outputs"].values())
        return
    expected_cases = tol.SIMULATED_GPU_LAUNCH_CASES if (launch and SIM) else \
        (*tol.CASES, *(tol.KINK_CASES if OPS[KERNELS[name].op].uses_kinks() else ()))
    assert ev["mode"] == MODE and "bitwise identical" in ev["determinism"]
    assert ev["launch_config"]["block"] == (256 if launch or not SIM else 32)
    assert "every element written" in ev["nan_poison"]
    assert list(ev["per_case"]) == list(expected_cases)
    for case, per in ev["per_case"].items():
        assert set(per["outputs"]) == set(spec.outputs)
        for out in per["outputs"].values():
            assert out["worst_error_over_bound"] <= 1 and out["model_value_deviation"] <= 1
        if launch and SIM:
            assert per["laws"] == "checked at the simulator's launch configuration"
        else:
            assert len(per["laws"]) == len(spec.laws) and all(l["ok"] for l in per["laws"].values())
    for out in ev["per_case"]["random"]["outputs"].values():
        # a rounding-error bound, not a vacuous one: within a few hundred times what numpy's float32
        # evaluation of the spec actually errs by (or its last rounding)
        if out["scale"]:
            assert out["max_bound"] <= 1e3 * max(out["float32_spec_error"], tol.UNIT_ROUNDOFF * out["scale"]), out
    if SIM:
        assert ev["race_detector"]["ran"] and ev["race_detector"]["clean"], ev["race_detector"]
    json.loads(cert.to_json())                       # a certificate the report runner can write


def test_claims_and_dims_cover_every_kernel_and_cross_block_boundaries():
    claims = {c for name in OPS for c in kernel_claims(OPS[name])}
    assert claims == {k.claim for k in KERNELS.values()}
    assert kernel_claims("softmax") == ["kernel:softmax_fwd", "kernel:softmax_bwd"]
    assert kernel_claims("mhsa") == [] and kernel_dims("mhsa", "simulator") == []
    # plain and flash, forward and backward, and the flash backward alone given the saved statistics
    assert len(kernel_claims("attention")) == 5
    for op in ("softmax", "rmsnorm", "layernorm", "gelu_erf"):
        widths = {d["n"] for d in kernel_dims(op, "simulator")}
        rows = {d["rows"] for d in kernel_dims(op, "simulator")}
        assert {1, 7, 33, 1025} <= widths and {1, 7, 33} <= rows
    for op, mode in [(o, m) for o in {k.op for k in KERNELS.values()} for m in ("simulator", "gpu")]:
        assert kernel_dims(op, mode), (op, mode)
        for d, _ in kernel_launches(op, mode):
            OPS[op].resolve_dims(d)                         # valid dims for the spec
    # the GPU's own launch configuration runs in the simulator for every kernel: long rows past 16
    # strides of 256 threads, head widths 64 and 128, query counts past one 16-tile
    per_kernel = {k.name: [d for d, launch in kernel_launches(k.op, "simulator", k.claim) if launch == "gpu"]
                  for k in KERNELS.values()}
    assert all(per_kernel.values()), per_kernel
    gpu_launch = {op: [d for d, launch in kernel_launches(op, "simulator") if launch == "gpu"]
                  for op in {k.op for k in KERNELS.values()}}
    for op in ("softmax", "rmsnorm", "layernorm", "gelu_erf", "gelu_tanh"):
        assert max(d["n"] for d in gpu_launch[op]) > 16 * 256
    for op in ("attention", "attention_causal"):
        assert {d["d"] for d in gpu_launch[op]} == {64, 128} and all(d["m"] > 16 for d in gpu_launch[op])
    assert {d["d"] for op in ("rope_half", "rope_interleaved") for d in gpu_launch[op]} == {64, 128}
    assert kernel_launches("softmax", "gpu") == [(d, None) for d in kernel_dims("softmax", "gpu")]
    # a certificate is filed by (op, claim, dims): the GPU-launch sizes must differ from the others
    for k in KERNELS.values():
        slugs = [tuple(sorted(d.items())) for d, _ in kernel_launches(k.op, "simulator", k.claim)]
        assert len(slugs) == len(set(slugs)), k.name


def test_the_equal_rows_case_repeats_one_row_of_each_differentiable_input_and_of_the_cotangent():
    inputs, dy = sample_inputs(OPS["attention"], {"m": 9, "d": 4}, 0, True, tol.EQUAL_ROWS)
    for a in (*inputs.values(), dy):
        assert a.dtype == np.float32 and a.flags.c_contiguous and a.shape == (9, 4)
        assert (a == a[0]).all() and len(set(a[0].tolist())) == 4      # equal rows, not equal entries
    random, _ = sample_inputs(OPS["attention"], {"m": 9, "d": 4}, 0, True, "random")
    assert (inputs["Q"][0] == random["Q"][0]).all() and not (random["Q"] == random["Q"][0]).all()
    with pytest.raises(Exception, match="unknown kernel launch"):
        check_kernel_claim(OPS["attention"], "kernel:flash_attention_bwd_saved", {"m": 9, "d": 4}, launch="fast")


# Laws a kernel does not run, each with its reason (said in the kernel's file too): none is skipped silently.
LAWS_NOT_RUN = {
    ("batchnorm", "dx_orthogonal_to_xhat"): "at batch 7, large magnitudes, its residual is 1.15 x the differential "
                                            "law bound while dx is inside the kernel's error model: rounding, "
                                            "which that rule does not bound for every summation order",
}


def test_every_spec_law_about_forward_or_backward_runs_on_a_kernel():
    """A new law in a spec must not be silently skipped by the kernel tier: every law that calls the
    op's forward or backward is attached to a kernel of that op, and to a kernel of the right kind,
    or listed in LAWS_NOT_RUN with its reason."""
    import inspect
    for op_name in {k.op for k in KERNELS.values()}:
        op = OPS[op_name]
        attached = {}
        for k in KERNELS.values():
            if k.op == op_name:
                for law in law_objects(op, k):
                    attached.setdefault(law.name, set()).add(k.kind)
                    uses = set(inspect.signature(law.fn).parameters)
                    assert k.kind == "backward" or "backward" not in uses, (k.name, law.name)
        for law in op.laws:
            uses = set(inspect.signature(law.fn).parameters)
            if uses & {"forward", "backward"}:
                assert (law.name in attached) != ((op_name, law.name) in LAWS_NOT_RUN), (op_name, law.name)


def test_launchers_take_batch_dims_and_device_arrays():
    from vjpcert.cuda_kernels.common import to_device
    from vjpcert.cuda_kernels.softmax import softmax_fwd
    x = np.random.default_rng(1).standard_normal((2, 3, 9)).astype(np.float32)
    y = softmax_fwd(x)
    assert y.shape == x.shape and np.array_equal(y.reshape(6, 9), softmax_fwd(x.reshape(6, 9)))
    d = softmax_fwd(to_device(x.reshape(6, 9)))
    assert np.array_equal(d.copy_to_host(), y.reshape(6, 9))


def test_fully_masked_query_rows_are_exactly_zero():
    from vjpcert.cuda_kernels import attention as A
    rng = np.random.default_rng(2)
    Q, K, V, dO = (rng.standard_normal((9, 3)).astype(np.float32) for _ in range(4))
    for fwd, bwd in [(A.flash_attention_causal_fwd, A.flash_attention_causal_bwd),
                     (A.attention_causal_fwd, A.attention_causal_bwd)]:
        O = fwd(Q, K, V, offset=2)
        dQ, dK, dV = bwd(Q, K, V, dO, offset=2)
        assert not O[:2].any() and not dQ[:2].any() and O[2:].all()
        assert not dK[-2:].any() and not dV[-2:].any()      # the last keys are seen by no query


# ------------------------------------------------------------------------------ compiled for sm_90
@pytest.fixture(scope="module")
def ptx_report():
    pytest.importorskip("cuda.core", reason="the sm_90 link step needs cuda-core (numba-cuda[cu13])")
    return resources.resource_report()


def test_the_committed_resource_table_is_current_and_within_the_limits():
    """What the compile test below (--slow: it compiles every kernel for sm_90) says, read off the
    committed table `vjpcert all` keeps current: made from the kernels' code there is now (its stamp;
    where the compiler's versions here are the table's, the stamp is recomputed and compared), and
    every kernel within the limits."""
    from vjpcert.stamps import Stamps, resources_inputs
    table = json.loads((ROOT / "reports" / "kernels" / "resources.json").read_text())
    from importlib import metadata
    here = {}
    for dist in table["versions"]:
        try:
            here[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            here[dist] = None
    if here == table["versions"]:
        assert Stamps(ROOT / "reports").data.get("resources") == resources_inputs(), \
            "the kernels changed since reports/kernels/resources.json was made: run `vjpcert all`"
    _within_limits(table)


@pytest.mark.slow
def test_every_kernel_compiles_for_sm90_without_spills_f64_or_excess_shared(ptx_report):
    _within_limits(ptx_report)


def _within_limits(ptx_report):
    kernels = ptx_report["kernels"]
    expected = {"softmax_fwd", "softmax_bwd", "rope_rotate", "rmsnorm_fwd", "rmsnorm_bwd", "layernorm_fwd",
                "layernorm_bwd", "gelu_erf_fwd", "gelu_erf_bwd", "gelu_tanh_fwd", "gelu_tanh_bwd", "matmul",
                "colsum", "fill"} | {f"{k}[d<={D}]" for k in ("flash_fwd", "flash_bwd_pre", "flash_bwd_dkdv",
                                                              "flash_bwd_dq") for D in attention_flash.HEAD_DIMS}
    assert expected <= set(kernels), sorted(expected - set(kernels))
    assert resources.problems(ptx_report) == []
    for name, r in kernels.items():
        assert r["registers"] and r["registers"] <= 255, (name, r)
        assert r["spill_bytes"] == 0 and r["f64_instructions"] == 0 and r["shared_bytes"] <= 48 * 1024
    assert kernels["flash_fwd[d<=64]"]["shared_bytes"] > 0        # the parser reads .shared declarations
    # the launchers' shared-memory budget (what they refuse by) is what the compiler declares
    from vjpcert.cuda_kernels.attention_flash import flash_shared_bytes
    for D in attention_flash.HEAD_DIMS:
        for name, nbytes in flash_shared_bytes(16, D).items():
            assert kernels[f"{name}[d<={D}]"]["shared_bytes"] == nbytes, (name, D)
    for name, r in kernels.items():
        assert 0 < r["occupancy"] <= 1 and r["blocks_per_sm"] >= 1 and r["threads"] == 256, (name, r)


def test_ptx_checks_fail_on_float64_spills_and_excess_shared_memory():
    pytest.importorskip("cuda.core", reason="the sm_90 link step needs cuda-core (numba-cuda[cu13])")
    controls = ROOT / "tests" / "kernels" / "controls.py"
    report = resources.resource_report(extra=f"{controls}:ptx_controls", only_extra=True)
    found = resources.problems(report)
    assert any(p.startswith("gelu_float64:") and "float64 instructions" in p for p in found), found
    assert any(p.startswith("flash_bwd_dkdv[maxreg=32]:") and "spills" in p for p in found), found
    assert any(p.startswith("too_much_shared:") and "static shared memory" in p for p in found), found
    assert not any(p.startswith("gelu_skips_last:") for p in found), found   # clean PTX is not flagged


# ------------------------------------------------------------------------------ negative controls
# (control, op, dims, launch, cases, the check that goes red, the violation kind / the case it fails at)
CONTROL_CASES = [
    ("missing_sync", "softmax", {"rows": 2, "n": 33}, None, None, "race detector", "race: read/write"),
    ("uninitialised_read", "softmax", {"rows": 1, "n": 7}, None, None, "race detector", "uninitialised read"),
    ("divergent_barrier", "softmax", {"rows": 1, "n": 7}, None, None, "race detector", "barrier not reached"),
    ("half_partials", "softmax", {"rows": 3, "n": 1025}, None, None, "tolerance", None),
    ("skips_last", "gelu_erf", {"rows": 7, "n": 33}, None, None, "NaN poison", None),
    ("wrong_dK", "attention", {"m": 7, "d": 3}, None, None, "tolerance", None),
    ("nondeterministic", "gelu_erf", {"rows": 7, "n": 33}, None, None, "determinism", None),
    # overflow and cancellation, which standard-normal inputs never show
    ("softmax_no_max", "softmax", {"rows": 7, "n": 33}, None, ("random", "large_offset"), "NaN poison", "large_offset"),
    ("softmax_max_over_full_blocks", "softmax", {"rows": 7, "n": 33}, None, None, "NaN poison", "huge_in_last_block"),
    ("softmax_global_total_racy", "softmax", {"rows": 7, "n": 33}, None, None, "determinism", "random"),
    ("cleared_by_block_0", "gelu_erf", {"rows": 7, "n": 33}, None, None, "determinism", "random"),
    ("flash_fwd_no_running_max", "attention", {"m": 7, "d": 3}, None, None, "NaN poison", "large_magnitude"),
    ("layernorm_one_pass_variance", "layernorm", {"rows": 7, "n": 33}, None, None, "tolerance", "large_offset"),
    # what only the GPU's launch configuration shows
    ("flash_dq_accumulator_too_small", "attention", {"m": 17, "d": 128}, "gpu", None, "kernel raised", "random"),
    ("flash_any_head_width", "attention", {"m": 17, "d": 192}, "gpu", None, "kernel raised", "random"),
    # summation order and small RoPE faults, red under the error model (not k x numpy's error)
    ("matmul_one_running_sum", "linear", {"rows": 64, "n_in": 1024, "n_out": 16}, "gpu", None, "tolerance", "random"),
    ("flash_dkdv_one_running_sum", "attention", {"m": 512, "d": 8}, "orders", None, "tolerance", "equal_rows"),
    ("rmsnorm_sequential_sum_of_squares", "rmsnorm", {"rows": 64, "n": 4096}, "gpu", None, "tolerance", "random"),
    ("rope_angle_shifted", "rope_half", {"rows": 7, "d": 34}, None, None, "tolerance", "random"),
    ("rope_short_sincos", "rope_interleaved", {"rows": 7, "d": 34}, None, None, "tolerance", "random"),
    ("conv2d_dx_kernel_not_flipped", "conv2d", {"N": 2, "C": 3, "O": 5, "H": 3, "W": 4}, None, None, "tolerance",
     "random"),
    ("batchnorm_bwd_no_mean_term", "batchnorm", {"batch": 33, "channels": 7}, None, None, "tolerance", "random"),
    # the kinks: exact zeros and ties, which no other case draws
    ("relu_bwd_passes_zero", "relu", {"rows": 7, "n": 33}, None, None, "tolerance", "on_kinks"),
    ("max_pool_bwd_tie_to_last", "max_pool2d", {"N": 2, "C": 3, "Ho": 3, "Wo": 5}, None, None, "tolerance", "on_kinks"),
    # the chunk boundary (the simulator's chunks are 8 steps): one step past it
    ("linear_attention_fwd_carry_dropped", "linear_attention", {"h": 1, "T": 9, "d": 2, "e": 2}, None, ("random",),
     "tolerance", "random"),
    ("linear_attention_bwd_carry_dropped", "linear_attention", {"h": 1, "T": 9, "d": 2, "e": 2}, None, ("random",),
     "tolerance", "random"),
]


@pytest.mark.parametrize("control,op,dims,launch,cases,check,kind", CONTROL_CASES, ids=[c[0] for c in CONTROL_CASES])
def test_negative_control_goes_red(control, op, dims, launch, cases, check, kind):
    if check == "race detector" and not SIM:
        pytest.skip("the race detector instruments the simulator; this run is on a GPU")
    if check == "kernel raised" and not SIM:
        pytest.skip("out-of-bounds local arrays and over-limit shared memory raise in the simulator; on a GPU "
                    "they are undefined behaviour or a link error")
    spec = CONTROLS[control]
    cert = check_kernel_claim(OPS[op], spec.claim, dims, kernel=spec, launch=launch, cases=cases)
    assert cert.verdict == "failed", cert.evidence
    w = cert.evidence["witness"]
    assert w["check"] == check, w
    if check == "race detector":
        assert any(v["kind"].startswith(kind) for v in w["violations"]), w
    elif kind:
        assert w["case"] == kind, w
    if control == "wrong_dK":
        assert w["output"] == "dK" and w["error"] > 1e3 * w["bound"]
    if control == "skips_last":
        assert w["index"] == [6, 32] and w["unwritten_or_nonfinite"] == 1
    if control == "flash_dq_accumulator_too_small" and SIM:
        assert "IndexError" in w["error"] and "out of bounds" in w["error"]
    if control == "flash_any_head_width" and SIM:
        assert "static shared memory" in w["error"] and "would not link" in w["error"]
    if control.startswith("rope_"):
        assert w["error"] > 10 * w["bound"]          # ~1e-4 against a bound of a few u |x|


@pytest.mark.slow        # why each check is there; that each control goes red is test_negative_control_goes_red
def test_the_adversarial_kernel_faults_hide_from_what_the_checks_were_before():
    """Why the cases and the GPU's launch configuration: the overflow fault passes on standard normal
    inputs, the undersized dQ accumulator passes at every size of the simulator's configuration and at
    d = 64 in the GPU's, the sequential sum of squares passes at the simulator's block of 32."""
    cert = check_kernel_claim(OPS["softmax"], "kernel:softmax_fwd", {"rows": 7, "n": 33},
                              kernel=CONTROLS["softmax_no_max"], cases=("random",))
    assert cert.verdict == "kernel-match"
    # the racy global total: clean for the shared-memory race detector, and right in the simulator's
    # own thread order (both runs in it: what the determinism check did before it reversed the threads)
    from vjpcert.cuda_kernels import check as kcheck
    real = kcheck._run_in_order
    try:
        kcheck._run_in_order = lambda *a, reversed_threads: real(*a, reversed_threads=False)
        for control, op in (("softmax_global_total_racy", "softmax"), ("cleared_by_block_0", "gelu_erf")):
            spec = CONTROLS[control]
            cert = check_kernel_claim(OPS[op], spec.claim, {"rows": 7, "n": 33}, kernel=spec)
            assert cert.verdict == "kernel-match", (control, cert.evidence.get("witness"))
            assert cert.evidence["race_detector"]["clean"]
    finally:
        kcheck._run_in_order = real
    # the maximum that skips the tail: right in every case but the one with a huge entry there
    from vjpcert.core.kernel_checks import HUGE_IN_LAST_BLOCK
    for dims in ({"rows": 7, "n": 33}, {"rows": 3, "n": 1025}):
        cert = check_kernel_claim(OPS["softmax"], "kernel:softmax_fwd", dims,
                                  kernel=CONTROLS["softmax_max_over_full_blocks"],
                                  cases=[c for c in tol.CASES if c != HUGE_IN_LAST_BLOCK])
        assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    dq = CONTROLS["flash_dq_accumulator_too_small"]
    for dims in kernel_dims("attention", "simulator"):
        cert = check_kernel_claim(OPS["attention"], dq.claim, dims, kernel=dq, cases=("random",))
        assert cert.verdict == "kernel-match"
    assert check_kernel_claim(OPS["attention"], dq.claim, {"m": 17, "d": 64}, kernel=dq,
                              launch="gpu").verdict == "kernel-match"
    # one running sum over every query in dK/dV: inside the model's bound in every case but equal rows,
    # at every size of the ladder and at the order check's own m = 512 (where P's rounding hides it)
    one_sum = CONTROLS["flash_dkdv_one_running_sum"]
    for dims in kernel_dims("attention", "simulator"):
        assert check_kernel_claim(OPS["attention"], one_sum.claim, dims, kernel=one_sum).verdict == "kernel-match"
    cert = check_kernel_claim(OPS["attention"], one_sum.claim, {"m": 512, "d": 8}, kernel=one_sum,
                              cases=("random",), launch=ORDERS)
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")


def test_the_kink_faults_hide_from_every_case_but_the_kinks():
    """Why the case on_kinks: a relu mask x >= 0 and a max-pool tie sent to the last maximum pass
    every other input case (continuous draws meet no exact zero, no tie)."""
    from vjpcert.cuda_kernels import settings as ktol
    for control, op, dims in (("relu_bwd_passes_zero", "relu", {"rows": 7, "n": 33}),
                              ("max_pool_bwd_tie_to_last", "max_pool2d", {"N": 2, "C": 3, "Ho": 3, "Wo": 5})):
        spec = CONTROLS[control]
        cert = check_kernel_claim(OPS[op], spec.claim, dims, kernel=spec, cases=ktol.CASES)
        assert cert.verdict == "kernel-match", (control, cert.evidence)


def test_a_dropped_chunk_carry_hides_within_one_chunk():
    """Why the sizes cross the chunk: a chunked kernel that drops the carry between chunks is right
    for every sequence of one chunk (T <= C = 8 in the simulator), however the inputs are drawn."""
    for control in ("linear_attention_fwd_carry_dropped", "linear_attention_bwd_carry_dropped"):
        spec = CONTROLS[control]
        cert = check_kernel_claim(OPS["linear_attention"], spec.claim, {"h": 2, "T": 8, "d": 2, "e": 3}, kernel=spec)
        assert cert.verdict == "kernel-match", (control, cert.evidence.get("witness"))


def test_launchers_refuse_shapes_a_gpu_cannot_run():
    """At tile 16 the flash backward's tiles fit the 48 KiB of static shared memory up to d = 176, the
    forward's up to d = 240: the launchers refuse wider heads with one line, before any launch (the
    simulator would run them)."""
    from vjpcert.cuda_kernels import attention as A
    from vjpcert.cuda_kernels import attention_flash as F
    from vjpcert.cuda_kernels.common import GPU_CONFIG, use_config
    assert F.max_head_dim(16) == 176 and F.max_head_dim(16, backward=False) == 240
    rng = np.random.default_rng(3)
    q = rng.standard_normal((17, 192)).astype(np.float32)
    with use_config(GPU_CONFIG):
        refusal = r"head width d = 192 needs 5\d{4} bytes .* widest head it handles is d = 176"
        with pytest.raises(F.LaunchError, match=refusal):
            A.flash_attention_bwd(q, q, q, q)
        with pytest.raises(F.LaunchError, match="widest head it handles is d = 240"):
            A.flash_attention_fwd(*(rng.standard_normal((17, 256)).astype(np.float32) for _ in range(3)))
        assert np.isfinite(A.flash_attention_fwd(q, q, q)).all()          # the forward fits at 192
    with pytest.raises(F.LaunchError, match="grid's y dimension"):
        F.check_flash_shape(70000, 16, 64, 16, backward=False)
    assert "\n" not in str(pytest.raises(F.LaunchError, F.check_flash_shape, 1, 16, 200, 16, True).value)


def test_dropped_partial_sums_hide_at_small_widths():
    """Why the sizes must cross 1024: the same bug passes at width 7 (only the lower half of the
    block holds data there) and fails at 1025."""
    spec = CONTROLS["half_partials"]
    assert check_kernel_claim(OPS["softmax"], spec.claim, {"rows": 3, "n": 7}, kernel=spec).verdict == "kernel-match"


def test_float64_kernel_passes_numerically_so_only_the_ptx_check_catches_it():
    spec = CONTROLS["float64_gelu"]
    assert check_kernel_claim(OPS["gelu_erf"], spec.claim, {"rows": 7, "n": 33}, kernel=spec).verdict == "kernel-match"


def test_a_law_check_fails_on_its_own():
    """softmax dx = y * dy (row term dropped): the law 'cotangent_sums_to_zero' alone goes red."""
    op, spec = OPS["softmax"], CONTROLS["softmax_bwd_no_dot"]
    inputs, dy = sample_inputs(op, {"rows": 7, "n": 33}, 0, True)
    law = op.get_law("cotangent_sums_to_zero")
    bad = check_law(op, spec, law, inputs, dy, KERNELS)
    good = check_law(op, KERNELS["softmax_bwd"], law, inputs, dy, KERNELS)
    assert not bad["ok"] and bad["residual"] > 1e3 * bad["bound"], bad
    assert good["ok"], good


def test_the_race_detector_logs_accesses_and_is_pinned():
    if not SIM:
        pytest.skip("the race detector instruments the simulator; this run is on a GPU")
    from importlib import metadata

    from vjpcert.cuda_kernels.simulator import PINNED_NUMBA_CUDA, race_detector
    from vjpcert.cuda_kernels.softmax import softmax_fwd
    assert metadata.version("numba-cuda") == PINNED_NUMBA_CUDA
    with race_detector() as counts:
        softmax_fwd(np.ones((2, 40), np.float32))
    # 2 blocks, 2 reductions each: a warp total written and read back per reduction (the rest is shuffles)
    assert counts["blocks"] == 2 and counts["accesses"] >= 2 * 2 * 2


# ------------------------------------------------------------------------------ hygiene
@pytest.mark.parametrize("checker", ["cuda_kernels/check.py", "symbolic/fixed/prover.py", "symbolic/every_size/general.py",
                                     "symbolic/fixed/strategies.py", "symbolic/composition/compose.py", "numeric/check.py",
                                     "numeric/reference.py", "numeric/sampling.py"])
def test_tolerances_live_in_one_place(checker):
    """No tolerance literals in a checker's code: every number it decides with comes from its tier's
    settings.py or core/tolerance.py (comments may cite numbers)."""
    code = "\n".join(line.split("#")[0] for line in (ROOT / checker).read_text().splitlines())
    code = re.sub(r'"""(?:.|\n)*?"""', "", code)                       # docstrings
    assert not re.search(r"\b\d+(?:\.\d+)?e-\d+\b", code), re.findall(r".*\b\d+(?:\.\d+)?e-\d+\b.*", code)


def _gpu_script(tmp_path, *args):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_run.py"), *args, "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OUT": str(tmp_path)})
    return proc, json.loads((tmp_path / "gpu_run.json").read_text())


@pytest.mark.slow                   # the GPU script in the simulator: ~11 s; it fails fast below
def test_gpu_script_runs_end_to_end_in_the_simulator(tmp_path):
    """benchmarks/gpu_run.py --simulate: preflight, every benchmark path against PyTorch computing the
    same outputs, a check of every kernel, JSON, the table last."""
    proc, res = _gpu_script(tmp_path, "--simulate")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert res["mode"] == "simulator" and res["preflight"]["ok"] and res["preflight"]["trivial_kernel_s"] >= 0
    assert {n: s["status"] for n, s in res["sections"].items()} == {"preflight": "ok", "bench": "ok", "checks": "ok",
                                                                    "triton": "ok"}
    assert all(c["verdict"] == "kernel-match" for c in res["checks"])
    # the Triton tier in the interpreter: every registered kernel (Liger's in float32 and bfloat16)
    if res["sections"]["triton"].get("skipped") is None:
        assert res["triton_checks"] and all(c["verdict"] == "kernel-match" for c in res["triton_checks"])
        assert {c["dtype"] for c in res["triton_checks"]} >= {"float32", "bfloat16"}
    assert {c["kernel"] for c in res["checks"]} == set(KERNELS)
    mb = res["bench"]["memory_bound"]
    assert {"softmax_fwd", "softmax_bwd", "rmsnorm_bwd", "layernorm_bwd", "rope_half_fwd", "gelu_tanh_bwd"} <= set(mb)
    assert all("pct_of_copy_bw" in r and "speed_vs_torch" in r and r["reps"] >= 2 for r in mb.values())
    assert set(res["bench"]["attention"]) == {"full", "causal"}
    assert set(res["bench"]["linear"]) == {"linear_fwd", "linear_bwd"}
    out = proc.stdout
    assert out.rstrip().splitlines()[-1].endswith("JSON: gpu_run.json")          # the table comes last
    assert "speed vs torch" in out and "attn fwd+bwd causal" in out and f"checks: {len(KERNELS)} kernel-match" in out


def test_gpu_script_fails_fast_and_keeps_to_its_deadline(tmp_path):
    """No GPU and no --simulate: the preflight stops the run at once (exit 2), with the JSON saying why.
    A deadline that has passed: the later sections are recorded as skipped (exit 3), never lost."""
    if SIM:
        proc, res = _gpu_script(tmp_path / "a")
        assert proc.returncode == 2 and res["sections"]["preflight"]["status"] == "failed"
        assert "no GPU" in res["sections"]["preflight"]["error"] and res["bench"] is None
    proc, res = _gpu_script(tmp_path / "b", "--simulate", "--deadline", "1")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert res["sections"]["preflight"]["status"] == "ok"
    assert res["sections"]["bench"]["status"] == res["sections"]["checks"]["status"] == "skipped: deadline"
    assert res["sections"]["triton"]["status"] == "skipped: deadline"
