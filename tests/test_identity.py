"""A certificate is current only when nothing that made it has changed: the code it ran (the spec and
every user module it imports), the task it stands for (op, claim, tier, variant, dims, options), and
the file it lives in. Each test here was a false pass with exit 0 before (the note says which)."""
import json
import textwrap

import pytest

from vjpcert.cli import main

HELPER_RIGHT = "def gain(B, x):\n    return 2 * x\n"
HELPER_WRONG = "def gain(B, x):\n    return 3 * x\n"
SPEC = '''
import numpy as np
from vjpcert import op
from helpers import gain

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    return (gain(B, x) * dy,)
'''


def _project(tmp_path, helper=HELPER_RIGHT, spec=SPEC):
    (tmp_path / "helpers.py").write_text(helper)
    f = tmp_path / "my_ops.py"
    f.write_text(textwrap.dedent(spec))
    return f


def _verdicts(reports, tier="symbolic"):
    return {json.loads(p.read_text())["claim"]: json.loads(p.read_text())["verdict"]
            for p in (reports / "certificates").rglob(f"{tier}__*.json")}


def test_an_edited_helper_module_makes_its_certificates_stale(tmp_path, capsys):
    f = _project(tmp_path)
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 0
    record = json.loads(next((reports / "certificates").rglob("symbolic__vjp-x*.json")).read_text())
    assert "helpers.py" in " ".join(record["sources"]) and "my_ops.py" in " ".join(record["sources"])
    (tmp_path / "helpers.py").write_text(HELPER_WRONG)           # the spec file itself is unchanged
    verify = ["verify", str(reports), "--spec", str(f)]
    assert main(verify) == 1 and "stale" in capsys.readouterr().out
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 1   # rerun, not skipped
    assert _verdicts(reports)["vjp[x]"] == "failed"


def test_the_tasks_of_one_op_in_one_run_share_the_op_it_resolved(tmp_path, monkeypatch):
    """A run resolves each op (loads its file, builds it) once, and its claims, tiers and dims share
    it (instead of loading the file and tracing again per task); the next run, and a task run outside
    a run (a replay), resolve it afresh."""
    from vjpcert.ops import OpRef
    from vjpcert.runner import execute, make_task, run_tasks
    f = _project(tmp_path, spec=SPEC.replace('dims=[{"n": 3}]', 'dims=[{"n": 2}, {"n": 3}]'))
    resolved = []
    real = OpRef.resolve
    monkeypatch.setattr(OpRef, "resolve", lambda self: (resolved.append(str(self)), real(self))[1])
    ref = OpRef("sq", str(f))
    tasks = [make_task(tier, ref, "vjp[x]", {"n": n}) for tier in ("symbolic", "numeric") for n in (2, 3)]
    certs = run_tasks(tasks)
    assert [c.verdict for c in certs] == ["proved", "proved", "checked", "checked"]
    assert resolved == ["sq"]
    resolved.clear()
    run_tasks(tasks[:1])
    assert resolved == ["sq"], "the next run loads the file again"
    resolved.clear()
    execute(tasks[0]), execute(tasks[1])
    assert resolved == ["sq", "sq"]


def test_a_dask_worker_runs_the_code_on_disk_now(tmp_path):
    distributed = pytest.importorskip("distributed")
    f = _project(tmp_path)
    reports = tmp_path / "reports"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        args = ["prove", str(f), "--reports", str(reports), "--quiet", "--scheduler", cluster.scheduler_address]
        assert main(args) == 0
        (tmp_path / "helpers.py").write_text(HELPER_WRONG)
        dask_code = main([*args, "--force"])                     # the same long-lived worker
        dask = _verdicts(reports)
    assert main(["prove", str(f), "--reports", str(reports), "--quiet", "--force", "--jobs", "1"]) == dask_code == 1
    assert dask == _verdicts(reports) == {"vjp[x]": "failed"}


