"""Wrong GPT-2-block backwards: LN2's point, GELU's point, the MLP's output projection."""
import numpy as np

from vjpcert.specs.gpt2_block import gpt2_block, merge_heads, qkv, split_heads


def _back(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes,
          *, ln2_at_x=False, gelu_at_output=False, dbpr_mean=False, dWpr_at_h=False):
    N1, Qh, Kh, Vh = qkv(B, X, g1, be1, Wqkv, bqkv, heads, eps, nodes)
    A = merge_heads(nodes.attn(Qh, Kh, Vh))
    Y = X + nodes.attn_proj(A, Wo, bo)
    N2 = nodes.ln2(Y, g2, be2, eps=eps)
    H = nodes.c_fc(N2, Wfc, bfc)
    G = nodes.act(H)
    dG, dWpr, dbpr = nodes.mlp_proj.vjp(G, Wpr, bpr, dy)
    if dWpr_at_h:
        _, dWpr, _ = nodes.mlp_proj.vjp(H, Wpr, bpr, dy)
    if dbpr_mean:
        dbpr = dy.mean(0)
    (dH,) = nodes.act.vjp(G if gelu_at_output else H, dG)
    dN2, dWfc, dbfc = nodes.c_fc.vjp(N2, Wfc, bfc, dH)
    dYb, dg2, dbe2 = nodes.ln2.vjp(X if ln2_at_x else Y, g2, be2, dN2, eps=eps)
    dY = dy + dYb
    dA, dWo, dbo = nodes.attn_proj.vjp(A, Wo, bo, dY)
    dQh, dKh, dVh = nodes.attn.vjp(Qh, Kh, Vh, split_heads(dA, heads))
    dQKV = np.concatenate([merge_heads(dQh), merge_heads(dKh), merge_heads(dVh)], -1)
    dN1, dWqkv, dbqkv = nodes.c_attn.vjp(N1, Wqkv, bqkv, dQKV)
    dXb, dg1, dbe1 = nodes.ln1.vjp(X, g1, be1, dN1, eps=eps)
    return dY + dXb, dg1, dbe1, dWqkv, dbqkv, dWo, dbo, dg2, dbe2, dWfc, dbfc, dWpr, dbpr


UPSTREAM = ["vjp[X]", "vjp[g1]", "vjp[be1]", "vjp[Wqkv]", "vjp[bqkv]", "vjp[Wo]", "vjp[bo]"]


@gpt2_block.mutant("ln2_backward_at_block_input", kills=UPSTREAM + ["vjp[g2]"])
def _(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes):
    """LN2's backward evaluated at X instead of its own input Y (dbeta2 = sum dN2 does not care)."""
    return _back(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes,
                 ln2_at_x=True)


@gpt2_block.mutant("gelu_backward_at_its_output",
                   kills=UPSTREAM + ["vjp[g2]", "vjp[be2]", "vjp[Wfc]", "vjp[bfc]"])
def _(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes):
    """gelu' evaluated at gelu(H) instead of H."""
    return _back(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes,
                 gelu_at_output=True)


@gpt2_block.mutant("mlp_output_bias_gradient_mean", kills=["vjp[bpr]"])
def _(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes):
    return _back(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes,
                 dbpr_mean=True)


@gpt2_block.mutant("mlp_output_weight_at_preactivation", kills=["vjp[Wpr]"])
def _(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes):
    """dWpr = dy^T H with the pre-activation H instead of gelu(H)."""
    return _back(B, X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr, heads, eps, dy, nodes,
                 dWpr_at_h=True)
