"""The Triton tier (triton_kernels/): our reference kernels match, every negative control goes red by the
check it was built for, the harness cannot be fooled by what it patches, Liger-Kernel's kernels run
through it (in Triton's interpreter without a GPU), and users check their own kernels from a file and
from the fixture. Skipped, with the reason, where triton / torch / liger-kernel are not installed
(`pip install -e '.[triton]'`)."""
from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import optional

import vjpcert.triton_kernels  # noqa: F401  (TRITON_INTERPRET before anything decorates a kernel)

optional.importorskip("torch", reason="the Triton tier needs torch: pip install -e '.[triton]'")
optional.importorskip("triton", reason="the Triton tier needs triton: pip install -e '.[triton]'")

from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.triton_kernels.check import check_triton_claim, detect_mode  # noqa: E402
from vjpcert.triton_kernels.registry import discover  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
liger_installed = importlib.util.find_spec("liger_kernel") is not None
needs_liger = pytest.mark.skipif(not liger_installed, reason="liger-kernel is not installed: pip install -e '.[triton]'")
CONTROLS_FILE = ROOT / "tests" / "triton" / "controls.py"
CONTROLS_MODULE = optional.from_file(CONTROLS_FILE, "triton_controls")


# The parameters are named without importing a kernel (collection imports no Triton, tests/optional.py):
# the controls by the keys of their table as written, the registered kernels by (op, kind), each list
# held to the registry by a test.
def _keys_of_the_table(path: Path, name: str) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == name for t in node.targets))
    return [k.value for k in table.keys]


CONTROL_NAMES = _keys_of_the_table(CONTROLS_FILE, "CONTROLS")
REFERENCE_PAIRS = [("softmax", "forward"), ("softmax", "backward"), ("gelu_tanh", "forward"), ("gelu_tanh", "backward")]


def _registered(source: str, pair=None) -> list:
    """The registered kernels from ``source`` ("vjpcert", "liger-kernel"), of one (op, kind) if given."""
    return [k for k in discover()[0].values() if k.source.startswith(source)
            and (pair is None or (k.op_name, k.kind) == pair)]


def test_the_parameters_name_every_control_and_registered_kernel():
    assert CONTROL_NAMES == list(CONTROLS_MODULE.CONTROLS)
    assert sorted({(k.op_name, k.kind) for k in _registered("vjpcert")}) == sorted(REFERENCE_PAIRS)


def test_the_mode_is_the_interpreter_or_a_gpu():
    assert detect_mode() in ("interpreter", "gpu")


@pytest.mark.parametrize("pair", REFERENCE_PAIRS, ids="-".join)
def test_our_reference_kernels_match_at_every_size(pair, request):
    """At every size of the kernel's ladder with --slow; by default at its middle one (past a block)."""
    for kernel in _registered("vjpcert", pair):
        middle = len(kernel.sizes) // 2
        for dims in kernel.sizes if request.config.getoption("--slow") else kernel.sizes[middle:middle + 1]:
            cert = check_triton_claim(kernel.op, kernel.claim, dims)
            assert cert.verdict == "kernel-match", (kernel.name, cert.evidence.get("witness"))
            assert cert.tier == "triton" and cert.method == f"triton-{detect_mode()}"


@pytest.mark.parametrize("name", CONTROL_NAMES)
def test_every_negative_control_goes_red_by_its_own_check(name):
    kernel, dims, check = CONTROLS_MODULE.CONTROLS[name]
    cert = check_triton_claim(kernel.op, kernel.claim, dims, kernel=kernel)
    assert cert.verdict == "failed"
    assert cert.evidence["witness"]["check"] == check, cert.evidence["witness"]


def test_a_read_past_the_end_that_nan_alone_would_miss_is_caught_by_the_second_fence():
    """The unmasked max pass reads NaN from the fence, which tl.maximum ignores: the outputs are right
    with NaN fences, so only the run with fences of 3e38 shows the read."""
    kernel, dims, _ = CONTROLS_MODULE.CONTROLS["softmax_unmasked_load"]
    cert = check_triton_claim(kernel.op, kernel.claim, dims, kernel=kernel, cases=("random",))
    w = cert.evidence["witness"]
    assert w["check"] == "fence read" and w["index"][0] == dims["rows"] - 1     # the last row only


