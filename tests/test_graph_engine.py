"""The tape-graph engine under test: random DAGs of certified nodes (with fan-out), their backprop
compared with high-precision finite differences of the composed *forward* (never with a composed
backward, which would be circular), and the same DAG with one node's VJP broken must fail."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import OPS
from vjpcert.numeric.check import check_claim
from vjpcert.core.graph import ADD, MATMUL, MUL, TRANSPOSE, Graph, Prim, from_op, graph_op, scale

S1, S2, S3, VEC = (2, 3), (3, 2), (2, 2), (3,)
INPUTS = {"a": S1, "b": S1, "c": S2, "g": VEC, "e": VEC}
UNARY = {  # prim, the shapes it accepts -> output shape
    "transpose": (TRANSPOSE, {S1: S2, S2: S1, S3: S3}),
    "softmax": (from_op(OPS["softmax"]), {S1: S1, S2: S2, S3: S3}),
    "gelu": (from_op(OPS["gelu_tanh"]), {S1: S1, S2: S2, S3: S3}),
    "half": (scale(lambda B, a: B.c(1, 2), "half"), {S1: S1, S2: S2, S3: S3, VEC: VEC}),
}
BINARY = {
    "add": (ADD, lambda p, q: p if p == q else None),
    "mul": (MUL, lambda p, q: p if p == q else None),
    "matmul": (MATMUL, lambda p, q: (p[0], q[1]) if len(p) == len(q) == 2 and p[1] == q[0] else None),
}
NORMS = {"layernorm": from_op(OPS["layernorm"]), "rmsnorm": from_op(OPS["rmsnorm"])}


@st.composite
def graphs(draw, min_nodes=2):
    """A DAG of 2-5 nodes over INPUTS; each node draws arguments whose shapes it accepts, so values
    are reused (fan-out) as often as the draw likes."""
    g = Graph("random", dict(INPUTS))
    shapes = dict(INPUTS)
    for i in range(draw(st.integers(min_nodes, 5))):
        options = []
        for key, (prim, rule) in UNARY.items():
            options += [(prim, (x,), rule[s]) for x, s in shapes.items() if s in rule]
        for key, (prim, rule) in BINARY.items():
            options += [(prim, (x, y), rule(p, q)) for x, p in shapes.items() for y, q in shapes.items()
                        if rule(p, q) is not None]
        options += [(NORMS["layernorm"], (x, "g", "e"), S1) for x, s in shapes.items() if s == S1]
        options += [(NORMS["rmsnorm"], (x, "g"), S1) for x, s in shapes.items() if s == S1]
        prim, args, out = draw(st.sampled_from(options))
        g.node(f"n{i}", prim, *args)
        shapes[f"n{i}"] = out
    return g


def _broken(prim: Prim) -> Prim:
    return Prim(prim.name + "~flipped", prim.forward,
                lambda B, *a: tuple(-c for c in prim.vjp(B, *a)), prim.arity)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(graphs())
def test_backprop_matches_finite_differences_of_the_forward(g):
    op = graph_op(g, dims=[{}], register=False)
    for wrt in INPUTS:
        cert = check_claim(op, f"vjp[{wrt}]", {}, dps=30, cases=("random",))
        assert cert.verdict == "checked", (g.order, wrt, cert.evidence)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(graphs(), st.data())
def test_a_node_with_a_wrong_vjp_is_caught(g, data):
    i = data.draw(st.integers(0, len(g.nodes) - 1))
    name, prim, args = g.nodes[i]
    g.nodes[i] = (name, _broken(prim), args)
    op = graph_op(g, dims=[{}], register=False)
    verdicts = {check_claim(op, f"vjp[{a}]", {}, dps=30, cases=("random",)).verdict for a in INPUTS}
    # the seed on the broken node's own value reaches its arguments through the flipped VJP
    assert "failed" in verdicts, g.order


def test_fan_out_is_summed():
    g = Graph("fan", {"a": S1})
    g.node("s", ADD, "a", "a")            # a used twice by one node
    g.node("p", MUL, "s", "a")            # and once more
    from vjpcert.core.backends import F64
    a = np.arange(6.0).reshape(S1)
    tape = g.eval(F64, {"a": a})
    cot = g.backprop(F64, tape, {"p": np.ones(S1)})
    assert np.allclose(cot["a"], 4 * a)   # d(2a * a)/da = 4a


def test_split_and_merge_heads_are_each_others_transpose():
    from vjpcert.core.graph import merge_heads, split_heads
    g = Graph("heads", {"a": (2, 4)})
    g.node("h", split_heads(2), "a")
    g.node("m", merge_heads(), "h")
    op = graph_op(g, dims=[{}], register=False)
    assert check_claim(op, "vjp[a]", {}, dps=30, cases=("random",)).verdict == "checked"
    from vjpcert.core.backends import F64
    a = np.arange(8.0).reshape(2, 4)
    assert np.array_equal(g.eval(F64, {"a": a})["m"], a)
