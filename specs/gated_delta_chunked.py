"""The gated delta rule in its chunked form (the WY / UT form of chunked Gated DeltaNet kernels), held
to the recurrent form of ``gated_delta_rule``.

Inside a chunk of n steps, with gamma_i = alpha_1 ... alpha_i the gate's decay from the chunk's start
(per head), the state after step i is gamma_i (S - sum_(j <= i) k_j r_j^T / gamma_j), where the rows
r_i^T = beta_i (gamma_i k_i^T S - v_i^T) - beta_i sum_(j < i) (gamma_i / gamma_j) (k_i . k_j) r_j^T
are one unit lower triangular system, (I + A) R = diag(beta gamma) K S - diag(beta) V with
A_ij = beta_i (gamma_i / gamma_j) (k_i . k_j) for j < i. So a chunk is matrix products:

    S' = gamma_n S - K^T diag(gamma_n / gamma) R        O = diag(gamma) Q S - (G o tril(Q K^T)) R

(G_ij = gamma_i / gamma_j). A is strictly lower triangular, so (I + A)^-1 is the language's ``unit_lower_inverse``
(a finite series with no division, which every field reads alike; an atom at a symbolic chunk length). Each chunk op's backward is written out by hand (through the
inverse: dA = -T^T dT T^T). ``core.chunked`` holds the two ops to the recurrence's cell and readout
(its generated laws) and makes the chunked op, whose forward is the recurrent form's at every length
and chunk size tried, and whose backward is its VJP.
"""
import numpy as np

from vjpcert.core.chunked import chunked
from vjpcert.core.matrix_functions import unit_lower_inverse
from vjpcert.core.registry import op
from vjpcert.specs.gated_delta_rule import STATE, gated_delta_rule, gates, unit_keys

CHUNK = dict(dims=[{"h": 1, "n": 1, "dk": 2, "dv": 2}, {"h": 1, "n": 2, "dk": 2, "dv": 1},
                   {"h": 1, "n": 3, "dk": 1, "dv": 1}],
             check_dims={"h": 2, "n": 4, "dk": 3, "dv": 2},
             sample={"k": unit_keys, "alpha": gates, "beta": gates})


def _heads(x):
    """(n, h, ...) -> (h, n, ...): a chunk's sequence, head first, for per-head matrix products."""
    return x.transpose(1, 0, *range(2, x.ndim))


def _t(x):
    """Per head: the transpose of the last two axes."""
    return x.transpose(0, 2, 1)


def _masks(n):
    """j <= i and j < i over a chunk's (i, j)."""
    return np.tril(np.ones((n, n), dtype=bool)), np.tril(np.ones((n, n), dtype=bool), -1)


def _decays(B, a):
    """gamma (h, n): the products a_1 ... a_i, and the ratios gamma_i / gamma_j (h, n, n)."""
    incl, _ = _masks(a.shape[1])
    g = np.where(incl[None], a[:, None, :], B.c(1)).prod(2)
    return g, g[:, :, None] / g[:, None, :]


def _solve(B, S, K, V, a, b):
    """What both chunk ops read: gamma, the ratios, T = (I + A)^-1, the right side, and R."""
    _, strict = _masks(K.shape[1])
    g, ratio = _decays(B, a)
    T = unit_lower_inverse(B, np.where(strict, b[:, :, None] * ratio * (K @ _t(K)), B.c(0)))
    rhs = (b * g)[:, :, None] * (K @ S) - b[:, :, None] * V
    return g, ratio, T, rhs, T @ rhs


def _back_through_R(B, S, K, V, a, b, g, ratio, T, rhs, dR):
    """The cotangents of S, K, V, b and gamma from R's (dR), through R = T rhs and T = (I + A)^-1."""
    _, strict = _masks(K.shape[1])
    drhs = _t(T) @ dR
    dA = np.where(strict, -(_t(T) @ (dR @ _t(rhs)) @ _t(T)), B.c(0))
    KS, M = K @ S, K @ _t(K)
    dKS = (b * g)[:, :, None] * drhs
    dbg = (drhs * KS).sum(2)
    db = dbg * g - (drhs * V).sum(2) + (dA * ratio * M).sum(2)
    dM = dA * b[:, :, None] * ratio
    dK = dKS @ _t(S) + (dM + _t(dM)) @ K
    dg = dbg * b + _ratio_back(g, ratio, dA * b[:, :, None] * M)
    return _t(K) @ dKS, dK, -b[:, :, None] * drhs, db, dg


def _ratio_back(g, ratio, dratio):
    """gamma's cotangent from that of the ratios gamma_i / gamma_j."""
    return (dratio / g[:, None, :]).sum(2) - (dratio * ratio).sum(1) / g


def _gate_back(B, a, g, dg):
    """The gate's cotangent from gamma's: d a_l = sum_(i >= l) gamma_i d gamma_i / a_l."""
    incl, _ = _masks(a.shape[1])
    return np.where(incl[None], (g * dg)[:, :, None], B.c(0)).sum(1) / a


@op(inputs={"S": STATE, "k": ("n", "h", "dk"), "v": ("n", "h", "dv"), "alpha": ("n", "h"), "beta": ("n", "h")},
    output=STATE, **CHUNK)
