"""The selective state-space scan (``specs/selective_scan.py``): a recurrence with a readout
(``core.recurrence``), proved for every length by induction from its cell's and its readout's claims;
softplus' threshold is a kink whose value on the kink is checked past the transcendentals around it.
A torch reference of the scan: tests/test_frontend_selective_scan.py."""
import numpy as np
import pytest

import vjpcert.core.recurrence as R
from vjpcert.core.backends import F64
from vjpcert.core.errors import SpecError
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.fixed.prover import prove_claim

OPS = builtin_ops()
SCAN, CELL, READOUT = OPS["selective_scan"], OPS["selective_scan_cell"], OPS["selective_scan_readout"]
# vjp[dt] and vjp[dt_bias]: their unrolled instances take the ring's exp split (~30 s). The default run
# keeps one claim through the cell (A, shared) and one through the readout (c, a sequence); the others
# stand on the committed every-size certificates (tests/test_all_verify.py) and run with --slow
DEFAULT_CLAIMS = {"vjp[A]", "vjp[c]"}


def _inputs(rng, T, d, N, *, threshold_crossed=True):
    """Mamba's shapes for one sequence: x, dt, z (T, d); b, c (T, N); A (d, N) negative; D, dt_bias (d,)."""
    dt = rng.standard_normal((T, d))
    if threshold_crossed:
        dt[0, 0] = 25.0                       # one step above softplus' threshold: the linear branch
    return dict(h=rng.standard_normal((d, N)) / 2, x=rng.standard_normal((T, d)), dt=dt,
                b=rng.standard_normal((T, N)), A=-np.exp(rng.standard_normal((d, N))), dt_bias=rng.standard_normal(d) / 4,
                c=rng.standard_normal((T, N)), z=rng.standard_normal((T, d)), D=rng.standard_normal(d))


def test_the_recurrence_reads_its_state_out_and_its_backward_is_both_steps_backwards():
    """With a readout, the output stacks readout(h_t, ...) and bptt runs the readout's backward before
    the cell's; x, which both read, gets both cotangents."""
    rng = np.random.default_rng(0)
    v = _inputs(rng, 5, 3, 2)
    h, ys = v["h"], []
    for t in range(5):
        h = CELL(F64, h, v["x"][t], v["dt"][t], v["b"][t], v["A"], v["dt_bias"])
        ys.append(READOUT(F64, h, v["c"][t], v["x"][t], v["z"][t], v["D"]))
    np.testing.assert_allclose(SCAN(F64, *v.values()), np.stack(ys), rtol=1e-14)
    assert list(SCAN.inputs) == ["h", "x", "dt", "b", "A", "dt_bias", "c", "z", "D"]
    assert SCAN.recurrence.readout is READOUT and SCAN.recurrence.shared == ("A", "dt_bias", "D")
    assert {CELL.vjp, READOUT.vjp} <= set(SCAN._extra_functions)


def test_a_readout_that_does_not_fit_is_refused():
    from vjpcert.core.registry import op

    @op(name="tr_readout_without_state", inputs={"c": ("N",)}, output=("N",), dims=[{"N": 2}])
    def no_state(B, c):
        return c

    @no_state.defvjp
    def _(B, c, dy):
        return (dy,)
    with pytest.raises(SpecError, match="reads the state"):
        R.recurrence(CELL, readout=no_state, carry="h", over=("x", "dt", "b", "c"), name="tr_bad_readout",
                     dims=[{"T": 1, "d": 2, "N": 2}])

    @op(name="tr_readout_other_shape", inputs={"h": ("d", "N"), "x": ("N",)}, output=("d",), dims=[{"d": 2, "N": 2}])
    def other_shape(B, h, x):
        return h @ x

    @other_shape.defvjp
    def _(B, h, x, dy):
        return np.outer(dy, x), h.T @ dy
    with pytest.raises(SpecError, match="one input has one shape"):
        R.recurrence(CELL, readout=other_shape, carry="h", over=("x", "dt", "b"), name="tr_bad_shape_readout",
                     dims=[{"T": 1, "d": 2, "N": 2}])


# ------------------------------------------------------------------------------ every length
@pytest.mark.parametrize("claim", [pytest.param(c, marks=() if c in DEFAULT_CLAIMS else pytest.mark.slow)
                                   for c in SCAN.general])
def test_every_vjp_of_the_scan_is_proved_for_every_length_from_the_cell_s_and_the_readout_s(claim):
    cert = prove_general(SCAN, claim, budget=300)
    ev = cert.evidence
    assert cert.verdict == "proved-general", ev.get("reason")
    assert ev["readout"] == "selective_scan_readout" and "readout's backward at t = 1" in ev["statement"]
    v = claim[4:-1]
    # the state's cotangent passes through both steps; v's own through the steps that read it
    assert set(ev["cell_claims"]) == {"vjp[h]"} | ({claim} if v in CELL.inputs else set())
    assert set(ev["readout_claims"]) == {"vjp[h]"} | ({claim} if v in READOUT.inputs else set())
    assert [i["verdict"] for i in ev["instances"]][:2] == ["proved"] * 2


def test_a_hand_written_loop_over_the_readout_is_not_proved_by_induction_and_a_wrong_one_is_failed():
    m = next(m for m in SCAN.mutants if m.name == "state_cotangent_not_carried_back")
    cert = prove_general(SCAN.with_mutant(m), "vjp[x]", budget=60)
    assert cert.verdict == "failed" and "not the recurrence's own" in cert.evidence["reason"], cert.evidence


# ------------------------------------------------------------------------------ softplus' threshold
def test_the_value_on_the_threshold_is_checked_past_the_exponentials_and_a_wrong_one_is_failed():
    """softplus' kink a = 20 sits beside log(1 + e^a): the kink's argument stays exact, the rest is real
    at 60 digits. [a >= 20] for [a > 20] is right on both sides and 1 - sigmoid(20) = 2e-9 off on it."""
    cert = prove_claim(CELL, "at_the_kink", CELL.dims[-1])
    assert cert.verdict == "checked" and cert.evidence["steps_on_kink"] > 0, cert.evidence
    m = next(m for m in CELL.mutants if m.name == "softplus_threshold_taken_on_the_kink")
    bad = prove_claim(CELL.with_mutant(m), "at_the_kink", CELL.dims[-1])
    w = bad.evidence["witness"]
    assert bad.verdict == "failed" and w["exact"] is False and w["digits"] == 60, bad.evidence
    assert float(w["residual"]) != 0 and w["steps_on_kink"] > 0
    for claim in ("vjp[dt]", "vjp[dt_bias]"):          # off the kink it is the right backward
        assert prove_claim(CELL.with_mutant(m), claim, CELL.dims[-1]).verdict == "proved"
