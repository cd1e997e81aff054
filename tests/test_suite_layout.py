"""The test suite's own layout: collecting it imports no optional framework (tests/optional.py), the
tests that need one are marked and run last in each worker, a framework that is missing skips, and an
xdist worker runs one BLAS and Numba thread."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import optional
from conftest import (FRAMEWORKS, IMPORTED_AT_COLLECTION, ONE_THREAD_PER_WORKER, _forget_user_files_loaded_since,
                      framework_tests_last, needs)

ROOT = Path(__file__).resolve().parents[1]


def test_collecting_the_suite_imports_no_optional_framework(request):
    assert request.config.stash[IMPORTED_AT_COLLECTION] == []


def test_a_test_file_that_imports_a_framework_at_its_top_is_seen(tmp_path):
    """The check above can fail: collected beside a file written the old way, it goes red."""
    pytest.importorskip("distributed")
    for name in ("conftest.py", "optional.py", Path(__file__).name):
        shutil.copy(ROOT / "tests" / name, tmp_path / name)
    (tmp_path / "test_eager.py").write_text("import distributed\nfrom vjpcert.symbolic.modular import arith\n\n\n"
                                            "def test_nothing():\n    assert distributed and arith\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                          "--rootdir", str(tmp_path), "-c", str(ROOT / "pyproject.toml"),
                          f"{Path(__file__).name}::test_collecting_the_suite_imports_no_optional_framework",
                          "test_eager.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and "assert ['distributed...ular.kernels'] == []" in run.stdout, run.stdout[-2000:]


def test_a_module_imported_at_first_use_refuses_a_name_set_on_its_stand_in():
    """A patch set on the stand-in would miss the module the code under test reads: refused, and the
    module, imported at that first use, is the real one."""
    from optional import compiled
    arith = compiled("vjpcert.symbolic.modular.arith")
    with pytest.raises(TypeError, match="monkeypatch.setattr"):
        arith.BLOCK = 4
    with pytest.raises(TypeError):
        del arith.BLOCK
    import vjpcert.symbolic.modular.arith as real
    assert arith.BLOCK == real.BLOCK and arith.ModP is real.ModP


def test_the_needs_are_read_off_the_deferred_imports_too():
    assert {"torch", "triton"} <= needs(ROOT / "tests" / "test_triton.py", None)
    assert "torch" in needs(ROOT / "tests" / "test_torch_bridge.py", None)          # optional.imported(...)
    assert "jax" in needs(ROOT / "tests" / "test_jax_bridge.py", None)
    assert not needs(ROOT / "tests" / "test_modular_arith.py", None) & set(FRAMEWORKS)


def test_a_framework_reached_through_a_helper_marks_the_tests_that_call_it(tmp_path):
    """A helper of the file (called, kept under another name, or taken as a fixture) or of
    tests/optional.py that imports a framework makes each test that reaches it need that framework; a
    test of the same file that reaches none needs nothing."""
    path = tmp_path / "test_helpers.py"
    path.write_text(textwrap.dedent("""
        import pytest
        import optional

        _check = optional.check_triton

        def _kernel():
            from vjpcert.triton_kernels.registry import TritonKernel
            return TritonKernel

        def _twice():
            return _kernel()

        @pytest.fixture
        def jax_module():
            import jax
            return jax

        def test_through_two_helpers():
            _twice()

        def test_through_an_alias_of_optional():
            _check(None, {})

        def test_through_a_fixture(jax_module):
            pass

        def test_reaching_nothing():
            assert _kernel is not None
        """))
    assert needs(path, "test_through_two_helpers") == {"triton"}
    assert needs(path, "test_through_an_alias_of_optional") == {"torch", "triton"}    # optional.needs_triton
    assert needs(path, "test_through_a_fixture") == {"jax"}
    assert needs(path, "test_reaching_nothing") == set()         # named, not called: the control


def test_a_test_that_loads_a_framework_unmarked_is_told_which_marker_to_add(tmp_path):
    """The loads no file's imports show (the code under test imports the framework) are caught as they
    happen: a warning names the marker; the same test marked, and a test that loads nothing, get none."""
    pytest.importorskip("distributed")
    for name in ("conftest.py", "optional.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / name)
    (tmp_path / "test_loads.py").write_text(textwrap.dedent("""
        import importlib
        import pytest

        def test_light():
            pass

        def test_unmarked():
            importlib.import_module("distri" + "buted")

        @pytest.mark.dask
        def test_marked():
            importlib.import_module("distri" + "buted")
        """))

    def run(*tests):                     # each in a fresh process: the framework not loaded before it
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                              "--rootdir", str(tmp_path), "-c", str(ROOT / "pyproject.toml"),
                              *(f"test_loads.py::{t}" for t in tests)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:]
        return out.stdout
    told = run("test_unmarked")
    assert "test_loads.py::test_unmarked" in told and "@pytest.mark.dask" in told, told[-2000:]
    quiet = run("test_light", "test_marked")
    assert "without the marker" not in quiet, quiet[-2000:]


def test_each_workers_share_runs_its_framework_tests_last():
    items = [("a", False), ("t1", True), ("b", False), ("c", False), ("t2", True), ("d", False), ("t3", True)]
    out = framework_tests_last(items, 2, lambda i: i[1])
    assert sorted(out) == sorted(items)
    first, second = out[:len(out) // 2], out[len(out) // 2:]
    for share in (first, second):
        flags = [heavy for _, heavy in share]
        assert flags == sorted(flags), share                  # light, then heavy
    assert [n for n, _ in out] == ["a", "b", "t1", "c", "d", "t2", "t3"]
    assert framework_tests_last(items, 1, lambda i: i[1]) == [i for i in items if not i[1]] + [i for i in items if i[1]]


def test_a_missing_framework_skips_the_file_and_a_missing_submodule_skips_the_test():
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        optional.importorskip("no_such_framework_here")
    deferred = optional.importorskip("json.no_such_submodule", reason="needs the submodule")
    with pytest.raises(pytest.skip.Exception, match="needs the submodule"):
        deferred.anything
    assert optional.importorskip("json").dumps([1]) == "[1]"            # imported at first use


def test_pytests_questions_of_a_name_do_not_import_it():
    """Collection asks every module-level name for __test__ and the like; an import there would skip
    (or load) the whole file, so a private name is answered without importing."""
    deferred = optional._Deferred("no_such_framework_here", None)
    assert not hasattr(deferred, "__test__") and not hasattr(deferred, "_pytestfixturefunction")
    with pytest.raises(pytest.skip.Exception):
        deferred.public_name


def test_a_file_loaded_at_first_use(tmp_path):
    path = tmp_path / "kernels_here.py"
    path.write_text(textwrap.dedent("""
        LOADED = True
        TABLE = {"x": 1}
    """))
    module = optional.from_file(path, "kernels_here_for_a_test")
    assert "kernels_here_for_a_test" not in sys.modules
    assert module.TABLE == {"x": 1} and "kernels_here_for_a_test" in sys.modules
    del sys.modules["kernels_here_for_a_test"]


def test_an_xdist_worker_runs_one_blas_and_numba_thread(request):
    """Each worker inherits one thread per library from the controller (unless the caller chose another
    number), and Numba read it at its import."""
    import os
    if getattr(request.config, "workerinput", None) is None:
        pytest.skip("not an xdist worker")
    import numba
    assert all(os.environ.get(var) for var in ONE_THREAD_PER_WORKER)
    assert numba.config.NUMBA_NUM_THREADS == int(os.environ["NUMBA_NUM_THREADS"])


def _isolation_bench():
    """benchmarks/isolation_bench.py, imported as a module of the repository (the benchmarks are not a
    package on sys.path)."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import isolation_bench
    finally:
        sys.path.remove(str(ROOT))
    return isolation_bench

