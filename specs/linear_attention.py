"""Causal linear attention with a decay, per head, in its recurrent and its chunked form:

    S_t = gamma S_(t-1) + k_t v_t^T  (S_0 = 0),   o_t = S_t^T q_t
        = sum_(s <= t) gamma^(t - s) (q_t . k_s) v_s

gamma = 1 is plain causal linear attention (the law below). The recurrent form is the reference: the
cell (the state's update) and the readout, each with its backward written out by hand, scanned along
T (``core.recurrence``: its backward is backpropagation through time over theirs, its VJP claims proved
for every length by induction). The chunked form (``core.chunked``) cuts the sequence into chunks of C
steps, the last one partial: inside a chunk the quadratic form (Q K^T masked by the decays) V, across
chunks the state carried from chunk to chunk, each written for a chunk of any length n with its
backward by hand. That it is the recurrent form, and that its backward is its VJP, is proved for every
length T and every chunk size C from the chunk ops' claims for every n.
"""
from fractions import Fraction

import numpy as np

from vjpcert.core.chunked import chunked
from vjpcert.core.recurrence import recurrence
from vjpcert.core.registry import Param, op

STATE = ("h", "d", "e")
DECAY = Param(Fraction(9, 10), positive=True, doc="the state's decay per step (1: none)")
STEP_DIMS = dict(dims=[{"h": 1, "d": 2, "e": 2}, {"h": 2, "d": 2, "e": 1}], check_dims={"h": 2, "d": 3, "e": 2})


def _outer(a, b):
    """Per head: a (h, d), b (h, e) -> (h, d, e)."""
    return a[:, :, None] * b[:, None, :]


def _read(S, a):
    """Per head: S^T a, S (h, d, e), a (h, d) -> (h, e)."""
    return (S * a[:, :, None]).sum(1)


@op(inputs={"S": STATE, "k": ("h", "d"), "v": ("h", "e")}, output=STATE, params={"gamma": DECAY}, **STEP_DIMS)
def linear_attention_cell(B, S, k, v, gamma):
    return gamma * S + _outer(k, v)


@linear_attention_cell.defvjp
def _(B, S, k, v, gamma, dy):
    return gamma * dy, (dy * v[:, None, :]).sum(2), _read(dy, k)


@op(inputs={"S": STATE, "q": ("h", "d")}, output=("h", "e"), **STEP_DIMS)
def linear_attention_readout(B, S, q):
    return _read(S, q)


@linear_attention_readout.defvjp
def _(B, S, q, dy):
    return _outer(q, dy), (S * dy[:, None, :]).sum(2)


linear_attention_cell.every_size("vjp[S]", "vjp[k]", "vjp[v]")
linear_attention_readout.every_size("vjp[S]", "vjp[q]")

linear_attention = recurrence(
    linear_attention_cell, readout=linear_attention_readout, carry="S", over=("q", "k", "v"), order=("q", "k", "v"),
    axis=1, zero_carry=True, name="linear_attention",
    dims=[{"h": 1, "T": 1, "d": 2, "e": 2}, {"h": 1, "T": 3, "d": 2, "e": 1}, {"h": 2, "T": 4, "d": 1, "e": 2}],
    check_dims={"h": 2, "T": 9, "d": 3, "e": 2}, modular_dims=[{"h": 4, "T": 2048, "d": 64, "e": 64}])
linear_attention.every_size("vjp[q]", "vjp[k]", "vjp[v]")


def recurrent(B, q, k, v, gamma):
    """The recurrent form's outputs (h, T, e), for tests and laws."""
    return linear_attention.forward(B, q, k, v, gamma)


@linear_attention.law(params={"gamma": 1})
def without_decay_it_is_causal_attention_without_softmax(B, q, k, v, forward):
    """At gamma = 1, o_t = sum_(s <= t) (q_t . k_s) v_s: the causally masked (Q K^T) V."""
    A = q @ k.transpose(0, 2, 1)
    mask = np.tril(np.ones((q.shape[1], q.shape[1]), dtype=bool))
    return forward(q, k, v), np.where(mask, A, B.c(0)) @ v


