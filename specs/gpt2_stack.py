"""A two-block GPT-2 stack with its learned positions and final LayerNorm: composites compose.

    H0 = X + P,   H1 = block_1(H0),   H2 = block_2(H1),   Z = LN_f(H2)
X are the token embeddings, P GPT-2's learned position embeddings (wpe, a differentiated input: added
once, before the first block, where GPT-2 adds them). Each block is the composite of
specs/gpt2_block.py, a node here: its certificate at the dims the stack calls it with is itself
compositional, resting on its nodes' every-size proofs. The backward: dH2 = LN_f^T(dZ),
dH1 = block_2^T(dH2), dH0 = block_1^T(dH1), dX = dP = dH0.
"""

from vjpcert.core.registry import op
from vjpcert.specs.gpt2_block import GPT2, INPUTS as BLOCK, _heads_ok, gpt2_block
from vjpcert.specs.layernorm import layernorm

PER_BLOCK = [n for n in BLOCK if n != "X"]
INPUTS = {"X": ("m", "D"), "P": ("m", "D"),
          **{f"{n}_{k}": BLOCK[n] for k in (1, 2) for n in PER_BLOCK}, "gf": ("D",), "bf": ("D",)}


@op(inputs=INPUTS, output=("m", "D"), params=GPT2["params"],
    nodes={"block_1": gpt2_block, "block_2": gpt2_block, "ln_f": layernorm}, proofs=("compositional",),
    dims=[{"m": 2, "D": 4, "F": 2}], compositional_dims=[{"m": 16, "D": 64, "F": 256}],
    check_dims={"m": 2, "D": 4, "F": 2}, constraints=_heads_ok)       # small: 28 claims, two blocks each
def gpt2_stack(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
               g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, nodes):
    H1 = nodes.block_1(X + P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1, heads=heads, eps=eps)
    H2 = nodes.block_2(H1, g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, heads=heads, eps=eps)
    return nodes.ln_f(H2, gf, bf, eps=eps)


@gpt2_stack.defvjp
def gpt2_stack_vjp(B, X, P, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1,
                   g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, gf, bf, heads, eps, dy, nodes):
    H0 = X + P
    H1 = nodes.block_1(H0, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1, heads=heads, eps=eps)
    H2 = nodes.block_2(H1, g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, heads=heads, eps=eps)
    dH2, dgf, dbf = nodes.ln_f.vjp(H2, gf, bf, dy, eps=eps)
    dH1, *d2 = nodes.block_2.vjp(H1, g1_2, be1_2, Wqkv_2, bqkv_2, Wo_2, bo_2, g2_2, be2_2, Wfc_2, bfc_2, Wpr_2, bpr_2, dy=dH2, heads=heads, eps=eps)
    dH0, *d1 = nodes.block_1.vjp(H0, g1_1, be1_1, Wqkv_1, bqkv_1, Wo_1, bo_1, g2_1, be2_1, Wfc_1, bfc_1, Wpr_1, bpr_1, dy=dH1, heads=heads, eps=eps)
    return (dH0, dH0, *d1, *d2, dgf, dbf)                 # X and P enter as a sum: both get dH0
