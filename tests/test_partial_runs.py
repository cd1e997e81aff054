"""Partial runs cannot damage reports: a run over a subset of ops or tiers updates those certificates
and renders every page from *all* that is on disk, so the pages never depend on which command ran
last; `--point` and `--impl` results are kept apart (reports/adhoc/); `vjpcert verify` renders the
pages to memory (unless their stamp vouches for them) and names any page that is not current, so CI
catches a damaged report."""
import hashlib
import json
import shutil

import pytest

from vjpcert.cli import main

USER_OP = ('from vjpcert.core.registry import op\n'
           '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
           'def cube(B, x):\n    """x cubed, entrywise: a user op with a docstring."""\n    return x * x * x\n'
           '@cube.defvjp\ndef _(B, x, dy):\n    return (3 * x * x * dy,)\n')


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small report directory: softmax proved, a user op proved and checked."""
    base = tmp_path_factory.mktemp("built")
    (base / "mine.py").write_text(USER_OP)
    reports = base / "reports"
    assert main(["prove", "softmax", "--reports", str(reports), "--quiet"]) == 0
    assert main(["all", str(base / "mine.py"), "--reports", str(reports), "--quiet", "--no-plots",
                 "--dims", "n=3"]) in (0, 3)                 # its own n: the long rows add only seconds
    return base


@pytest.fixture
def copy(built, tmp_path, monkeypatch):
    shutil.copytree(built, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)            # the default report directory, ./reports, is this copy
    return tmp_path / "reports"


def test_prove_and_check_point_leave_every_page_unchanged(copy, tmp_path, capsys):
    before = _files(copy)
    assert "x cubed, entrywise" in before["cube.md"].decode() and "x cubed" in before["ops/cube.html"].decode()
    assert main(["prove", "softmax"]) == 0                     # every certificate current: nothing runs
    assert _files(copy) == before
    point = tmp_path / "p.json"
    point.write_text(json.dumps({"x": [[0.5, -1.0, 2.0]]}))
    assert main(["check", "softmax", "--point", str(point), "--no-plots"]) == 0
    after = _files(copy)
    written = sorted(set(after) - set(before))
    assert written and all(w.startswith("adhoc/") for w in written), written
    assert {k: v for k, v in after.items() if not k.startswith("adhoc/")} == before, \
        "a --point run changed the planned reports"
    assert (copy / "adhoc/certificates/softmax/numeric-point__vjp-x__n3-rows1.json").is_file()
    capsys.readouterr()
    assert main(["verify", str(copy), "--spec", str(tmp_path / "mine.py"), "--no-missing"]) == 0, \
        capsys.readouterr().out


def test_a_run_over_other_ops_keeps_a_user_ops_docstring(copy):
    before = _files(copy)
    (copy / "softmax.md").unlink()                     # a page to re-render, so rendering does run
    assert main(["prove", "softmax", "--quiet"]) == 0
    after = _files(copy)
    assert after == before, sorted(k for k in before if after.get(k) != before[k])


def test_pages_do_not_name_the_command_that_rendered_them(copy):
    assert main(["prove", "softmax", "--quiet", "--force"]) == 0
    index = (copy / "README.md").read_text()
    assert "vjpcert prove" not in index and "Rendered from" in index
    assert "vjpcert prove" not in (copy / "index.html").read_text()


def test_verify_names_a_damaged_page_and_render_repairs_it(copy, tmp_path, capsys):
    spec = ["--spec", str(tmp_path / "mine.py"), "--no-missing"]
    assert main(["verify", str(copy), *spec]) == 0
    page = copy / "cube.md"
    page.write_text(page.read_text().replace("x cubed, entrywise", ""))      # what a partial run used to do
    (copy / "index.html").unlink()
    capsys.readouterr()
    assert main(["verify", str(copy), *spec]) == 1
    out = capsys.readouterr().out
    assert "page      cube.md: not what the certificates render to" in out
    assert "page      index.html: missing" in out
    assert main(["verify", str(copy), *spec, "--no-pages"]) == 0
    assert main(["render", str(copy), "--spec", str(tmp_path / "mine.py")]) == 0
    assert main(["verify", str(copy), *spec]) == 0
    assert "x cubed, entrywise" in page.read_text()


def _renders(monkeypatch) -> list:
    """Count the renders `verify` runs (it compares what they give with the pages on disk)."""
    import vjpcert.reports as reports
    calls, real = [], reports.render_reports
    monkeypatch.setattr(reports, "render_reports", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_verify_renders_only_when_the_pages_stamp_does_not_vouch_for_them(copy, tmp_path, capsys, monkeypatch):
    """The stamp vouches for the pages only while their inputs and every page's bytes are as rendered:
    an input changed under the same pages (the stamp's inputs hash no longer matches) is rendered and
    named; a page added beside the rendered ones is named without a render."""
    spec = ["--spec", str(tmp_path / "mine.py"), "--no-missing"]
    renders = _renders(monkeypatch)
    assert main(["verify", str(copy), *spec]) == 0
    assert renders == []                                   # as rendered: nothing rendered again
    stray = copy / "ops" / "stray.html"
    stray.write_text("<p>a page no certificate renders to</p>")
    capsys.readouterr()
    assert main(["verify", str(copy), *spec]) == 1
    assert "ops/stray.html: no certificate renders to it" in capsys.readouterr().out and renders == []
    stray.unlink()
    stamps = json.loads((copy / "stamps.json").read_text())
    stamps["pages"]["inputs"] = "0" * 64                   # rendered from other inputs than these
    (copy / "stamps.json").write_text(json.dumps(stamps))
    page = copy / "cube.md"
    page.write_text(page.read_text().replace("x cubed, entrywise", ""))
    stamps["pages"]["files"]["cube.md"] = hashlib.sha256(page.read_bytes()).hexdigest()
    (copy / "stamps.json").write_text(json.dumps(stamps))  # the page's own hash vouched for, its inputs not
    capsys.readouterr()
    assert main(["verify", str(copy), *spec]) == 1
    assert "page      cube.md: not what the certificates render to" in capsys.readouterr().out
    assert renders == [1]


def test_render_of_a_directory_without_certificates_is_bad_input(tmp_path, capsys):
    assert main(["render", str(tmp_path)]) == 2
    assert "no certificates/ folder" in capsys.readouterr().err


def test_an_op_without_a_docstring_gets_no_empty_block(tmp_path):
    spec = tmp_path / "bare.py"
    spec.write_text(USER_OP.replace('    """x cubed, entrywise: a user op with a docstring."""\n', ""))
    reports = tmp_path / "reports"
    assert main(["prove", str(spec), "--reports", str(reports), "--quiet"]) == 0
    assert "```text\n\n```" not in (reports / "cube.md").read_text()
    assert "<pre></pre>" not in (reports / "ops" / "cube.html").read_text()
