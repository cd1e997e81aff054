"""A command run again with nothing to do prints its last run instead of planning (``vjpcert.up_to_date``),
but only while every file that run was decided from hashes as it did. A replay of a stale answer would be
a false verdict, so each kind of file it was decided from is changed here, and the command must plan again
and come to the new answer; the negative control shows the fingerprint's report part is what catches one."""
import json
import os
import sys
import textwrap

import pytest

from vjpcert import cli_run, up_to_date
from vjpcert.cli import main

HELPER_RIGHT = "def gain(B, x):\n    return 2 * x\n"
HELPER_WRONG = "def gain(B, x):\n    return 3 * x\n"          # the same length: only content tells them apart
SPEC = '''
import json
from pathlib import Path
from vjpcert import op
from helpers import gain

OFFSET = json.loads(Path(__file__).with_name("offset.json").read_text())["offset"]

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sq(B, x):
    return x * x + OFFSET

@sq.defvjp
def _(B, x, dy):
    return (gain(B, x) * dy,)
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A spec folder (a spec, a helper module it imports, a data file it reads), its own cache, and
    a count of the runs that planned."""
    monkeypatch.setenv("VJPCERT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helpers.py").write_text(HELPER_RIGHT)
    (folder / "offset.json").write_text(json.dumps({"offset": 1}))
    (folder / "my_ops.py").write_text(textwrap.dedent(SPEC))
    planned = []
    original = cli_run._plan

    def counting(args, tiers):
        planned.append(tiers)
        return original(args, tiers)
    monkeypatch.setattr(cli_run, "_plan", counting)

    class Project:
        spec, reports, runs = folder / "my_ops.py", tmp_path / "reports", planned

        def prove(self, *extra, replay=True):
            while str(folder) in sys.path:          # as a new process starts: loading a spec puts its folder there
                sys.path.remove(str(folder))
            return main(["prove", str(self.spec), "--reports", str(self.reports), *extra], replay=replay)
    return Project()


def _settled(project, capsys, *extra):
    """Run until a run had nothing to do and was kept: (its exit code, what it printed)."""
    project.prove(*extra)                        # runs the claims: its reports changed, so not kept
    capsys.readouterr()
    code = project.prove(*extra)                 # nothing to run: kept
    return code, _lines(capsys)


def _lines(capsys) -> list[str]:
    """What was printed, without blank lines (a progress bar leaves one where the output is not a terminal)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_a_run_with_nothing_to_do_is_replayed_as_it_printed(project, capsys):
    code, printed = _settled(project, capsys)
    assert code == 0 and "(0 run, 1 current)" in "\n".join(printed) and len(project.runs) == 2
    assert project.prove() == 0
    assert len(project.runs) == 2                # replayed: not planned
    assert _lines(capsys) == printed


def test_a_python_caller_always_plans(project, capsys):
    _settled(project, capsys)
    assert project.prove(replay=False) == 0 and len(project.runs) == 3


def test_a_run_that_ran_claims_is_not_kept(project, capsys):
    assert project.prove() == 0 and not list((project.reports.parent / "cache").glob("up-to-date/*.json"))


def test_each_command_line_is_kept_apart(project, capsys):
    _settled(project, capsys)
    project.prove("--quiet")                     # prints less: its own run, planned
    assert len(project.runs) == 3


def _edit_helper(p):
    helper = p.spec.with_name("helpers.py")
    st = os.stat(helper)
    helper.write_text(HELPER_WRONG)
    os.utime(helper, ns=(st.st_atime_ns, st.st_mtime_ns))       # same size, same time: only its bytes differ


def _shadow_helper(p):
    package = p.spec.with_name("helpers")               # a package wins over a module of the same name
    package.mkdir()
    (package / "__init__.py").write_text(HELPER_WRONG)


def _edit_data(p):
    p.spec.with_name("offset.json").write_text(json.dumps({"offset": 2}))


def _corrupt_certificate(p):
    cert = next((p.reports / "certificates").rglob("symbolic__vjp-x*.json"))
    cert.write_text(cert.read_text().replace('"proved"', '"failed"'))


def _delete_certificate(p):
    next((p.reports / "certificates").rglob("symbolic__vjp-x*.json")).unlink()


def _delete_page(p):
    (p.reports / "README.md").unlink()


def _set_environment(p):
    os.environ["VJPCERT_SOMETHING"] = "1"               # the test's monkeypatch set it, and restores it


# (the change, the exit code planning comes to, whether the claim runs again)
CHANGES = {"a helper module edited to the same size and time": (_edit_helper, 1, True),
           "a module that now shadows the helper": (_shadow_helper, 1, True),
           "a data file the spec reads": (_edit_data, 0, True),
           "a certificate edited": (_corrupt_certificate, 0, True),
           "a certificate deleted": (_delete_certificate, 0, True),
           "a page deleted": (_delete_page, 0, False),
           "an environment variable vjpcert reads": (_set_environment, 0, False)}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_to_what_the_run_was_decided_from_plans_again(change, project, capsys, monkeypatch):
    monkeypatch.setenv("VJPCERT_SOMETHING", "0")
    _settled(project, capsys)
    edit, expected, reruns = CHANGES[change]
    edit(project)
    assert project.prove() == expected and len(project.runs) == 3
    assert ("(1 run, 0 current)" if reruns else "(0 run, 1 current)") in capsys.readouterr().err
    assert (project.reports / "README.md").is_file()


def test_a_failure_is_replayed_with_its_witness_and_exit_code(project, capsys):
    _settled(project, capsys)
    _edit_helper(project)
    code, printed = _settled(project, capsys)
    text = "\n".join(printed)
    assert code == 1 and "current certificate(s) hold a failure" in text and "failed  symbolic sq vjp[x]" in text
    assert project.prove() == 1 and len(project.runs) == 4
    assert _lines(capsys) == printed


def test_vjpcert_own_code_edited_plans_again(project, capsys, monkeypatch, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "checker.py").write_text("X = 1\n")
    roots = up_to_date.package_roots()
    monkeypatch.setattr(up_to_date, "package_roots", lambda: [*roots, own])
    _settled(project, capsys)
    (own / "checker.py").write_text("X = 2\n")
    assert project.prove() == 0 and len(project.runs) == 3


def test_a_file_edited_while_the_run_ran_is_not_kept(project, capsys, monkeypatch):
    project.prove()
    original = cli_run._run

    def editing(*a, **k):
        code = original(*a, **k)
        _edit_helper(project)                       # after planning loaded the right helper
        return code
    monkeypatch.setattr(cli_run, "_run", editing)
    assert project.prove() == 0                     # ran what it loaded: nothing to do
    monkeypatch.setattr(cli_run, "_run", original)
    assert project.prove() == 1 and len(project.runs) == 3   # planned again: the helper on disk is wrong


def test_without_the_reports_in_the_fingerprint_a_deleted_certificate_would_be_replayed(project, capsys, monkeypatch):
    """The negative control: with the report folder left out, the replay prints a certificate that is
    gone as current -- the stale answer the fingerprint exists to refuse."""
    monkeypatch.setattr(up_to_date, "reports_digest", lambda root: "")
    _settled(project, capsys)
    _delete_certificate(project)
    assert project.prove() == 0 and len(project.runs) == 2
    assert "(0 run, 1 current)" in capsys.readouterr().err


def test_an_interrupted_run_is_not_kept(project, capsys, monkeypatch):
    project.prove()
    import vjpcert.runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    original = vjpcert.runner.run_tasks
    monkeypatch.setattr(vjpcert.runner, "run_tasks", interrupted)
    assert project.prove() == 130
    monkeypatch.setattr(vjpcert.runner, "run_tasks", original)
    assert project.prove() == 0 and len(project.runs) == 3


def test_a_file_behind_a_linked_folder_of_the_reports_counts(project, capsys, tmp_path):
    """A report folder whose certificates live elsewhere, behind a link: an edit there plans again."""
    project.prove()
    elsewhere = tmp_path / "elsewhere"
    (project.reports / "certificates").rename(elsewhere)
    (project.reports / "certificates").symlink_to(elsewhere, target_is_directory=True)
    _settled(project, capsys)
    _corrupt_certificate(project)
    assert project.prove() == 0 and len(project.runs) == 3
    assert "(1 run, 0 current)" in capsys.readouterr().err


def test_only_the_runs_kept_last_are_kept(project, capsys, monkeypatch):
    monkeypatch.setattr(up_to_date, "KEPT", 1)
    _settled(project, capsys)
    project.prove("--quiet")                        # another command line: kept, the first forgotten
    kept = list((project.reports.parent / "cache" / "up-to-date").glob("*.json"))
    assert len(kept) == 1
    project.prove()
    assert len(project.runs) == 4                   # the first command line plans again
