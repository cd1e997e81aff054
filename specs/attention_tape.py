"""The attention graph as a tape (TorchLean's scaledDotProductGraph):

    Q, K, V  ->  Kt = K^T  ->  L = Q Kt  ->  S = c L  ->  P = rowsoftmax(S)  ->  O = P V,   c = 1/sqrt(d)

Its forward is the whole evaluation (the inputs and every saved value, flattened); its backward is
reverse accumulation over the tape from a seed on *all* of them. Its VJP claims are therefore the seed
theorem ``backprop_eq_adjoint_fderiv``: backprop = (d eval)^T seed, for every seed.
"""
import numpy as np

from vjpcert.specs.attention import scale
from vjpcert.core.graph import MATMUL, TRANSPOSE, Graph, Prim, from_op, graph_op
from vjpcert.specs.softmax import softmax

# S = c L with c = 1/sqrt(d) read off Q's width; Q gets no cotangent through it (c is a constant)
SCALE = Prim("scale_by_rsqrt_d", lambda B, L, Q: scale(B, Q.shape[-1]) * L,
             lambda B, L, Q, dy: (scale(B, Q.shape[-1]) * dy, B.zeros(np.shape(Q))), 2)

graph = Graph("attention_tape", {"Q": ("m", "d"), "K": ("m", "d"), "V": ("m", "d")})
graph.node("Kt", TRANSPOSE, "K")
graph.node("L", MATMUL, "Q", "Kt")
graph.node("S", SCALE, "L", "Q")
graph.node("P", from_op(softmax, "rowsoftmax"), "S")
graph.node("O", MATMUL, "P", "V")

attention_tape = graph_op(graph, dims=[{"m": 2, "d": 1}, {"m": 2, "d": 3}, {"m": 3, "d": 2}],
                          check_dims={"m": 3, "d": 2})


@attention_tape.law
def tape_ends_in_attention(B, Q, K, V, forward):
    """The tape's last block is the attention output: the graph computes the attention spec."""
    from vjpcert.specs.attention import attention
    tape = forward(Q, K, V)
    return tape[-Q.size:].reshape(Q.shape), attention(B, Q, K, V)
