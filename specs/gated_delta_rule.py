"""The gated delta rule (Gated DeltaNet), per head, in its recurrent form: a state S_t of shape (d_k, d_v)
per head, erased along the key before the new value is written, and decayed by a gate:

    S_t = alpha_t (I - beta_t k_t k_t^T) S_(t-1) + beta_t k_t v_t^T        o_t = S_t^T q_t

alpha_t in (0, 1] is the gate (alpha = 1: DeltaNet's delta rule), beta_t in (0, 1) the writing strength,
k_t a unit key (the numeric checks draw them so; the proofs hold for every value). The
cell (the state's update) and the readout each have their backward written out by hand:

    P = S - beta k (k^T S), S' = alpha P + beta k v^T, dP = alpha dS'
    dS = dP - beta k (k^T dP)           d alpha = <dS', P>           dv = beta dS'^T k
    d beta = <dS', k v^T> - <dP, k (k^T S)>
    dk = beta (dS' v - dP (S^T k) - S (dP^T k))

and the scan's is backpropagation through time over them (``core.recurrence``), proved for every
length by induction from theirs, which hold for every number of heads and every key and value width.
"""
import numpy as np

from vjpcert.core.recurrence import recurrence
from vjpcert.core.registry import op

STATE = ("h", "dk", "dv")
STEP_DIMS = dict(dims=[{"h": 1, "dk": 2, "dv": 2}, {"h": 2, "dk": 2, "dv": 1}], check_dims={"h": 2, "dk": 3, "dv": 2})


def _per_head(a):
    """A per-head scalar (h,) against the state (h, d_k, d_v)."""
    return a[:, None, None]


def _outer(a, b):
    """Per head: a (h, m), b (h, n) -> (h, m, n)."""
    return a[:, :, None] * b[:, None, :]


def _keyed(S, k):
    """Per head: S^T k, S (h, d_k, d_v), k (h, d_k) -> (h, d_v)."""
    return (S * k[:, :, None]).sum(1)


def gates(rng, shape):
    """alpha and beta as the model makes them, sigmoids: in (0, 1)."""
    return 1 / (1 + np.exp(-2 * rng.standard_normal(shape)))


def unit_keys(rng, shape):
    """Keys L2-normalised per head, as Gated DeltaNet's are: with beta in (0, 1) the erasure
    I - beta k k^T is then a contraction. (With |k|^2 beta > 2 it has an eigenvalue below -1 and the
    state grows geometrically, past what any working precision resolves over a thousand steps.)"""
    k = rng.standard_normal(shape)
    return k / np.sqrt((k * k).sum(-1, keepdims=True))


@op(inputs={"S": STATE, "k": ("h", "dk"), "v": ("h", "dv"), "alpha": ("h",), "beta": ("h",)}, output=STATE,
    sample={"k": unit_keys, "alpha": gates, "beta": gates}, **STEP_DIMS)
def gated_delta_cell(B, S, k, v, alpha, beta):
    erased = S - _per_head(beta) * _outer(k, _keyed(S, k))          # (I - beta k k^T) S
    return _per_head(alpha) * erased + _per_head(beta) * _outer(k, v)


@gated_delta_cell.defvjp
def _(B, S, k, v, alpha, beta, dy):
    u = _keyed(S, k)                                  # S^T k
    P = S - _per_head(beta) * _outer(k, u)
    dP = _per_head(alpha) * dy
    w = _keyed(dP, k)                                 # dP^T k
    dS = dP - _per_head(beta) * _outer(k, w)
    d_alpha = (dy * P).sum((1, 2))
    d_beta = (dy * _outer(k, v)).sum((1, 2)) - (dP * _outer(k, u)).sum((1, 2))
    dk = _per_head(beta)[:, :, 0] * ((dy * v[:, None, :]).sum(2) - (dP * u[:, None, :]).sum(2)
                                     - (S * w[:, None, :]).sum(2))
    dv = _per_head(beta)[:, :, 0] * _keyed(dy, k)
    return dS, dk, dv, d_alpha, d_beta


@op(inputs={"S": STATE, "q": ("h", "dk")}, output=("h", "dv"), **STEP_DIMS)
def gated_delta_readout(B, S, q):
    return _keyed(S, q)


@gated_delta_readout.defvjp
def _(B, S, q, dy):
    return _outer(q, dy), (S * dy[:, None, :]).sum(2)


gated_delta_cell.every_size("vjp[S]", "vjp[k]", "vjp[v]", "vjp[alpha]", "vjp[beta]")
gated_delta_readout.every_size("vjp[S]", "vjp[q]")

# T = 1, 2 and 3 unrolled exactly; mod p at production size: 2048 steps of 4 heads of 64.
gated_delta_rule = recurrence(gated_delta_cell, readout=gated_delta_readout, carry="S",
                              over=("k", "v", "alpha", "beta", "q"), name="gated_delta_rule",
                              dims=[{"T": 1, "h": 1, "dk": 2, "dv": 2}, {"T": 2, "h": 1, "dk": 2, "dv": 1},
                                    {"T": 3, "h": 1, "dk": 1, "dv": 1}],
                              check_dims={"T": 6, "h": 2, "dk": 3, "dv": 2},
                              modular_dims=[{"T": 2048, "h": 4, "dk": 64, "dv": 64}])
gated_delta_rule.every_size("vjp[S]", "vjp[k]", "vjp[v]", "vjp[alpha]", "vjp[beta]", "vjp[q]")


@gated_delta_rule.law
def a_key_written_at_full_strength_recalls_its_value(B, S, k, v, alpha, beta, q, forward):
    """Written at full strength, beta_t = 1 / (k_t^T k_t) (the erasure I - beta_t k_t k_t^T is then the
    projection away from k_t), S_t^T k_t = v_t whatever the gate and the state before: the delta rule
    replaces the value stored under k_t (read out with q_t = k_t). A rational identity, so every tier
    decides it (a unit key k / sqrt(k^T k) put a square root in it, which mod p leaves undecided)."""
    return forward(S, k, v, alpha, 1 / (k * k).sum(-1), k), v
