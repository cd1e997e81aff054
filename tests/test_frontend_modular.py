"""Framework code at production size: a torch or JAX graph runs in the modular tier through the same
arrays mod p a spec runs on (no exact trace at production dims), declared with ``modular_dims`` (or
``--modular-dims``) as a spec declares them, and a wrong backward fails there with an exact witness."""
from __future__ import annotations

import json
import sys

import pytest

import optional

torch = optional.importorskip("torch")
F = optional.importorskip("torch.nn.functional")
models = optional.importorskip("torch_models")

from vjpcert.cli import main  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402
check_modular = optional.imported("vjpcert.symbolic.modular.check", "check_modular")   # its Numba loops: at first use

ROWS_N = {"x": ("rows", "n"), "gamma": ("n",)}


def _verdicts(op, dims):
    return {c: check_modular(op, c, dims) for c in op.claims() if c.startswith("vjp[")}


def test_a_module_is_checked_at_production_dims_from_the_module_itself():
    op = from_torch(models.LlamaMLP, init={"dim": "D", "hidden": "F"}, inputs={"x": ("rows", "D")},
                    dims=[{"rows": 2, "D": 2, "F": 3}], modular_dims=[{"rows": 16, "D": 64, "F": 172}])
    certs = _verdicts(op, op.modular_dims[0])
    assert {c: cert.verdict for c, cert in certs.items()} == {f"vjp[{n}]": "checked-probabilistic" for n in op.inputs}
    assert all(float(cert.evidence["false_pass_probability"]) < 1e-6 for cert in certs.values())


def test_attention_inside_a_module_is_checked_at_production_dims():
    op = from_torch(models.CausalSelfAttention, init={"dim": "D", "heads": 2}, inputs={"x": ("b", "t", "D")},
                    dims=[{"b": 1, "t": 2, "D": 4}])
    assert check_modular(op, "vjp[x]", {"b": 2, "t": 16, "D": 32}).verdict == "checked-probabilistic"


@pytest.mark.parametrize("cls, verdict", [("RMSNorm", "checked-probabilistic"), ("RMSNormWrongTerm", "failed")])
def test_a_hand_written_backward_is_checked_and_a_wrong_one_fails_with_an_exact_witness(cls, verdict):
    fn = getattr(models, cls)
    op = from_torch(lambda x, gamma, eps: fn.apply(x, gamma, eps), name=cls, inputs=ROWS_N,
                    dims=[{"rows": 1, "n": 2}], params={"eps": 1e-6})
    cert = check_modular(op, "vjp[x]", {"rows": 16, "n": 96})
    assert cert.verdict == verdict
    if verdict == "failed":
        w = cert.evidence["witness"]
        assert w["exact"] and int(w["residual_mod_p"]) != 0 and w["real_point"]["confirmed"]


def test_a_wrong_function_inside_a_module_fails_at_production_dims():
    op = from_torch(models.WrongBlock, init={"dim": "n"}, inputs={"x": ("rows", "n")}, dims=[{"rows": 1, "n": 2}])
    assert check_modular(op, "vjp[x]", {"rows": 8, "n": 48}).verdict == "failed"


def test_a_constant_read_as_its_decimal_is_never_a_failure_mod_p():
    """PyTorch's erf GELU read with --constants decimal: its residual is the rounding of 1/sqrt(2) and
    1/sqrt(2 pi), which the modular test cannot tell from a bug: inconclusive, saying so; read as the
    reals they round (the default), the same code is checked."""
    def gelu(constants):
        return from_torch(lambda x: F.gelu(x), name=f"gelu_{constants}", inputs={"x": ("rows", "n")},
                          dims=[{"rows": 1, "n": 2}], constants=constants)
    decimal = check_modular(gelu("decimal"), "vjp[x]", {"rows": 4, "n": 64})
    assert decimal.verdict == "inconclusive" and "0.7071067811865476" in decimal.evidence["reason"]
    assert "witness" not in decimal.evidence and decimal.evidence["nonzero_at"]
    assert check_modular(gelu("named"), "vjp[x]", {"rows": 4, "n": 64}).verdict == "checked-probabilistic"


def test_a_jax_function_and_a_wrong_custom_vjp_at_production_dims():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from vjpcert.frontends.jaxpr import from_jax

    @jax.custom_vjp
    def square(x):
        return x * x
    square.defvjp(lambda x: (x * x, x), lambda x, dy: (dy * x,))         # should be 2 x dy
    dims = {"rows": 8, "n": 64}
    good = from_jax(lambda x: jax.nn.softmax(x, -1) * jnp.tanh(x), name="good", inputs={"x": ("rows", "n")},
                    dims=[{"rows": 1, "n": 2}])
    bad = from_jax(lambda x: square(x).sum(-1), name="bad", inputs={"x": ("rows", "n")}, dims=[{"rows": 1, "n": 2}])
    assert check_modular(good, "vjp[x]", dims).verdict == "checked-probabilistic"
    assert check_modular(bad, "vjp[x]", dims).verdict == "failed"


def test_the_command_line_checks_a_module_at_the_production_dims_it_is_given_and_verify_rebuilds_it(tmp_path, monkeypatch):
    import inspect
    module = "import torch.nn as nn\nimport torch.nn.functional as F\n\n\n" + inspect.getsource(models.LlamaMLP)
    (tmp_path / "user_mlp.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    reports = tmp_path / "reports"
    assert main(["prove", "torch:user_mlp:LlamaMLP", "--init", "dim=D", "--init", "hidden=F", "--input", "x=rows,D",
                 "--dims", "rows=2,D=2,F=3", "--modular-dims", "rows=32,D=64,F=172", "--reports", str(reports),
                 "--quiet"]) == 0
    records = [json.loads(p.read_text()) for p in (reports / "certificates" / "user_mlp.LlamaMLP").glob("*.json")]
    by_dims = {}
    for r in records:
        by_dims.setdefault(json.dumps(r["dims"], sort_keys=True), set()).add(r["verdict"])
    assert by_dims == {json.dumps({"D": 2, "F": 3, "rows": 2}, sort_keys=True): {"proved"},
                       json.dumps({"D": 64, "F": 172, "rows": 32}, sort_keys=True): {"checked-probabilistic"}}
    # the reports record the declaration: verify builds the op again from it, and sees an edit
    assert main(["verify", str(reports)]) == 0
    (tmp_path / "user_mlp.py").write_text(module.replace("* self.up(x)", "* self.up(x) * 2"))
    monkeypatch.delitem(sys.modules, "user_mlp")            # as a fresh process loads it
    assert main(["verify", str(reports)]) == 1


def test_modular_dims_are_part_of_the_ops_identity():
    def make(modular):
        return from_torch(models.LlamaMLP, init={"dim": "D", "hidden": "F"}, inputs={"x": ("rows", "D")},
                          dims=[{"rows": 2, "D": 2, "F": 3}], modular_dims=modular)
    assert make([{"rows": 8, "D": 8, "F": 8}]).spec_sha256 != make(None).spec_sha256
