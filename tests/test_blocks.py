"""The transformer blocks' specs against PyTorch, its named mutants, and the blocks at realistic dims.

The symbolic tier proves each backward is the transposed Jacobian of the spec's own forward; these tests
pin the *forwards* to what PyTorch computes -- scaled_dot_product_attention with m_q != m_k, a scale,
both causal alignments, key padding and enable_gqa, a Llama-style and a GPT-2-style block written in
plain torch -- and the spec's hand-written backward to torch's autograd of that torch code, in float64.
"""
import math

import numpy as np
import pytest

import optional
from conftest import OPS
from vjpcert.symbolic.composition.compose import _CACHE, prove_compositional
from vjpcert.symbolic.fixed.prover import prove_claim

torch = optional.importorskip("torch")
F = optional.importorskip("torch.nn.functional")
as_function = optional.imported("vjpcert.numeric.torch_bridge", "as_function")


def _tensors(rng, shapes):
    return [torch.tensor(rng.standard_normal(s), dtype=torch.float64, requires_grad=True) for s in shapes]


def _agree(op_name, shapes, reference, fixed=None, seed=0):
    """Our spec (forward and hand-written backward) against torch's code and its autograd."""
    rng = np.random.default_rng(seed)
    ours, theirs = _tensors(rng, shapes), None
    theirs = [t.detach().clone().requires_grad_(True) for t in ours]
    y = as_function(OPS[op_name], fixed or {})(*ours)
    z = reference(*theirs)
    assert torch.allclose(y, z, rtol=1e-10, atol=1e-12), (y - z).abs().max()
    dy = torch.tensor(rng.standard_normal(tuple(y.shape)), dtype=torch.float64)
    g_ours = torch.autograd.grad(y, ours, dy)
    g_theirs = torch.autograd.grad(z, theirs, dy)
    for name, a, b in zip(OPS[op_name].inputs, g_ours, g_theirs):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-11), (name, (a - b).abs().max())


# ------------------------------------------------------------------ attention as PyTorch exposes it
MQ, MK, D, DV = 3, 5, 4, 2


def test_sdpa_with_key_padding_is_torch_with_a_boolean_mask():
    keep = torch.ones(MQ, MK, dtype=torch.bool)
    keep[:, :1] = False                                  # pad = 1: the first key is padding
    _agree("sdpa", [(MQ, D), (MK, D), (MK, DV)],
           lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, attn_mask=keep))


def test_sdpa_causal_is_torch_is_causal_top_left():
    _agree("sdpa_causal", [(MQ, D), (MK, D), (MK, DV)],
           lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, is_causal=True))


def test_sdpa_causal_bottom_right_is_the_kv_cache_alignment():
    mask = torch.ones(MQ, MK, dtype=torch.bool).tril(MK - MQ)     # the last query sees every key
    _agree("sdpa_causal_bottom_right", [(MQ, D), (MK, D), (MK, DV)],
           lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, attn_mask=mask))


def test_scale_one_is_torch_s_default_and_the_proof_holds_for_every_scale():
    """scale multiplies 1/sqrt(d): 1 is torch's default (above); torch's scale=s is s sqrt(d) here,
    and the proofs treat it as a symbol (a dQ wrong at every scale but 1 is failed)."""
    from vjpcert.core.backends import F64
    o, rng = OPS["sdpa_causal"], np.random.default_rng(1)
    Q, K, V = (rng.standard_normal(s) for s in [(MQ, D), (MK, D), (MK, DV)])
    ours = o.bind(o.forward, F64, {"Q": Q, "K": K, "V": V, "scale": 0.5 * math.sqrt(D)})
    theirs = F.scaled_dot_product_attention(*map(torch.tensor, (Q, K, V)), is_causal=True, scale=0.5)
    assert np.allclose(ours, theirs.numpy(), rtol=1e-12)
    m = next(m for m in OPS["sdpa"].mutants if m.name == "dQ_scale_is_one_over_sqrt_d")
    assert prove_claim(OPS["sdpa"].with_mutant(m), "vjp[Q]", OPS["sdpa"].dims[-1]).verdict == "failed"


def test_gqa_is_torch_enable_gqa():
    hk, g, m, d = 2, 3, 4, 2
    _agree("gqa_causal", [(hk, g, m, d), (hk, m, d), (hk, m, d)],
           lambda Q, K, V: F.scaled_dot_product_attention(Q.reshape(hk * g, m, d), K, V, is_causal=True,
                                                          enable_gqa=True).reshape(hk, g, m, d))


# ------------------------------------------------------------------ the issue's named mutants
NAMED = [("gqa_causal", "shared_heads_not_summed", "vjp[K]"),
         ("sdpa_causal_bottom_right", "bottom_right_mask_applied_top_left", "vjp[Q]"),
         ("cross_entropy", "ignores_ignore_index", "vjp[x]"),
         ("swiglu", "sigmoid_prime_for_silu_prime", "vjp[a]")]


@pytest.mark.parametrize("name,mutant,claim", NAMED)
def test_the_issue_s_mutants_are_killed_by_the_symbolic_tier(name, mutant, claim):
    o = OPS[name]
    twin = o.with_mutant(next(m for m in o.mutants if m.name == mutant))
    cert = prove_claim(twin, claim, o.dims[-1])
    assert cert.verdict == "failed", cert.evidence
    assert cert.evidence["witness"]["point"]