# ------------------------------------------------------------------------------ the chunked form
CHUNK = dict(dims=[{"h": 1, "n": 1, "d": 2, "e": 2}, {"h": 1, "n": 2, "d": 2, "e": 1}, {"h": 2, "n": 3, "d": 1, "e": 2}],
             check_dims={"h": 2, "n": 4, "d": 3, "e": 2})


def powers(B, gamma, n):
    """gamma^0 .. gamma^(n - 1): gamma to the power of each step's index in the chunk."""
    return gamma ** B.array(np.arange(n))


@op(inputs={"S": STATE, "k": ("h", "n", "d"), "v": ("h", "n", "e")}, output=STATE, params={"gamma": DECAY}, **CHUNK)
def linear_attention_chunk_state(B, S, k, v, gamma):
    """The state after a chunk of n steps: gamma^n S + sum_j gamma^(n-1-j) k_j v_j^T."""
    n = k.shape[1]
    w = gamma ** n / (powers(B, gamma, n) * gamma)          # gamma^(n-1-j): k_j's weight
    return gamma ** n * S + (k * w[None, :, None]).transpose(0, 2, 1) @ v


@linear_attention_chunk_state.defvjp
def _(B, S, k, v, gamma, dy):
    n = k.shape[1]
    w = gamma ** n / (powers(B, gamma, n) * gamma)
    return gamma ** n * dy, (v @ dy.transpose(0, 2, 1)) * w[None, :, None], (k * w[None, :, None]) @ dy


@op(inputs={"S": STATE, "q": ("h", "n", "d"), "k": ("h", "n", "d"), "v": ("h", "n", "e")}, output=("h", "n", "e"),
    params={"gamma": DECAY}, **CHUNK)
def linear_attention_chunk_out(B, S, q, k, v, gamma):
    """A chunk's outputs from the state S before it: o_i = gamma^(i+1) S^T q_i (what came before) plus
    sum_(j <= i) gamma^(i-j) (q_i . k_j) v_j (the chunk itself, the masked quadratic form)."""
    n = q.shape[1]
    g = powers(B, gamma, n)[None, :, None]
    mask = np.tril(np.ones((n, n), dtype=bool))
    inside = np.where(mask, (q * g) @ (k / g).transpose(0, 2, 1), B.c(0)) @ v
    return inside + (q * g * gamma) @ S


@linear_attention_chunk_out.defvjp
def _(B, S, q, k, v, gamma, dy):
    n = q.shape[1]
    g = powers(B, gamma, n)[None, :, None]
    mask = np.tril(np.ones((n, n), dtype=bool))
    Qg, Kg = q * g, k / g
    M = np.where(mask, Qg @ Kg.transpose(0, 2, 1), B.c(0))            # inside = M V
    dM = np.where(mask, dy @ v.transpose(0, 2, 1), B.c(0))
    dS = (q * g * gamma).transpose(0, 2, 1) @ dy
    dq = (dM @ Kg) * g + (dy @ S.transpose(0, 2, 1)) * g * gamma
    return dS, dq, (dM.transpose(0, 2, 1) @ Qg) / g, M.transpose(0, 2, 1) @ dy


for _chunk_op in (linear_attention_chunk_state, linear_attention_chunk_out):
    _chunk_op.every_size(*(c for c in _chunk_op.claims() if c.startswith("vjp[")))

linear_attention_chunked = chunked(
    linear_attention, state=linear_attention_chunk_state, out=linear_attention_chunk_out,
    name="linear_attention_chunked", chunk=2,
    dims=[{"h": 1, "T": 1, "d": 2, "e": 2}, {"h": 1, "T": 3, "d": 2, "e": 1}, {"h": 2, "T": 5, "d": 1, "e": 2}],
    check_dims={"h": 2, "T": 9, "d": 3, "e": 2},
    # mod p at the recurrent form's production size, in chunks of 64 and of 100 (the last chunk 48 long)
    modular_dims=[{"h": 4, "T": 2048, "d": 64, "e": 64, "C": 64}, {"h": 4, "T": 2048, "d": 64, "e": 64, "C": 100}])
linear_attention_chunked.every_size("vjp[q]", "vjp[k]", "vjp[v]", "equals_the_recurrent_form")
