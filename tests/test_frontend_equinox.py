"""An Equinox module as it is: its floating arrays are inputs (one VJP claim each), built at each dims
from its constructor arguments, proved at small dims and checked at production ones; a wrong
custom_vjp inside one fails with a witness."""
from __future__ import annotations

import pytest

import optional

jax = optional.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]')")
eqx = optional.importorskip("equinox", reason="Equinox is optional (pip install equinox)")
jnp = optional.importorskip("jax.numpy")

from vjpcert.cli import main  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.frontends.jaxpr import from_jax  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402
from vjpcert.symbolic.modular.check import check_modular  # noqa: E402

MLP_INIT = {"in_size": "n", "out_size": 2, "width_size": "h", "depth": 1}


def _mlp(**extra):
    return from_jax(eqx.nn.MLP, init={**MLP_INIT, "activation": jax.nn.tanh}, inputs={"x": ("n",)},
                    dims=[{"n": 3, "h": 4}], **extra)


def test_an_equinox_mlp_is_proved_parameter_by_parameter_and_checked_at_production_dims():
    op = _mlp()
    assert list(op.inputs) == ["x", "layers_0_weight", "layers_0_bias", "layers_1_weight", "layers_1_bias"]
    assert op.shape(op.inputs["layers_0_weight"], {"n": 5, "h": 7}) == (7, 5)       # built again at those dims
    assert {c: prove_claim(op, c, {"n": 3, "h": 4}).verdict for c in op.claims()} == \
        {c: "proved" for c in op.claims()}
    assert check_modular(op, "vjp[layers_0_weight]", {"n": 48, "h": 96}).verdict == "checked-probabilistic"


def _square_with(backward):
    @jax.custom_vjp
    def square(x):
        return x * x
    square.defvjp(lambda x: (x * x, x), backward)
    return square


def test_a_wrong_custom_vjp_inside_a_module_fails_with_a_witness():
    class Scaled(eqx.Module):
        w: jax.Array
        backward: object = eqx.field(static=True)        # a function: no array of the module

        def __init__(self, n, backward):
            self.w = jnp.ones(n)
            self.backward = backward

        def __call__(self, x):
            return _square_with(self.backward)(self.w * x)

    ok = from_jax(Scaled, init={"n": "n", "backward": lambda x, dy: (2 * x * dy,)}, inputs={"x": ("n",)},
                  dims=[{"n": 3}])
    bad = from_jax(Scaled, init={"n": "n", "backward": lambda x, dy: (x * dy,)}, inputs={"x": ("n",)},
                   dims=[{"n": 3}])
    assert [prove_claim(ok, c, {"n": 3}).verdict for c in ok.claims()] == ["proved", "proved"]
    cert = prove_claim(bad, "vjp[w]", {"n": 3})
    assert cert.verdict == "failed" and cert.evidence["witness"]
    assert check_modular(bad, "vjp[x]", {"n": 64}).verdict == "failed"


def test_init_on_a_plain_function_is_refused():
    with pytest.raises(SpecError, match="Equinox"):
        from_jax(lambda x: x * x, init={"n": 3}, inputs={"x": ("n",)}, dims=[{"n": 2}])


USER_FILE = """
import equinox as eqx
import jax


class TanhMLP(eqx.Module):
    mlp: eqx.nn.MLP

    def __init__(self, n, h, key):
        self.mlp = eqx.nn.MLP(n, 2, h, 1, activation=jax.nn.tanh, key=key)

    def __call__(self, x):
        return self.mlp(x)


class ReluMLP(TanhMLP):
    def __init__(self, n, h, key):
        self.mlp = eqx.nn.MLP(n, 2, h, 1, key=key)            # relu: a kink
"""


def test_the_command_line_takes_an_equinox_class_with_its_constructor(tmp_path, monkeypatch, capsys):
    (tmp_path / "user_eqx.py").write_text(USER_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    args = ["--init", "n=n", "--init", "h=h", "--input", "x=n", "--dims", "n=2,h=3", "--reports", str(tmp_path / "r"),
            "--quiet"]
    assert main(["prove", "jax:user_eqx:TanhMLP", *args]) == 0
    assert main(["prove", "jax:user_eqx:ReluMLP", *args]) == 0          # relu: proved on each region, checked on the kink
    assert main(["prove", "jax:user_eqx:TanhMLP", "--train", *args]) == 2    # no training mode in Equinox