def test_a_bottom_right_mask_applied_top_left_needs_a_rectangle():
    """At m_q = m_k the two alignments are one mask, so the mutant is *right* there: only the
    rectangles of the dims ladder (m_q < m_k and m_q > m_k) can kill it, and both do."""
    o = OPS["sdpa_causal_bottom_right"]
    twin = o.with_mutant(next(m for m in o.mutants if m.name == "bottom_right_mask_applied_top_left"))
    assert prove_claim(twin, "vjp[Q]", {"mq": 3, "mk": 3, "d": 2, "dv": 1}).verdict == "proved"
    assert all(d["mq"] != d["mk"] for d in o.dims)
    assert all(prove_claim(twin, "vjp[Q]", d).verdict == "failed" for d in o.dims)


# ------------------------------------------------------------------ whole blocks in plain torch
def _rms(x, g, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g


def _rope(x, pos, base=10000.0):          # x: (heads, m, dh), Llama's rotate_half layout
    dh = x.shape[-1]
    inv = base ** (-torch.arange(0, dh // 2, dtype=torch.float64) * 2 / dh)
    th = pos[:, None] * inv[None, :]
    cos, sin = torch.cat([th.cos()] * 2, -1), torch.cat([th.sin()] * 2, -1)
    rot = torch.cat([-x[..., dh // 2:], x[..., :dh // 2]], -1)
    return x * cos + rot * sin


def test_the_llama_block_is_a_llama_block_in_torch():
    o = OPS["llama_block"]
    heads, kv, eps = o.params["heads"].default, o.params["kv_heads"].default, float(o.params["eps"].default)
    m, D, Dkv, Fh = 5, 16, 8, 12
    dh = D // heads
    pos = np.arange(m, dtype=float) + 7

    def llama(X, g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd):
        N = _rms(X, g1, eps)
        Q = (N @ Wq.T).reshape(m, heads, dh).transpose(0, 1)
        K = (N @ Wk.T).reshape(m, kv, dh).transpose(0, 1)
        V = (N @ Wv.T).reshape(m, kv, dh).transpose(0, 1)
        p = torch.tensor(pos)
        A = F.scaled_dot_product_attention(_rope(Q, p), _rope(K, p), V, is_causal=True, enable_gqa=True)
        Y = X + A.transpose(0, 1).reshape(m, D) @ Wo.T
        N2 = _rms(Y, g2, eps)
        return Y + (F.silu(N2 @ Wg.T) * (N2 @ Wu.T)) @ Wd.T
    _agree("llama_block", [(m, D), (D,), (D, D), (Dkv, D), (Dkv, D), (D, D), (D,), (Fh, D), (Fh, D), (D, Fh)],
           llama, fixed={"pos": pos})


def test_the_gpt2_block_is_a_gpt2_block_in_torch():
    o = OPS["gpt2_block"]
    heads, eps = o.params["heads"].default, float(o.params["eps"].default)
    m, D, Fh = 4, 8, 12

    def gpt2(X, g1, be1, Wqkv, bqkv, Wo, bo, g2, be2, Wfc, bfc, Wpr, bpr):
        qkv = F.layer_norm(X, (D,), g1, be1, eps) @ Wqkv.T + bqkv
        q, k, v = (t.reshape(m, heads, D // heads).transpose(0, 1) for t in qkv.split(D, -1))
        A = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(m, D)
        Y = X + A @ Wo.T + bo
        H = F.layer_norm(Y, (D,), g2, be2, eps) @ Wfc.T + bfc
        return Y + F.gelu(H, approximate="tanh") @ Wpr.T + bpr
    _agree("gpt2_block", [(m, D), (D,), (D,), (3 * D, D), (3 * D,), (D, D), (D,), (D,), (D,), (Fh, D), (Fh,),
                          (D, Fh), (D,)], gpt2)


# ------------------------------------------------------------------ compositional proofs
def test_the_wiring_cache_never_hands_a_mutant_the_correct_op_s_verdict():
    """The wiring of all a composite's claims is computed once per op and dims and cached: a mutant
    twin proved right after the correct op, at the same dims, is still failed."""
    o = OPS["swiglu_mlp"]
    dims = o.dims[-1]
    assert prove_compositional(o, "vjp[X]", dims).verdict == "proved-compositional"
    twin = o.with_mutant(next(m for m in o.mutants if m.name == "up_branch_missing_from_dX"))
    assert prove_compositional(twin, "vjp[X]", dims).verdict == "failed"
    assert prove_compositional(o, "vjp[X]", dims).verdict == "proved-compositional"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama_block", "gpt2_block", "swiglu_mlp"])
def test_the_blocks_at_realistic_dims_rest_on_every_size_node_proofs(name):
    o = OPS[name]
    dims = o.compositional_dims[0]
    _CACHE.clear()
    certs = [prove_compositional(o, c, dims) for c in o.claims() if c.startswith("vjp[")]
    assert all(c.verdict == "proved-compositional" for c in certs), [c.evidence for c in certs]
    leaves = certs[0].evidence["nodes"]
    assert all(n["rests_on"] in ("general", "compositional") for n in leaves), leaves
    if name != "swiglu_mlp":                     # the blocks' attention rests on GQA's every-size proof
        attn = [n for n in leaves if n["op"] == "gqa_causal"]
        assert attn and all(n["rests_on"] == "general" for n in attn)
