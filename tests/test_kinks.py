"""The kink of the spec language, B.step ([a > 0]) and B.relu = a step(a): proved on every open region
of the kinks' signs by the exact ring (each step a free Boolean, s^2 = s, step(-a) = 1 - step(a),
step(c a) = step(a) for c > 0, and a - c > 0 implying a > 0), checked mod p at production dims, kept
at a distance by the numeric tier's samples, and -- separately, on the kink itself -- held to the
convention relu'(0) = 0 by the claim at_the_kink. Each piece has its control."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np

from vjpcert.core.backends import F32, F64
from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.evaluate import QField
from vjpcert.core.registry import KINK_CLAIM, op
from vjpcert.core.rounding import RoundingBackend
from vjpcert.numeric import settings as numeric_tol
from vjpcert.numeric.check import check_claim, numeric_claims
from vjpcert.numeric.sampling import kink_distance, sample_point
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.fixed import fields
from vjpcert.symbolic.fixed.claims import trace_claim
from vjpcert.symbolic.fixed.kinks import kink_roots
from vjpcert.symbolic.fixed.prover import prove_claim

from optional import imported

check_modular = imported("vjpcert.symbolic.modular.check", "check_modular")   # its Numba loops: at first use

ROWS = {"x": ("rows", "n")}
DIMS = {"rows": 2, "n": 3}


def _elementwise(name, forward, backward):
    f = op(name=name, inputs=ROWS, output=("rows", "n"), dims=[DIMS])(forward)
    f.defvjp(backward)
    return f


def _linear(name, backward):
    f = op(name=name, inputs={"x": ("rows", "n"), "w": ("n", "m")}, output=("rows", "m"),
           dims=[{"rows": 2, "n": 3, "m": 2}])(lambda B, x, w: B.relu(x @ w))
    f.defvjp(backward)
    return f


def _right_linear(B, x, w, dy):
    g = dy * B.step(x @ w)
    return g @ w.T, x.T @ g


def _other_region_linear(B, x, w, dy):
    g = dy * B.step(-(x @ w))
    return g @ w.T, x.T @ g


# ------------------------------------------------------------------ the exact tier, region by region
def test_a_relu_layer_is_proved_on_each_region_and_says_so():
    f = _linear("kk_relu_linear", _right_linear)
    for claim in ("vjp[x]", "vjp[w]"):
        cert = prove_claim(f, claim, {"rows": 2, "n": 3, "m": 2})
        assert cert.verdict == "proved", cert.evidence
        assert "on each region" in cert.evidence["regions"]
        assert cert.evidence["atoms"] == {"step": 4}


def test_the_mask_of_the_other_region_fails_with_an_exact_witness():
    f = _linear("kk_relu_linear_wrong", _other_region_linear)
    cert = prove_claim(f, "vjp[x]", {"rows": 2, "n": 3, "m": 2})
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"]


def test_a_kink_moved_by_a_constant_is_not_the_same_kink():
    """relu(x - 1) with the mask of x: wrong on 0 < x < 1 only (a region a proof over independent
    regions must not merge with its neighbours)."""
    f = _elementwise("kk_shifted_kink", lambda B, x: B.relu(x - 1), lambda B, x, dy: (dy * B.step(x),))
    assert prove_claim(f, "vjp[x]", DIMS).verdict == "failed"


def test_a_positive_factor_and_a_sign_are_read_off_the_kink():
    """step(2x) is step(x), step(-x) is 1 - step(x): a backward spelled either way is the same."""
    f = _elementwise("kk_scaled", lambda B, x: B.relu(2 * x) / 2, lambda B, x, dy: (dy * (1 - B.step(-x)),))
    assert prove_claim(f, "vjp[x]", DIMS).verdict == "proved"


def _relu6(name):
    return _elementwise(name, lambda B, x: B.relu(x) - B.relu(x - B.c(6)),
                        lambda B, x, dy: (dy * B.step(x) * B.step(B.c(6) - x),))


def test_two_kinks_of_one_argument_are_ordered():
    """relu6's backward dy step(x) step(6 - x) is its derivative only because x > 6 implies x > 0."""
    assert prove_claim(_relu6("kk_relu6"), "vjp[x]", DIMS).verdict == "proved"