def test_a_point_check_is_not_reused_by_a_plain_check(tmp_path, capsys):
    f = _project(tmp_path)
    point = tmp_path / "p.json"
    point.write_text(json.dumps({"x": [0.5, -1.0, 2.0, 0.25]}))
    reports = tmp_path / "reports"
    assert main(["check", str(f), "--point", str(point), "--reports", str(reports), "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["check", str(f), "--reports", str(reports), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "are current: skipped" not in err                    # the plain check ran
    variants = {p.name.split("__")[0] for p in (reports / "certificates").rglob("numeric*.json")}
    assert variants == {"numeric", "numeric-point"}             # side by side, neither overwritten


def test_two_claims_that_would_share_a_file_are_a_spec_error(tmp_path, capsys):
    f = _project(tmp_path, spec=SPEC + '''
@sq.law(name="vjp-x")
def clash(B, x, forward):
    return forward(x) - x * x
''')
    assert main(["prove", str(f), "--reports", str(tmp_path / "r"), "--quiet"]) == 2
    assert "share one certificate file" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["softmax/../softmax", "../x", "a b", ".hidden", "x/y"])
def test_a_path_like_op_name_is_rejected(tmp_path, capsys, name):
    spec = SPEC.replace('@op(inputs', f'@op(name={name!r}, inputs')
    f = _project(tmp_path, spec=spec)
    assert main(["prove", str(f), "--reports", str(tmp_path / "r"), "--quiet"]) == 2
    assert "is not allowed" in capsys.readouterr().err


def test_a_deleted_user_certificate_fails_verify(tmp_path, capsys):
    f = _project(tmp_path)
    reports = tmp_path / "reports"
    assert main(["all", str(f), "--reports", str(reports), "--quiet", "--no-plots"]) == 0
    assert main(["verify", str(reports), "--spec", str(f)]) == 0
    victim = next((reports / "certificates").rglob("numeric__vjp-x*.json"))
    victim.unlink()
    capsys.readouterr()
    assert main(["verify", str(reports), "--spec", str(f)]) == 1
    out = capsys.readouterr().out
    assert "missing" in out and victim.name in out and "softmax" not in out   # no built-in noise


def test_a_certificate_under_another_name_is_mismatched(tmp_path, capsys):
    f = _project(tmp_path)
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 0
    src = next((reports / "certificates").rglob("symbolic__vjp-x*.json"))
    src.rename(src.with_name(src.name.replace("vjp-x", "vjp-y")))
    capsys.readouterr()
    assert main(["verify", str(reports), "--spec", str(f), "--no-missing"]) == 1
    assert "mismatched" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["softmax", "layernorm", "vit_block", "rotary_attention"])
def test_the_fixture_the_session_and_the_cli_plan_the_same_claims(name):
    from vjpcert.cli import _plan, build_parser
    from vjpcert.plan import plan_op

    def key(t):
        return repr((t.tier, t.claim, t.dims, t.options))
    for tiers, command in ((("symbolic",), "prove"), (("numeric",), "check")):
        cli, _ = _plan(build_parser().parse_args([command, name]), tiers)
        assert sorted(map(key, plan_op(name, tiers))) == sorted(map(key, cli))


@pytest.mark.parametrize("edited", ["helpers.py", "my_ops.py"])
def test_an_edit_in_the_second_of_the_last_import_is_not_run_from_old_bytecode(tmp_path, edited):
    """Python trusts a cached .pyc while the source keeps its size and its modification time in whole
    seconds: an edit in the same second to the same length (2 * x to 3 * x) made the rerun prove the
    old code under a certificate hashing the new (a false proof). Reproduced without a race: the old
    bytecode is compiled, the file edited, and its old modification time put back."""
    import os
    import py_compile
    f = _project(tmp_path)
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 0
    target = tmp_path / edited
    for source in (tmp_path / "helpers.py", f):
        py_compile.compile(str(source), doraise=True)   # the bytecode of the code that was proved
    before = target.stat()
    text = target.read_text()
    # the helper's gain, or the spec's forward (x + x: its backward 2 x dy is then wrong), same length
    wrong = text.replace("2 * x", "3 * x") if edited == "helpers.py" else text.replace("x * x", "x + x")
    assert wrong != text and len(wrong) == len(text)
    target.write_text(wrong)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 1
    assert _verdicts(reports)["vjp[x]"] == "failed"



DYNAMIC = '''
import importlib
from vjpcert import op

EXTRA


@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    return (BACKWARD,)

@sq.law
def twice_the_input(B, x, dy, backward):
    """backward(x, dy) = 2 x dy."""
    return backward(x, dy)[0], LAW
'''


STATEMENT_INSIDE = '''
def through_an_import_statement(B, x):
    from helpers import gain            # inside a function, yet in the source: hashed
    return gain(B, x)
'''