def test_the_skipped_block_is_invisible_when_the_size_is_a_multiple_of_the_block():
    """Why the sizes include non-multiples: at 2 x 64 elements nothing is skipped."""
    kernel, _, _ = CONTROLS_MODULE.CONTROLS["gelu_skips_last_block"]
    cert = check_triton_claim(kernel.op, kernel.claim, {"rows": 2, "n": 64}, kernel=kernel, cases=("random",))
    assert cert.verdict == "kernel-match"


# ------------------------------------------------------------------------------ the harness
def test_poisoned_allocations_are_nan_and_fenced_and_restored():
    import torch
    from vjpcert.triton_kernels import harness
    original = torch.empty
    with harness.run_context() as arena:
        a = torch.empty(3, 4)
        b = torch.empty_like(torch.zeros(5))
        i = torch.empty(3, dtype=torch.int64)          # integers are not poisoned (no NaN to poison with)
        assert torch.isnan(a).all() and torch.isnan(b).all() and i.dtype == torch.int64
        assert arena.violations() == []
        a.view(-1).as_strided((13,), (1,)).fill_(0.0)    # one element past the end of a
        assert len(arena.violations()) == 1 and "after" in arena.violations()[0]
    assert torch.empty is original


def test_the_interpreter_patch_is_undone_after_the_block():
    import triton.runtime.interpreter as interp
    from vjpcert.triton_kernels.interpreter import faithful
    before = interp._implicit_cvt
    with faithful():
        inside = interp._implicit_cvt
    assert interp._implicit_cvt is before
    assert inside is not before or detect_mode() == "gpu"


def test_a_kernel_decorated_before_the_interpreter_was_on_is_bad_input_not_a_failure():
    """A kernel the interpreter cannot run says so (exit 2 in the CLI), never `failed`."""
    from vjpcert.triton_kernels.registry import TritonKernel

    def launcher(x):
        raise RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")
    if detect_mode() != "interpreter":
        pytest.skip("only the interpreter has this failure mode")
    k = TritonKernel("compiled_too_early", "softmax", "forward", ("y",), launcher)
    with pytest.raises(SpecError, match="decorated before TRITON_INTERPRET"):
        check_triton_claim("softmax", k.claim, {"rows": 1, "n": 2}, kernel=k)


# ------------------------------------------------------------------------------ Liger-Kernel
LIGER_OPS = {"rmsnorm", "layernorm", "softmax", "rope_half", "swiglu", "geglu", "cross_entropy"}
LIGER_PAIRS = [(op, kind) for op in sorted(LIGER_OPS) for kind in ("forward", "backward")]


@needs_liger
def test_every_liger_op_of_the_issue_is_registered_forward_and_backward():
    pairs = {(k.op, k.kind) for k in _registered("liger-kernel")}
    assert pairs == {(op, kind) for op in LIGER_OPS for kind in ("forward", "backward")}


@needs_liger
@pytest.mark.parametrize("pair", LIGER_PAIRS, ids="-".join)
def test_liger_kernels_run_and_match_at_a_middle_size(pair):
    """One size that is not a power of two and has several rows, random inputs: every Liger kernel
    runs through the harness and matches (the whole ladder and every case: reports/liger/)."""
    kernels = _registered("liger-kernel", pair)
    assert kernels
    for kernel in kernels:
        dims = kernel.sizes[2]
        cert = check_triton_claim(kernel.op, kernel.claim, dims, cases=("random",))
        assert cert.verdict == "kernel-match", (kernel.name, cert.evidence.get("witness"))


