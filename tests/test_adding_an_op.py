"""Adding an op touches only its own files: a throwaway SiLU is added to a copy of the source tree --
`specs/silu.py` and `specs/mutants/silu.py`, nothing else -- and every tier picks it up (planning,
proofs, numeric checks with the float references, the mutation suite) by discovery."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("core", "specs", "frontends", "symbolic", "numeric", "cuda_kernels", "vjpcert")

SILU = '''
"""SiLU, elementwise: y = x sigmoid(x),  dx = dy sigmoid(x) (1 + x (1 - sigmoid(x)))."""
from vjpcert import op


def sigmoid(B, x):
    return 1 / (1 + B.exp(-x))


@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}],
    check_dims={"rows": 3, "n": 5})
def silu(B, x):
    return x * sigmoid(B, x)


@silu.defvjp
def silu_vjp(B, x, dy):
    s = sigmoid(B, x)
    return (dy * s * (1 + x * (1 - s)),)


silu.every_size("vjp[x]")
'''

SILU_MUTANTS = '''
"""A wrong SiLU backward."""
from vjpcert.specs.silu import sigmoid, silu


@silu.mutant("sigmoid_derivative_for_silu", kills=["vjp[x]"])
def _(B, x, dy):
    """sigma'(x) in place of silu'(x) (the gate's derivative, not the product's)."""
    s = sigmoid(B, x)
    return (dy * s * (1 - s),)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    for floor in FLOORS:
        shutil.copytree(ROOT / floor, root / floor, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "specs" / "silu.py").write_text(textwrap.dedent(SILU))
    (root / "specs" / "mutants" / "silu.py").write_text(textwrap.dedent(SILU_MUTANTS))
    return root


def _run(tree, *args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_copy_is_what_runs(tree):
    out = _run(tree, "-c", "import vjpcert.specs as s, vjpcert.core.registry as r; print(s.__file__); "
                           "print(r.__file__); print('silu' in s.builtin_ops())")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert all(line.startswith(str(tree)) for line in lines[:2]) and lines[2] == "True"


def test_every_tier_picks_the_new_op_up(tree):
    reports = tree / "reports"
    out = _run(tree, "-m", "vjpcert.cli", "all", "silu", "--reports", str(reports), "--quiet", "--no-plots")
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (reports / "certificates" / "silu").glob("*.json")]
    tiers = {(r["tier"], r["claim"]) for r in records}
    assert {("symbolic", "vjp[x]"), ("numeric", "vjp[x]"), ("numeric", "reference")} <= tiers
    assert all(r["verdict"] in ("proved", "proved-general", "checked") for r in records)
    assert any(r["method"] == "general" for r in records)          # the every-size proof, derived
    assert (reports / "silu.md").is_file() and "silu" in (reports / "README.md").read_text()


def test_the_mutation_suite_picks_its_mutant_up(tree):
    out = _run(tree, "-c", "from vjpcert.specs import builtin_ops; from vjpcert.symbolic.prover import "
                           "prove_claim; o = builtin_ops()['silu']; m = o.mutants[0]; "
                           "print(prove_claim(o.with_mutant(m), 'vjp[x]', o.dims[-1]).verdict)")
    assert out.returncode == 0 and out.stdout.strip() == "failed", out.stderr[-2000:]