def test_without_their_order_two_kinks_are_never_a_failure(monkeypatch):
    """The control: with the implication x - 6 > 0 => x > 0 gone, the sign pattern (x > 6, x < 0) is a
    region too and the claim is not proved there -- and no real point refutes it."""
    monkeypatch.setattr(fields.RingField, "step_implications", lambda self: [])
    cert = prove_claim(_relu6("kk_relu6_unordered"), "vjp[x]", DIMS)
    assert cert.verdict == "inconclusive", cert.evidence


def _mask_law(name):
    f = _elementwise(name, lambda B, x: B.relu(x), lambda B, x, dy: (dy * B.step(x),))

    @f.law
    def gradient_is_a_mask(B, x, backward):
        (d,) = backward(x, dy=x * 0 + 1)
        return d * d, d
    return f


def test_a_step_is_boolean():
    assert prove_claim(_mask_law("kk_mask"), "gradient_is_a_mask", DIMS).verdict == "proved"


def test_without_s_squared_equals_s_a_boolean_identity_is_not_proved(monkeypatch):
    monkeypatch.setattr(fields.RingField, "_split_bool", lambda self, poly, var: [poly])
    cert = prove_claim(_mask_law("kk_mask_free"), "gradient_is_a_mask", DIMS)
    assert cert.verdict != "proved"


# ------------------------------------------------------------------ on the kink itself
def test_the_gradient_at_zero_is_held_to_the_convention():
    """A [x >= 0] backward is right on every open region (proved) and wrong on the kink: at_the_kink
    fails it at an exact point on the kink; the right one is checked there."""
    ge = _elementwise("kk_ge", lambda B, x: B.relu(x), lambda B, x, dy: (dy * (1 - B.step(-x)),))
    gt = _elementwise("kk_gt", lambda B, x: B.relu(x), lambda B, x, dy: (dy * B.step(x),))
    assert KINK_CLAIM in ge.claims()
    assert prove_claim(ge, "vjp[x]", DIMS).verdict == "proved"
    cert = prove_claim(ge, KINK_CLAIM, DIMS)
    assert cert.verdict == "failed", cert.evidence
    w = cert.evidence["witness"]
    assert w["exact"] and w["J^T dy"] == "0" and w["backward"] != "0"
    ok = prove_claim(gt, KINK_CLAIM, DIMS)
    assert ok.verdict == "checked" and ok.evidence["steps_on_kink"] > 0, ok.evidence
    assert "relu'(0) = step(0) = 0" in ok.evidence["convention"]


def _tie_value(name, factor):
    """relu with ``factor`` * dy on the kink (exactly where x = 0: 1 - step(x) - step(-x))."""
    return _elementwise(name, lambda B, x: B.relu(x),
                        lambda B, x, dy: (dy * (B.step(x) + factor * (1 - B.step(x) - B.step(-x))),))


def test_the_one_sided_interval_tells_another_convention_from_no_derivative_at_all():
    """On the kink, relu's one-sided derivatives are 0 and 1: a backward giving dy/2 there (JAX's tie
    split) misses PyTorch's convention but is within their interval; one giving 2 dy is outside it,
    no branch of the function has it. Both fail, and the witness says which; the right backward is
    checked, with the interval bounded at every point that met a kink."""
    half = prove_claim(_tie_value("kk_half", Fraction(1, 2)), KINK_CLAIM, DIMS)
    assert half.verdict == "failed", half.evidence
    w = half.evidence["witness"]
    assert w["one_sided"]["within"] is True and "another convention" in w["one_sided"]["in_words"], w
    assert Fraction(w["backward"]) == Fraction(w["one_sided"]["interval"][1]) / 2 or \
        Fraction(w["backward"]) == Fraction(w["one_sided"]["interval"][0]) / 2, w
    twice = prove_claim(_tie_value("kk_twice", 2), KINK_CLAIM, DIMS)
    assert twice.verdict == "failed", twice.evidence
    w = twice.evidence["witness"]
    assert w["one_sided"]["within"] is False and "outside" in w["one_sided"]["in_words"], w
    ok = prove_claim(_tie_value("kk_zero", 0), KINK_CLAIM, DIMS)
    assert ok.verdict == "checked", ok.evidence
    assert ok.evidence["one_sided"]["points_bounded"] > 0


