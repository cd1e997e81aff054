"""Compositional certificates: every composite claim proved-compositional; every composite mutant
failed by the assembly (wiring) check; and the opaque-node method is sound (a backward evaluated at
the wrong point is caught, even where a point-blind stand-in would pass it)."""
import pytest

from conftest import OPS, op_claims, op_mutants
from vjpcert.symbolic.composition import node_calls, prove_compositional


@pytest.mark.parametrize("name,claim", op_claims("compositional"))
def test_every_composite_claim_is_proved_compositionally(name, claim):
    op = OPS[name]
    cert = prove_compositional(op, claim, op.dims[-1])
    assert cert.verdict == "proved-compositional", cert.evidence
    assert cert.evidence["assembly"]["verdict"] == "proved"
    assert cert.evidence["assembly"]["atoms"].get("opaque", 0) > 0
    assert {n["node"] for n in cert.evidence["nodes"]} == set(op.nodes)
    assert all(n["verdict"].startswith("proved") for n in cert.evidence["nodes"])


@pytest.mark.parametrize("name,mutant", op_mutants("compositional"))
def test_composite_mutants_fail_in_the_assembly(name, mutant):
    op = OPS[name]
    m = next(m for m in op.mutants if m.name == mutant)
    twin = op.with_mutant(m)
    for claim in op.claims():
        cert = prove_compositional(twin, claim, op.dims[-1])
        if claim in m.kills:
            assert cert.verdict == "failed", (claim, cert.evidence)
            assert cert.evidence["witness"]["in"].startswith("assembly")
        elif "wiring_failure" in cert.evidence:
            # wrong wiring that the real nodes happen to forgive (a key bias's cotangent is always 0)
            assert cert.verdict == "inconclusive", (claim, cert.verdict)
        else:
            assert cert.verdict == "proved-compositional", (claim, cert.verdict)


def test_nodes_are_certified_at_the_dims_the_composite_uses():
    calls = node_calls(OPS["vit_block"], {"m": 2, "D": 4, "F": 3})
    assert {d for d, _ in calls["ln1"]} == {(("n", 4), ("rows", 2))}
    assert {d for d, _ in calls["mlp"]} == {(("D", 4), ("F", 3), ("m", 2))}
    assert {s for _, s in calls["attn"]} == {(("heads", 2),)}


def test_a_failing_node_fails_the_composite():
    """A wrong node backward (GELU missing its pdf term) inside the MLP fails it, via the node."""
    mlp = OPS["mlp"]
    gelu = OPS["gelu_erf"]
    bad = gelu.with_mutant(next(m for m in gelu.mutants if m.name == "missing_pdf_term"))
    twin = mlp.with_nodes({**mlp.nodes, "act": bad}, "bad-gelu")
    twin.base_name = "mlp"
    cert = prove_compositional(twin, "vjp[X]", mlp.dims[0])
    assert cert.verdict == "failed" and cert.evidence["node_failure"]["node"] == "act"
    assert cert.evidence["witness"]["in"] == "node act"


def test_opaque_nodes_have_point_dependent_jacobians():
    """The ViT mutant that runs LN2's backward at X instead of Y changes only dgamma2 through the
    point: a stand-in whose Jacobian ignored the point would prove it; the opaque atoms do not."""
    vit = OPS["vit_block"]
    m = next(m for m in vit.mutants if m.name == "ln2_backward_at_block_input")
    cert = prove_compositional(vit.with_mutant(m), "vjp[g2]", vit.dims[0])
    assert cert.verdict == "failed"