def gated_delta_chunk_state(B, S, k, v, alpha, beta):
    """The state after a chunk of n steps: gamma_n S - K^T diag(gamma_n / gamma) R."""
    K, V, a, b = _heads(k), _heads(v), alpha.T, beta.T
    g, _, _, _, R = _solve(B, S, K, V, a, b)
    gn = a.prod(1)
    return gn[:, None, None] * S - _t(K) @ ((gn[:, None] / g)[:, :, None] * R)


@gated_delta_chunk_state.defvjp
def _(B, S, k, v, alpha, beta, dy):
    K, V, a, b = _heads(k), _heads(v), alpha.T, beta.T
    g, ratio, T, rhs, R = _solve(B, S, K, V, a, b)
    gn = a.prod(1)
    w = gn[:, None] / g                                    # gamma_n / gamma_j: r_j's weight
    dW = -(K @ dy)
    dw = (dW * R).sum(2)
    dS, dK, dV, db, dg = _back_through_R(B, S, K, V, a, b, g, ratio, T, rhs, w[:, :, None] * dW)
    d_gn = (dy * S).sum((1, 2)) + (dw / g).sum(1)
    dg = dg - dw * w / g
    da = _gate_back(B, a, g, dg) + d_gn[:, None] * gn[:, None] / a
    dK = dK - (w[:, :, None] * R) @ _t(dy)
    return gn[:, None, None] * dy + dS, _heads(dK), _heads(dV), da.T, db.T


@op(inputs={"S": STATE, "q": ("n", "h", "dk"), "k": ("n", "h", "dk"), "v": ("n", "h", "dv"), "alpha": ("n", "h"),
            "beta": ("n", "h")}, output=("n", "h", "dv"), **CHUNK)
def gated_delta_chunk_out(B, S, q, k, v, alpha, beta):
    """A chunk's outputs from the state S before it: diag(gamma) Q S - (G o tril(Q K^T)) R."""
    Q, K, V, a, b = _heads(q), _heads(k), _heads(v), alpha.T, beta.T
    incl, _ = _masks(K.shape[1])
    g, ratio, _, _, R = _solve(B, S, K, V, a, b)
    return _heads(g[:, :, None] * (Q @ S) - np.where(incl, ratio * (Q @ _t(K)), B.c(0)) @ R)


@gated_delta_chunk_out.defvjp
def _(B, S, q, k, v, alpha, beta, dy):
    Q, K, V, a, b, dO = _heads(q), _heads(k), _heads(v), alpha.T, beta.T, _heads(dy)
    incl, _ = _masks(K.shape[1])
    g, ratio, T, rhs, R = _solve(B, S, K, V, a, b)
    QK = Q @ _t(K)
    E = np.where(incl, ratio * QK, B.c(0))
    dQS = g[:, :, None] * dO
    dE = np.where(incl, -(dO @ _t(R)), B.c(0))
    dS, dK, dV, db, dg = _back_through_R(B, S, K, V, a, b, g, ratio, T, rhs, -(_t(E) @ dO))
    dQK = dE * ratio
    dg = dg + (dO * (Q @ S)).sum(2) + _ratio_back(g, ratio, dE * QK)
    dQ = dQS @ _t(S) + dQK @ K
    return _t(Q) @ dQS + dS, _heads(dQ), _heads(dK + _t(dQK) @ Q), _heads(dV), _gate_back(B, a, g, dg).T, db.T


for _chunk_op in (gated_delta_chunk_state, gated_delta_chunk_out):
    _chunk_op.every_size(*(c for c in _chunk_op.claims() if c.startswith("vjp[")))

gated_delta_rule_chunked = chunked(
    gated_delta_rule, state=gated_delta_chunk_state, out=gated_delta_chunk_out, name="gated_delta_rule_chunked",
    chunk=2,
    dims=[{"T": 1, "h": 1, "dk": 2, "dv": 2}, {"T": 3, "h": 1, "dk": 2, "dv": 1}, {"T": 5, "h": 1, "dk": 1, "dv": 1}],
    check_dims={"T": 9, "h": 2, "dk": 3, "dv": 2},
    # mod p at the recurrent form's production size, in chunks of 64 and of 100 (the last chunk 48 long)
    modular_dims=[{"T": 2048, "h": 4, "dk": 64, "dv": 64, "C": 64},
                  {"T": 2048, "h": 4, "dk": 64, "dv": 64, "C": 100}])
# Stated for every length and chunk size, as the linear attention's chunked form is: by induction over the
# chunks, from the chunk ops' claims for every n (the every-size tier reads the gates' product at a
# symbolic n as exp of a sum of logs, and the solve as an atom per entry). The forms' agreement rests on
# the chunk ops' laws, which the every-size tier proves with the chunk's last step taken out: T's last row
# by forward substitution against the rows above it, the (n - 1)-step solve (ARCHITECTURE.md).
gated_delta_rule_chunked.every_size("vjp[S]", "vjp[k]", "vjp[v]", "vjp[alpha]", "vjp[beta]", "vjp[q]",
                                    "equals_the_recurrent_form")
