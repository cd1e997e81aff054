"""The floors of the house (ARCHITECTURE.md), checked on the source: an import only ever points down.

    vjpcert (CLI, runner, reports)          may import everything below
    symbolic | numeric | cuda_kernels | triton_kernels
                                            may import specs and core, never each other nor vjpcert's top
    specs | frontends                        may import core (and themselves), never each other
    core                                     imports no other floor
Nothing imports the repository's folders by their bare names (``import specs``): installed, they live
under the ``vjpcert`` namespace, so a user's own ``specs`` package can never shadow them.

Within a floor the modules form no cycle: the graph of every import statement, those inside functions
included (a function-level import hides a cycle from Python, not from the design), is acyclic. And
``symbolic/`` has floors of its own:

    every_size | composition | modular       may import fixed (and composition every_size), never each other
    fixed                                    the fixed-dims prover: imports no other subpackage
    settings, api, ... (top-level modules)   importable from every subpackage
"""
import ast
import importlib.util
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


# ------------------------------------------------------------------------------ the module graph
def _module_files(root: Path) -> dict[str, Path]:
    """Dotted name -> file for every module of the package laid out under ``root`` as this repository
    lays it out: ``root/<floor>/...`` is ``vjpcert.<floor>...``, ``root/vjpcert/...`` is ``vjpcert...``."""
    out = {}
    for folder in (*FLOORS, "vjpcert"):
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[0] != "vjpcert":
                parts.insert(0, "vjpcert")
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _import_targets(path: Path, name: str, modules) -> list[tuple[int, str]]:
    """(line, module) for every import statement of a module, at any depth (inside functions too), each
    resolved to the module it runs: ``from P import m`` is the module ``P.m`` where ``m`` is one, else
    ``P``; relative imports are made absolute; a name outside ``modules`` resolves to its longest
    prefix that is one (``import vjpcert.core.trace.x`` is vjpcert.core.trace)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}   # annotations only: never run
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level + (node.module or "")) if node.level else node.module
            base = importlib.util.resolve_name(base, package) if node.level else base
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in names:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                out.append((node.lineno, target))
    return out


def _module_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules its import statements run. ``from P import m`` with ``m`` a submodule is
    an edge to ``P.m`` alone: that it also runs ``P``'s __init__ is true of every submodule of ``P``
    and no dependency of this module's code; ``from P import name`` is an edge to ``P`` itself."""
    modules = _module_files(root)
    return {name: {t for _, t in _import_targets(path, name, modules) if t != name}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of the graph, each a list of modules with its first one repeated at the end: for every
    strongly connected component of more than one module (Tarjan's), the shortest cycle through each of
    its modules that no cycle listed before passes through, so every module of a tangle is named."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    cycles = []
    for comp in sorted(comps, key=min):
        covered: set = set()
        for first in sorted(comp):
            if first not in covered:
                cycles.append(_shortest_cycle(graph, comp, first))
                covered |= set(cycles[-1])
    return cycles


def _shortest_cycle(graph, comp: set, first: str) -> list[str]:
    """The shortest cycle from ``first`` back to it inside its component (breadth first)."""
    came = {first: None}
    queue = [first]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & comp):
            if w == first:
                path = [v]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return [*reversed(path), first]
            if w not in came:
                came[w] = v
                queue.append(w)
    raise AssertionError(f"{first} is in a component but on no cycle")


def _describe_cycles(cycles) -> str:
    return "import cycles (move the shared piece down, or into a small module both import):\n" + \
        "\n".join("  " + " -> ".join(c) for c in cycles)


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



# ------------------------------------------------------------------------------ no cycles
def test_the_import_graph_has_no_cycle():
    """Every module of the package, every import statement (inside functions too): no cycle."""
    graph = _module_graph(ROOT)
    assert {"vjpcert.core.registry", "vjpcert.symbolic.fixed.prover", "vjpcert.runner"} <= set(graph)
    cycles = _cycles(graph)
    assert not cycles, _describe_cycles(cycles)


def _write(root: Path, files: dict):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            if parent.parts and not (root / parent / "__init__.py").exists():
                (root / parent / "__init__.py").write_text("")


def test_the_cycle_detector_finds_cycles_hidden_in_functions_and_through_a_package(tmp_path):
    """A two-module cycle closed by an import inside a function, a three-module one through a package's
    __init__ (``from package import name``) and an acyclic control: both cycles are named, the control
    is not, and ``from package import submodule`` alone closes none."""
    _write(tmp_path, {
        "numeric/a.py": "from vjpcert.numeric.b import g\n",
        "numeric/b.py": "def g():\n    from vjpcert.numeric.a import x\n    return x\n",
        "numeric/c.py": "from vjpcert.numeric import settings\nimport vjpcert.core.x\n",
        "numeric/settings.py": "",
        "symbolic/__init__.py": "from vjpcert.symbolic.api import prove\n",
        "symbolic/api.py": "def prove():\n    import vjpcert.symbolic.fixed.prover\n",
        "symbolic/fixed/prover.py": "from vjpcert.symbolic import settings\nfrom vjpcert.symbolic import prove\n",
        "symbolic/settings.py": "",
        "core/x.py": "from . import y\n",
        "core/y.py": "",
    })
    graph = _module_graph(tmp_path)
    assert graph["vjpcert.core.x"] == {"vjpcert.core.y"}              # a relative import resolved
    assert graph["vjpcert.numeric.c"] == {"vjpcert.numeric.settings", "vjpcert.core.x"}
    cycles = _cycles(graph)
    assert cycles == [["vjpcert.numeric.a", "vjpcert.numeric.b", "vjpcert.numeric.a"],
                      ["vjpcert.symbolic", "vjpcert.symbolic.api", "vjpcert.symbolic.fixed.prover",
                       "vjpcert.symbolic"]], cycles
    message = _describe_cycles(cycles)
    assert "vjpcert.numeric.a -> vjpcert.numeric.b -> vjpcert.numeric.a" in message
    assert "vjpcert.symbolic -> vjpcert.symbolic.api -> vjpcert.symbolic.fixed.prover -> vjpcert.symbolic" in message
    (tmp_path / "symbolic/fixed/prover.py").write_text("from vjpcert.symbolic import settings\n")
    (tmp_path / "numeric/b.py").write_text("def g():\n    return 1\n")
    assert _cycles(_module_graph(tmp_path)) == []


# ------------------------------------------------------------------------------ the floors of symbolic/
SYMBOLIC_ALLOWED = {
    "fixed": {"fixed"},
    "every_size": {"fixed", "every_size"},
    # a composite's node rests on the node's every-size proof where it has one (``proved-general``
    # covers the dims the composite calls it at, whatever they are): compose runs ``prove_general``
    "composition": {"fixed", "every_size", "composition"},
    "modular": {"fixed", "modular"},
}


def _symbolic_part(module: str) -> str | None:
    """The subpackage of ``vjpcert.symbolic`` a module is in; "" for its top-level modules
    (``settings``, ``api``, the package itself); None outside it."""
    parts = module.split(".")
    if parts[:2] != ["vjpcert", "symbolic"]:
        return None
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in SYMBOLIC_ALLOWED) else ""


