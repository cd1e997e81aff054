"""The production blocks as plain PyTorch modules, for peers measured beside vjpcert in the same run.

Written from the architectures' published structure, with the shapes of the specs' own production
dims (`specs/vit.py`, `specs/gpt2_block.py`, `specs/llama_block.py`): a pre-LN ViT block, a GPT-2
block (fused QKV, causal attention, GELU-tanh MLP, biases everywhere) and a Llama-style decoder layer
(RMSNorm, grouped-query attention with rotary positions, SwiGLU MLP, no biases). A peer is timed as
one forward and one backward in float64 on the CPU, which is what one modular trial replaces.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def _attention(q, k, v, causal: bool):
    """(heads, m, dh) each; the math path, as the specs write it (scores, softmax, weighted values)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        m = s.shape[-1]
        s = s.masked_fill(torch.ones(m, m, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


class ViTBlock(nn.Module):
    def __init__(self, D: int, F_: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, F_), nn.Linear(F_, D)

    def forward(self, x):
        m, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(m, 3, self.heads, D // self.heads).permute(1, 2, 0, 3)
        x = x + self.out(_attention(q, k, v, causal=False).transpose(0, 1).reshape(m, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT2Block(ViTBlock):
    def forward(self, x):
        m, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(m, 3, self.heads, D // self.heads).permute(1, 2, 0, 3)
        x = x + self.out(_attention(q, k, v, causal=True).transpose(0, 1).reshape(m, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def _rope(x, pos):
    """Half-split rotary positions over (heads, m, dh)."""
    dh = x.shape[-1]
    inv = 10000.0 ** (-torch.arange(0, dh // 2, dtype=x.dtype) / (dh // 2))
    ang = pos[:, None].to(x.dtype) * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    a, b = x[..., : dh // 2], x[..., dh // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


class LlamaBlock(nn.Module):
    def __init__(self, D: int, Dkv: int, F_: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.wq, self.wk, self.wv = nn.Linear(D, D, bias=False), nn.Linear(D, Dkv, bias=False), \
            nn.Linear(D, Dkv, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.wg, self.wu, self.wd = nn.Linear(D, F_, bias=False), nn.Linear(D, F_, bias=False), \
            nn.Linear(F_, D, bias=False)

    def forward(self, x):
        m, D = x.shape
        dh = D // self.heads
        pos = torch.arange(m)
        h = self.n1(x)
        q = _rope(self.wq(h).reshape(m, self.heads, dh).transpose(0, 1), pos)
        k = _rope(self.wk(h).reshape(m, self.kv_heads, dh).transpose(0, 1), pos)
        v = self.wv(h).reshape(m, self.kv_heads, dh).transpose(0, 1)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        x = x + self.wo(_attention(q, k, v, causal=True).transpose(0, 1).reshape(m, D))
        h = self.n2(x)
        return x + self.wd(F.silu(self.wg(h)) * self.wu(h))


def block(name: str, dims: dict) -> nn.Module:
    """The peer of a built-in block at its dims (the keys of the spec's modular_dims)."""
    if name == "vit_block":
        return ViTBlock(dims["D"], dims["F"], dims["heads"])
    if name == "gpt2_block":
        return GPT2Block(dims["D"], dims["F"], dims["heads"])
    if name == "llama_block":
        return LlamaBlock(dims["D"], dims["Dkv"], dims["F"], dims["heads"], dims["kv_heads"])
    raise KeyError(name)


def forward_backward_seconds(name: str, dims: dict, repeats: int = 3) -> float:
    """The best of ``repeats`` forward + backward passes in float64 (after one to warm up), on the
    threads torch was given."""
    import time
    torch.manual_seed(0)
    module = block(name, dims).double()
    x = torch.randn(dims["m"], dims["D"], dtype=torch.float64, requires_grad=True)
    best = float("inf")
    for i in range(repeats + 1):
        module.zero_grad()
        t = time.perf_counter()
        y = module(x)
        y.backward(torch.randn_like(y))
        if i:
            best = min(best, time.perf_counter() - t)
    return best
