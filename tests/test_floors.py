"""The floors of the house (ARCHITECTURE.md), checked on the source: an import only ever points down.

    vjpcert (CLI, runner, reports)          may import everything below
    symbolic | numeric | cuda_kernels | triton_kernels
                                            may import specs and core, never each other nor vjpcert's top
    specs | frontends                        may import core (and themselves), never each other
    core                                     imports no other floor
Nothing imports the repository's folders by their bare names (``import specs``): installed, they live
under the ``vjpcert`` namespace, so a user's own ``specs`` package can never shadow them.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("core", "specs", "frontends", "symbolic", "numeric", "cuda_kernels", "triton_kernels")
ALLOWED = {
    "core": {"core"},
    "specs": {"core", "specs"},
    "frontends": {"core", "frontends"},     # framework code (PyTorch, JAX) turned into ops, beside specs
    "symbolic": {"core", "specs", "symbolic"},
    "numeric": {"core", "specs", "numeric"},
    "cuda_kernels": {"core", "specs", "cuda_kernels"},
    "triton_kernels": {"core", "specs", "triton_kernels"},
}


def _imports(path: Path):
    """(line, module) for every import in a file, relative imports resolved to absolute names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module


def _floor_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "vjpcert":
        return None
    if len(parts) == 1 or parts[1] not in FLOORS:
        return "vjpcert"                      # the top floor: CLI, runner, reports, plugin
    return parts[1]


@pytest.mark.parametrize("floor", FLOORS)
def test_imports_only_point_down(floor):
    bad = []
    for path in sorted((ROOT / floor).rglob("*.py")):
        for line, module in _imports(path):
            target = _floor_of(module)
            if target is not None and target not in ALLOWED[floor]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not bad, "imports that point up or sideways:\n" + "\n".join(bad)


@pytest.mark.parametrize("folder", [*FLOORS, "vjpcert", "tests", "benchmarks", "examples"])
def test_nothing_imports_a_floor_by_its_bare_name(folder):
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, module in _imports(path):
            if module.split(".")[0] in FLOORS:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not bad, "bare floor imports (use vjpcert.<floor>):\n" + "\n".join(bad)


def test_the_rule_can_fail(tmp_path):
    """A checker importing another checker is caught (the test above is not vacuous)."""
    f = tmp_path / "x.py"
    f.write_text("from vjpcert.numeric.check import check_claim\nimport specs\n")
    found = [m for _, m in _imports(f)]
    assert _floor_of(found[0]) == "numeric" and "numeric" not in ALLOWED["symbolic"]
    assert found[1].split(".")[0] in FLOORS


def test_a_project_with_its_own_specs_package_runs_the_plugin_and_the_session(tmp_path):
    """vjpcert installs nothing under a top-level name a user's project might use: a project whose own
    `specs/`, `symbolic/` and `numeric/` packages come first on its path runs the pytest plugin (a
    proof through the fixture, with its own `specs` imported beside it) and the session."""
    import subprocess
    import sys
    import textwrap
    for name in ("specs", "symbolic", "numeric"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"MINE = {name!r}\n")
    (tmp_path / "test_project.py").write_text(textwrap.dedent('''
        import specs, symbolic, numeric


        def test_the_project_s_packages_and_vjpcert_coexist(vjpcert):
            assert (specs.MINE, symbolic.MINE, numeric.MINE) == ("specs", "symbolic", "numeric")
            certs = vjpcert.proved("softmax", dims={"rows": 1, "n": 2})
            assert certs and all(c.verdict.startswith("proved") for c in certs)


        def test_the_session_imports():
            from vjpcert.session import OPS, prove
            assert "softmax" in OPS and callable(prove) and specs.MINE == "specs"
    '''))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_project.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 passed" in out.stdout