def _dynamic(tmp_path, backward, law="2 * x * dy", extra=""):
    (tmp_path / "helpers.py").write_text(HELPER_RIGHT)
    f = tmp_path / "my_ops.py"
    f.write_text(DYNAMIC.replace("BACKWARD", backward).replace("LAW", law).replace("EXTRA", extra))
    return f


LOADED_BY_PATH = '''
import importlib.util
import pathlib


def by_path(name):
    where = pathlib.Path(__file__).with_name(name + ".py")
    spec = importlib.util.spec_from_file_location("loaded_" + name, where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
'''


@pytest.mark.parametrize("how", ["importlib.import_module('helpers')", "__import__('helpers')", "by_path('helpers')",
                                 "__import__('runpy').run_path(__file__.replace('my_ops', 'helpers'))['gain']"])
def test_a_module_the_backward_imports_while_it_runs_refuses_the_op(tmp_path, capsys, how):
    """The source of my_ops.py imports no helpers module, so no certificate would hash it: after an
    edit to a wrong gain the old certificate stayed current and `verify` agreed (a false proof)."""
    call = how if how.endswith("['gain']") else f"{how}.gain"
    f = _dynamic(tmp_path, f"{call}(B, x) * dy", extra=LOADED_BY_PATH)
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "helpers.py while it ran" in err and "op 'sq'" in err
    assert not list(reports.rglob("*.json"))


def test_a_module_a_law_imports_while_it_runs_makes_its_certificate_inconclusive_every_time(tmp_path):
    """Planning runs the forward and the backward, not the laws: the runner sees the law's import."""
    f = _dynamic(tmp_path, "2 * x * dy", law="__import__('helpers').gain(B, x) * dy")
    reports = tmp_path / "reports"
    for _ in range(2):              # an inconclusive certificate that carries an error is never current
        main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"])
        record = json.loads(next(reports.rglob("symbolic__twice_the_input*.json")).read_text())
        assert record["verdict"] == "inconclusive" and "helpers.py while it ran" in record["evidence"]["error"]
    assert _verdicts(reports)["vjp[x]"] == "proved"


def test_without_the_watch_a_run_time_import_is_a_false_proof(tmp_path, monkeypatch):
    """The control: with the watch off, the edit to a wrong gain leaves the certificate current."""
    for where in ("vjpcert.unhashed", "vjpcert.runner"):
        monkeypatch.setattr(f"{where}.unhashed", lambda op, seen: None)
    f = _dynamic(tmp_path, "importlib.import_module('helpers').gain(B, x) * dy")
    reports = tmp_path / "reports"
    main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"])
    assert _verdicts(reports)["vjp[x]"] == "proved"
    (tmp_path / "helpers.py").write_text(HELPER_WRONG)
    main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"])
    assert _verdicts(reports)["vjp[x]"] == "proved"      # still current: the wrong gain goes unseen


def test_an_import_statement_inside_a_function_is_hashed_and_allowed(tmp_path):
    f = _dynamic(tmp_path, "through_an_import_statement(B, x) * dy", extra=STATEMENT_INSIDE)
    reports = tmp_path / "reports"
    main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"])
    assert _verdicts(reports)["vjp[x]"] == "proved"
    (tmp_path / "helpers.py").write_text(HELPER_WRONG)
    assert main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"]) == 1
    assert _verdicts(reports)["vjp[x]"] == "failed"


@pytest.mark.parametrize("read", ["os.environ.get('GAIN', '2')", "os.getenv('GAIN', '2')", "os.environ['HOME'] and '2'"])
def test_a_backward_that_reads_the_environment_is_refused(tmp_path, capsys, read):
    """GAIN=3 would change the backward and leave its certificate current: which value was proved?"""
    f = _dynamic(tmp_path, f"int(__import__('os').environ and {read}) * x * dy".replace("__import__('os').environ and ", ""),
                 extra="import os\n")
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "environment variable" in err and ("GAIN" in err or "HOME" in err)


def test_without_the_watch_another_value_of_the_variable_is_a_false_proof(tmp_path, monkeypatch):
    """The control: GAIN=3 makes the backward wrong, and the certificate proved with GAIN unset stays."""
    for where in ("vjpcert.unhashed", "vjpcert.runner"):
        monkeypatch.setattr(f"{where}.unhashed", lambda op, seen: None)
    monkeypatch.delenv("GAIN", raising=False)
    f = _dynamic(tmp_path, "int(os.environ.get('GAIN', '2')) * x * dy", extra="import os\n")
    reports = tmp_path / "reports"
    main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"])
    assert _verdicts(reports)["vjp[x]"] == "proved"
    monkeypatch.setenv("GAIN", "3")
    main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"])
    assert _verdicts(reports)["vjp[x]"] == "proved"      # still current: the value is in no hash


