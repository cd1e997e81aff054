"""A pre-LN ViT block over tokens X (m x D), `heads` heads, MLP width F:

    Y = X + MHSA(LN1(X)),      Z = Y + MLP(LN2(Y))
The backward runs the residual fan-in by hand: dY = dZ + LN2^T(MLP^T(dZ)), dX = dY + LN1^T(MHSA^T(dY)).
A monolithic proof of this block did not finish in 5 minutes; it is certified compositionally -- the
wiring proved with every node an arbitrary function, each node resting on its every-size proof -- at
its small dims and at m = 16, D = 64, F = 256 with 4 heads.
"""
from fractions import Fraction

from vjpcert.specs.layernorm import layernorm
from vjpcert.specs.mhsa import mhsa
from vjpcert.specs.mlp import mlp
from vjpcert.core.registry import Param, op

INPUTS = {"X": ("m", "D"), "g1": ("D",), "be1": ("D",),
          "Wq": ("D", "D"), "bq": ("D",), "Wk": ("D", "D"), "bk": ("D",),
          "Wv": ("D", "D"), "bv": ("D",), "Wo": ("D", "D"), "bo": ("D",),
          "g2": ("D",), "be2": ("D",), "W1": ("F", "D"), "b1": ("F",), "W2": ("D", "F"), "b2": ("D",)}


def _heads_ok(dims, heads=4):
    return None if dims["D"] % heads == 0 else f"D = {dims['D']} is not a multiple of {heads} heads"


@op(inputs=INPUTS, output=("m", "D"),
    params={"heads": Param(4, symbolic=False), "eps": Param(Fraction(1, 10**5), positive=True)},
    nodes={"ln1": layernorm, "attn": mhsa, "ln2": layernorm, "mlp": mlp}, proofs=("compositional",),
    dims=[{"m": 2, "D": 4, "F": 3}], large_dims=[{"m": 3, "D": 8, "F": 6}],
    compositional_dims=[{"m": 16, "D": 64, "F": 256}],
    modular_dims=[{"m": 197, "D": 192, "F": 768, "heads": 3}],      # ViT-Tiny: 197 tokens, 3 heads of 64
    check_dims={"m": 4, "D": 8, "F": 16}, constraints=_heads_ok)
def vit_block(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, nodes):
    Y = X + nodes.attn(nodes.ln1(X, g1, be1, eps=eps), Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads=heads)
    return Y + nodes.mlp(nodes.ln2(Y, g2, be2, eps=eps), W1, b1, W2, b2)


@vit_block.defvjp
def vit_block_vjp(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps,
                  dy, nodes):
    N1 = nodes.ln1(X, g1, be1, eps=eps)
    Y = X + nodes.attn(N1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads=heads)
    N2 = nodes.ln2(Y, g2, be2, eps=eps)
    dN2, dW1, db1, dW2, db2 = nodes.mlp.vjp(N2, W1, b1, W2, b2, dy)
    dYb, dg2, dbe2 = nodes.ln2.vjp(Y, g2, be2, dN2, eps=eps)
    dY = dy + dYb                                             # residual fan-in
    dN1, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo = nodes.attn.vjp(N1, Wq, bq, Wk, bk, Wv, bv, Wo, bo,
                                                                  dy=dY, heads=heads)
    dXb, dg1, dbe1 = nodes.ln1.vjp(X, g1, be1, dN1, eps=eps)
    return (dY + dXb, dg1, dbe1, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo, dg2, dbe2, dW1, db1, dW2, db2)
