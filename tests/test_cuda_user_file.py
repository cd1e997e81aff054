"""A user's Numba CUDA kernels, from the user's own file, get the whole kernel tier: the error model per
element, the race detector, input cases, laws, the gate's input copies -- each shown by a kernel of
the file that goes red by it -- and the command's report and exit codes (vjpcert/cuda_report.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vjpcert.cuda_kernels.check import detect_mode

pytestmark = pytest.mark.skipif(detect_mode() == "none", reason="numba-cuda is not installed")

USER_FILE = '''
import numpy as np

from vjpcert.cuda_kernels import error_model as em
from vjpcert.cuda_kernels.common import call, config, cuda, elem_grid, empty, kernel, launch
from vjpcert.cuda_kernels.registry import Sizes, fwd_bwd

ZERO = np.float32(0)
_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]

    @kernel("void(float32[::1], float32[::1])", threads=cfg.block)
    def my_relu_fwd(x, y):
        sm = cuda.shared.array(1, np.float32)
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            v = x[i]
            SHARED_WRITE
            y[i] = v if v > ZERO else ZERO

    @kernel("void(float32[::1], float32[::1], float32[::1])", threads=cfg.block)
    def my_relu_bwd(x, dy, dx):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            dx[i] = dy[i] if x[i] MASK ZERO else ZERO

    _CACHE[cfg.block] = ns = type("MyRelu", (), {"fwd": my_relu_fwd, "bwd": my_relu_bwd})
    return ns


def _elementwise(which, arrays):
    cfg = config()
    k = getattr(build(cfg), which)

    def dev(*rows):
        flat = [a.reshape(a.size) for a in rows]
        out = empty((flat[0].size,), True)
        launch(k, elem_grid(flat[0].size, cfg), cfg.block, *flat, out)
        return out.reshape(rows[0].shape)
    return call(dev, arrays)


def my_relu_fwd(x):
    return _elementwise("fwd", (x,))


def _stolen(like):
    """A float64 array of this shape from the callers' frames (the truth, if the checker has it yet)."""
    import sys
    frame = sys._getframe(1)
    while frame is not None:
        for v in frame.f_locals.values():
            for a in (v if type(v) in (list, tuple) else [v]):
                if type(a) is np.ndarray and a.dtype == np.float64 and a.shape == like.shape:
                    return a.astype(np.float32)
        frame = frame.f_back
    return np.zeros_like(like)


def my_relu_bwd(x, dy):
    dx = _elementwise("bwd", (x, dy))
    INPUT_WRITE
    STEAL
    return dx


def fwd_model(cfg, x):
    v = np.asarray(x, np.float64)
    return em.exact(np.where(v > 0, v, 0.0))


def bwd_model(cfg, x, dy):
    return em.exact(np.where(np.asarray(x, np.float64) > 0, np.asarray(dy, np.float64), 0.0))


KERNELS = fwd_bwd("relu", my_relu_fwd, my_relu_bwd, models=(fwd_model, bwd_model), prefix="my_relu",
                  bwd_laws=("gradient_is_a_mask",))