class _OtherSide(QField):
    """Exact rationals with every step on its kink taking the other branch, 1."""

    def step(self, a):
        return Fraction(1) if a >= 0 else Fraction(0)


def test_the_interval_encloses_both_branches_of_every_kink():
    """The enclosure is sound: J^T dy with the steps on their kinks at 0 (the convention) and at 1
    (the other branch) lies inside it, component by component, for ops whose kinks sit at 0, at an
    offset, on ties and behind a kink of a kink."""
    from vjpcert.symbolic.fixed.kinks import _one_sided, _point
    ops = builtin_ops()
    cases = [("relu", DIMS), ("relu6", DIMS), ("huber", DIMS), ("max_pool2d", {"N": 1, "C": 1, "Ho": 1, "Wo": 1})]
    rng = random.Random(3)
    seen = 0
    for name, dims in cases:
        claim = trace_claim(ops[name], "vjp[" + next(iter(ops[name].inputs)) + "]", dims)
        for _ in range(6):
            point = _point(claim.leaves(), rng, small=True)
            enclosure = _one_sided(claim, point)
            if enclosure is None:
                continue
            for field in (QField(point), _OtherSide(point)):
                for (_, b), (lo, hi) in zip(claim.components(field), enclosure):
                    assert lo <= b <= hi, (name, point, b, lo, hi)
                    seen += 1
    assert seen > 100


def test_a_kink_away_from_zero_is_met_at_its_root():
    """relu6's upper kink sits at x = 6, where no draw from {-1, 0, 1} or of 0 lands: the sampler finds
    the root of the step's argument (affine in one input) and puts inputs on it, so a backward that
    passes the gradient at x = 6 fails there -- with the input at 6 in the witness."""
    relu6 = builtin_ops()["relu6"]
    ok = prove_claim(relu6, KINK_CLAIM, DIMS)
    assert ok.verdict == "checked", ok.evidence
    wrong = relu6.with_mutant(next(m for m in relu6.mutants if m.name == "difference_of_steps"))
    assert prove_claim(wrong, "vjp[x]", DIMS).verdict == "proved"          # right on every region
    cert = prove_claim(wrong, KINK_CLAIM, DIMS)
    assert cert.verdict == "failed", cert.evidence
    w = cert.evidence["witness"]
    assert w["point"][w["component"]] == "6" and w["J^T dy"] == "0"


def test_the_roots_are_found_only_for_an_argument_affine_in_an_input():
    """x - 6 has the root 6 in its input; x[0] + x[1] has a root in each input with the other held at
    the base point (and there the argument is exactly 0); x * x - 4 is affine in nothing: no root (a
    point there would be a guess)."""
    shifted = _elementwise("kk_roots_shifted", lambda B, x: B.relu(x - 6), lambda B, x, dy: (dy * B.step(x - 6),))
    pair = _elementwise("kk_roots_pair", lambda B, x: B.relu(x + x[::-1]), lambda B, x, dy: (0 * dy,))
    square = _elementwise("kk_roots_square", lambda B, x: B.relu(x * x - 4),
                          lambda B, x, dy: (dy * 2 * x * B.step(x * x - 4),))
    claim = trace_claim(shifted, "vjp[x]", DIMS)
    _, roots, moving = kink_roots(claim, claim.leaves(), random.Random(0))
    assert len(roots) == 6 and all(v == [6] for v in roots.values()) and moving
    claim = trace_claim(pair, "vjp[x]", DIMS)
    base, roots, _ = kink_roots(claim, claim.leaves(), random.Random(0))
    assert len(roots) == 6
    leaf, (root,) = next((k, v) for k, v in roots.items() if k.index == (0, 0))
    other = next(k for k in base if k.owner == "x" and k.index == (1, 0))
    assert root + base[other] == 0
    claim = trace_claim(square, "vjp[x]", DIMS)
    _, roots, moving = kink_roots(claim, claim.leaves(), random.Random(0))
    assert roots == {} and moving          # its kinks move with x, and no point can be placed on them


