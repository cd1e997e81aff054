"""A checker hash follows behaviour: a comment, a docstring or formatting changes nothing, a code change
stales the certificates of the checker whose code changed and no others. The framework frontends define
ops, so their code is in each framework op's identity and in no checker's hash."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("vjpcert", "core", "specs", "frontends", "symbolic", "numeric", "cuda_kernels", "triton_kernels")
HASHES = """
import json
from vjpcert.tiers import TIERS
out = {}
for name in ("symbolic", "numeric", "kernel", "triton"):
    t = TIERS[name]
    for method in (None, "compositional", "general", "modular"):
        if method and name != "symbolic":
            continue
        import importlib, vjpcert
        out[f"{name}:{method}"] = t.checker_sha256(method)
out["symbolic:at_the_kink"] = TIERS["symbolic"].checker_sha256(None, "at_the_kink")   # a claim's own checker
from vjpcert.core.code_hash import definition_sha256
out["frontend-ops"] = definition_sha256("vjpcert.frontends")   # in every framework op's identity
out["origin"] = vjpcert.__file__
print(json.dumps(out))
"""


def _copy(tmp_path) -> Path:
    root = tmp_path / "repo"
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _hashes(root: Path) -> dict:
    run = subprocess.run([sys.executable, "-c", HASHES], cwd=root, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(root)})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(out.pop("origin")).resolve().is_relative_to(root.resolve()), "the copy was not the code imported"
    return out


def _edit_text_only(path: Path):
    """A comment at the top and the bottom, a blank line, and every docstring reworded."""
    import ast
    src = path.read_text()
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            i = body[0].lineno - 1
            lines[i] = lines[i].replace('"""', '"""Reworded. ', 1) if '"""' in lines[i] else lines[i]
    path.write_text("# an edited comment\n\n" + "".join(lines) + "\n# another one\n")


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    return _hashes(_copy(tmp_path_factory.mktemp("before")))


def test_comment_and_docstring_edits_of_every_checker_file_and_of_core_change_no_checker_hash(tmp_path, before):
    root = _copy(tmp_path)
    for folder in ("vjpcert", "core", "frontends", "symbolic", "numeric", "cuda_kernels", "triton_kernels"):
        for path in (root / folder).rglob("*.py"):
            _edit_text_only(path)
    assert _hashes(root) == before


# each case copies the package and hashes every checker in a fresh process (2 s): the default run
# keeps one prover alone, the ladder, a kernel file found at run time and the frontends; --slow all
SLOW = pytest.mark.slow


@pytest.mark.parametrize("path, stale", [
    # the every-size prover, and composition, whose nodes rest on every-size proofs where they have one
    pytest.param("symbolic/every_size/normal.py", {"symbolic:general", "symbolic:compositional"}, marks=SLOW),
    ("symbolic/modular/arith.py", {"symbolic:modular"}),                # the modular test only
    # the value on a kink: its own check, and composition, whose composites rest on their nodes' checks
    pytest.param("symbolic/fixed/kinks.py", {"symbolic:at_the_kink", "symbolic:compositional"}, marks=SLOW),
    # the ladder (and the numeric tier, whose `checked` it holds against exact normalisation): not the
    # value on a kink, which the ladder hands to that check by name
    ("symbolic/fixed/prover.py", {"symbolic:None", "symbolic:compositional", "symbolic:general", "numeric"}),
    ("cuda_kernels/softmax.py", {"kernel"}),                             # a kernel file, found at run time
    pytest.param("core/trace.py", {"symbolic:None", "symbolic:compositional", "symbolic:general", "symbolic:modular",
                                   "symbolic:at_the_kink", "numeric", "kernel", "triton", "frontend-ops"},
                 marks=SLOW),                                           # machinery every checker runs on
    ("frontends/values.py", {"frontend-ops"}),                          # framework ops only, not the specs'
    # the constructs ops are built with: in those ops' identity (below), in no checker's hash
    ("core/chunked.py", set()),
    pytest.param("core/recurrence.py", set(), marks=SLOW),
    # bookkeeping: what a record holds and when it is current, in no checker's hash and no op's definition
    ("core/certificate.py", set()),
    pytest.param("core/sources.py", set(), marks=SLOW),
    pytest.param("core/reads.py", set(), marks=SLOW),
    pytest.param("core/code_hash.py", set(), marks=SLOW),
    pytest.param("core/features.py", set(), marks=SLOW),
    ("vjpcert/__init__.py", {"symbolic:None", "symbolic:compositional", "symbolic:general", "symbolic:modular",
                             "symbolic:at_the_kink", "numeric", "kernel", "triton", "frontend-ops"}),
])
def test_a_code_change_stales_the_checkers_that_run_that_code_and_no_others(tmp_path, before, path, stale):
    root = _copy(tmp_path)
    target = root / path
    target.write_text(target.read_text() + "\n_EDITED_FOR_A_TEST = 1\n")
    after = _hashes(root)
    changed = {k for k in before if before[k] != after[k]}
    assert {k.removesuffix(":None") if not k.startswith("symbolic") else k for k in changed} == stale


