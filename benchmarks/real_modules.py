"""Transformer blocks written the way open-source model code writes them (nn.Modules with parameters,
buffers, fused attention), for the module benchmark (``benchmarks/module_bench.py``) and the tests.

Each is a module class built from its sizes; vjpcert takes it as it is (``from_torch(Class, init=...)``):
no glue beyond naming it and its dims.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm decoder layer: RMSNorm, grouped-query causal attention with rotary embeddings (their
    cos/sin tables are buffers), RMSNorm, SwiGLU MLP; two residuals."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int, seq: int, theta: float = 10000.0):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        inv = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class GPT2Block(nn.Module):
    """GPT-2's block: LayerNorm, fused-QKV causal attention, LayerNorm, GELU (tanh) MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class ViTBlock(nn.Module):
    """A ViT encoder block: LayerNorm, attention over all tokens written out (scores scaled by
    1/sqrt(head_dim), softmax), LayerNorm, GELU (erf) MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.heads, self.scale = heads, 1 / math.sqrt(dim // heads)
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


# (name, class, init with dim names, inputs, small dims, production dims: ViT-Tiny, GPT-2-small's block
# and a Llama-style layer of 8 heads sharing 2 key/value heads, as the modular benchmark sizes them)
MODULES = [
    ("llama_decoder_layer", LlamaDecoderLayer,
     {"dim": "D", "heads": "H", "kv_heads": "KV", "hidden": "F", "seq": "t"}, {"x": ("b", "t", "D")},
     {"b": 1, "t": 2, "D": 4, "F": 3, "H": 2, "KV": 1},
     {"b": 1, "t": 512, "D": 512, "F": 1376, "H": 8, "KV": 2}),
    ("gpt2_block", GPT2Block, {"dim": "D", "heads": "H"}, {"x": ("b", "t", "D")}, {"b": 1, "t": 2, "D": 2, "H": 2},
     {"b": 1, "t": 1024, "D": 768, "H": 12}),
    ("vit_block", ViTBlock, {"dim": "D", "heads": "H", "mlp_ratio": "R"}, {"x": ("b", "n", "D")},
     {"b": 1, "n": 2, "D": 2, "H": 1, "R": 1}, {"b": 1, "n": 197, "D": 192, "H": 3, "R": 4}),
]
