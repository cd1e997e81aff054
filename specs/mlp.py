"""Transformer MLP over tokens X (m x D): dense -> GELU (erf) -> dense, hidden width F.

    H = X W1^T + b1,   G = gelu(H),   Y = G W2^T + b2
    dG, dW2, db2 = linear backward;  dH = gelu backward;  dX, dW1, db1 = linear backward
"""
from vjpcert.specs.gelu import gelu_erf
from vjpcert.specs.linear import linear
from vjpcert.core.registry import op


@op(inputs={"X": ("m", "D"), "W1": ("F", "D"), "b1": ("F",), "W2": ("D", "F"), "b2": ("D",)},
    output=("m", "D"), nodes={"dense1": linear, "act": gelu_erf, "dense2": linear},
    proofs=("monolithic", "compositional"),
    dims=[{"m": 1, "D": 2, "F": 3}, {"m": 2, "D": 3, "F": 4}], check_dims={"m": 3, "D": 4, "F": 6})
def mlp(B, X, W1, b1, W2, b2, nodes):
    return nodes.dense2(nodes.act(nodes.dense1(X, W1, b1)), W2, b2)


@mlp.defvjp
def mlp_vjp(B, X, W1, b1, W2, b2, dy, nodes):
    H = nodes.dense1(X, W1, b1)
    G = nodes.act(H)
    dG, dW2, db2 = nodes.dense2.vjp(G, W2, b2, dy)
    (dH,) = nodes.act.vjp(H, dG)
    dX, dW1, db1 = nodes.dense1.vjp(X, W1, b1, dH)
    return dX, dW1, db1, dW2, db2