@pytest.mark.parametrize("ask,said", [("int(subprocess.run(['true']).returncode == 0)", "a subprocess (subprocess.Popen)"),
                                      ("len(socket.getaddrinfo('localhost', 9)[:1])", "the network")])
def test_a_backward_that_asks_another_program_or_the_network_is_refused(tmp_path, capsys, ask, said):
    """What came back would decide the backward, and no certificate would hash it."""
    f = _dynamic(tmp_path, f"{ask} * 2 * x * dy", extra="import socket\nimport subprocess\n")
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet"]) == 2
    assert said in capsys.readouterr().err


def test_the_watch_counts_a_users_files_only():
    """vjpcert's own tree is not a user's code: its machinery (Triton's checker included, which
    core.reads counts as spec code) and the built-in specs, whose identity is the project's."""
    from pathlib import Path

    from vjpcert.unhashed import is_user_code
    root = Path(__file__).resolve().parents[1]
    for mine in ("triton_kernels/check.py", "specs/softmax.py", "core/registry.py", "vjpcert/runner.py"):
        assert not is_user_code(root / mine), mine
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        assert is_user_code(Path(d) / "helpers.py")


SIBLING = '''
from vjpcert import op
import helpers                      # this file's op hashes helpers.py


@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def double(B, x):
    return helpers.gain(B, x)

@double.defvjp
def _(B, x, dy):
    return (2 * dy,)
'''

REACHES_THROUGH = {
    "sys.modules": ("import sys\n", "sys.modules['helpers'].gain(B, x)"),
    "a sibling spec's globals": ("import sys\n", "next(m for m in list(sys.modules.values()) if (getattr(m, '__file__', None) or '').endswith('first.py')).helpers.gain(B, x)"),
    "a thread": ("import sys\nfrom concurrent.futures import ThreadPoolExecutor\n",
                 "ThreadPoolExecutor(1).submit(sys.modules['helpers'].gain, B, x).result()"),
    "gc": ("import gc\nimport os\nimport types\n",
           "next(f for f in gc.get_objects() if type(f) is types.FunctionType and f.__name__ == 'gain' "
           "and os.path.dirname(f.__code__.co_filename) == os.path.dirname(__file__))(B, x)"),
}


def _siblings(tmp_path, how):
    """Two spec files: first.py imports helpers; second.py imports nothing of it, yet its backward runs
    helpers' code, reached through what first.py loaded."""
    (tmp_path / "helpers.py").write_text(HELPER_RIGHT)
    first = tmp_path / "first.py"
    first.write_text(SIBLING)
    extra, call = REACHES_THROUGH[how]
    second = tmp_path / "second.py"
    second.write_text(DYNAMIC.replace("BACKWARD", f"{call} * dy").replace("LAW", "2 * x * dy").replace("EXTRA", extra))
    return first, second


@pytest.mark.parametrize("how", sorted(REACHES_THROUGH))
def test_code_of_a_file_the_op_does_not_import_that_runs_in_its_backward_refuses_the_op(tmp_path, capsys, how):
    """second.py's source imports no helpers module, so its certificates would not hash helpers.py: an edit
    to a wrong gain left its proof current (a false proof) when first.py had loaded helpers in the same
    process. What runs is what counts, however it was reached."""
    first, second = _siblings(tmp_path, how)
    reports = tmp_path / "reports"
    assert main(["prove", str(first), str(second), "--reports", str(reports), "--quiet", "--no-general"]) == 2
    err = capsys.readouterr().err
    assert "helpers.py" in err and "op 'sq'" in err


def test_without_the_watch_code_reached_through_a_sibling_is_a_false_proof(tmp_path, monkeypatch):
    """The control of the test above."""
    for where in ("vjpcert.unhashed", "vjpcert.runner"):
        monkeypatch.setattr(f"{where}.unhashed", lambda op, seen: None)
    first, second = _siblings(tmp_path, "sys.modules")
    reports = tmp_path / "reports"
    command = ["prove", str(first), str(second), "--reports", str(reports), "--quiet", "--no-general"]
    main(command)
    proved = {json.loads(p.read_text())["op"] for p in (reports / "certificates").rglob("symbolic__vjp-x*.json")
              if json.loads(p.read_text())["verdict"] == "proved"}
    assert proved == {"double", "sq"}
    (tmp_path / "helpers.py").write_text(HELPER_WRONG)
    main(command)
    verdicts = {json.loads(p.read_text())["op"]: json.loads(p.read_text())["verdict"]
                for p in (reports / "certificates").rglob("symbolic__vjp-x*.json")}
    assert verdicts["sq"] == "proved"            # still current: helpers.py is not in its hash


