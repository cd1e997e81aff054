"""`vjpcert check` end to end: certificates with digits, plots linked from the reports, bad input."""
import json

import pytest

from vjpcert.cli import main


def run(tmp_path, *args):
    reports = tmp_path / "reports"
    return main(["check", "--quiet", "--reports", str(reports), *map(str, args)]), reports


def test_check_writes_digits_and_a_linked_plot(tmp_path):
    # at small dims (the long rows cost seconds and are not what this test reads)
    code, reports = run(tmp_path, "softmax", "--dps", "30", "--seed", "3", "--dims", "rows=2,n=5")
    assert code == 0
    recs = [json.loads(p.read_text()) for p in (reports / "certificates" / "softmax").glob("numeric__*.json")]
    from vjpcert.plan import plan_op
    planned = plan_op("softmax", ("numeric",), dims={"rows": 2, "n": 5})
    assert len(recs) == len(planned) and all(r["verdict"] == "checked" for r in recs)
    assert {r["claim"] for r in recs} >= {"vjp[x]", "reference", "max_shift_free"}
    assert all(r["evidence"]["dps"] == 30 and r["evidence"]["seed"] == 3 for r in recs)
    assert (reports / "plots" / "softmax-fd.png").stat().st_size > 10_000
    assert "plots/softmax-fd.png" in (reports / "softmax.md").read_text()


def test_check_a_given_point_with_another_method(tmp_path):
    point = tmp_path / "p.json"
    point.write_text(json.dumps({"x": [[0.5, -1.0, 2.0]]}))
    code, reports = run(tmp_path, "softmax", "--point", point, "--method", "richardson", "--no-plots")
    assert code == 0
    rec = json.loads((reports / "certificates/softmax/numeric-point__vjp-x__n3-rows1.json").read_text())
    assert rec["evidence"]["cases"].keys() == {"given"} and rec["method"] == "richardson@50"
    assert rec["evidence"]["given_point"] == {"x": [[0.5, -1.0, 2.0]]} and len(rec["options"]["point"]) == 64


def test_wrong_backward_is_exit_1(tmp_path):
    spec = tmp_path / "mine.py"
    spec.write_text('from vjpcert.core.registry import op\n'
                    '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
                    'def cube(B, x):\n    return x * x * x\n'
                    '@cube.defvjp\ndef _(B, x, dy):\n    return (2 * x * x * dy,)\n')
    code, reports = run(tmp_path, spec, "--no-plots")
    assert code == 1
    rec = json.loads((reports / "certificates/cube/numeric__vjp-x__n3.json").read_text())
    assert rec["verdict"] == "failed" and rec["evidence"]["witness"]["point"]


@pytest.mark.parametrize("args,message", [
    (["softmax", "--dps", "10"], "below 20"),
    (["rope_half", "--shape", "d=7"], "even"),
    (["softmax", "--point", "nope.json"], "file not found"),
])
def test_bad_input_is_exit_2_and_writes_nothing(tmp_path, capsys, args, message):
    code, reports = run(tmp_path, *args)
    assert code == 2 and message in capsys.readouterr().err
    assert not reports.exists()


def test_nan_in_a_point_file_is_exit_2(tmp_path, capsys):
    point = tmp_path / "p.json"
    point.write_text('{"x": [[0.5, NaN, 2.0]]}')
    code, reports = run(tmp_path, "softmax", "--point", point)
    assert code == 2 and "NaN" in capsys.readouterr().err and not reports.exists()