def test_an_op_without_a_kink_has_no_kink_claim():
    assert KINK_CLAIM not in builtin_ops()["gelu_erf"].claims()
    assert KINK_CLAIM in builtin_ops()["relu"].claims()


def test_the_numeric_tier_leaves_the_kink_to_the_exact_tier():
    assert KINK_CLAIM not in numeric_claims(builtin_ops()["relu"])


# ------------------------------------------------------------------ the other interpreters
def test_mod_p_a_relu_layer_is_checked_at_production_dims_and_the_other_region_fails():
    dims = {"rows": 16, "n": 64, "m": 32}
    right = check_modular(_linear("kk_mod_relu", _right_linear), "vjp[x]", dims)
    assert right.verdict == "checked-probabilistic", right.evidence
    wrong = check_modular(_linear("kk_mod_relu_wrong", _other_region_linear), "vjp[x]", dims)
    assert wrong.verdict == "failed" and wrong.evidence["witness"]["real_point"]["confirmed"]


def test_the_numeric_tier_samples_away_from_the_kink():
    relu = builtin_ops()["relu"]
    at = {"x": np.array([[0.0, 1.0, -2.0]])}
    assert kink_distance(relu, at) == 0.0
    assert kink_distance(builtin_ops()["gelu_erf"], at) == float("inf")
    point = sample_point(relu, {"rows": 3, "n": 7}, "random", seed=0)
    assert kink_distance(relu, point) >= numeric_tol.KINK_MIN_DISTANCE
    assert np.abs(point["x"]).min() >= numeric_tol.KINK_MIN_DISTANCE


def test_the_every_size_tier_proves_a_kink_region_by_region():
    """Each step a Step atom of the every-size normal form (s^2 = s, Step(-a) = 1 - Step(a), a
    positive factor read off): a relu layer's backward is proved for every size; the mask of the other
    side, or of a shifted kink, is not."""
    right = _elementwise("kk_general", lambda B, x: B.relu(x), lambda B, x, dy: (dy * (1 - B.step(-2 * x)),))
    right.every_size("vjp[x]")
    assert prove_general(right, "vjp[x]", budget=30).verdict == "proved-general"
    for name, wrong in (("other_side", lambda B, x, dy: (dy * B.step(-x),)),
                        ("shifted", lambda B, x, dy: (dy * B.step(x - 1),))):
        f = _elementwise(f"kk_general_{name}", lambda B, x: B.relu(x), wrong)
        f.every_size("vjp[x]")
        assert prove_general(f, "vjp[x]", budget=30).verdict in ("failed", "inconclusive"), name


def test_without_s_squared_equals_s_the_every_size_tier_proves_no_mask_law(monkeypatch):
    """The control of the Boolean relation: relu's gradient_is_a_mask (d^2 = d) needs Step^2 = Step."""
    from vjpcert.symbolic.every_size.normal import Normaliser
    relu = builtin_ops()["relu"]
    assert prove_general(relu, "gradient_is_a_mask", budget=30).verdict == "proved-general"
    monkeypatch.setattr(Normaliser, "_reduce_indicators", lambda self, num: num)
    assert prove_general(relu, "gradient_is_a_mask", budget=30, seed=1).verdict != "proved-general"