def test_ops_of_two_files_that_each_import_a_shared_helper_are_proved(tmp_path):
    """Each file's code is foreign to the other's op, so what runs is watched; a helper both import with
    an import statement is in both ops' hashes, and neither op runs the other's file."""
    (tmp_path / "helpers.py").write_text(HELPER_RIGHT)
    first = tmp_path / "first.py"
    first.write_text(SIBLING)
    second = tmp_path / "second.py"
    second.write_text(SPEC)
    reports = tmp_path / "reports"
    assert main(["prove", str(first), str(second), "--reports", str(reports), "--quiet", "--no-general"]) == 0
    from vjpcert.unhashed import foreign_code
    from vjpcert.ops import load_file
    op = next(o for o in load_file(second) if o.name == "sq")
    assert first.resolve() in foreign_code(op) and (tmp_path / "helpers.py").resolve() not in foreign_code(op)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_law_that_runs_a_siblings_helper_is_inconclusive_in_every_worker(tmp_path, jobs):
    """Planning runs the forward and the backward, not the laws: the runner sees what a law runs, in
    this process or in a worker that loaded the other file first."""
    first, second = _siblings(tmp_path, "sys.modules")
    second.write_text(second.read_text().replace("sys.modules['helpers'].gain(B, x) * dy,)", "2 * x * dy,)")
                      .replace("return backward(x, dy)[0], 2 * x * dy",
                               "return backward(x, dy)[0], sys.modules['helpers'].gain(B, x) * dy"))
    reports = tmp_path / "reports"
    main(["prove", str(first), str(second), "--reports", str(reports), "--quiet", "--no-general", "--jobs", jobs])
    records = [json.loads(p.read_text()) for p in (reports / "certificates" / "sq").glob("symbolic__*.json")]
    verdicts = {r["claim"]: r["verdict"] for r in records}
    assert verdicts == {"vjp[x]": "proved", "twice_the_input": "inconclusive"}
    law = next(r for r in records if r["claim"] == "twice_the_input")
    assert "helpers.py" in law["evidence"]["error"] or "KeyError" in law["evidence"]["error"]