def test_a_framework_ops_identity_carries_the_frontends_code(monkeypatch):
    """What leaves the frontends out of the checkers' hashes is that each framework op's identity has
    them: a different frontend code hash is a different op (its certificates stale)."""
    pytest.importorskip("torch")
    from vjpcert.core import code_hash
    from vjpcert.frontends.pytorch import from_torch

    def make():
        return from_torch(lambda x: x * x, inputs={"x": ("n",)}, dims=[{"n": 2}], name="hash_square")

    before = make().spec_sha256
    assert make().spec_sha256 == before
    monkeypatch.setattr(code_hash, "definition_sha256", lambda package: "another frontend")
    assert make().spec_sha256 != before


def test_the_ladder_hands_the_value_on_a_kink_to_the_module_the_tier_table_hashes():
    """The prover imports the kink check by name (so the ladder's hash leaves it out); the tier table
    names the module whose hash its certificates carry: the two names must be one."""
    from vjpcert.core.registry import KINK_CLAIM
    from vjpcert.symbolic.fixed import kinks, prover
    from vjpcert.tiers import TIERS
    assert TIERS["symbolic"].checker_module(None, KINK_CLAIM) == prover.KINK_CHECKER == kinks.__name__
    assert TIERS["symbolic"].checker_sha256(None, KINK_CLAIM) == kinks.CHECKER_SHA256
    assert TIERS["symbolic"].checker_sha256(None, "vjp[x]") == prover.CHECKER_SHA256 != kinks.CHECKER_SHA256


def test_the_construct_files_are_in_the_identity_of_the_ops_built_with_them_and_no_other():
    """What an edit of core/chunked.py or core/recurrence.py stales, given that no checker hashes them:
    the recurrences, the chunked ops and the chunk ops whose laws chunked generated (their mutant twins
    too), and no op built without them."""
    from vjpcert.specs import builtin_ops
    ops = builtin_ops()
    chunked, recurrence = (ROOT / "core" / "chunked.py").resolve(), (ROOT / "core" / "recurrence.py").resolve()

    def files(o):
        return {p.resolve() for p in o.source_files}
    for name in ("linear_attention_chunked", "linear_attention_chunk_state", "linear_attention_chunk_out",
                 "gated_delta_rule_chunked", "gated_delta_chunk_state", "gated_delta_chunk_out"):
        o = ops[name]
        assert {chunked, recurrence} <= files(o), name
        assert all({chunked, recurrence} <= files(o.with_mutant(m)) for m in o.mutants), name
    for name in ("linear_attention", "gated_delta_rule", "lstm", "selective_scan"):
        assert recurrence in files(ops[name]) and chunked not in files(ops[name]), name
    for name in ("softmax", "gated_delta_cell", "linear_attention_cell", "conv2d"):
        assert not {chunked, recurrence} & files(ops[name]), name


def test_leaving_the_bookkeeping_out_of_a_checker_hash_leaves_out_nothing_else():
    """The bookkeeping modules are not followed: whatever a checker runs that they import, it must reach
    by an import of its own, or an edit of it would stale nothing. So each checker's closure without
    them is its whole closure less them, module for module."""
    from vjpcert.core.code_hash import BOOKKEEPING, _package_closure, closure
    from vjpcert.core.registry import KINK_CLAIM
    from vjpcert.tiers import TIERS
    entries = {TIERS[name].checker_module(method, claim) for name in TIERS
               for method in (None, "compositional", "general", "modular") for claim in ("vjp[x]", KINK_CLAIM)}
    assert len(entries) >= 8
    for entry in entries:
        whole = closure(entry, bookkeeping=True)
        assert set(BOOKKEEPING) & set(whole), entry                      # what the test is about is there
        assert set(closure(entry)) == set(whole) - set(BOOKKEEPING), entry
    for package in {TIERS[name].discovered for name in TIERS} - {None}:
        whole = _package_closure(package, bookkeeping=True)
        assert set(_package_closure(package)) == set(whole) - set(BOOKKEEPING), package


def test_a_module_reached_only_through_the_bookkeeping_would_be_caught(monkeypatch):
    """The negative control of the test above: a checker module that reaches the tracer only through
    the claims' memory (as the kernel checkers did before the op handed the memory its tracer) fails it."""
    from vjpcert.core import code_hash
    real = code_hash._imported

    def tracer_only_through_the_memory(path, modname):
        found = real(path, modname)
        if modname == "vjpcert.core.registry":
            return [n for n in found if n != "vjpcert.core.tracing"]
        if modname == "vjpcert.core.features":
            return found + ["vjpcert.core.tracing"]
        return found
    monkeypatch.setattr(code_hash, "_imported", tracer_only_through_the_memory)
    with pytest.raises(AssertionError):
        test_leaving_the_bookkeeping_out_of_a_checker_hash_leaves_out_nothing_else()
