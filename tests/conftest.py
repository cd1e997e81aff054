import pytest

from vjpcert.specs import builtin_ops

OPS = builtin_ops()


def op_claims(proof=None):
    """(op, claim) pairs; with ``proof``, only ops proved that way ("monolithic"/"compositional")."""
    return [(name, claim) for name, op in OPS.items() if proof is None or proof in op.proofs
            for claim in op.claims() if proof != "compositional" or claim.startswith("vjp[")]


def representative(name, claim) -> bool:
    """The claim that stands for an op in the default run's per-claim matrices: its first input's VJP
    (--slow runs every claim). The default run's matrices say each op still goes through each
    checker, and each mutant standing for it still goes red; that every claim of every op holds is
    what the committed certificates say, which CI verifies are current (same spec, same checker
    code), all passing, and replays a sample of."""
    if heavy(name):
        return False        # its family stands for it (see HEAVY_COMPOSITES and HEAVY_LEAVES)
    return claim == next(c for c in OPS[name].claims() if c.startswith("vjp["))


def by_default(pairs):
    """(op, claim) pairs as pytest params, the non-representative ones marked slow."""
    return [pytest.param(n, c, marks=() if representative(n, c) else pytest.mark.slow) for n, c in pairs]


def op_mutants(proof=None):
    return [(name, m.name) for name, op in OPS.items() if proof is None or proof in op.proofs
            for m in op.mutants]


# Composites whose first compositional proof in a fresh process costs 15 s or more (their nodes'
# every-size proofs come first), or whose every check costs seconds where a smaller member of their
# family costs a fraction (ConvNeXt's 7x7 depthwise branch; multi-head attention, whose heads are
# attention's): their claims and mutants run with --slow, and in the committed certificates and kill
# matrix; the ResNet and MobileNet blocks, and attention, stand for them in the default run.
HEAVY_COMPOSITES = ("gpt2_block", "convnext_block", "mhsa")
# Leaf ops whose mutants each cost seconds to half a minute in a fresh process (the 3x3 max-pool: nine
# taps per window, and the value on its kinks probed input by input; the 7x7 depthwise convolution:
# 49 taps): --slow and the committed kill matrix, like the heavy composites; max_pool2d and
# depthwise_conv2d stand for their families in the default run.
HEAVY_LEAVES = ("max_pool2d_3x3s2", "depthwise_conv7x7")


def heavy(name) -> bool:
    """An op the default run's per-claim and per-mutant matrices leave to --slow: a heavy composite
    or leaf, or a stack of blocks (its checks are its blocks', which stand for it)."""
    o = OPS[name]
    return name in HEAVY_COMPOSITES or name in HEAVY_LEAVES or any(node.nodes for node in o.nodes.values())


def standing_mutants(name) -> set[str]:
    """The mutants that stand for an op in the default run: for a composite (an op with nodes) its
    first one (each mutant evaluates the whole block again), and none for a composite of composites
    (a stack of blocks: one mutant costs a minute, and exercises only what its blocks' mutants do);
    for a leaf op, a few mutants that
    between them kill every claim (a greedy cover, so each claim's negative control goes red in every
    run), and every mutant of a kind with a path of its own (refused, evading the standard inputs,
    below any finite precision). --slow runs them all, and the committed kill matrix, which CI checks
    is current, holds every mutant in every tier."""
    o = OPS[name]
    if heavy(name):
        return set()
    if o.nodes and "monolithic" not in o.proofs:
        return {o.mutants[0].name} if o.mutants else set()
    out = {m.name for m in o.mutants if m.refused or m.evades or m.exact_only}
    left = set(o.claims())
    while left:                         # greedy cover: the mutant that kills the most claims not yet killed
        best = max(o.mutants, key=lambda m: len(left & set(m.kills)))
        if not left & set(best.kills):
            break                       # a claim no mutant kills: test_every_claim_has_a_negative_control fails
        out.add(best.name)
        left -= set(best.kills)
    return out


def mutants_by_default(pairs):
    """(op, mutant) pairs as pytest params, those that do not stand for their op marked slow."""
    return [pytest.param(name, mutant, marks=() if mutant in standing_mutants(name) else pytest.mark.slow)
            for name, mutant in pairs]


# Two one-line ops for the report tests: cube with a wrong backward (one failed claim), square right.
REPORT_OPS = ('from vjpcert.core.registry import op\n'
       '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
       'def cube(B, x):\n    """x cubed, with a wrong backward."""\n    return x * x * x\n'
       '@cube.defvjp\ndef _(B, x, dy):\n    return (2 * x * x * dy,)\n'
       '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
       'def square(B, x):\n    """x squared."""\n    return x * x\n'
       '@square.defvjp\ndef _(B, x, dy):\n    return (2 * x * dy,)\n')


@pytest.fixture(scope="session")
def ops():
    return OPS

pytest_plugins = ["pytester"]