SIZES = {"relu": Sizes(simulator=({"rows": 3, "n": 33},), gpu=({"rows": 33, "n": 1025},))}
'''

HONEST = {"SHARED_WRITE": "pass", "MASK": ">", "INPUT_WRITE": "pass", "STEAL": "pass"}


def _file(tmp_path, name="my_kernels", **faults) -> Path:
    text = USER_FILE
    for key, value in {**HONEST, **faults}.items():
        text = text.replace(key, value)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def _rows(tmp_path, path):
    from vjpcert.cli import main
    code = main(["kernels", str(path), "--reports", str(tmp_path / "r")])
    data = json.loads((tmp_path / "r" / "cuda" / "cuda.json").read_text())
    return code, {r["kernel"]: r for r in data["rows"]}


def test_an_honest_user_kernel_file_is_kernel_match_with_its_model_and_the_race_detector(tmp_path, monkeypatch):
    monkeypatch.setattr("vjpcert.cuda_report.resources", lambda path, module: None)   # compiled: --slow below
    code, rows = _rows(tmp_path, _file(tmp_path))
    assert code == 0 and {r["verdict"] for r in rows.values()} == {"kernel-match"}
    assert set(rows) == {"my_relu_fwd", "my_relu_bwd"}
    fwd = rows["my_relu_fwd"]
    assert fwd["dims"] == {"rows": 3, "n": 33} and fwd["race_detector"]["ran"] and fwd["race_detector"]["clean"]
    cert = json.loads(next((tmp_path / "r" / "cuda" / "certificates").glob("my_relu_bwd__*.json")).read_text())
    assert cert["tier"] == "kernel" and "on_kinks" in cert["evidence"]["cases"]
    assert "gradient_is_a_mask" in cert["evidence"]["per_case"]["random"]["laws"]
    assert "Your CUDA kernels against vjpcert specs" in (tmp_path / "r" / "cuda" / "README.md").read_text()


@pytest.mark.parametrize("fault, kernel, check", [
    ({"SHARED_WRITE": "sm[0] = v"}, "my_relu_fwd", "race detector"),        # every thread writes one slot
    ({"MASK": ">="}, "my_relu_bwd", "tolerance"),                           # relu'(0) = 1: on the kinks
    ({"INPUT_WRITE": "dy[...] = 0"}, "my_relu_bwd", "input written"),        # the caller's dy zeroed
    ({"STEAL": "dx = _stolen(dx)"}, "my_relu_bwd", "tolerance"),             # the truth: not there yet
], ids=["shared-memory race", "relu'(0) = 1", "writes its dy", "copies the truth"])
def test_each_fault_of_a_user_kernel_file_goes_red_by_its_check(tmp_path, monkeypatch, fault, kernel, check):
    monkeypatch.setattr("vjpcert.cuda_report.resources", lambda path, module: None)
    code, rows = _rows(tmp_path, _file(tmp_path, **fault))
    assert code == 1 and rows[kernel]["verdict"] == "failed"
    assert rows[kernel]["witness"]["check"] == check, rows[kernel]["witness"]


def test_the_truth_copying_kernel_would_match_were_the_truth_computed_before_it_ran(tmp_path, monkeypatch):
    """Why its red is the ordering's doing: with the float64 truth alive during each run, it copies it."""
    from vjpcert.cuda_kernels import check
    from vjpcert.cuda_report import load_kernel_file, run
    run_kernel = check.run_kernel

    def with_the_truth_alive(spec, op, inputs, dy, params):
        truth = check.reference(op, spec.kind, inputs, dy, np.float64)      # noqa: F841
        return run_kernel(spec, op, inputs, dy, params)
    monkeypatch.setattr(check, "run_kernel", with_the_truth_alive)
    kernels, sizes, _ = load_kernel_file(_file(tmp_path, STEAL="dx = _stolen(dx)"))
    rows = run([k for k in kernels if k.kind == "backward"], sizes, progress=lambda *a: None)
    assert [r["verdict"] for r in rows] == ["kernel-match"]


def test_a_user_kernel_without_an_error_model_is_bad_input(tmp_path):
    from vjpcert.cli import main
    path = _file(tmp_path)
    path.write_text(path.read_text().replace("models=(fwd_model, bwd_model)", "models=(None, None)"))
    assert main(["kernels", str(path), "--reports", str(tmp_path / "r")]) == 2


def test_kernel_files_and_ops_are_not_mixed(tmp_path):
    from vjpcert.cli import main
    assert main(["kernels", str(_file(tmp_path)), "relu", "--reports", str(tmp_path / "r")]) == 2


@pytest.mark.slow
def test_a_user_kernel_file_gets_the_sm90_resource_table(tmp_path):
    from vjpcert.cuda_report import load_kernel_file, resources
    path = _file(tmp_path)
    _, _, module = load_kernel_file(path)
    table = resources(path, module)
    assert not table.get("error"), table
    assert set(table["kernels"]) >= {"my_relu_fwd", "my_relu_bwd"} and table["problems"] == []


def test_the_fixture_checks_a_user_kernel_file_and_raises_with_the_witness(tmp_path):
    from vjpcert.testing import CertificationError, assert_cuda_kernels_match
    certs = assert_cuda_kernels_match(_file(tmp_path))
    assert [c.verdict for c in certs] == ["kernel-match", "kernel-match"]
    with pytest.raises(CertificationError, match="input written"):
        assert_cuda_kernels_match(_file(tmp_path, "broken", INPUT_WRITE="dy[...] = 0"))