@needs_liger
def test_a_wrong_liger_gradient_would_be_caught():
    """The harness's negative control: Liger's real softmax backward, scaled by 1 + 1e-4 afterwards."""
    import dataclasses
    from vjpcert.triton_kernels import liger
    k = discover()[0]["liger_softmax_bwd"]
    bad = dataclasses.replace(k, name="liger_softmax_bwd_scaled",
                              launcher=lambda x, dy: tuple(g * np.float32(1 + 1e-4) for g in liger.softmax_bwd(x, dy)))
    cert = check_triton_claim("softmax", bad.claim, {"rows": 3, "n": 7}, kernel=bad, cases=("random",))
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "tolerance"


def test_a_float64_result_is_not_a_float32_kernel():
    from vjpcert.triton_kernels.registry import TritonKernel

    def exact_softmax(x):
        e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    k = TritonKernel("float64_softmax", "softmax", "forward", ("y",), exact_softmax)
    cert = check_triton_claim("softmax", k.claim, {"rows": 2, "n": 5}, kernel=k, cases=("random",))
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "dtype"


@needs_liger
def test_liger_labels_are_refused_unless_the_target_is_exactly_a_label():
    from vjpcert.triton_kernels.liger import IGNORE_INDEX, labels_of
    t = np.eye(4)[[2, 0, 1]]
    assert labels_of(t, np.array([1.0, 0.0, 1.0]), 0.0).tolist() == [2, IGNORE_INDEX, 1]
    smoothed = 0.9 * t + 0.1 / 4
    assert labels_of(smoothed, np.ones(3), 0.1).tolist() == [2, 0, 1]
    with pytest.raises(SpecError, match="not a label"):
        labels_of(np.full((3, 4), 0.25), np.ones(3), 0.0)            # a soft target Liger cannot take
    with pytest.raises(SpecError, match="not a label"):
        labels_of(smoothed, np.ones(3), 0.0)                          # smoothing Liger was not told about
    with pytest.raises(SpecError, match="0 \\(ignore_index\\) or 1"):
        labels_of(t, np.array([1.0, 0.5, 1.0]), 0.0)


@needs_liger
def test_liger_in_place_kernels_leave_the_checker_s_inputs_alone():
    from vjpcert.triton_kernels import liger
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    dy = np.ones((2, 3), np.float32)
    a0, b0 = a.copy(), b.copy()
    liger.swiglu_bwd(a, b, dy)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


# ------------------------------------------------------------------------------ users' kernels
USER_FILE = '''
import vjpcert.triton_kernels  # first: the interpreter on before triton decorates the kernel
import triton
import triton.language as tl
from vjpcert.triton_kernels import harness
from vjpcert.triton_kernels.registry import TritonKernel


@triton.jit
def double_bwd(dy_ptr, dx_ptr, size, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    tl.store(dx_ptr + offs, FACTOR * tl.load(dy_ptr + offs, mask=mask), mask=mask)


def softmax_is_not_this(x, dy):
    d, out = harness.device_tensor(dy), harness.empty(dy.shape)
    double_bwd[(triton.cdiv(dy.size, 16),)](d, out, dy.size, BLOCK=16)
    return (harness.to_numpy(out),)


def gelu_at_zero(x, dy):
    return softmax_is_not_this(x, dy)


TRITON_KERNELS = [TritonKernel("mine", "softmax", "backward", ("dx",), softmax_is_not_this, source="my file")]
'''