# The default run (CI's) is every test at representative sizes; `pytest --slow` adds the full
# matrices (every kernel at every size, every claim of every composite and its mutants against every
# claim, the ViT block at realistic dims). What the slow tests prove of the built-in ops is also in the
# committed certificates, which CI verifies are current and replays a sample of.
def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the slow tests (the full matrices)")


# What a test needs, as markers, so a contributor can run the part they touch (`pytest -m "not cuda"`,
# `pytest -m torch`): read off the test files' imports and importorskip calls (module level: every test
# of the file; inside a test function: that test), so the markers cannot drift from the code.
NEEDS = {"torch": ("torch", "vjpcert.frontends.pytorch", "vjpcert.numeric.torch_bridge"),
         "jax": ("jax", "vjpcert.frontends.jaxpr", "vjpcert.numeric.jax_bridge"),
         "triton": ("triton", "liger_kernel", "vjpcert.triton_kernels"),
         "cuda": ("numba", "vjpcert.cuda_kernels"),
         "dask": ("distributed", "dask")}
FRAMEWORKS = ("torch", "jax", "triton", "dask")      # the needs run last in each worker


def _names_of(tree) -> tuple[list[str], set[str]]:
    """The modules ``tree`` imports (statements, and importorskip/imported calls with a constant name),
    and the plain names it calls (``helper(...)``, ``optional.check_triton(...)`` as its attribute)."""
    import ast
    names, called = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call):
            attr = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if attr in ("importorskip", "imported") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
            called.add(attr)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "optional":
            called.add(node.attr)           # optional.check_triton, called here or kept under another name
    return names, called


def _needs_of_names(names) -> set[str]:
    return {need for need, prefixes in NEEDS.items()
            for n in names for p in prefixes if n == p or n.startswith(p + ".")}


_NEEDS_CACHE: dict = {}


def _read(path):
    """(what the module needs at its top, {function: what it needs}): a function needs what it imports
    and what the module-level functions it calls need, in its own file and in tests/optional.py (a
    helper that builds a Triton kernel, ``optional.check_triton``), so a test that reaches a framework
    through a helper is marked as one that imports it."""
    import ast
    from pathlib import Path
    if path not in _NEEDS_CACHE:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        top = ast.Module(body=[n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))],
                         type_ignores=[])
        own = {}
        for n in tree.body:
            if isinstance(n, ast.FunctionDef):        # its fixtures, by argument name, as calls
                names, called = _names_of(n)
                own[n.name] = (names, called | {a.arg for a in n.args.args})
        helpers = {} if Path(path).name == "optional.py" else _read(Path(__file__).with_name("optional.py"))[1]
        aliases = {}                         # _check = optional.check_triton
        for n in top.body:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and len(n.targets) == 1 \
                    and isinstance(n.targets[0], ast.Name):
                aliases[n.targets[0].id] = n.value.attr
        functions = {}

        def closure(name, seen):
            if name in functions:
                return functions[name]
            names, called = own[name]
            found = _needs_of_names(names)
            for c in called:
                c = aliases.get(c, c)
                if c in own and c not in seen:
                    found |= closure(c, seen | {c})
                elif c in helpers and c not in own:
                    found |= helpers[c]
            return found
        for name in own:
            functions[name] = closure(name, {name})
        _NEEDS_CACHE[path] = (_needs_of_names(_names_of(top)[0]), functions)
    return _NEEDS_CACHE[path]


def needs(path, function: str | None) -> set[str]:
    """What the test module at ``path`` needs at module level, plus what ``function`` needs."""
    top, functions = _read(path)
    return top | functions.get(function, set())


# A test that loads a framework the reader above cannot see (the code under test imports it: `vjpcert
# verify` rebuilding the framework ops) says so with the framework's marker; one that says nothing runs
# among the light tests and leaves its worker heavy for every later proof (each forked child pays for
# the parent's size). So each test that is not marked for a framework and loads one is told, with a
# warning that names the marker to add. Triton (some 80 MB) is not watched: declaring an op loads it
# wherever the op's file reaches the Triton tier (core.sources asks where `triton.language` lives, and
# finding a submodule imports its package), which is no need of the test's.
FRAMEWORK_MODULES = {need: NEEDS[need][0] for need in FRAMEWORKS if need != "triton"}   # the package each loads


@pytest.fixture(autouse=True)
def _a_framework_loaded_unannounced_is_named(request):
    import sys
    before = {m for m in FRAMEWORK_MODULES.values() if m in sys.modules}
    yield
    marked = set(request.node.keywords)
    loaded = [need for need, module in FRAMEWORK_MODULES.items()
              if module in sys.modules and module not in before and need not in marked]
    if loaded:
        request.node.warn(pytest.PytestWarning(
            f"this test loaded {', '.join(loaded)} without the marker: mark it "
            f"{' '.join('@pytest.mark.' + n for n in loaded)} so it runs with the framework tests, last in its worker"))


# Under pytest-xdist every core runs a worker already, so each worker's BLAS, OpenMP and Numba take one
# thread: a second thread per worker only contends for the cores (and OpenBLAS's idle threads spin).
# Set in the controller before it starts the workers, which read it at their first import; a value the
# caller set is kept, and a run without xdist keeps every core.
ONE_THREAD_PER_WORKER = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