def test_the_isolation_check_fails_a_test_file_that_passes_only_after_another(tmp_path):
    """benchmarks/isolation_bench.py's negative control: test_b.py passes when test_a.py ran first in the
    same process (a helper module's global it sets), and the check, running each file alone, says so."""
    alone = _isolation_bench().alone
    (tmp_path / "shared_state.py").write_text("seen = []\n")
    (tmp_path / "test_a.py").write_text("import shared_state\ndef test_a():\n    shared_state.seen.append(1)\n")
    (tmp_path / "test_b.py").write_text("import shared_state\ndef test_b():\n    assert shared_state.seen\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    together = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                               "-n", "0", "test_a.py", "test_b.py"], cwd=tmp_path, capture_output=True, text=True)
    assert together.returncode == 0, together.stdout           # in one process, in this order: green
    rows = {r["file"]: r for r in alone([Path("test_a.py"), Path("test_b.py")], cwd=tmp_path)}
    assert rows["test_a.py"]["ok"] and "1 passed" in rows["test_a.py"]["summary"]
    assert not rows["test_b.py"]["ok"] and "1 failed" in rows["test_b.py"]["summary"]
    assert any("test_b" in line for line in rows["test_b.py"]["failed"])


def test_the_isolation_check_passes_a_file_that_skips_itself_and_fails_one_that_cannot_be_collected(tmp_path):
    """A file that skips itself at collection (an optional dependency missing: pytest's exit code 5,
    no tests collected) is not a failure alone; one whose import fails is."""
    alone = _isolation_bench().alone
    (tmp_path / "test_skips.py").write_text("import pytest\npytest.importorskip('no_such_module_here')\n"
                                            "def test_x():\n    pass\n")
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\ndef test_x():\n    pass\n")
    rows = {r["file"]: r for r in alone([Path("test_skips.py"), Path("test_broken.py")], cwd=tmp_path)}
    assert rows["test_skips.py"]["ok"] and rows["test_skips.py"]["code"] == 5
    assert "1 skipped" in rows["test_skips.py"]["summary"]
    assert not rows["test_broken.py"]["ok"] and rows["test_broken.py"]["code"] not in (0, 5)


def test_a_user_file_one_test_loaded_is_not_foreign_code_to_the_next(tmp_path):
    """The conftest forgets what a test loaded, so the next test's user op meets the process as a fresh
    command would: its watch has nothing foreign to profile (the control: without forgetting, the
    first file is foreign to the second op)."""
    from vjpcert import unhashed
    from vjpcert.ops import load_file           # the command's: it notes every user file loaded from then on

    def user_file(name):
        folder = tmp_path / name
        folder.mkdir()
        path = folder / f"{name}.py"
        path.write_text(f"from vjpcert.core.registry import op\n"
                        f"@op(inputs={{'x': ('n',)}}, output=('n',), dims=[{{'n': 2}}])\n"
                        f"def {name}(B, x):\n    return x * x\n"
                        f"@{name}.defvjp\ndef _(B, x, dy):\n    return (2 * x * dy,)\n")
        return path

    first = user_file("first_of_two")
    test = _forget_user_files_loaded_since()
    next(test)                                    # the first test begins
    (op1,) = load_file(first)
    assert first.resolve() in unhashed._LOADED and str(first.parent.resolve()) in sys.path
    (op2,) = load_file(user_file("kept_next"))
    assert unhashed.foreign_code(op2) == {first.resolve()}     # what a later test would meet, kept
    with pytest.raises(StopIteration):
        next(test)                                # the first test ends
    assert first.resolve() not in unhashed._LOADED and op1.module.__name__ not in sys.modules
    assert str(first.parent.resolve()) not in sys.path
    (op3,) = load_file(user_file("forgotten_before"))
    assert unhashed.foreign_code(op3) == set()
