"""Adding an op touches only its own files: a throwaway SiLU is added to a copy of the source tree --
`specs/silu.py`, `specs/mutants/silu.py` and `cuda_kernels/silu.py`, nothing else -- and every tier
picks it up (planning, proofs, numeric checks with the float references, its kernels in the
simulator, the sm_90 resource table, the mutation suite) by discovery."""
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


SILU_KERNELS = '''
"""SiLU kernels, elementwise, grid-strided: y = x s,  dx = dy s (1 + x (1 - s)),  s = 1 / (1 + exp(-x))."""
import math

import numpy as np

from vjpcert.cuda_kernels.common import call, config, cuda, elem_grid, empty, float32, kernel, launch
from vjpcert.cuda_kernels.registry import ROWS, fwd_bwd

ONE = np.float32(1)
_CACHE = {}


def build(cfg):
    if cfg.block not in _CACHE:
        @kernel("void(float32[::1], float32[::1])", threads=cfg.block)
        def silu_fwd_k(x, y):
            for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
                v = x[i]
                y[i] = v * (ONE / (ONE + float32(math.exp(-v))))

        @kernel("void(float32[::1], float32[::1], float32[::1])", threads=cfg.block)
        def silu_bwd_k(x, dy, dx):
            for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
                v = x[i]
                s = ONE / (ONE + float32(math.exp(-v)))
                dx[i] = dy[i] * (s * (ONE + v * (ONE - s)))
        _CACHE[cfg.block] = type("SiluKernels", (), {"fwd": silu_fwd_k, "bwd": silu_bwd_k})
    return _CACHE[cfg.block]


def _elementwise(name, arrays, poison):
    cfg = config()
    k = getattr(build(cfg), name)

    def dev(*rows):
        flat = [a.reshape(a.size) for a in rows]
        out = empty((flat[0].size,), poison)
        launch(k, elem_grid(flat[0].size, cfg), cfg.block, *flat, out)
        return out.reshape(rows[0].shape)
    return call(dev, arrays)


def silu_fwd(x, *, poison=True):
    return _elementwise("fwd", (x,), poison)


def silu_bwd(x, dy, *, poison=True):
    return _elementwise("bwd", (x, dy), poison)


def _sigmoid_model(v):
    from vjpcert.cuda_kernels import error_model as em
    return em.exact(1.0) / (em.exact(1.0) + em.exp(-v))


def silu_fwd_model(cfg, x):
    from vjpcert.cuda_kernels import error_model as em
    v = em.exact(x)
    return v * _sigmoid_model(v)


def silu_bwd_model(cfg, x, dy):
    from vjpcert.cuda_kernels import error_model as em
    v = em.exact(x)
    s = _sigmoid_model(v)
    return em.exact(dy) * (s * (em.exact(1.0) + v * (em.exact(1.0) - s)))


KERNELS = fwd_bwd("silu", silu_fwd, silu_bwd, models=(silu_fwd_model, silu_bwd_model), doc="elementwise")
SIZES = {"silu": ROWS}
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    for floor in FLOORS:
        shutil.copytree(ROOT / floor, root / floor, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "specs" / "silu.py").write_text(textwrap.dedent(SILU))
    (root / "specs" / "mutants" / "silu.py").write_text(textwrap.dedent(SILU_MUTANTS))
    (root / "cuda_kernels" / "silu.py").write_text(textwrap.dedent(SILU_KERNELS))
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


@pytest.mark.slow        # a whole `vjpcert all` of the new op (half a minute); the tests below show in
def test_every_tier_picks_the_new_op_up(tree):   # seconds that its mutant, kernels and resources are found
    reports = tree / "reports"
    out = _run(tree, "-m", "vjpcert.cli", "all", "silu", "--reports", str(reports), "--quiet", "--no-plots")
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (reports / "certificates" / "silu").glob("*.json")]
    tiers = {(r["tier"], r["claim"]) for r in records}
    assert {("symbolic", "vjp[x]"), ("numeric", "vjp[x]"), ("numeric", "reference"),
            ("kernel", "kernel:silu_fwd"), ("kernel", "kernel:silu_bwd")} <= tiers
    assert all(r["verdict"] in ("proved", "proved-general", "checked", "kernel-match") for r in records), \
        [(r["tier"], r["claim"], r["verdict"], r["evidence"].get("witness")) for r in records if r["verdict"] not in
         ("proved", "proved-general", "checked", "kernel-match")]
    launches = {r["evidence"]["launch"] for r in records if r["tier"] == "kernel"}
    assert launches == {"default", "gpu"}                          # its sizes, and the GPU's own launch
    assert any(r["method"] == "general" for r in records)          # the every-size proof, derived
    assert (reports / "silu.md").is_file() and "silu" in (reports / "README.md").read_text()


def test_the_mutation_suite_picks_its_mutant_up(tree):
    out = _run(tree, "-c", "from vjpcert.specs import builtin_ops; from vjpcert.symbolic.fixed.prover import "
                           "prove_claim; o = builtin_ops()['silu']; m = o.mutants[0]; "
                           "print(prove_claim(o.with_mutant(m), 'vjp[x]', o.dims[-1]).verdict)")
    assert out.returncode == 0 and out.stdout.strip() == "failed", out.stderr[-2000:]


def test_a_wrong_kernel_of_the_new_op_is_caught(tree):
    """The kernel tier holds the new kernels to their error model: a backward that drops the product
    rule's second term (sigma' for silu') is failed, with a witness."""
    code = ("import numpy as np; from vjpcert.cuda_kernels import silu; "
            "from vjpcert.cuda_kernels.check import check_kernel_claim; "
            "from vjpcert.cuda_kernels.registry import KERNELS; import dataclasses; "
            "bad = lambda x, dy, poison=True: dy * (1 / (1 + np.exp(-x))) * (1 - 1 / (1 + np.exp(-x))); "
            "KERNELS['silu_bwd'] = dataclasses.replace(KERNELS['silu_bwd'], launcher=bad); "
            "c = check_kernel_claim('silu', 'kernel:silu_bwd', {'rows': 7, 'n': 33}); "
            "print(c.verdict, c.evidence['witness']['check'])")
    out = _run(tree, "-c", code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "failed", out.stdout


def test_the_resource_table_compiles_the_new_kernels(tree):
    """The sm_90 resource table finds the new kernels with the others (no list names them)."""
    out = _run(tree, "-c", "import os; os.environ['VJPCERT_KERNEL_MODE'] = 'compile'; "
                           "from vjpcert.cuda_kernels.resources import ptx_kernels; "
                           "print(sorted(k.name for k in ptx_kernels()))")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "silu_fwd_k" in out.stdout and "silu_bwd_k" in out.stdout and "gelu_erf_fwd" in out.stdout