def test_floats_give_the_convention_on_the_kink_in_their_own_dtype():
    for B in (F64, F32):
        out = B.step(np.array([-1.0, 0.0, 2.0], dtype=B.dtype))
        assert out.dtype == B.dtype and out.tolist() == [0.0, float(STEP_AT_KINK), 1.0]


def test_the_float_references_are_held_to_the_convention_on_the_kinks(monkeypatch):
    """The numeric tier's float references take the case ``on_kinks`` on purpose (exact zeros, ties),
    against the spec's exact value there. Control: a float backend whose step is [a >= 0] agrees
    with the spec on every point away from the kinks and fails on them, in that case only."""
    from vjpcert.numeric.reference import check_reference
    relu, dims = builtin_ops()["relu"], {"rows": 2, "n": 3}
    ok = check_reference(relu, dims)
    assert ok.verdict == "checked" and "on_kinks" in ok.evidence["cases"], ok.evidence
    for B in (F64, F32):
        monkeypatch.setattr(B, "step", B._checked(lambda a, B=B: (a >= 0).astype(B.dtype)))
    wrong = check_reference(relu, dims)
    assert wrong.verdict == "failed" and wrong.evidence["witness"]["case"] == "on_kinks", wrong.evidence
    assert check_reference(relu, dims, cases=("random",), point=None).evidence["witness"]["case"] == "on_kinks"


def test_an_op_that_leaves_the_rationals_on_its_kinks_skips_that_case_and_says_why():
    from vjpcert.numeric.reference import check_reference
    block = builtin_ops()["inverted_residual"]
    cert = check_reference(block, block.resolve_dims(block.dims[0]))
    assert cert.verdict == "checked" and "on_kinks" not in cert.evidence["cases"]
    assert "leaves the rationals" in cert.evidence["cases_skipped"]["on_kinks"]


def test_the_rounding_model_bounds_a_step_whose_sign_the_bound_cannot_decide():
    """Exact where the running bound decides the argument's sign; off by up to 1 where it does not
    (the exact argument and the computed one may lie on two sides of the kink)."""
    from vjpcert.core.rounding import Rounded
    R = RoundingBackend(np.float32)
    assert R.step1(Rounded(1e-3, 1e-6, R)).e == 0.0 and R.step1(Rounded(-1e-3, 1e-6, R)).e == 0.0
    assert R.step1(Rounded(1e-9, 1e-6, R)).e == 1.0 and R.step1(Rounded(-1e-9, 1e-6, R)).e == 1.0


# ------------------------------------------------------------------ max-pooling: ties
def _pool_mutant(name):
    pool = builtin_ops()["max_pool2d"]
    return pool.with_mutant(next(m for m in pool.mutants if m.name == name))


def test_max_pooling_routes_a_tie_to_the_first_index_and_nothing_else_passes_the_tie():
    """Every tied maximum, or the last one, is the max-pool gradient on every region of the taps'
    order (proved) and wrong on a tie: at_the_kink fails both with an exact witness."""
    dims = {"N": 1, "C": 1, "Ho": 1, "Wo": 1}
    pool = builtin_ops()["max_pool2d"]
    assert prove_claim(pool, KINK_CLAIM, dims).verdict == "checked"
    for name in ("gradient_to_every_tied_index", "tie_to_the_last_index"):
        wrong = _pool_mutant(name)
        assert prove_claim(wrong, "vjp[x]", dims).verdict == "proved"
        cert = prove_claim(wrong, KINK_CLAIM, dims)
        assert cert.verdict == "failed" and cert.evidence["witness"]["exact"], (name, cert.evidence)