# A worker runs proofs as a command does, so it collects garbage as the command does (vjpcert/cli.py,
# GC_THRESHOLDS: fewer, larger batches; the proof-heavy test files ran 4% faster for it).
def pytest_configure(config):
    import gc
    import os
    from vjpcert.cli import GC_THRESHOLDS
    gc.set_threshold(*GC_THRESHOLDS)
    if config.getoption("numprocesses", default=None) and "PYTEST_XDIST_WORKER" not in os.environ:
        for var in ONE_THREAD_PER_WORKER:
            os.environ.setdefault(var, "1")
    config.addinivalue_line("markers", "slow: a full matrix or realistic size; run with --slow")
    for need in NEEDS:
        config.addinivalue_line("markers", f"{need}: needs {need} (read off the test file's imports)")


# The files whose tests take a minute or more (whole-block mutants, end-to-end commands, subprocess
# pytest runs), measured with --durations. They run first, so under pytest-xdist the short tests come
# last and fill both workers to the end, instead of one long test running alone after the rest.
LONG_FIRST = ("test_numeric.py", "test_composition.py", "test_readme.py", "test_adding_an_op.py",
              "test_plugin.py", "test_all_verify.py", "test_notebook.py", "test_frameworks.py",
              "test_kernels.py", "test_soundness.py", "test_every_size_language.py", "test_dask.py")


def framework_tests_last(items: list, workers: int, needs_framework) -> list:
    """The tests that need a framework last in each worker (tests/optional.py: a worker that imported
    one forks its proofs slower). pytest-xdist's worksteal hands each worker a contiguous share of the
    list, so each share is its light tests, then its framework tests; the order within each stays."""
    light = [i for i in items if not needs_framework(i)]
    heavy = [i for i in items if needs_framework(i)]
    return [item for k in range(workers)
            for part in (light[k * len(light) // workers:(k + 1) * len(light) // workers],
                         heavy[k * len(heavy) // workers:(k + 1) * len(heavy) // workers])
            for item in part]


# The optional frameworks that collecting the suite must not import (tests/optional.py), nor the modular
# tier's Numba loops, compiled when first imported (optional.compiled); and which of them it did: each
# worker records it when its collection ends, tests/test_suite_layout.py asserts.
OPTIONAL_MODULES = ("torch", "jax", "triton", "liger_kernel", "distributed", "vjpcert.symbolic.modular.kernels")
IMPORTED_AT_COLLECTION = pytest.StashKey[list]()


def pytest_collection_finish(session):
    import sys
    session.config.stash[IMPORTED_AT_COLLECTION] = sorted(m for m in OPTIONAL_MODULES if m in sys.modules)
    # tests/optional.py: from here on a private name asked of a module imported at first use is a test's.
    # Reached through sys.modules, not an import statement: an op declared in a test file has its code
    # files read off the imports of that file and of what it imports (core.sources), conftest included,
    # and optional.py's imports inside its functions would import the Triton tier's package there.
    if "optional" in sys.modules:
        sys.modules["optional"].COLLECTION["done"] = True


def _workers(config) -> int:
    workerinput = getattr(config, "workerinput", None)      # pytest-xdist's, in a worker
    return int(workerinput["workercount"]) if workerinput else 1


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FIRST)      # stable: the order within stays
    for item in items:
        function = getattr(getattr(item, "function", None), "__name__", None)
        for need in sorted(needs(item.path, function)):
            item.add_marker(need)
    items[:] = framework_tests_last(items, _workers(config), lambda i: any(m in i.keywords for m in FRAMEWORKS))
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="a full matrix or realistic size: pytest --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# A test is one command's worth of work, and should meet the process as that command would. A worker
# runs hundreds of tests, each loading user spec files from its own tmp_path; kept, they would be
# reachable from every later test's spec code (sys.modules, sys.path), so the watch for code a
# certificate does not hash would profile every call of every later user op (vjpcert/unhashed.py,
# ``watch``: on Python 3.11 a profile hook, some 2x on the code it watches). So what a test (or a test
# module's fixtures) loaded is forgotten after it: its user modules, the user files the watch noted as
# loaded, and the folders it put on sys.path. A test of several user files in one process makes them
# within the test; tests/test_identity.py has those.
def _forget_user_files_loaded_since():
    import sys
    from vjpcert import unhashed
    loaded, modules, path = set(unhashed._LOADED), set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - modules:
        module = sys.modules.get(name)
        if module is not None and unhashed._user_file(module) is not None:
            del sys.modules[name]
    unhashed._LOADED.intersection_update(loaded)
    sys.path[:] = [p for p in sys.path if p in path]


each_test_forgets_its_user_files = pytest.fixture(autouse=True)(_forget_user_files_loaded_since)
each_module_forgets_its_user_files = pytest.fixture(autouse=True, scope="module")(_forget_user_files_loaded_since)
