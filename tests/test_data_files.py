"""Every file a claim reads is part of its hash: data a spec reads (at import time, or while its forward,
backward or laws run; through ``open``, ``json.load``, ``Path.read_text``, ``np.load``, ...) and the
listings of folders it looks into, besides its code. Before, a spec that read its coefficients from a
JSON file beside it kept its certificate "current" after the JSON was edited: `prove` skipped the claim
(exit 0) and `verify` passed, while a fresh run failed."""
import json
import textwrap

import numpy as np

from vjpcert.cli import main

# the backward's factor comes from a file: right at gain 2 (d/dx x*x = 2x), wrong at gain 3
AT_IMPORT = '''
import json
from pathlib import Path
from vjpcert import op

GAIN = json.load(open(Path(__file__).with_name("coeffs.json")))["gain"]

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    return (GAIN * x * dy,)
'''

IN_THE_BACKWARD = '''
import json
from pathlib import Path
from vjpcert import op

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    gain = json.loads(Path(__file__).with_name("coeffs.json").read_text())["gain"]
    return (gain * x * dy,)
'''

IN_THE_FORWARD_NPY = '''
import numpy as np
from pathlib import Path
from vjpcert import op

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sc(B, x):
    return int(np.load(Path(__file__).with_name("scale.npy"))[0]) * x

@sc.defvjp
def _(B, x, dy):
    return (2 * dy,)
'''

FROM_A_LISTING = '''
from pathlib import Path
from vjpcert import op

# one term per coefficient file in the folder: a file added there changes the op
TERMS = len(sorted(Path(__file__).parent.joinpath("terms").glob("*.txt")))

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    return (TERMS * x * dy,)
'''


def _project(tmp_path, spec, gain=2):
    (tmp_path / "coeffs.json").write_text(json.dumps({"gain": gain}))
    (tmp_path / "unrelated.json").write_text(json.dumps({"gain": 7}))
    f = tmp_path / "my_ops.py"
    f.write_text(textwrap.dedent(spec))
    return f


def _prove(f, reports, capsys):
    capsys.readouterr()
    code = main(["prove", str(f), "--reports", str(reports)])
    return code, capsys.readouterr().err


def _records(reports):
    return [json.loads(p.read_text()) for p in sorted((reports / "certificates").rglob("symbolic__*.json"))]


def _edit_then_stale(tmp_path, capsys, f, edit, label):
    reports = tmp_path / "reports"
    code, _ = _prove(f, reports, capsys)
    assert code == 0
    edit()
    capsys.readouterr()
    assert main(["verify", str(reports), "--spec", str(f), "--no-missing"]) == 1
    out = capsys.readouterr().out
    assert "stale" in out and label in out, out
    code, err = _prove(f, reports, capsys)
    assert "are current: skipped" not in err, err          # the claim ran again ...
    assert code == 1                                         # ... and the wrong factor is found
    assert [r["verdict"] for r in _records(reports)] == ["failed"]


def test_a_json_read_at_import_time_is_part_of_the_hash(tmp_path, capsys):
    f = _project(tmp_path, AT_IMPORT)
    _edit_then_stale(tmp_path, capsys, f, lambda: (tmp_path / "coeffs.json").write_text('{"gain": 3}'),
                     "coeffs.json")


def test_a_json_read_inside_the_backward_is_part_of_the_hash(tmp_path, capsys):
    f = _project(tmp_path, IN_THE_BACKWARD)
    _edit_then_stale(tmp_path, capsys, f, lambda: (tmp_path / "coeffs.json").write_text('{"gain": 3}'),
                     "coeffs.json")


def test_an_array_read_with_np_load_inside_the_forward_is_part_of_the_hash(tmp_path, capsys):
    f = _project(tmp_path, IN_THE_FORWARD_NPY)
    np.save(tmp_path / "scale.npy", np.array([2]))
    _edit_then_stale(tmp_path, capsys, f, lambda: np.save(tmp_path / "scale.npy", np.array([3])), "scale.npy")


def test_a_folder_listing_the_spec_reads_is_part_of_the_hash(tmp_path, capsys):
    f = _project(tmp_path, FROM_A_LISTING)
    (tmp_path / "terms").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "terms" / name).write_text("1")
    _edit_then_stale(tmp_path, capsys, f, lambda: (tmp_path / "terms" / "c.txt").write_text("1"), "terms")


