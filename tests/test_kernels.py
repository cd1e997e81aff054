"""The kernel tier, generically over the kernel registry: every kernel matches its spec within the
tolerance rule at sizes crossing the block boundaries, bitwise deterministic, every output element
written (NaN poison), its runtime laws holding, the shared-memory race detector clean (simulator),
and compiled for sm_90 without spills, over-limit shared memory or float64 instructions. Then the
negative controls: each check goes red on a kernel built to break it.

In the simulator (no GPU here) the whole file takes about two minutes on two cores.
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

from vjpcert.cuda_kernels import resources
from vjpcert.cuda_kernels.check import (check_kernel_claim, check_law, detect_mode, kernel_claims, kernel_dims,
                                law_objects, sample_inputs)
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
CASES = [(k.name, d) for k in KERNELS.values() for d in kernel_dims(k.op, MODE)]


def test_there_is_cuda_to_run_on():
    """Here: the simulator (no GPU); on a GPU machine: the GPU. Never 'none' in CI."""
    assert MODE in ("simulator", "gpu")


@pytest.mark.parametrize("name,dims", CASES, ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in d.items())}"
                                                  for n, d in CASES])
def test_every_kernel_matches_its_spec(name, dims):
    spec = KERNELS[name]
    cert = check_kernel_claim(OPS[spec.op], spec.claim, dims, seed=0)
    assert cert.verdict == "kernel-match", json.dumps(cert.evidence, default=str)[:3000]
    ev = cert.evidence
    assert ev["mode"] == MODE and ev["determinism"].endswith("bitwise identical")
    assert "every element written" in ev["nan_poison"]
    assert set(ev["outputs"]) == set(spec.outputs)
    for out in ev["outputs"].values():
        assert out["kernel_error"] <= out["bound"]
    assert len(ev["laws"]) == len(spec.laws) and all(l["ok"] for l in ev["laws"].values())
    if SIM:
        assert ev["race_detector"]["ran"] and ev["race_detector"]["clean"], ev["race_detector"]
    json.loads(cert.to_json())                       # a certificate the report runner can write


def test_claims_and_dims_cover_every_kernel_and_cross_block_boundaries():
    claims = {c for name in OPS for c in kernel_claims(OPS[name])}
    assert claims == {k.claim for k in KERNELS.values()}
    assert kernel_claims("softmax") == ["kernel:softmax_fwd", "kernel:softmax_bwd"]
    assert kernel_claims("mhsa") == [] and kernel_dims("mhsa", "simulator") == []
    assert len(kernel_claims("attention")) == 4           # plain and flash, forward and backward
    for op in ("softmax", "rmsnorm", "layernorm", "gelu_erf"):
        widths = {d["n"] for d in kernel_dims(op, "simulator")}
        rows = {d["rows"] for d in kernel_dims(op, "simulator")}
        assert {1, 7, 33, 1025} <= widths and {1, 7, 33} <= rows
    for op, mode in [(o, m) for o in {k.op for k in KERNELS.values()} for m in ("simulator", "gpu")]:
        assert kernel_dims(op, mode), (op, mode)
        for d in kernel_dims(op, mode):
            OPS[op].resolve_dims(d)                         # valid dims for the spec


def test_every_spec_law_about_forward_or_backward_runs_on_a_kernel():
    """A new law in a spec must not be silently skipped by the kernel tier: every law that calls the
    op's forward or backward is attached to a kernel of that op, and to a kernel of the right kind."""
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
                assert law.name in attached, (op_name, law.name)


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


