"""The gated delta rule (``specs/gated_delta_rule.py``): the paper's recurrence (Gated DeltaNet, state as
d_v x d_k: S_t = S_(t-1) alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t) in float64,
its VJPs proved for every length by induction from the cell's and the readout's, and its law -- a
key written at full strength recalls its value -- proved exactly and refuted for a forward that
writes without erasing."""
import numpy as np
import pytest

from vjpcert.core.backends import F64
from vjpcert.core.spec_array import plain
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.fixed.prover import prove_claim

OPS = builtin_ops()
RULE, CELL, READOUT = OPS["gated_delta_rule"], OPS["gated_delta_cell"], OPS["gated_delta_readout"]
LAW = "a_key_written_at_full_strength_recalls_its_value"


def test_the_spec_is_the_paper_s_recurrence_in_its_own_layout():
    rng = np.random.default_rng(0)
    T, h, dk, dv = 9, 2, 4, 3
    S0, k, v, q = (rng.standard_normal(s) for s in ((h, dk, dv), (T, h, dk), (T, h, dv), (T, h, dk)))
    alpha, beta = rng.uniform(0.5, 1, (T, h)), rng.uniform(0, 1, (T, h))
    want = np.empty((T, h, dv))
    for head in range(h):
        S = S0[head].T                                           # the paper's d_v x d_k state
        for t in range(T):
            kt = k[t, head][:, None]
            S = S @ (alpha[t, head] * (np.eye(dk) - beta[t, head] * kt @ kt.T)) + beta[t, head] * v[t, head][:, None] @ kt.T
            want[t, head] = S @ q[t, head]
    np.testing.assert_allclose(plain(RULE(F64, S0, k, v, alpha, beta, q)), want, rtol=1e-12)


# the default run keeps the state (through both steps) and the query (the readout's own); the others
# stand on the committed every-size certificates (tests/test_all_verify.py) and run with --slow
@pytest.mark.parametrize("claim", [pytest.param(c, marks=() if c in ("vjp[S]", "vjp[q]") else pytest.mark.slow)
                                   for c in sorted(RULE.general)])
def test_every_vjp_is_proved_for_every_length_from_the_cell_s_and_the_readout_s(claim):
    cert = prove_general(RULE, claim, budget=120)
    ev = cert.evidence
    assert cert.verdict == "proved-general", ev.get("reason")
    assert cert.dims == {"T": "T", "h": "h", "dk": "dk", "dv": "dv"} and "T >= 1" in cert.assumptions
    v = claim[4:-1]
    assert set(ev["cell_claims"]) == {"vjp[S]"} | ({claim} if v in CELL.inputs else set())
    assert set(ev["readout_claims"]) == {"vjp[S]"} | ({claim} if v in READOUT.inputs else set())


def test_a_key_written_at_full_strength_recalls_its_value_and_a_rule_that_does_not_erase_is_refuted():
    for dims in RULE.dims:
        assert prove_claim(RULE, LAW, dims).verdict == "proved", dims
    m = next(m for m in RULE.mutants if m.name == "writes_without_erasing")
    cert = prove_claim(RULE.with_mutant(m), LAW, RULE.dims[-1])
    assert cert.verdict == "failed" and cert.evidence["witness"], cert.evidence
