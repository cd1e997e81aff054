"""Wrong ViT-block backwards: residuals and sublayer wiring."""
from vjpcert.specs.vit import vit_block


def _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes,
          *, residual2=True, residual1=True, ln2_at=None, mlp_at=None, db2_mean=False, dbk_from_q=False):
    N1 = nodes.ln1(X, g1, be1, eps=eps)
    Y = X + nodes.attn(N1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads=heads)
    N2 = nodes.ln2(Y, g2, be2, eps=eps)
    dN2, dW1, db1, dW2, db2 = nodes.mlp.vjp(N1 if mlp_at == "N1" else N2, W1, b1, W2, b2, dy)
    if db2_mean:
        db2 = dy.mean(0)
    dYb, dg2, dbe2 = nodes.ln2.vjp(X if ln2_at == "X" else Y, g2, be2, dN2, eps=eps)
    dY = dy + dYb if residual2 else dYb
    dN1, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo = nodes.attn.vjp(N1, Wq, bq, Wk, bk, Wv, bv, Wo, bo,
                                                                  dy=dY, heads=heads)
    dXb, dg1, dbe1 = nodes.ln1.vjp(X, g1, be1, dN1, eps=eps)
    if dbk_from_q:
        dbk = dbq
    return (dY + dXb if residual1 else dXb, dg1, dbe1, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo, dg2, dbe2,
            dW1, db1, dW2, db2)


# every cotangent upstream of the second residual -- except the key bias's, which is exactly 0 for any
# upstream cotangent (softmax ignores a shift common to a row), so no wiring bug can make it wrong
ALL_BUT_MLP = ["vjp[X]", "vjp[g1]", "vjp[be1]", "vjp[Wq]", "vjp[bq]", "vjp[Wk]", "vjp[Wv]",
               "vjp[bv]", "vjp[Wo]", "vjp[bo]"]


@vit_block.mutant("second_residual_dropped", kills=ALL_BUT_MLP)
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    return _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy,
                 nodes, residual2=False)


@vit_block.mutant("first_residual_dropped", kills=["vjp[X]"])
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    return _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy,
                 nodes, residual1=False)


@vit_block.mutant("ln2_backward_at_block_input", kills=ALL_BUT_MLP + ["vjp[g2]"])
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    """LN2's backward evaluated at X instead of at its own input Y (dbeta2 = sum dN2 does not care)."""
    return _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy,
                 nodes, ln2_at="X")


@vit_block.mutant("mlp_backward_at_ln1_output",
                  kills=ALL_BUT_MLP + ["vjp[g2]", "vjp[be2]", "vjp[W1]", "vjp[b1]", "vjp[W2]"])
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    """The MLP's backward fed the first LayerNorm's output: every cotangent but db2 (= sum dZ) and
    dbk (always 0) goes wrong."""
    return _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy,
                 nodes, mlp_at="N1")


@vit_block.mutant("mlp_output_bias_gradient_mean", kills=["vjp[b2]"])
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    return _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy,
                 nodes, db2_mean=True)


@vit_block.mutant("key_bias_given_query_bias_gradient", kills=["vjp[bk]"])
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    """dbk := dbq (a copy-paste slip): dbk must be exactly 0, dbq is not."""
    return _back(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy,
                 nodes, dbk_from_q=True)


@vit_block.mutant("ln1_backward_without_eps", kills=["vjp[X]", "vjp[g1]"])
def _(B, X, g1, be1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, be2, W1, b1, W2, b2, heads, eps, dy, nodes):
    """LN1's backward called without eps: it falls back to LayerNorm's default (1e-5), which is the
    block's default too, so at default parameters the numbers agree. The node is called at another
    point than its forward (eps = default, not eps): the wiring proof names the node and the argument,
    and the numeric tier sees it at a non-default eps."""
    N1 = nodes.ln1(X, g1, be1, eps=eps)
    Y = X + nodes.attn(N1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads=heads)
    N2 = nodes.ln2(Y, g2, be2, eps=eps)
    dN2, dW1, db1, dW2, db2 = nodes.mlp.vjp(N2, W1, b1, W2, b2, dy)
    dYb, dg2, dbe2 = nodes.ln2.vjp(Y, g2, be2, dN2, eps=eps)
    dY = dy + dYb
    dN1, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo = nodes.attn.vjp(N1, Wq, bq, Wk, bk, Wv, bv, Wo, bo,
                                                                  dy=dY, heads=heads)
    dXb, dg1, dbe1 = nodes.ln1.vjp(X, g1, be1, dN1)
    return (dY + dXb, dg1, dbe1, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo, dg2, dbe2, dW1, db1, dW2, db2)
