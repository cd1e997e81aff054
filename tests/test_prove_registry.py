"""Generic tests over the registry: every claim of every built-in op is proved, and every mutant
makes exactly the claims it names fail -- with a witness -- and no others (no false kills)."""
import pytest

from conftest import OPS, by_default, mutants_by_default, op_claims, op_mutants
from vjpcert.core.registry import KINK_CLAIM, SpecError
from vjpcert.core.validate import validate
from vjpcert.symbolic.fixed.prover import prove_claim


@pytest.mark.parametrize("name,claim", by_default(op_claims("monolithic")))
def test_every_claim_is_proved_at_every_default_dims(name, claim, request):
    """At the op's first dims (every dims with --slow)."""
    op = OPS[name]
    for dims in op.dims if request.config.getoption("--slow") else op.dims[:1]:
        cert = prove_claim(op, claim, dims)
        if claim == KINK_CLAIM:        # a convention at exact points on the kinks: checked, never proved
            assert cert.verdict == "checked" and cert.method == "exact-at-kink", (dims, cert.evidence)
            continue
        assert cert.verdict == "proved", (dims, cert.evidence)
        assert cert.method.startswith(("flint-atoms", "sympy")), cert.method   # an exact normalisation
        assert "vacuous" not in cert.evidence, "a proof that both sides are 0 proves nothing"


@pytest.mark.parametrize("name,mutant", mutants_by_default(op_mutants("monolithic")))
def test_mutant_fails_exactly_the_claims_it_names(name, mutant, request):
    """Each claim a mutant names is failed with a witness; with --slow (and in the committed kill
    matrix, `vjpcert mutate`) every other claim is proved too: no false kill."""
    op = OPS[name]
    m = next(m for m in op.mutants if m.name == mutant)
    twin = op.with_mutant(m)
    dims = op.dims[-1]
    if m.refused:                      # bad input: refused before anything is proved
        with pytest.raises(SpecError):
            validate(twin, dims)
        return
    for claim in op.claims():
        if claim not in m.kills and not request.config.getoption("--slow"):
            continue
        cert = prove_claim(twin, claim, dims)
        if claim in m.kills:
            assert cert.verdict == "failed", (claim, cert.verdict, cert.evidence)
            w = cert.evidence["witness"]
            assert (w.get("exact") or float(w["relative"]) > 1e-20) and w["point"], w
        else:
            assert cert.verdict == ("checked" if claim == KINK_CLAIM else "proved"), (claim, cert.verdict)


@pytest.mark.parametrize("name", list(OPS))
def test_every_claim_has_a_negative_control(name):
    op = OPS[name]
    killed = {c for m in op.mutants for c in m.kills}
    if KINK_CLAIM in op.claims() and op.proofs == ("compositional",):
        # a composite's value on its kinks rests on its nodes' (symbolic.composition.compose): its
        # negative controls are theirs, one for each node with a kink
        kinked = {n for n in op.nodes.values() if KINK_CLAIM in n.claims()}
        assert all(any(KINK_CLAIM in m.kills for m in n.mutants) for n in kinked), kinked
        killed.add(KINK_CLAIM)
    assert set(op.claims()) <= killed, f"claims without a mutant: {set(op.claims()) - killed}"
    assert killed <= set(op.claims()), f"mutants name unknown claims: {killed - set(op.claims())}"


def test_witness_replays_exactly(ops):
    """A witness names exact rational inputs: evaluating the mutant there again reproduces it."""
    op = ops["rmsnorm"]
    twin = op.with_mutant(next(m for m in op.mutants if m.name == "eps_outside_sqrt"))
    a = prove_claim(twin, "vjp[x]", op.dims[-1], seed=7).evidence["witness"]
    b = prove_claim(twin, "vjp[x]", op.dims[-1], seed=7).evidence["witness"]
    assert a == b