def _run_report(tmp_path, text, *extra):
    f = tmp_path / "my_kernels.py"
    f.write_text(text)
    return subprocess.run([sys.executable, "-m", "vjpcert.triton_report", str(f), "--out", str(tmp_path / "out"),
                           *extra], capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_a_user_file_with_a_wrong_kernel_fails_with_exit_1(tmp_path):
    out = _run_report(tmp_path, USER_FILE.replace("FACTOR", "2.0"))
    assert out.returncode == 1, out.stdout + out.stderr
    data = json.loads((tmp_path / "out" / "triton.json").read_text())
    assert all(r["verdict"] == "failed" for r in data["rows"])


def test_a_user_file_without_kernels_is_bad_input(tmp_path):
    out = _run_report(tmp_path, "x = 1\n")
    assert out.returncode == 2 and "TRITON_KERNELS" in out.stderr


def test_the_vjpcert_command_runs_a_user_file(tmp_path):
    """`vjpcert triton my_kernels.py`: the kernel is right here (FACTOR 1: dx = dy is not softmax's
    backward either, so it fails: exit 1 with a tolerance witness in the JSON)."""
    from vjpcert.cli import main
    f = tmp_path / "k.py"
    f.write_text(USER_FILE.replace("FACTOR", "1.0"))
    assert main(["triton", str(f), "--out", str(tmp_path / "o")]) == 1
    rows = json.loads((tmp_path / "o" / "triton.json").read_text())["rows"]
    assert {r["witness"]["check"] for r in rows} == {"tolerance"}
    good = tmp_path / "good.py"
    good.write_text("from vjpcert.triton_kernels.reference import softmax_fwd\n"
                    "from vjpcert.triton_kernels.registry import TritonKernel\n"
                    "TRITON_KERNELS = [TritonKernel('mine_fwd', 'softmax', 'forward', ('y',), softmax_fwd,\n"
                    "                               sizes=({'rows': 3, 'n': 40},))]\n")
    assert main(["triton", str(good), "--out", str(tmp_path / "g")]) == 0


def test_the_fixture_checks_a_user_triton_kernel(tmp_path):
    """vjpcert.triton_matches in a user's test: our reference softmax passes, the control fails."""
    (tmp_path / "test_mine.py").write_text(textwrap.dedent('''
        import pytest
        from vjpcert.triton_kernels import reference


        def test_good(vjpcert):
            vjpcert.triton_matches("softmax", reference.softmax_fwd, kind="forward", dims={"rows": 2, "n": 40})


        def test_bad(vjpcert):
            with pytest.raises(vjpcert.CertificationError, match="tolerance"):
                vjpcert.triton_matches("softmax", lambda x, dy: (dy,), dims={"rows": 2, "n": 5})
    '''))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 passed" in out.stdout


@needs_liger
def test_the_committed_liger_report_has_a_verdict_for_every_kernel_and_size_and_is_current():
    """reports/liger/ (regenerate: `vjpcert triton --liger --out reports/liger`): a row for every Liger
    kernel at every size of its own and of the gate's, none "did not run", every certificate from the current checker and specs."""
    import jsonschema
    from vjpcert.core.certificate import CERTIFICATE_SCHEMA
    from vjpcert.specs import resolve_op
    from vjpcert.triton_kernels.check import CHECKER_SHA256, triton_dims
    data = json.loads((ROOT / "reports" / "liger" / "liger.json").read_text())
    rows = {(r["kernel"], json.dumps(r["dims"], sort_keys=True)): r for r in data["rows"]}
    # every kernel at its own sizes and the gate's (drawn from the kernel's code: new code, new sizes)
    expected = {(k.name, json.dumps(d, sort_keys=True)) for k in _registered("liger-kernel")
                for d in triton_dims(k, "interpreter")}
    assert set(rows) == expected
    assert all(r["verdict"] in ("kernel-match", "failed", "inconclusive") for r in rows.values())
    for r in rows.values():     # an inconclusive one says why: outside the rule, inside the any-order bound
        w = r["witness"]
        if r["verdict"] == "inconclusive" and w["check"] == "law":
            assert w["residual"] > w["bound"] and w["ill_conditioned"]["law_bound_any_order"]
        elif r["verdict"] == "inconclusive":
            assert w["error"] > w["bound"] and w["error_over_allowed"] <= 1 and w["condition_number"]
    # every op in float32 and in bfloat16
    assert {(r["op"], r["dtype"]) for r in rows.values()} == {(r["op"], d) for r in rows.values()
                                                              for d in ("float32", "bfloat16")}
    text = (ROOT / "reports" / "liger" / "README.md").read_text()
    assert "Liger-Kernel against vjpcert specs" in text and "What the harness patches" in text
    assert "RMSNorm's casting modes, told apart" in text
    stale = []
    for path in sorted((ROOT / "reports" / "liger" / "certificates").glob("*.json")):
        record = json.loads(path.read_text())
        jsonschema.validate(record, CERTIFICATE_SCHEMA)
        if record["checker_sha256"] != CHECKER_SHA256 or record["spec_sha256"] != resolve_op(record["op"]).spec_sha256:
            stale.append(path.name)
    assert not stale, f"stale Liger certificates (regenerate the report): {stale[:5]}"
    assert len(list((ROOT / "reports" / "liger" / "certificates").glob("*.json"))) == len(expected)


# ------------------------------------------------------------------------------ partial cotangents, own specs
OWN_SPEC_FILE = '''
import vjpcert.triton_kernels  # first: the interpreter on before triton decorates the kernel
import triton
import triton.language as tl
from vjpcert.core.registry import op
from vjpcert.triton_kernels import harness
from vjpcert.triton_kernels.registry import TritonKernel


@op(inputs={"x": ("rows", "n"), "w": ("n",)}, output=("rows", "n"), dims=[{"rows": 1, "n": 2}])
def scale(B, x, w):
    return x * w


@scale.defvjp
def scale_vjp(B, x, w, dy):
    return dy * w, (dy * x).sum(0)


@triton.jit
def scale_dx_kernel(dy_ptr, w_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        dy = tl.load(dy_ptr + row * n + offs, mask=mask)
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(dx_ptr + row * n + offs, FACTOR * dy * w, mask=mask)


def scale_dx(x, w, dy):
    """dx only: w is a frozen weight, its gradient never computed."""
    rows, n = dy.shape
    d, ww, out = harness.device_tensor(dy), harness.device_tensor(w), harness.empty(dy.shape)
    scale_dx_kernel[(rows,)](d, ww, out, n, BLOCK=16)
    return (harness.to_numpy(out),)


TRITON_KERNELS = [TritonKernel("scale_dx", scale, "backward", ("dx",), scale_dx, source="my file",
                               sizes=({"rows": 3, "n": 33},))]
'''


@pytest.mark.parametrize("factor,verdict", [("1.0", "kernel-match"), ("2.0", "failed")])
def test_a_backward_returning_dx_only_is_checked_against_a_spec_of_its_own_file(tmp_path, factor, verdict):
    from vjpcert.triton_report import load_user_kernels
    f = tmp_path / "own_spec.py"
    f.write_text(OWN_SPEC_FILE.replace("FACTOR", factor))
    (kernel,) = load_user_kernels(str(f))
    cert = check_triton_claim(kernel.op, kernel.claim, {"rows": 3, "n": 33}, kernel=kernel)
    assert cert.verdict == verdict and cert.op == "scale"
    assert any("returns dx of the spec's cotangents (dx, dw): only those are checked" in a
               for a in cert.assumptions)
    if verdict == "failed":
        assert cert.evidence["witness"]["check"] == "tolerance" and cert.evidence["witness"]["output"] == "dx"


def test_the_command_checks_a_file_with_its_own_spec_and_no_driver(tmp_path):
    from vjpcert.cli import main
    f = tmp_path / "own_spec.py"
    f.write_text(OWN_SPEC_FILE.replace("FACTOR", "1.0"))
    assert main(["triton", str(f), "--out", str(tmp_path / "o")]) == 0
    rows = json.loads((tmp_path / "o" / "triton.json").read_text())["rows"]
    assert {(r["op"], r["verdict"]) for r in rows} == {("scale", "kernel-match")}
    # the kernel's one size first, then the gate's: a power of two, a multiple of 32, two drawn
    assert rows[0]["dims"] == {"rows": 3, "n": 33} and len(rows) == 5
    assert {r["dims"]["n"] for r in rows[1:3]} == {64, 96}


def test_a_partial_backward_must_name_the_cotangents_it_returns(tmp_path):
    from vjpcert.triton_report import load_user_kernels
    f = tmp_path / "own_spec.py"
    f.write_text(OWN_SPEC_FILE.replace("FACTOR", "1.0").replace('("dx",), scale_dx', '("grad",), scale_dx'))
    (kernel,) = load_user_kernels(str(f))
    with pytest.raises(SpecError, match="names each d<input>"):
        check_triton_claim(kernel.op, kernel.claim, {"rows": 3, "n": 33}, kernel=kernel)