def test_a_case_with_no_point_away_from_the_kinks_is_skipped_and_named():
    """A near-constant image under max-pooling is ties everywhere: the numeric tier checks the other
    cases and says which it skipped, rather than refusing the op."""
    pool = builtin_ops()["max_pool2d"]
    cert = check_claim(pool, "vjp[x]", pool.check_dims)
    assert cert.verdict == "checked", cert.evidence
    assert "near_constant" in cert.evidence["cases_skipped"]
    assert "near_constant" not in cert.evidence["cases"]


def test_mpmath_does_not_guess_the_sign_of_a_rounding_residue():
    """A step whose argument is 0 in the reals comes out of mpmath as a residue of about eps, of
    either sign: the field refuses to decide it (the witness then resamples, and finds no witness)."""
    import pytest

    from vjpcert.core.evaluate import MpField, SignUndecided
    F = MpField(50, {})
    residue = F.const(Fraction(1, 3)) * 3 - 1
    with pytest.raises(SignUndecided):
        F.step(residue + F.ctx.mpf(10) ** -40)
    assert F.step(F.const(Fraction(1, 10**20))) == 1 and F.step(F.const(-1)) == STEP_AT_KINK


def test_a_kink_of_a_kink_is_split_on_the_inner_one():
    """relu6(relu6(x)) = relu6(x): the outer steps' arguments hold the inner steps (Booleans), and
    step(a) = s step(a|s=1) + (1 - s) step(a|s=0) decides it; a law off by one inside fails, and
    without the split the law is not proved."""
    import pytest

    relu6 = builtin_ops()["relu6"]
    assert prove_claim(relu6, "clamps_once", DIMS).verdict == "proved"
    f = _elementwise("kk_nested_wrong", relu6.forward, relu6.vjp)

    @f.law
    def off_by_one_inside(B, x, forward):
        return forward(forward(x) + 1), forward(x)
    assert prove_claim(f, "off_by_one_inside", DIMS).verdict == "failed"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fields, "MAX_STEP_SPLITS", 0)
        assert prove_claim(relu6, "clamps_once", DIMS).verdict != "proved"


def _doubled(name, node):
    f = op(name=name, inputs=ROWS, output=("rows", "n"), dims=[DIMS], nodes={"act": node},
           proofs=("compositional",))(lambda B, x, nodes: 2 * nodes.act(x))
    f.defvjp(lambda B, x, dy, nodes: nodes.act.vjp(x, 2 * dy))
    return f


def test_a_composite_meets_the_convention_on_its_kinks_through_its_nodes():
    """A composite's value on a kink rests on its nodes': the wiring proved and every node with a kink
    checked there. A node whose backward passes the gradient at 0 leaves the composite unchecked,
    naming the node."""
    from vjpcert.symbolic.composition.compose import prove_compositional
    relu = builtin_ops()["relu"]
    cert = prove_compositional(_doubled("kk_comp_relu", relu), KINK_CLAIM, DIMS)
    assert cert.verdict == "checked" and cert.evidence["nodes"][0]["verdict"] == "checked", cert.evidence
    ge = _elementwise("kk_comp_ge", lambda B, x: B.relu(x), lambda B, x, dy: (dy * (1 - B.step(-x)),))
    cert = prove_compositional(_doubled("kk_comp_ge_outer", ge), KINK_CLAIM, DIMS)
    assert cert.verdict == "inconclusive" and "act" in cert.evidence["reason"], cert.evidence


def test_a_kink_check_whose_probes_met_a_pole_is_not_checked(monkeypatch):
    """Which steps must meet their kinks is learnt by probing around a random base point; where that
    point is a pole of the claim, no one knows, and the check cannot say every kink was met."""
    from vjpcert.symbolic.fixed import kinks
    relu = builtin_ops()["relu"]
    assert kinks.at_the_kink(relu, DIMS)["status"] == "checked"
    monkeypatch.setattr(kinks, "kink_roots", lambda claim, leaves, rng: (kinks._point(leaves, rng, False), {}, None))
    out = kinks.at_the_kink(relu, DIMS)
    assert out["status"] == "unmet" and "pole" in str(out["unmet"])
