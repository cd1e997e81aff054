"""SwiGLU MLP (Llama's feed-forward) over tokens X (m x D), hidden width F, no biases:

    A = X Wg^T,  U = X Wu^T,  H = swiglu(A, U) = silu(A) * U,  Y = H Wd^T
    dH, dWd = down_proj backward;  dA, dU = swiglu backward;  dX = dA Wg + dU Wu (the fan-out of X)
The gated product is a node of its own (specs/swiglu.py): the composite's own code is linear wiring
only. Llama's projections have no bias: the linear nodes are called with a constant zero bias (part
of each call's point), and their bias cotangents are dropped.
"""
from vjpcert.core.registry import op
from vjpcert.specs.linear import linear
from vjpcert.specs.swiglu import swiglu


def no_bias(B, W):
    """The zero bias of a bias-free projection with weight W (n_out x n_in)."""
    return B.zeros((W.shape[0],))


@op(inputs={"X": ("m", "D"), "Wg": ("F", "D"), "Wu": ("F", "D"), "Wd": ("D", "F")}, output=("m", "D"),
    nodes={"gate_proj": linear, "up_proj": linear, "gate": swiglu, "down_proj": linear},
    proofs=("monolithic", "compositional"),
    dims=[{"m": 1, "D": 2, "F": 1}, {"m": 2, "D": 2, "F": 3}], check_dims={"m": 3, "D": 4, "F": 6},
    compositional_dims=[{"m": 16, "D": 64, "F": 176}])
def swiglu_mlp(B, X, Wg, Wu, Wd, nodes):
    H = nodes.gate(nodes.gate_proj(X, Wg, no_bias(B, Wg)), nodes.up_proj(X, Wu, no_bias(B, Wu)))
    return nodes.down_proj(H, Wd, no_bias(B, Wd))


@swiglu_mlp.defvjp
def swiglu_mlp_vjp(B, X, Wg, Wu, Wd, dy, nodes):
    A, U = nodes.gate_proj(X, Wg, no_bias(B, Wg)), nodes.up_proj(X, Wu, no_bias(B, Wu))
    H = nodes.gate(A, U)
    dH, dWd, _ = nodes.down_proj.vjp(H, Wd, no_bias(B, Wd), dy)
    dA, dU = nodes.gate.vjp(A, U, dH)
    dXg, dWg, _ = nodes.gate_proj.vjp(X, Wg, no_bias(B, Wg), dA)
    dXu, dWu, _ = nodes.up_proj.vjp(X, Wu, no_bias(B, Wu), dU)
    return dXg + dXu, dWg, dWu, dWd