def test_the_certificate_lists_its_data_files_marked_as_data(tmp_path, capsys):
    f = _project(tmp_path, IN_THE_BACKWARD)
    reports = tmp_path / "reports"
    assert _prove(f, reports, capsys)[0] == 0
    (record,) = _records(reports)
    data = [s for s in record["sources"] if s.startswith("data:")]
    assert len(data) == 1 and data[0].startswith("data:coeffs.json sha256=")
    assert "my_ops.py" in " ".join(record["sources"])
    assert not any("unrelated" in s for s in record["sources"])


def test_an_unrelated_file_edited_leaves_the_certificate_current(tmp_path, capsys):
    for spec in (AT_IMPORT, IN_THE_BACKWARD):
        f = _project(tmp_path, spec)
        reports = tmp_path / "reports"
        assert _prove(f, reports, capsys)[0] == 0
        (tmp_path / "unrelated.json").write_text('{"gain": 8}')
        (tmp_path / "coeffs.json").write_text('{"gain": 2}')         # rewritten, the same bytes
        code, err = _prove(f, reports, capsys)
        assert code == 0 and "1 of 1 certificates are current: skipped" in err, err
        assert main(["verify", str(reports), "--spec", str(f), "--no-missing"]) == 0


def test_certificates_from_a_process_pool_are_current_on_a_rerun(tmp_path, capsys):
    f = _project(tmp_path, IN_THE_BACKWARD)
    reports = tmp_path / "reports"
    capsys.readouterr()
    assert main(["prove", str(f), "--reports", str(reports), "--jobs", "2"]) == 0
    code, err = _prove(f, reports, capsys)
    assert code == 0 and "1 of 1 certificates are current: skipped" in err, err


def test_a_worker_refuses_when_a_data_file_changed_after_planning(tmp_path):
    from vjpcert.plan import plan_op
    from vjpcert.runner import execute
    f = _project(tmp_path, AT_IMPORT)
    (task,) = plan_op(f"{f}::sq", ("symbolic",), general=False)
    assert execute(task).verdict == "proved"                   # the correct twin: nothing changed
    (tmp_path / "coeffs.json").write_text('{"gain": 3}')
    cert = execute(task)
    assert cert.verdict == "inconclusive" and "coeffs.json" in cert.evidence["error"], cert.evidence


def test_a_read_in_a_forked_child_reaches_the_parent(tmp_path):
    from vjpcert.core import sources
    from vjpcert.core.budget import run_with_budget
    from vjpcert.core.registry import load_file
    f = _project(tmp_path, IN_THE_BACKWARD)
    (op,) = load_file(f)
    assert not [s for s in sources.covered(op)[1] if s.startswith("data:")]
    from vjpcert.core.backends import F64
    x = np.array([1.0, 2.0, 3.0])
    out = run_with_budget(lambda: op.bind(op.vjp, F64, {"x": x, "dy": x})[0].tolist(), 60)
    assert out.status == "ok", out.error
    assert [s for s in sources.covered(op)[1] if s.startswith("data:coeffs.json")]


def test_the_ops_that_read_no_data_keep_the_hash_they_always_had():
    from vjpcert.core.sources import covered, files_sha256
    from vjpcert.specs import builtin_ops
    for name, op in builtin_ops().items():
        spec_sha256, listed = covered(op)
        assert spec_sha256 == files_sha256(op.source_files) == op.spec_sha256, name
        assert not [s for s in listed if ":" in s and " sha256=" in s], (name, listed)


TORCH_MODULE = '''
import torch

def scaled(x):
    return 3 * x * x
'''


def test_a_framework_searching_sys_path_on_import_is_not_a_data_read(tmp_path, monkeypatch, capsys):
    """importlib.metadata lists every folder of sys.path when torch is imported from the user's module:
    the listing of the user's folder is not something the user's code read (a twin of the listing test)."""
    import pytest
    pytest.importorskip("torch")
    (tmp_path / "user_scaled.py").write_text(TORCH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    reports = tmp_path / "r"
    assert main(["prove", "torch:user_scaled:scaled", "--input", "x=n", "--dims", "n=3", "--quiet",
                 "--reports", str(reports)]) == 0
    for record in _records(reports):
        assert record["sources"] == ["user_scaled.py"], record["sources"]
