"""Kinks in framework code: an order comparison of input-dependent numbers is made of the spec
language's kink, B.step ([x > y] = step(x - y), [x = y] = 1 - step(x - y) - step(y - x)), so
torch.relu, relu6, hardtanh, leaky_relu, abs, maximum, clamp and torch.where(x > 0, ...) are proved
from PyTorch's own backward on every region, and held on the kink itself to the derivative of their
forward (PyTorch's conventions: relu'(0) = 0, a maximum's tie split in half). A hand-written mask
x >= 0 is proved on every region and fails on the kink; the mask of the other side fails outright."""
from __future__ import annotations

import pytest

import optional

torch = optional.importorskip("torch")
F = optional.importorskip("torch.nn.functional")
models = optional.importorskip("torch_models")

from vjpcert.core.registry import KINK_CLAIM  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402
check_modular = optional.imported("vjpcert.symbolic.modular.check", "check_modular")   # its Numba loops: at first use

DIMS = {"rows": 2, "n": 3}
X = {"x": ("rows", "n")}

KINKED = {        # each a lambda: reading F or torch here would import PyTorch at collection
    "relu": lambda x: F.relu(x),
    "relu6": lambda x: F.relu6(x),
    "hardtanh": lambda x: F.hardtanh(x),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.25),
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "abs": lambda x: torch.abs(x),
    "clamp": lambda x: torch.clamp(x, min=0.0),
    "where": lambda x: torch.where(x > 0, x, 2 * x),
    "maximum_of_two": lambda x: torch.maximum(x, x.flip(-1)),
}


@pytest.mark.parametrize("name", sorted(KINKED))
def test_a_kink_in_pytorch_is_proved_on_each_region_and_checked_on_the_kink(name):
    op = from_torch(KINKED[name], name=f"fk_{name}", inputs=X, dims=[DIMS])
    assert KINK_CLAIM in op.claims()
    cert = prove_claim(op, "vjp[x]", DIMS)
    assert cert.verdict == "proved", cert.evidence
    assert "on each region" in cert.evidence["regions"]
    kink = prove_claim(op, KINK_CLAIM, DIMS)
    assert kink.verdict == "checked" and kink.evidence["steps_on_kink"] > 0, kink.evidence


def test_a_mask_written_x_ge_0_is_right_on_every_region_and_wrong_on_the_kink():
    op = from_torch(models.ReluMaskGE.apply, name="fk_mask_ge", inputs=X, dims=[DIMS])
    assert prove_claim(op, "vjp[x]", DIMS).verdict == "proved"
    cert = prove_claim(op, KINK_CLAIM, DIMS)
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"], cert.evidence
    good = from_torch(models.ReluMaskGT.apply, name="fk_mask_gt", inputs=X, dims=[DIMS])
    assert prove_claim(good, KINK_CLAIM, DIMS).verdict == "checked"


def test_the_mask_of_the_other_side_fails_with_an_exact_witness():
    op = from_torch(models.ReluMaskOtherSide.apply, name="fk_mask_other", inputs=X, dims=[DIMS])
    cert = prove_claim(op, "vjp[x]", DIMS)
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"]


def test_a_relu_mlp_module_is_proved_and_checked_mod_p_at_production_dims():
    op = from_torch(models.ReluMLP, init={"dim": "D", "hidden": "H"}, inputs={"x": ("rows", "D")},
                    dims=[{"rows": 2, "D": 2, "H": 3}], modular_dims=[{"rows": 16, "D": 64, "H": 256}])
    for claim in ("vjp[x]", "vjp[up_weight]"):
        assert prove_claim(op, claim, {"rows": 2, "D": 2, "H": 3}).verdict == "proved"
    assert check_modular(op, "vjp[x]", op.modular_dims[0]).verdict == "checked-probabilistic"


def test_a_comparison_with_minus_infinity_entries_is_still_refused():
    from vjpcert.core.registry import SpecError
    with pytest.raises(SpecError, match="-inf"):
        op = from_torch(lambda x: torch.where(x + torch.full_like(x, float("-inf")) > 0, x, x), name="fk_inf",
                        inputs=X, dims=[DIMS])
        prove_claim(op, "vjp[x]", DIMS)