def test_every_kernel_compiles_for_sm90_without_spills_f64_or_excess_shared(ptx_report):
    kernels = ptx_report["kernels"]
    expected = {"softmax_fwd", "softmax_bwd", "rope_rotate", "rmsnorm_fwd", "rmsnorm_bwd", "layernorm_fwd",
                "layernorm_bwd", "gelu_erf_fwd", "gelu_erf_bwd", "gelu_tanh_fwd", "gelu_tanh_bwd", "matmul",
                "colsum", "fill"} | {f"{k}[d<={D}]" for k in ("flash_fwd", "flash_bwd_pre", "flash_bwd_dkdv",
                                                              "flash_bwd_dq") for D in resources.HEAD_DIMS}
    assert expected <= set(kernels), sorted(expected - set(kernels))
    assert resources.problems(ptx_report) == []
    for name, r in kernels.items():
        assert r["registers"] and r["registers"] <= 255, (name, r)
        assert r["spill_bytes"] == 0 and r["f64_instructions"] == 0 and r["shared_bytes"] <= 48 * 1024
    assert kernels["flash_fwd[d<=64]"]["shared_bytes"] > 0        # the parser reads .shared declarations


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
CONTROL_CASES = [
    ("missing_sync", "softmax", {"rows": 2, "n": 33}, "race detector", "race: read/write"),
    ("uninitialised_read", "softmax", {"rows": 1, "n": 7}, "race detector", "uninitialised read"),
    ("divergent_barrier", "softmax", {"rows": 1, "n": 7}, "race detector", "barrier not reached"),
    ("half_partials", "softmax", {"rows": 3, "n": 1025}, "tolerance", None),
    ("skips_last", "gelu_erf", {"rows": 7, "n": 33}, "NaN poison", None),
    ("wrong_dK", "attention", {"m": 7, "d": 3}, "tolerance", None),
    ("nondeterministic", "gelu_erf", {"rows": 7, "n": 33}, "determinism", None),
]


@pytest.mark.parametrize("control,op,dims,check,kind", CONTROL_CASES, ids=[c[0] for c in CONTROL_CASES])
def test_negative_control_goes_red(control, op, dims, check, kind):
    if check == "race detector" and not SIM:
        pytest.skip("the race detector instruments the simulator; this run is on a GPU")
    spec = CONTROLS[control]
    cert = check_kernel_claim(OPS[op], spec.claim, dims, kernel=spec)
    assert cert.verdict == "failed", cert.evidence
    w = cert.evidence["witness"]
    assert w["check"] == check, w
    if kind:
        assert any(v["kind"].startswith(kind) for v in w["violations"]), w
    if control == "wrong_dK":
        assert w["output"] == "dK" and w["error"] > 1e3 * w["bound"]
    if control == "skips_last":
        assert w["index"] == [6, 32] and w["unwritten_or_nonfinite"] == 1


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
    assert counts["blocks"] == 2 and counts["accesses"] > 2 * 2 * 4 * 32     # 2 blocks, 2 reductions


# ------------------------------------------------------------------------------ hygiene
def test_tolerances_live_in_one_place():
    """No numeric tolerance literals in the checker: every number comes from tolerances.py."""
    text = (ROOT / "cuda_kernels" / "check.py").read_text()
    assert not re.search(r"\b\d+e-\d+\b", text)


def test_gpu_script_runs_end_to_end_in_the_simulator(tmp_path):
    """benchmarks/gpu_run.py --simulate: checks at tiny sizes, every benchmark path, JSON, table."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_run.py"), "--simulate",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OUT": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "gpu_run.json").read_text())
    assert res["mode"] == "simulator" and res["checks"]
    assert all(c["verdict"] == "kernel-match" for c in res["checks"])
    assert {c["kernel"] for c in res["checks"]} == set(KERNELS)
    mb = res["bench"]["memory_bound"]
    assert {"softmax_fwd", "softmax_bwd", "rmsnorm_bwd", "layernorm_bwd", "rope_half_fwd", "gelu_tanh_bwd"} <= set(mb)
    assert all("pct_of_copy_bw" in r and "ratio" in r for r in mb.values())
    assert set(res["bench"]["attention"]) == {"full", "causal"}
    assert "ours/torch" in proc.stdout and "attn fwd+bwd causal" in proc.stdout