def _sideways_symbolic_imports(root: Path) -> list[str]:
    """Every import (inside functions too) from one subpackage of symbolic/ into one its rule does not
    allow; core, specs and symbolic's top-level modules are allowed to all (the floors check the rest)."""
    modules = _module_files(root)
    bad = []
    for name, path in modules.items():
        part = _symbolic_part(name)
        if not part:
            continue
        for line, target in _import_targets(path, name, modules):
            other = _symbolic_part(target)
            if other and other not in SYMBOLIC_ALLOWED[part]:
                bad.append(f"{path.relative_to(root)}:{line} imports {target}")
    return bad


def test_every_subpackage_of_symbolic_has_a_rule():
    found = {p.parent.name for p in (ROOT / "symbolic").glob("*/__init__.py")}
    assert found == set(SYMBOLIC_ALLOWED), f"a subpackage of symbolic/ without a rule here: {found ^ set(SYMBOLIC_ALLOWED)}"


def test_the_subpackages_of_symbolic_import_only_down():
    bad = _sideways_symbolic_imports(ROOT)
    assert not bad, "imports between symbolic/ subpackages that point up or sideways:\n" + "\n".join(bad)


def test_the_symbolic_rule_can_fail(tmp_path):
    """Sideways (modular -> every_size, by ``from package import submodule`` too), up (fixed -> modular,
    inside a function) are caught; down (every_size -> fixed), top-level modules and the one allowed
    sideways edge (composition -> every_size) are not."""
    _write(tmp_path, {
        "symbolic/settings.py": "",
        "symbolic/modular/check.py": "from vjpcert.symbolic.every_size.general import prove_general\n"
                                     "from vjpcert.symbolic import composition\n"
                                     "from vjpcert.symbolic import settings\n",
        "symbolic/fixed/prover.py": "def f():\n    import vjpcert.symbolic.modular.check\n",
        "symbolic/every_size/general.py": "from vjpcert.symbolic.fixed.prover import f\n",
        "symbolic/composition/compose.py": "from vjpcert.symbolic.every_size import general\n",
    })
    assert _sideways_symbolic_imports(tmp_path) == [
        "symbolic/fixed/prover.py:2 imports vjpcert.symbolic.modular.check",
        "symbolic/modular/check.py:1 imports vjpcert.symbolic.every_size.general",
        "symbolic/modular/check.py:2 imports vjpcert.symbolic.composition",
    ]

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
