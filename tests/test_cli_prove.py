"""`vjpcert prove` end to end: reports, exit codes, user files, and bad input (exit 2, nothing written)."""
import json
import textwrap

import pytest

from vjpcert.cli import main

GOOD = '''
"""A user's op: y = x^2 * w, in one file."""
from vjpcert.core.registry import op

@op(inputs={"x": ("n",), "w": ("n",)}, output=("n",), dims=[{"n": 3}])
def square_scale(B, x, w):
    return x * x * w

@square_scale.defvjp
def square_scale_vjp(B, x, w, dy):
    return 2 * x * w * dy, x * x * dy
'''


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def run(tmp_path, *args):
    reports = tmp_path / "reports"
    return main(["prove", "--quiet", "--reports", str(reports), *map(str, args)]), reports


def test_builtin_op_writes_json_markdown_and_index(tmp_path):
    code, reports = run(tmp_path, "softmax", "--jobs", "2")
    assert code == 0
    certs = list((reports / "certificates" / "softmax").glob("*.json"))
    from vjpcert.plan import plan_op
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic.every_size.general import general_claims
    planned = plan_op("softmax", ("symbolic",))
    assert len(certs) == len(planned) and any(t.claim == "max_shift_free" for t in planned)
    general = [t for t in planned if dict(t.options).get("method") == "general"]
    assert {t.claim for t in general} == set(general_claims(builtin_ops()["softmax"])) != set()
    record = json.loads(certs[0].read_text())
    for key in ("op", "claim", "verdict", "method", "dims", "assumptions", "evidence",
                "spec_sha256", "sources", "versions", "schema"):
        assert key in record
    assert "seconds" not in record and '"seconds"' not in json.dumps(record)   # timings live apart
    assert json.loads((reports / "timings.json").read_text())
    assert "proved" in (reports / "softmax.md").read_text()
    assert "[softmax](softmax.md)" in (reports / "README.md").read_text()
    assert not list(reports.rglob(".tmp-*")), "a temporary file was left behind"


def test_user_file_is_proved(tmp_path):
    code, reports = run(tmp_path, write(tmp_path, "my_ops.py", GOOD))
    assert code == 0
    assert {p.name for p in (reports / "certificates" / "square_scale").glob("*.json")} == {
        "symbolic__vjp-x__n3.json", "symbolic__vjp-w__n3.json"}


def test_wrong_user_backward_fails_with_exit_1_and_a_witness(tmp_path):
    wrong = GOOD.replace("2 * x * w * dy", "x * w * dy")
    code, reports = run(tmp_path, write(tmp_path, "my_ops.py", wrong))
    assert code == 1
    rec = json.loads((reports / "certificates/square_scale/symbolic__vjp-x__n3.json").read_text())
    assert rec["verdict"] == "failed" and rec["evidence"]["witness"]["point"]
    assert "Witnesses" in (reports / "square_scale.md").read_text()


def test_tiny_timeout_gives_exit_3(tmp_path):
    code, _ = run(tmp_path, "layernorm", "--dims", "n=32", "--timeout", "0.005")
    assert code == 3


BAD = {
    "wrong output shape": ("return x * x * w", "return (x * x * w).sum()", "the forward returned shape"),
    "wrong cotangent count": ("return 2 * x * w * dy, x * x * dy", "return (2 * x * w * dy,)",
                              "returned 1 cotangent"),
    "wrong cotangent shape": ("return 2 * x * w * dy, x * x * dy", "return 2 * x * w * dy, (x * x * dy)[:1]",
                              "has shape (1,)"),
    "python float": ("return x * x * w", "return 0.5 * x * x * w", "float"),
    "math call": ("return x * x * w", "import math; return math.exp(x[0]) * x * w", "math"),
    "numpy ufunc": ("return x * x * w", "import numpy as np; return np.exp(x) * w", "B.exp"),
    "undeclared argument": ("def square_scale(B, x, w):", "def square_scale(B, x, w, z):", "not declared"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_spec_is_exit_2_with_one_line_and_nothing_written(tmp_path, capsys, case):
    old, new, message = BAD[case]
    assert old in GOOD
    code, reports = run(tmp_path, write(tmp_path, "bad.py", GOOD.replace(old, new)))
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1, err
    assert "square_scale" in err or "bad.py" in err
    assert not reports.exists()


@pytest.mark.parametrize("args,message", [
    (["sofmax"], "did you mean 'softmax'"),
    (["missing_file.py"], "file not found"),
    (["softmax", "--dims", "q=3"], "no selected op has"),
    (["softmax", "--dims", "n=three"], "name=int"),
    (["softmax", "--jobs", "0"], "--jobs"),
])
def test_usage_errors_are_exit_2(tmp_path, capsys, args, message):
    code, reports = run(tmp_path, *args)
    assert code == 2 and message in capsys.readouterr().err
    assert not reports.exists()


def test_file_raising_on_import_is_named(tmp_path, capsys):
    code, reports = run(tmp_path, write(tmp_path, "boom.py", "raise RuntimeError('kaboom')\n"))
    err = capsys.readouterr().err
    assert code == 2 and "boom.py" in err and "kaboom" in err and not reports.exists()
