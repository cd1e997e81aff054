"""The Framework backwards report: its plan (proofs at small dims, checks at realistic ones), its
note, and `vjpcert verify` over it (a stale, edited or missing certificate is named). That the
committed report is current is tests/test_all_verify.py's guard: `vjpcert verify reports` covers
reports/frameworks/."""
import json
import shutil
from pathlib import Path

import pytest

import optional

optional.importorskip("torch", reason="the Framework backwards report needs PyTorch")

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


def test_verify_names_an_edited_and_a_missing_framework_certificate(report_copy, capsys, monkeypatch):
    """Also where JAX is not installed (as in CI): its certificates are skipped with a note, the
    PyTorch ones still verified."""
    import vjpcert.frameworks
    monkeypatch.setattr(vjpcert.frameworks, "jax_available", lambda: False)
    certs = sorted((report_copy / "frameworks" / "certificates" / "pytorch.softmax").glob("*.json"))
    rec = json.loads(certs[0].read_text())
    rec["assumptions"] = rec["assumptions"] + ["a hand edit"]   # the digest no longer matches
    certs[0].write_text(json.dumps(rec))
    certs[1].unlink()
    assert main(["verify", str(report_copy), "--no-missing"]) == 1
    out = capsys.readouterr().out
    assert "edited" in out and f"frameworks/certificates/pytorch.softmax/{certs[0].name}" in out
    has_jax = any((REPORT / "certificates").glob("jax.*"))
    assert ("JAX certificates not verified (JAX is not installed" in out) == has_jax
    problems, notes = verify_report(report_copy / "frameworks")
    assert any(p.kind == "missing" and certs[1].name in p.path for p in problems)
    assert not any("jax." in p.path for p in problems) and bool(notes) == has_jax


def test_no_correct_framework_op_is_failed_in_the_committed_report():
    """PyTorch's and JAX's own ops are correct: read as the reals they round, their constants prove them;
    the `.decimal` variants fail only by those constants' rounding, which is `inconclusive` with the
    fit that shows it, never `failed`."""
    certs = [json.loads(p.read_text()) for p in sorted((REPORT / "certificates").glob("*/*.json"))]
    assert certs and not [(c["op"], c["claim"], c["dims"]) for c in certs if c["verdict"] == "failed"]
    rounding = [c for c in certs if "constant_fit" in c["evidence"]]
    assert rounding and all(c["op"].endswith(".decimal") and c["verdict"] == "inconclusive" for c in rounding)
    # JAX's causal mask is a finite logit: its attention equals the spec's up to e^(-10^38), not exactly
    finite_mask = ("jax.sdpa_causal", "matches_spec[attention_causal]")
    assert not [(c["op"], c["claim"]) for c in certs if not c["op"].endswith(".decimal")
                and (c["op"], c["claim"]) != finite_mask
                and c["verdict"] not in ("proved", "checked", "checked-probabilistic")]
