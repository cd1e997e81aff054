"""Float constants in framework code: read as the reals they round, and a claim that fails only by their
rounding is `inconclusive` with the fit that shows it, never `failed`; a wrong formula still fails."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import optional

from vjpcert.core.registry import SpecError
from vjpcert.core.tolerance import CONSTANT_ROUNDING_ULPS, rounding_fit
from vjpcert.frontends.precision import significant_digits, ulp
from vjpcert.frontends.constants import Constants, constants_shifted, recognise

torch = optional.importorskip("torch")
F = optional.importorskip("torch.nn.functional")

from vjpcert.frontends.pytorch import from_torch  # noqa: E402
from vjpcert.numeric.check import check_claim  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402


def _up(v: float, k: int) -> float:
    for _ in range(k):
        v = math.nextafter(v, math.inf)
    return v


# ------------------------------------------------------------------------------ reading a constant
def test_ulp_and_digits_are_exact():
    for v in (1.0, 0.7598356856515927, 3.0, 1e-300, 0.5, 5e-324):
        assert float(ulp(v)) == math.ulp(v)
    assert ulp(1.0, "float32") == 2 ** -23
    assert significant_digits(Fraction("0.044715")) == 5
    assert significant_digits(Fraction(1000)) == 1


def test_a_computed_rounding_is_read_as_its_real_and_says_how_far():
    # PyTorch's math attention scales q and k by fl(sqrt(fl(1/sqrt(3)))): one ulp from 3^(-1/4)
    words, _, _ = recognise(math.sqrt(1 / math.sqrt(3)))
    assert words.startswith("((1/3))^(1/4)") and "1 ulp from it" in words
    assert recognise(0.7071067811865476)[0] == "sqrt(1/2)"                 # the nearest float: no note
    assert recognise(1 / math.sqrt(3))[0].startswith("sqrt(1/3)")            # JAX's 1/fl(sqrt(3))
    assert recognise(_up(1 / 3, 1))[2] == Fraction(1, 3)


def test_past_the_bound_a_constant_is_its_decimal():
    far = _up(0.7071067811865476, CONSTANT_ROUNDING_ULPS + 2)
    assert recognise(far) is None
    c = Constants("named")
    assert c.read(far) == Fraction(repr(far))
    assert repr(far) in c.rounded                   # a full-precision decimal: the rounding of a real


def test_at_low_precision_the_simplest_real_is_read():
    # 355/113 is pi to 7 digits: sqrt(226/355) is as close to a float32 sqrt(2/pi) as sqrt(2/pi) is
    v = float(np.float32(math.sqrt(2 / math.pi)))
    assert recognise(v, "float32")[0] == "sqrt(2/pi)"
    assert recognise(v) is None                      # not a float64 rounding of anything named


def test_written_decimals_are_not_roundings_and_are_never_shifted():
    c = Constants("decimal")
    for v in (0.044715, 1e-6, 0.5, 0.134145):
        c.read(v)
    assert c.rounded == set()
    with constants_shifted({repr(0.044715): 3}):
        assert Constants("decimal").read(0.044715) == Fraction("0.044715")
    with constants_shifted({repr(0.7978845608028654): 2}):
        moved = Constants("decimal").read(0.7978845608028654)
    assert moved == Fraction(repr(0.7978845608028654)) + 2 * ulp(0.7978845608028654)


def test_a_spec_has_no_rounded_constants_to_shift():
    from vjpcert.specs import builtin_ops
    op = builtin_ops()["gelu_erf"]
    assert op.rounded_constants(op.dims[0]) == []
    with pytest.raises(SpecError, match="no rounded constants"):
        op.constants_shifted({"0.5": 1})


# ------------------------------------------------------------------------------ the fit
def test_the_fit_explains_a_rounding_and_not_a_formula():
    rng = np.random.default_rng(0)
    S = {"a": list(rng.normal(size=8) * 1e-16), "b": list(rng.normal(size=8) * 1e-16)}
    r = [-(0.4 * x + 1.5 * y) for x, y in zip(S["a"], S["b"])]
    fit = rounding_fit(r, S)
    assert fit["explained"] and abs(fit["ulps"]["a"] - 0.4) < 1e-9
    # the same sizes, not a combination of the sensitivities: left standing
    assert not rounding_fit(list(rng.normal(size=8) * 1e-16), S)["explained"]
    # a combination that needs more than the bound: a constant off by more than its rounding
    big = [-(3 * CONSTANT_ROUNDING_ULPS) * x for x in S["a"]]
    assert not rounding_fit(big, S)["explained"]
    assert not rounding_fit([0.0] * 8, S)["explained"]        # nothing to explain: never a pass


# ------------------------------------------------------------------------------ claims
def _gelu(constants, **kw):
    return from_torch(lambda x: F.gelu(x), name="gelu", inputs={"x": ("n",)}, dims=[{"n": 2}],
                      constants=constants, **kw)


def _custom(coef, constants):
    """GELU with a backward whose 1/sqrt(2 pi) is ``coef``."""
    class Gelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            return dy * (0.5 * (1 + torch.erf(x * 0.7071067811865476)) + x * coef * torch.exp(-0.5 * x * x))
    return from_torch(lambda x: Gelu.apply(x), name="gelu_custom", inputs={"x": ("n",)}, dims=[{"n": 2}],
                      constants=constants)


def test_the_custom_control_is_right_with_the_right_constant():
    assert prove_claim(_custom(0.3989422804014327, "named"), "vjp[x]", {"n": 2}).verdict == "proved"


def test_named_is_the_default_and_proves_pytorch_gelu():
    op = from_torch(lambda x: F.gelu(x), name="gelu", inputs={"x": ("n",)}, dims=[{"n": 2}])
    assert op.constants == "named"
    cert = prove_claim(op, "vjp[x]", {"n": 2})
    assert cert.verdict == "proved"
    assert any("0.3989422804014327 as sqrt((1/2)/pi)" in a for a in cert.assumptions)


def test_a_decimal_reading_that_fails_only_by_rounding_is_inconclusive_with_the_fit():
    op = _gelu("decimal")
    cert = prove_claim(op, "vjp[x]", {"n": 2})
    assert (cert.verdict, cert.method) == ("inconclusive", "constant-rounding")
    fit = cert.evidence["constant_fit"]
    assert set(fit["ulps"]) == {"0.3989422804014327", "0.7071067811865476"}
    assert all(abs(v) <= CONSTANT_ROUNDING_ULPS for v in fit["ulps"].values())
    assert cert.evidence["witness"]["relative"]          # the disagreement is shown, not hidden
    assert "--constants named" in cert.evidence["reason"]
    num = check_claim(op, "vjp[x]", {"n": 2})
    assert num.verdict == "inconclusive" and "constant_fit" in num.evidence


@pytest.mark.parametrize("constants", ["named", "decimal"])
def test_a_wrong_backward_still_fails_with_a_witness(constants):
    op = _custom(2 * 0.3989422804014327, constants)
    for cert in (prove_claim(op, "vjp[x]", {"n": 2}), check_claim(op, "vjp[x]", {"n": 2})):
        assert cert.verdict == "failed" and cert.evidence["witness"]


@pytest.mark.parametrize("constants", ["named", "decimal"])
def test_a_constant_off_by_more_than_its_rounding_still_fails(constants):
    """1/sqrt(2 pi) moved 3x the bound in ulps: not a rounding of anything named, and no fit within the
    bound cancels it, whichever reading."""
    op = _custom(_up(0.3989422804014327, 3 * CONSTANT_ROUNDING_ULPS), constants)
    assert prove_claim(op, "vjp[x]", {"n": 2}).verdict == "failed"
    assert check_claim(op, "vjp[x]", {"n": 2}).verdict == "failed"


def test_pytorch_attention_at_an_odd_head_width_matches_its_spec_by_default():
    from vjpcert.specs import builtin_ops
    spec = builtin_ops()["attention"]
    op = from_torch(lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V), name="sdpa", spec=spec,
                    dims=[{"m": 2, "d": 3}])
    cert = prove_claim(op, "matches_spec[attention]", {"m": 2, "d": 3})
    assert cert.verdict == "proved"
    assert any("as ((1/3))^(1/4) (1 ulp from it" in a for a in cert.assumptions)
