"""Compositional certificates: every composite claim proved-compositional, at its small dims and at
realistic ones, resting node by node on every-size proofs; every composite mutant failed by the
wiring check; and the wiring is sound: a node's VJP called at another point than its forward -- an
argument, a non-differentiable input or a parameter that differs -- is caught and named."""
import pytest

from conftest import OPS, by_default, mutants_by_default, op_claims, op_mutants
from vjpcert.symbolic.composition.compose import prove_compositional
from vjpcert.symbolic.composition.wiring import node_signatures, prove_wiring


# The composites whose first claim the default run proves whole (a block's is 5-20 s); every composite's
# standing mutant is failed in the wiring below by default, and --slow proves every claim of every one.
DEFAULT_COMPOSITES = ("mlp", "rotary_attention", "lm_loss_head")


@pytest.mark.parametrize("name,claim", [p if p.values[0] in DEFAULT_COMPOSITES else
                                        pytest.param(*p.values, marks=pytest.mark.slow)
                                        for p in by_default(op_claims("compositional"))])
def test_every_composite_claim_is_proved_compositionally(name, claim):
    op = OPS[name]
    cert = prove_compositional(op, claim, op.dims[-1])
    assert cert.verdict == "proved-compositional", cert.evidence
    assert cert.evidence["wiring"]["status"] == "proved" and cert.evidence["wiring"]["words"] >= 1
    assert {n["node"] for n in cert.evidence["nodes"]} == set(op.nodes)
    assert all(n["verdict"].startswith("proved") and len(n["digest"]) == 64 for n in cert.evidence["nodes"])


@pytest.mark.parametrize("name,mutant", mutants_by_default(op_mutants("compositional")))
def test_composite_mutants_fail_in_the_wiring(name, mutant, request):
    """Every claim a mutant kills is failed in the wiring; with --slow, every other claim of the
    composite is checked too (proved, or inconclusive where the real nodes forgive the wiring)."""
    op = OPS[name]
    m = next(m for m in op.mutants if m.name == mutant)
    twin = op.with_mutant(m)
    for claim in op.claims():
        if not claim.startswith("vjp[") or (claim not in m.kills and not request.config.getoption("--slow")):
            continue
        cert = prove_compositional(twin, claim, op.dims[-1])
        if claim in m.kills:
            assert cert.verdict == "failed", (claim, cert.evidence)
            assert cert.evidence["witness"]["in"] == "the wiring"
        elif "wiring_failure" in cert.evidence:
            # wrong wiring that the real nodes happen to forgive (a key bias's cotangent is always 0)
            assert cert.verdict == "inconclusive", (claim, cert.verdict)
        else:
            assert cert.verdict == "proved-compositional", (claim, cert.verdict)


@pytest.mark.slow
def test_the_vit_block_at_realistic_dims_rests_on_every_size_node_proofs():
    """m = 16 tokens, width 64, 4 heads, MLP width 256: the wiring is proved directly at that size
    and every node's claims rest on proved-general certificates, cited by digest."""
    vit = OPS["vit_block"]
    dims = {"m": 16, "D": 64, "F": 256}
    cert = prove_compositional(vit, "vjp[X]", dims)
    assert cert.verdict == "proved-compositional", cert.evidence
    assert cert.dims == dims
    leaves = cert.evidence["nodes"]
    assert {n["node"] for n in leaves} == {"ln1", "attn", "ln2", "mlp"}
    ln = [n for n in leaves if n["op"] == "layernorm"]
    assert ln and all(n["rests_on"] == "general" and n["dims"] == {"rows": 16, "n": 64} for n in ln)
    comp = [n for n in leaves if n["op"] in ("mhsa", "mlp")]
    assert comp and all(n["rests_on"] == "compositional" for n in comp)


def test_nodes_are_certified_at_the_dims_and_params_the_composite_uses():
    sigs = node_signatures(OPS["vit_block"], {"m": 2, "D": 4, "F": 3})
    by_node = {}
    for inst, op, dims, static in sigs:
        by_node.setdefault(inst, set()).add((dims, static))
    assert by_node["ln1"] == {((("n", 4), ("rows", 2)), ())}
    assert by_node["mlp"] == {((("D", 4), ("F", 3), ("m", 2)), ())}
    assert {s for _, s in by_node["attn"]} == {(("heads", OPS["vit_block"].params["heads"].default),)}


def test_a_node_called_without_its_parameter_is_named():
    """The ViT block whose LN1 backward omits eps (LayerNorm's default equals the block's default, so
    numbers agree at default parameters): the wiring names the node, the argument and both values."""
    vit = OPS["vit_block"]
    m = next(m for m in vit.mutants if m.name == "ln1_backward_without_eps")
    out = prove_wiring(vit.with_mutant(m), "vjp[X]", vit.dims[0])
    assert out["status"] == "failed"
    (miss,) = out["node_called_at_another_point"]
    assert (miss["node"], miss["argument"], miss["forward_used"], miss["backward_used"]) == \
        ("ln1", "eps", "eps", "1/100000")


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


def test_wrong_wiring_fails_on_the_real_composite_without_proving_the_nodes(monkeypatch):
    """Wiring that is wrong for generic nodes can never be proved, whatever the nodes: the verdict is
    the real composite's witness, and no node's every-size proof is spent on it (a minute for the
    GPT-2 block in a fresh process). The correct MLP still rests on every node."""
    from vjpcert.symbolic.composition import compose
    proved_nodes = []
    real = compose.cover_node
    monkeypatch.setattr(compose, "cover_node", lambda op, *a, **k: proved_nodes.append(op.name) or real(op, *a, **k))
    mlp = OPS["mlp"]
    bad = mlp.with_mutant(next(m for m in mlp.mutants if m.name == "skips_activation_backward"))
    cert = prove_compositional(bad, "vjp[X]", mlp.dims[0])
    assert cert.verdict == "failed" and cert.evidence["wiring"]["status"] == "failed"
    assert cert.evidence["witness"]["in"] == "the wiring" and cert.evidence["witness"]["point"]
    assert proved_nodes == [] and cert.evidence["nodes"] == [] and "nodes_not_examined" in cert.evidence
    good = prove_compositional(mlp, "vjp[X]", mlp.dims[0])          # negative control: nodes are examined
    assert good.verdict == "proved-compositional" and proved_nodes and "nodes_not_examined" not in good.evidence


def test_a_backward_at_the_wrong_point_is_caught():
    """The ViT mutant that runs LN2's backward at X instead of Y changes only dgamma2 through the
    point: a stand-in whose Jacobian ignored the point would prove it; the wiring keys every call by it."""
    vit = OPS["vit_block"]
    m = next(m for m in vit.mutants if m.name == "ln2_backward_at_block_input")
    cert = prove_compositional(vit.with_mutant(m), "vjp[g2]", vit.dims[0])
    assert cert.verdict == "failed"
    assert cert.evidence["wiring_failure"]["node_called_at_another_point"][0]["node"] == "ln2"
