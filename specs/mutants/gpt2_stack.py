"""Wrong backwards of the two-block GPT-2 stack: the final LayerNorm's point, positions, its bias."""
from vjpcert.specs.gpt2_stack import INPUTS, gpt2_stack


def _back(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
          g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes, *, ln_f_at_h1=False, positions=True, dbf_mean=False):
    H0 = X + P
    H1 = nodes.block_1(H0, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1, heads=heads, eps=eps)
    H2 = nodes.block_2(H1, g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, heads=heads, eps=eps)
    dH2, dgf, dbf = nodes.ln_f.vjp(H1 if ln_f_at_h1 else H2, gf, bf, dy, eps=eps)
    if dbf_mean:
        dbf = dy.mean(0)
    dH1, *d2 = nodes.block_2.vjp(H1, g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, dy=dH2, heads=heads, eps=eps)
    dH0, *d1 = nodes.block_1.vjp(H0, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1, dy=dH1, heads=heads, eps=eps)
    return (dH0, dH0 if positions else 0 * dH0, *d1, *d2, dgf, dbf)


@gpt2_stack.mutant("final_norm_backward_at_first_block_output",
                   kills=[f"vjp[{n}]" for n in INPUTS if n != "bf"])
def _(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
      g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes):
    """LN_f's backward evaluated at block 1's output: every cotangent but dbf (= sum dZ) goes wrong."""
    return _back(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
      g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes, ln_f_at_h1=True)


@gpt2_stack.mutant("positions_get_no_gradient", kills=["vjp[P]"])
def _(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
      g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes):
    """The learned positions treated as constants."""
    return _back(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
      g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes, positions=False)


@gpt2_stack.mutant("final_bias_gradient_mean", kills=["vjp[bf]"])
def _(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
      g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes):
    return _back(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
      g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes, dbf_mean=True)
