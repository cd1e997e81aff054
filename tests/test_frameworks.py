"""The Framework backwards report: its plan (proofs at small dims, checks at realistic ones), its
note, and `vjpcert verify` over it (a stale, edited or missing certificate is named)."""
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the Framework backwards report needs PyTorch")

from vjpcert.cli import main  # noqa: E402
from vjpcert.frameworks import TABLE, expected_paths, plan, pytorch_ops, verify_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "frameworks"


def test_every_op_of_the_table_is_planned_proved_small_and_checked_realistic():
    ops = pytorch_ops()
    assert {n.split(".")[1] for n in ops} == {t[0] for t in TABLE}
    assert all(op.spec is not None and f"matches_spec[{op.spec.name}]" in op.claims() for op in ops.values())
    one = {"pytorch.softmax": ops["pytorch.softmax"]}          # the full plan traces at realistic dims
    tasks = plan(one)
    op = one["pytorch.softmax"]
    assert {t.claim for t in tasks if t.tier == "symbolic"} == set(op.claims())
    assert {tuple(sorted(d.items())) for d in op.dims} == {t.dims for t in tasks if t.tier == "symbolic"}
    assert {t.dims for t in tasks if t.tier == "numeric"} == {tuple(sorted(op.check_dims.items()))}
    from vjpcert.plan import task_relpath
    assert sorted(map(str, expected_paths(one))) == sorted(str(task_relpath(t, "pytorch.softmax")) for t in tasks)


def test_the_committed_framework_report_is_current_and_complete():
    problems, _ = verify_report(REPORT)
    assert not problems, "\n".join(map(str, problems[:20]))


def test_the_note_says_what_was_proved_what_only_checked_and_why():
    note = (REPORT / "README.md").read_text()
    for heading in ("## Verdicts", "## What was proved, what only checked, and why", "## Assumptions per op"):
        assert heading in note
    rows = json.loads((REPORT / "frameworks.json").read_text())["rows"]
    assert {r["op"].split(".")[1] for r in rows if r["op"].startswith("pytorch.")} == {t[0] for t in TABLE}
    for r in rows:
        if r["not_proved"]:
            assert "## Findings (with witnesses)" in note and all(x["witness"] for x in r["not_proved"]
                                                                  if x["verdict"] == "failed")


@pytest.fixture
def report_copy(tmp_path):
    root = tmp_path / "reports"
    (root / "certificates").mkdir(parents=True)
    shutil.copytree(REPORT, root / "frameworks")
    return root


def test_verify_names_an_edited_and_a_missing_framework_certificate(report_copy, capsys):
    certs = sorted((report_copy / "frameworks" / "certificates" / "pytorch.softmax").glob("*.json"))
    rec = json.loads(certs[0].read_text())
    rec["seconds"] += 1.0                                  # a hand edit the digest does not cover
    certs[0].write_text(json.dumps(rec))
    certs[1].unlink()
    assert main(["verify", str(report_copy), "--no-missing"]) == 1
    out = capsys.readouterr().out
    assert "edited" in out and f"frameworks/certificates/pytorch.softmax/{certs[0].name}" in out
    problems, _ = verify_report(report_copy / "frameworks")
    assert any(p.kind == "missing" and certs[1].name in p.path for p in problems)


def test_the_plan_and_the_committed_certificates_agree():
    ops = pytorch_ops()
    want = {str(p) for p in expected_paths(ops)}
    have = {str(p.relative_to(REPORT)) for p in (REPORT / "certificates").rglob("*.json")
            if p.parent.name.startswith("pytorch.")}
    assert want == have
