"""Kinks in JAX code: lax.max and lax.min of input-dependent numbers are made of the spec language's
kink. Against a constant bound (relu's max(x, 0)) the convention is relu's -- the traced side passes
its gradient where it is strictly above the bound, as jax.nn.relu and relu6 state with their custom
JVPs; between two traced values a tie is split in half, as lax.max's JVP does. So jax.nn.relu is
proved and checked on the kink, while jnp.maximum(x, 0.) and jnp.clip pass half the gradient on the
kink and fail there, with the half in the witness -- and the comparison JAX's backward makes of a value
with itself (eq(x, max(x, c))), 0 in the reals and a rounding residue in mpmath, never makes a
`failed` out of rounding."""
from __future__ import annotations

from fractions import Fraction

import pytest

import optional

jax = optional.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]')")
jnp = optional.importorskip("jax.numpy")

from vjpcert.core.registry import KINK_CLAIM  # noqa: E402
from vjpcert.frontends.jaxpr import from_jax  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402

DIMS = {"rows": 2, "n": 3}
X = {"x": ("rows", "n")}


def _op(name, fn):
    return from_jax(fn, name=f"jk_{name}", inputs=X, dims=[DIMS])


def test_jax_relu_is_proved_on_each_region_and_checked_on_the_kink():
    op = _op("relu", lambda x: jax.nn.relu(x))
    assert prove_claim(op, "vjp[x]", DIMS).verdict == "proved"
    cert = prove_claim(op, KINK_CLAIM, DIMS)
    assert cert.verdict == "checked" and cert.evidence["steps_on_kink"] > 0, cert.evidence


@pytest.mark.parametrize("name", ["maximum_with_zero", pytest.param("clip", marks=pytest.mark.slow)])
def test_a_maximum_with_a_constant_passes_half_on_the_kink_and_fails_there(name):
    fn = {"maximum_with_zero": lambda x: jnp.maximum(x, 0.0), "clip": lambda x: jnp.clip(x, -1.0, 1.0)}[name]
    op = _op(name, fn)
    # never failed on the regions: JAX's backward compares a value with itself, which mpmath cannot
    # decide (a residue of rounding), so that witness is no witness
    assert prove_claim(op, "vjp[x]", DIMS).verdict in ("proved", "inconclusive")
    cert = prove_claim(op, KINK_CLAIM, DIMS)
    assert cert.verdict == "failed", cert.evidence
    w = cert.evidence["witness"]
    assert w["J^T dy"] == "0" and w["exact"], w
    dy = next(v for k, v in w["point"].items() if k == f"dy[{w['component'][2:-1]}]")
    assert w["backward"] == str(Fraction(dy) / 2)


def test_a_maximum_of_two_traced_values_splits_a_tie_in_half_as_its_convention():
    op = _op("max_two", lambda x: jnp.maximum(x, x[::-1]))
    assert prove_claim(op, KINK_CLAIM, DIMS).verdict == "checked"
    assert prove_claim(op, "vjp[x]", DIMS).verdict in ("proved", "inconclusive")
