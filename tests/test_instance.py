"""A claim at fixed dims outside the op's ladder, proved as an instance of its every-size proof
(``symbolic.every_size.instance``): only a proved-general claim at sizes its statement covers is
`proved` that way; everything else goes down the fixed-dims ladder, which refutes a wrong backward."""
import json

import pytest

from vjpcert.core.certificate import Certificate
from vjpcert.specs import builtin_ops
from vjpcert.specs.mutants.general import SIZE_MUTANTS
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.every_size import instance
from vjpcert.symbolic.every_size.instance import instance_of, prove_instance
from vjpcert.tiers import Planning, tier

OPS = builtin_ops()


@pytest.fixture
def always_route(monkeypatch):
    """Every claim at every size tries the every-size proof first (the threshold is for speed only)."""
    monkeypatch.setattr(tol, "INSTANCE_MIN_RING_TERMS", 0)


def test_a_claim_past_the_ring_s_fast_reach_is_an_instance_of_its_every_size_proof():
    cert = prove_instance(OPS["layernorm"], "dx_orthogonal_to_xhat", {"rows": 1, "n": 128})
    assert (cert.verdict, cert.method, cert.variant) == ("proved", "general-instance", "symbolic")
    ev = cert.evidence
    assert ev["instance_of"]["at"] == {"rows": 1, "n": 128}
    assert ev["instance_of"]["every_size_dims"] == {"n": "n", "rows": "rows"}
    assert ev["every_size"]["tried"] and ev["every_size"]["ring_terms_bound"] >= tol.INSTANCE_MIN_RING_TERMS
    assert "n >= 1 (an integer)" in cert.assumptions and "at n = 128, rows = 1" in cert.assumptions
    assert cert.checker_sha256 == instance.CHECKER_SHA256
    assert Certificate.from_dict(json.loads(cert.to_json())).verdict == "proved"      # a valid record


def test_below_the_threshold_the_ring_proves_it_itself():
    cert = prove_instance(OPS["rmsnorm"], "vjp[gamma]", {"rows": 1, "n": 128})
    assert cert.verdict == "proved" and cert.method.startswith("flint")
    assert cert.evidence["every_size"]["tried"] is False
    assert cert.checker_sha256 == instance.CHECKER_SHA256     # the code that chose the route issued it


@pytest.mark.parametrize("mutant,claim", [("dropped_projection_term", "vjp[x]"),
                                          ("dropped_projection_term", "dx_orthogonal_to_xhat"),
                                          ("dropped_mean_term", "dx_sums_to_zero")])
def test_a_wrong_backward_is_not_an_instance_and_the_ladder_refutes_it(always_route, mutant, claim):
    o = OPS["layernorm"]
    twin = o.with_mutant(next(m for m in o.mutants if m.name == mutant))
    cert = prove_instance(twin, claim, {"rows": 2, "n": 5})
    assert cert.verdict == "failed" and "witness" in cert.evidence, cert.evidence
    assert cert.evidence["every_size"]["tried"] and cert.evidence["every_size"]["verdict"] != "proved-general"


@pytest.mark.parametrize("m", SIZE_MUTANTS, ids=lambda m: m.mutant.name)
def test_a_spec_wrong_only_at_some_sizes_is_never_an_instance(always_route, m):
    """The every-size trace refuses these; at a size where the spec is wrong the ladder refutes it."""
    o = OPS[m.op]
    twin = o.with_mutant(m.mutant)
    dims = m.fixed_dims or {**o.dims[-1]}
    cert = prove_instance(twin, m.claim, dims)
    assert cert.method != "general-instance"
    assert cert.evidence["every_size"]["verdict"] == "inconclusive"
    if m.fixed_dims:
        assert cert.verdict == "failed"


def test_sizes_the_every_size_statement_does_not_state_are_not_instances():
    assert instance_of(OPS["layernorm"], {"rows": 1, "n": 4096}) is None
    why = instance_of(OPS["rope_half"], {"rows": 1, "d": 3})
    assert why is not None and "d = 3" in why
    cert = prove_instance(OPS["softmax"], "max_shift_free", {"rows": 1, "n": 4})    # not an every-size claim
    assert cert.evidence["every_size"] == {"tried": False, "reason": "the op does not prove this claim for every size"}


def test_the_planner_sends_only_every_size_claims_outside_the_op_s_dims():
    op = OPS["softmax"]
    plan = tier("symbolic").plans

    def planned(**kw):
        p = Planning(overrides=kw.get("overrides", {}), large=False, seed=0, budget=None, dps=50,
                     method="central", point=None, fixed_dims=None, general=False, check=lambda *a: None)
        return {(t.claim, dict(t.options).get("method")) for t in plan("softmax", op, p)}

    own = planned()
    assert all(method != "instance" for _, method in own)
    big = planned(overrides={"n": 128})
    assert {c for c, method in big if method == "instance"} == set(op.general)
    assert ("max_shift_free", None) in big
