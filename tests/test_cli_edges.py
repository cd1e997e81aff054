"""The command line's rough edges, each with a test: FILE::op, --impl from the current
directory, a bad scheduler address, the resume hint, `kernels FILE` without kernels, IPython for the
session."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vjpcert.cli import main

ROOT = Path(__file__).resolve().parents[1]
TWO_OPS = ('from vjpcert.core.registry import op\n'
           '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
           'def cube(B, x):\n    return x * x * x\n'
           '@cube.defvjp\ndef _(B, x, dy):\n    return (3 * x * x * dy,)\n'
           '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
           'def square(B, x):\n    return x * x\n'
           '@square.defvjp\ndef _(B, x, dy):\n    return (2 * x * dy,)\n')


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(TWO_OPS)
    return path


def test_file_colon_colon_op_selects_one_op_of_a_file(tmp_path, spec):
    reports = tmp_path / "reports"
    assert main(["prove", f"{spec}::square", "--reports", str(reports), "--quiet"]) == 0
    assert [p.name for p in (reports / "certificates").iterdir()] == ["square"]
    assert main(["check", f"{spec}::square", "--reports", str(reports), "--quiet", "--no-plots"]) == 0


def test_file_colon_colon_an_unknown_op_is_one_line_exit_2(tmp_path, spec, capsys):
    assert main(["prove", f"{spec}::nope", "--reports", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "defines no op 'nope'" in err and "cube" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.torch          # `check --impl` loads the implementation bridges, torch's among them
def test_impl_imports_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "edges_impl.py").write_text(
        "import numpy as np\n"
        "def bwd(dy, x):\n    return (np.cos(x) * dy,)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert main(["check", "gelu_tanh", "--impl", "edges_impl:bwd", "--quiet"]) == 1
    # a wrong backward for gelu_tanh, but imported and checked: its certificate is in reports/adhoc/
    assert list((tmp_path / "reports" / "adhoc" / "certificates" / "gelu_tanh").glob("implementation__*.json"))


def test_a_bad_scheduler_address_is_one_line_exit_2(tmp_path, spec, capsys):
    pytest.importorskip("distributed")
    assert main(["prove", str(spec), "--reports", str(tmp_path / "r"), "--scheduler", "notanaddress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vjpcert: error: cannot reach the scheduler at 'notanaddress'")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_the_resume_hint_says_a_rerun_resumes_and_force_starts_over(tmp_path, spec, capsys):
    reports = tmp_path / "reports"
    assert main(["prove", f"{spec}::cube", "--reports", str(reports), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["prove", str(spec), "--reports", str(reports)]) == 0
    err = capsys.readouterr().err
    assert "1 of 2 certificates are current: skipped, the other 1 run (resuming; --force would rerun all 2 " \
           "from zero)" in err


def test_kernels_for_a_file_without_kernels_says_so_and_fails(tmp_path, spec, capsys):
    code = main(["kernels", str(spec), "--reports", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and ("no CUDA kernels for cube, square" in err or "kernel tier" in err), err
    assert not (tmp_path / "r").exists()


def test_the_session_shell_has_ipython_in_an_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name in ("session", "notebook", "test"):
        assert any(dep.lower().startswith("ipython") for dep in extras[name]), name


def test_the_session_shell_without_ipython_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "IPython"               # an IPython that cannot be imported
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('no IPython here')\n")
    proc = subprocess.run([sys.executable, "-m", "vjpcert.session"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 2 and "pip install -e '.[session]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_only_a_fresh_clone_s_first_no_op_run_derives_a_sample():
    """The sample is shown when a run finds every certificate current and nothing has run in this
    clone yet (no times recorded); a second no-op run, a run of named ops, --quiet or a run that
    derived something shows none."""
    from types import SimpleNamespace

    from vjpcert.cli import _shows_the_checkers
    plain = SimpleNamespace(targets=[], quiet=False)
    assert _shows_the_checkers("vjpcert all", plain, [], ["c"], fresh_clone=True)
    assert not _shows_the_checkers("vjpcert all", plain, [], ["c"], fresh_clone=False)
    assert not _shows_the_checkers("vjpcert all", plain, ["d"], ["c"], fresh_clone=True)
    assert not _shows_the_checkers("vjpcert prove", plain, [], ["c"], fresh_clone=True)
    assert not _shows_the_checkers("vjpcert all", SimpleNamespace(targets=["softmax"], quiet=False), [], ["c"], True)
    assert not _shows_the_checkers("vjpcert all", SimpleNamespace(targets=[], quiet=True), [], ["c"], True)


def test_a_run_with_every_certificate_current_derives_a_sample_again(tmp_path):
    """A fresh clone's first command has nothing to derive: it derives a few certificates again and
    shows each verdict beside its certificate's; a certificate forged with a fresh digest (an
    `inconclusive` where the proof holds) is caught, not shown as the same."""
    import io
    import json

    from rich.console import Console

    from vjpcert.cli import _rederive_sample
    from vjpcert.core.certificate import record_digest
    from vjpcert.specs import builtin_ops
    reports = tmp_path / "reports"
    assert main(["prove", "softmax", "--no-general", "--reports", str(reports), "--quiet"]) == 0
    out = io.StringIO()
    (reports / "timings.json").unlink()          # as on a fresh clone: no times recorded yet
    assert _rederive_sample(reports, builtin_ops(), Console(file=out, width=200), seed=0)
    text = out.getvalue()
    assert "symbolic softmax" in text and "same as its certificate" in text and "vjpcert all --force" in text
    assert (reports / "timings.json").exists()       # shown once: the next no-op run does nothing
    for path in (reports / "certificates").rglob("*.json"):
        record = json.loads(path.read_text())
        record["verdict"], record["trust"] = "inconclusive", "no evidence either way"
        record["digest"] = record_digest(record)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    out = io.StringIO()
    assert not _rederive_sample(reports, builtin_ops(), Console(file=out, width=200), seed=0)
    assert "DIFFERS from its certificate" in out.getvalue()


def test_the_shell_completes_commands_and_options(tmp_path):
    """With argcomplete installed (the `completion` extra), `eval "$(register-python-argcomplete
    vjpcert)"` completes subcommands and their options; without it the command runs as before."""
    pytest.importorskip("argcomplete", reason="pip install -e '.[completion]'")
    import os
    import shutil
    exe = shutil.which("vjpcert", path=str(Path(sys.executable).parent))
    assert exe, "the vjpcert console script is installed beside this Python"

    def complete(line):
        out = tmp_path / "completions"
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
        proc = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return out.read_text().split()
    assert complete("vjpcert ver") == ["verify"]
    assert "--modular" in complete("vjpcert all --mo")
    assert set(complete("vjpcert ")) >= {"all", "prove", "check", "verify", "render", "mutate"}


def test_the_command_collects_garbage_in_larger_batches_and_a_python_caller_keeps_its_own(tmp_path):
    """The collector setting is the command's (its process is its own); ``main(argv)`` called from
    Python leaves the caller's alone."""
    import gc
    from vjpcert.cli import GC_THRESHOLDS
    mine = (1234, 11, 12)
    before = gc.get_threshold()
    gc.set_threshold(*mine)
    try:
        main(["verify", str(tmp_path / "no_reports")])
        assert gc.get_threshold() == mine
    finally:
        gc.set_threshold(*before)
    code = ("import gc, sys\nsys.argv = ['vjpcert', '--help']\nfrom vjpcert.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint(tuple(gc.get_threshold()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == str(tuple(GC_THRESHOLDS)), out.stderr
