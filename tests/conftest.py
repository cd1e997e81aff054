import pytest

from vjpcert.specs import builtin_ops

OPS = builtin_ops()


def op_claims(proof=None):
    """(op, claim) pairs; with ``proof``, only ops proved that way ("monolithic"/"compositional")."""
    return [(name, claim) for name, op in OPS.items() if proof is None or proof in op.proofs
            for claim in op.claims() if proof != "compositional" or claim.startswith("vjp[")]


def representative(name, claim) -> bool:
    """A composite's (an op with nodes) first input's and last parameter's VJP and its laws stand for
    it in the default run; every claim of a leaf op is always run. --slow runs them all."""
    o = OPS[name]
    if not o.nodes or not claim.startswith("vjp["):
        return True
    vjps = [c for c in o.claims() if c.startswith("vjp[")]
    return claim in (vjps[0], vjps[-1])


def by_default(pairs):
    """(op, claim) pairs as pytest params, the non-representative ones marked slow."""
    return [pytest.param(n, c, marks=() if representative(n, c) else pytest.mark.slow) for n, c in pairs]


def op_mutants(proof=None):
    return [(name, m.name) for name, op in OPS.items() if proof is None or proof in op.proofs
            for m in op.mutants]


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
    if o.nodes and any(node.nodes for node in o.nodes.values()):
        return set()         # a stack of blocks: its checks are its blocks', which stand for it
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


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a full matrix or realistic size; run with --slow")


# The files whose tests take a minute or more (whole-block mutants, end-to-end commands, subprocess
# pytest runs), measured with --durations. They run first, so under pytest-xdist the short tests come
# last and fill both workers to the end, instead of one long test running alone after the rest.
LONG_FIRST = ("test_numeric.py", "test_composition.py", "test_readme.py", "test_adding_an_op.py",
              "test_plugin.py", "test_all_verify.py", "test_notebook.py", "test_frameworks.py",
              "test_kernels.py", "test_soundness.py", "test_every_size_language.py", "test_dask.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FIRST)      # stable: the order within stays
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="a full matrix or realistic size: pytest --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
