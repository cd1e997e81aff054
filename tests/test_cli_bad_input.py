"""Every bad input a newcomer may give is refused before any work: exit 2 (or 3 when a --timeout ran
out before the claims), ONE line on stderr, and nothing written. Each case also checks the folder it
names stayed as it was, so a refusal that comes after a partial write goes red."""
import os
import threading
import time
from pathlib import Path

import pytest

from vjpcert.cli import main

SQUARE = ('from vjpcert.core.registry import op\n'
          '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
          'def square(B, x):\n    return x * x\n'
          '@square.defvjp\ndef _(B, x, dy):\n    return (2 * x * dy,)\n')

SPIN = ('from vjpcert.core.registry import op\n'
        '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
        'def spin(B, x):\n'
        '    while True:\n'
        '        try:\n'
        '            pass\n'
        '        except Exception:      # a spec that swallows errors must not swallow the deadline\n'
        '            pass\n'
        '@spin.defvjp\ndef _(B, x, dy):\n    return (dy,)\n')

SPIN_AT_IMPORT = 'while True:\n    pass\n'


def _tree(root: Path) -> list[str]:
    """What a command wrote there, Python's own bytecode cache of an imported spec file aside."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts)


def _refused(capsys, argv, code=2, *, cwd_tree: Path):
    before = _tree(cwd_tree)
    assert main(argv) == code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("vjpcert: "), lines
    assert _tree(cwd_tree) == before, "a refused command wrote something"
    return lines[0]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(SQUARE)
    (tmp_path / "afile").write_text("not a folder\n")
    return tmp_path


@pytest.mark.parametrize("command", ["all", "prove", "check", "kernels"])
def test_a_file_as_the_report_folder(project, capsys, command):
    line = _refused(capsys, [command, "mine.py", "--reports", "afile"], cwd_tree=project)
    assert "afile" in line and "not a directory" in line


@pytest.mark.parametrize("command", ["prove", "check"])
def test_a_report_folder_under_a_file(project, capsys, command):
    line = _refused(capsys, [command, "mine.py", "--reports", "afile/reports"], cwd_tree=project)
    assert "afile is a file" in line


@pytest.mark.parametrize("argv", [["frameworks", "--reports", "afile"], ["mutate", "--reports", "afile"],
                                  ["check", "mine.py", "--impl", "x:y", "--reports", "afile"]])
def test_the_other_writers_refuse_a_file_too(project, capsys, argv):
    assert "not a directory" in _refused(capsys, argv, cwd_tree=project)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_report_folder(project, capsys):
    ro = project / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert "not writable" in _refused(capsys, ["prove", "mine.py", "--reports", "ro"], cwd_tree=project)
    finally:
        ro.chmod(0o755)


def test_a_report_folder_that_cannot_be_made(project, capsys):
    """/proc refuses new entries even to root: the case a read-only folder is for everyone else."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    assert "not writable" in _refused(capsys, ["prove", "mine.py", "--reports", "/proc/vjpcert-reports"],
                                      cwd_tree=project)


def test_verify_of_a_missing_folder_says_so_at_once(project, capsys):
    start = time.perf_counter()
    line = _refused(capsys, ["verify", "nope"], cwd_tree=project)
    assert "not a report directory" in line
    assert time.perf_counter() - start < 30       # before planning every op (that took a minute)


@pytest.mark.parametrize("argv, words", [
    (["prove", "mine.py", "--dims", "q=3"], "--dims names"),
    (["prove", "mine.py", "--dims", "n=abc"], "--dims expects"),
    (["prove", "nosuchop"], "unknown op"),
    (["prove", "missing.py"], "file not found"),
    (["prove", "mine.py", "--timeout", "-1"], "--timeout must be > 0"),
    (["check", "mine.py", "--dps", "3"], "--dps 3"),
    (["prove", "mine.py", "--jobs", "0"], "--jobs"),
    (["verify", "afile"], "not a report directory"),
])
def test_bad_arguments(project, capsys, argv, words):
    assert words in _refused(capsys, argv, cwd_tree=project)


def test_a_broken_spec_file(project, capsys):
    (project / "broken.py").write_text("def f(:\n")
    _refused(capsys, ["prove", "broken.py"], cwd_tree=project)


@pytest.fixture
def main_thread():
    """The deadline is a signal, delivered on the main thread only. Asked when the test runs, not when
    the file is imported: a pytest-xdist worker may import on its main thread and run a test on
    another, where the unbounded trace of a million entries then ran for minutes."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the deadline is a signal: main thread only")


needs_main_thread = pytest.mark.usefixtures("main_thread")


@needs_main_thread
def test_a_forward_that_never_returns_costs_the_timeout(project, capsys):
    (project / "spin.py").write_text(SPIN)
    start = time.perf_counter()
    line = _refused(capsys, ["prove", "spin.py", "--timeout", "2"], code=3, cwd_tree=project)
    assert "--timeout 2" in line and "nothing was run or written" in line
    assert time.perf_counter() - start < 30


@needs_main_thread
def test_a_spec_file_that_never_finishes_importing_costs_the_timeout(project, capsys):
    (project / "hang.py").write_text(SPIN_AT_IMPORT)
    line = _refused(capsys, ["prove", "hang.py", "--timeout", "2"], code=3, cwd_tree=project)
    assert "loading the spec files" in line


@needs_main_thread
def test_dims_too_large_to_trace_cost_the_timeout(project, capsys):
    """A million entries per row: tracing softmax makes millions of nodes, far past a second on any
    machine (2.5 s to reach the deadline here, 0.2 GB), so planning itself is what --timeout stops."""
    start = time.perf_counter()
    line = _refused(capsys, ["prove", "softmax", "--dims", "n=1000000", "--timeout", "1"], code=3,
                    cwd_tree=project)
    assert "planning softmax" in line and "--timeout 1" in line and "nothing was run or written" in line
    assert time.perf_counter() - start < 30


@needs_main_thread
def test_a_deadline_whose_alarm_is_swallowed_still_ends_the_work():
    """An alarm whose exception is lost (raised while Python collects garbage, where it is only
    printed) must not leave the work unbounded: the alarm repeats until the deadline is disarmed."""
    from vjpcert.cli import OutOfBudget, _deadline
    swallowed, start = [], time.perf_counter()
    with pytest.raises(OutOfBudget):
        with _deadline(0.3, "spinning"):
            try:
                time.sleep(20)          # the first alarm arrives here, and is swallowed
            except OutOfBudget:
                swallowed.append(time.perf_counter() - start)
            time.sleep(20)              # ... and the next one ends it
    assert swallowed and time.perf_counter() - start < 5


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("vjpcert ") and out.split()[1][0].isdigit()