def test_two_spec_folders_each_with_its_own_helpers_module_are_both_proved_in_one_command(tmp_path):
    """Both folders have a helpers.py, so sys.modules['helpers'] is whichever loaded last. Each op runs
    and hashes its own folder's helpers, as each file run as a script would (the first op was
    inconclusive, its code "changed" between planning and running, when the name was followed)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first = _project(a)
    (b / "helpers.py").write_text("def gain(B, x):\n    return 3 * x * x\n")
    second = b / "cube_ops.py"
    second.write_text(textwrap.dedent(SPEC).replace("def sq", "def cube").replace("sq.defvjp", "cube.defvjp")
                      .replace("return x * x", "return x * x * x"))
    reports = tmp_path / "reports"
    command = ["prove", str(first), str(second), "--reports", str(reports), "--quiet", "--no-general"]

    def records():
        return {json.loads(p.read_text())["op"]: json.loads(p.read_text())
                for p in (reports / "certificates").rglob("symbolic__vjp-x*.json")}
    assert main(command) == 0
    assert {name: r["verdict"] for name, r in records().items()} == {"sq": "proved", "cube": "proved"}
    from vjpcert.ops import load_file
    for spec, folder in ((first, a), (second, b), (first, a)):       # loaded again, after the other
        op, = load_file(spec)
        helpers = [f for f in op.source_files if f.name == "helpers.py"]
        assert helpers == [(folder / "helpers.py").resolve()]
        assert op.vjp.__globals__["gain"].__code__.co_filename == str((folder / "helpers.py").resolve())
    (b / "helpers.py").write_text("def gain(B, x):\n    return 2 * x * x\n")   # a wrong cube backward
    assert main(command) == 1
    assert {name: r["verdict"] for name, r in records().items()} == {"sq": "proved", "cube": "failed"}


def test_a_helper_module_whose_code_was_made_from_strings_is_hashed_by_its_file(tmp_path):
    """A dataclass's __init__ and a function made by exec name no file ("<string>"): such a name counts by
    its module's file, and an edit of the helper stales the proof."""
    (tmp_path / "helpers.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass

        @dataclass
        class Gain:
            k: int = 2

        exec("def gain(B, x):\\n    return Gain().k * x\\n")
    '''))
    f = tmp_path / "my_ops.py"
    f.write_text(textwrap.dedent(SPEC).replace("from helpers import gain", "from helpers import Gain, gain"))
    reports = tmp_path / "reports"
    assert main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"]) == 0
    record = json.loads(next((reports / "certificates").rglob("symbolic__vjp-x*.json")).read_text())
    assert sorted(s.rsplit("/", 1)[-1] for s in record["sources"]) == ["helpers.py", "my_ops.py"]
    (tmp_path / "helpers.py").write_text((tmp_path / "helpers.py").read_text().replace("k: int = 2", "k: int = 3"))
    assert main(["prove", str(f), "--reports", str(reports), "--quiet", "--no-general"]) == 1


def test_a_forked_strategy_stops_watching_and_its_parent_keeps_watching():
    """What a forked child (a strategy under its budget) sees never reaches its parent's watches, so
    it stops watching at once (its profile hook doubled the time of the SymPy it ran); the parent's
    watch, open across the fork, still sees what runs after it."""
    import sys

    from vjpcert import unhashed
    from vjpcert.core.budget import run_with_budget

    def in_child():
        hooked = sys.getprofile() is unhashed._profile or (unhashed._RUNS.get("tool") is not None and bool(
            sys.monitoring.get_events(unhashed._RUNS["tool"])))
        return hooked, len(unhashed._WATCHES), unhashed._RUNS["open"]

    with unhashed.watch() as seen:
        unhashed._runs_on()
        try:
            watching = in_child()
            child = run_with_budget(in_child, 60)
            after = in_child()
        finally:
            unhashed._runs_off()
    assert watching[0] and watching[1] >= 1 and watching[2] >= 1      # the control: the parent watches
    assert child.status == "ok" and child.value == (False, 0, 0), child
    assert after == watching and seen is not None


def test_a_watch_under_cprofile_sees_what_runs_and_the_profiler_resumes_after(tmp_path, monkeypatch):
    """cProfile's profiler is C code the watch's hook cannot pass events on to (it raised "'Profile'
    object is not callable" inside every user op's run): it is paused while the watch sees what runs,
    and counts again after."""
    import cProfile
    import importlib

    from vjpcert import unhashed
    (tmp_path / "far_helper.py").write_text("def far():\n    return 1\n\n\ndef after():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    helper = importlib.import_module("far_helper")
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with unhashed.watch() as seen:
            unhashed._runs_on()
            try:
                assert helper.far() == 1
            finally:
                unhashed._runs_off()
        assert helper.after() == 2
    finally:
        profiler.disable()
    assert (tmp_path / "far_helper.py").resolve() in seen.modules
    counted = {e.code.co_name for e in profiler.getstats() if not isinstance(e.code, str)}
    assert "after" in counted and "far" not in counted


def test_a_library_that_imports_main_while_a_claim_runs_is_not_the_claim_s_code(tmp_path):
    """A script that runs checks is user code (`python my_checks.py`): the kernel tier's simulator
    loads rlcompleter, which imports ``__main__`` and runs none of it, so a built-in kernel's
    certificate stays decided (it was `inconclusive`, the script named as code the claim ran). Spec
    code that imports ``__main__`` is still seen (the control)."""
    import subprocess
    import sys
    pytest.importorskip("numba")
    script = tmp_path / "my_checks.py"
    script.write_text(
        "from vjpcert import unhashed\n"
        "from vjpcert.ops import OpRef\n"
        "from vjpcert.runner import execute, make_task\n"
        "cert = execute(make_task('kernel', OpRef('layernorm'), 'kernel:layernorm_fwd', {'n': 7, 'rows': 2}))\n"
        "print('kernel:', cert.verdict, cert.evidence.get('error', ''))\n"
        "with unhashed.watch() as seen:\n"
        "    import __main__\n"
        "print('user code:', sorted(p.name for p in seen.modules))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "kernel: kernel-match" in out.stdout, out.stdout
    assert "user code: ['my_checks.py']" in out.stdout, out.stdout
