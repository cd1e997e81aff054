"""Wrong chunked gated delta rules, from the bug families of chunked (WY / UT) delta-rule kernels: the
inverse's cotangent not transposed, the key's second use in K K^T dropped from its gradient, the
gate's cotangent summed the wrong way along the chunk, the writing strength left out of the values'
gradient, the triangular system solved one squaring short, the decay to the chunk's end left out, the
decay mask inverted, a step's own write missing from its output, the state applied twice at a chunk
boundary, every chunk reading the initial state, and the state's cotangent not carried between
chunks."""
import numpy as np

from vjpcert.core.registry import BoundNode
from vjpcert.specs.gated_delta_chunked import (_decays, _gate_back, _heads, _masks, _ratio_back, _solve, _t,
                                               gated_delta_chunk_out, gated_delta_chunk_state,
                                               gated_delta_rule_chunked)


def _through_R(B, S, K, V, a, b, g, ratio, T, rhs, dR, *, transposed=True, symmetric=True, times_beta=True):
    """The spec's cotangents through R = T rhs and T = (I + A)^-1, with one bug switched on."""
    _, strict = _masks(K.shape[1])
    Tt = _t(T) if transposed else T
    drhs = _t(T) @ dR
    dA = np.where(strict, -(Tt @ (dR @ _t(rhs)) @ Tt), B.c(0))
    KS, M = K @ S, K @ _t(K)
    dKS = (b * g)[:, :, None] * drhs
    dbg = (drhs * KS).sum(2)
    db = dbg * g - (drhs * V).sum(2) + (dA * ratio * M).sum(2)
    dM = dA * b[:, :, None] * ratio
    dK = dKS @ _t(S) + ((dM + _t(dM)) if symmetric else dM) @ K
    dg = dbg * b + _ratio_back(g, ratio, dA * b[:, :, None] * M)
    return _t(K) @ dKS, dK, -(b[:, :, None] if times_beta else 1) * drhs, db, dg


def _state_backward(B, S, k, v, alpha, beta, dy, *, gate_after=True, **bug):
    """The chunk state's backward with one bug switched on (the spec's, written out in one piece)."""
    K, V, a, b = _heads(k), _heads(v), alpha.T, beta.T
    incl, _ = _masks(K.shape[1])
    g, ratio, T, rhs, R = _solve(B, S, K, V, a, b)
    gn = a.prod(1)
    w = gn[:, None] / g
    dW = -(K @ dy)
    dw = (dW * R).sum(2)
    dS, dK, dV, db, dg = _through_R(B, S, K, V, a, b, g, ratio, T, rhs, w[:, :, None] * dW, **bug)
    dg = dg - dw * w / g
    d_gn = (dy * S).sum((1, 2)) + (dw / g).sum(1)
    if gate_after:
        da = _gate_back(B, a, g, dg)
    else:                                   # sum_(i <= l) for sum_(i >= l)
        da = np.where(incl.T[None], (g * dg)[:, :, None], B.c(0)).sum(1) / a
    da = da + d_gn[:, None] * gn[:, None] / a
    dK = dK - (w[:, :, None] * R) @ _t(dy)
    return gn[:, None, None] * dy + dS, _heads(dK), _heads(dV), da.T, db.T


@gated_delta_chunk_state.mutant("inverse_cotangent_not_transposed", kills=["vjp[k]", "vjp[alpha]", "vjp[beta]"])
def _(B, S, k, v, alpha, beta, dy):
    """dA = -T dT T for -T^T dT T^T: the cotangent through (I + A)^-1 taken as if T were symmetric."""
    return _state_backward(B, S, k, v, alpha, beta, dy, transposed=False)


@gated_delta_chunk_state.mutant("key_gradient_misses_its_second_use_in_K_K_T", kills=["vjp[k]"])
def _(B, S, k, v, alpha, beta, dy):
    """dK = dM K for (dM + dM^T) K: K K^T reads each key twice, and the second read is dropped."""
    return _state_backward(B, S, k, v, alpha, beta, dy, symmetric=False)


@gated_delta_chunk_state.mutant("value_gradient_without_beta", kills=["vjp[v]"])
def _(B, S, k, v, alpha, beta, dy):
    """dV = -T^T dR: the writing strength that scales each value in the right side left out."""
    return _state_backward(B, S, k, v, alpha, beta, dy, times_beta=False)


@gated_delta_chunk_state.mutant("gate_cotangent_summed_from_the_chunk_start", kills=["vjp[alpha]"])
def _(B, S, k, v, alpha, beta, dy):
    """d a_l sums the gamma_i d gamma_i with i <= l: the reverse cumulative sum run forwards."""
    return _state_backward(B, S, k, v, alpha, beta, dy, gate_after=False)


def _state(B, S, k, v, alpha, beta, *, squarings=True, to_the_end=True):
    K, V, a, b = _heads(k), _heads(v), alpha.T, beta.T
    _, strict = _masks(K.shape[1])
    g, ratio = _decays(B, a)
    A = np.where(strict, b[:, :, None] * ratio * (K @ _t(K)), B.c(0))
    n = A.shape[-1]
    T = np.where(np.eye(n, dtype=bool)[None], B.c(1), B.c(0)) - A
    if squarings:
        T = T + T @ (A @ A)
    R = T @ ((b * g)[:, :, None] * (K @ S) - b[:, :, None] * V)
    gn = a.prod(1)
    return gn[:, None, None] * S - _t(K) @ (((gn[:, None] if to_the_end else 1) / g)[:, :, None] * R)


@gated_delta_chunk_state.mutant("triangular_solve_one_squaring_short", replaces="forward",
                                kills=["one_more_step_is_the_cell", "vjp[S]"])
def _(B, S, k, v, alpha, beta):
    """(I + A)^-1 as I - A: the first term of the series, right while a chunk has at most two steps."""
    return _state(B, S, k, v, alpha, beta, squarings=False)


@gated_delta_chunk_state.mutant("decay_to_the_chunk_end_left_out", replaces="forward",
                                kills=["one_step_is_the_cell", "vjp[k]"])
def _(B, S, k, v, alpha, beta):
    """The chunk's writes weighted by 1 / gamma_j for gamma_n / gamma_j: decayed from the chunk's start,
    not to its end."""
    return _state(B, S, k, v, alpha, beta, to_the_end=False)


def _out(B, S, q, k, v, alpha, beta, *, own_write=True, before=1, inverted=False):
    Q, K, V, a, b = _heads(q), _heads(k), _heads(v), alpha.T, beta.T
    incl, strict = _masks(K.shape[1])
    g, ratio, _, _, R = _solve(B, S, K, V, a, b)
    decay = 1 / ratio if inverted else ratio
    return _heads(before * g[:, :, None] * (Q @ S)
                  - np.where(incl if own_write else strict, decay * (Q @ _t(K)), B.c(0)) @ R)


@gated_delta_chunk_out.mutant("inverse_cotangent_not_transposed", kills=["vjp[k]", "vjp[alpha]", "vjp[beta]"])
def _(B, S, q, k, v, alpha, beta, dy):
    """The output's backward through (I + A)^-1 with dA = -T dT T, as if T were symmetric."""
    Q, K, V, a, b, dO = _heads(q), _heads(k), _heads(v), alpha.T, beta.T, _heads(dy)
    incl, _ = _masks(K.shape[1])
    g, ratio, T, rhs, R = _solve(B, S, K, V, a, b)
    QK = Q @ _t(K)
    E = np.where(incl, ratio * QK, B.c(0))
    dE = np.where(incl, -(dO @ _t(R)), B.c(0))
    dS, dK, dV, db, dg = _through_R(B, S, K, V, a, b, g, ratio, T, rhs, -(_t(E) @ dO), transposed=False)
    dg = dg + (dO * (Q @ S)).sum(2) + _ratio_back(g, ratio, dE * QK)
    dQ = (g[:, :, None] * dO) @ _t(S) + (dE * ratio) @ K
    return (_t(Q) @ (g[:, :, None] * dO) + dS, _heads(dQ), _heads(dK + _t(dE * ratio) @ Q), _heads(dV),
            _gate_back(B, a, g, dg).T, db.T)


@gated_delta_chunk_out.mutant("decay_mask_inverted", replaces="forward",
                              kills=["one_more_step_is_the_readout", "vjp[q]"])
def _(B, S, q, k, v, alpha, beta):
    """Inside the chunk gamma_j / gamma_i for gamma_i / gamma_j (no effect on chunks of one step)."""
    return _out(B, S, q, k, v, alpha, beta, inverted=True)


@gated_delta_chunk_out.mutant("own_write_missing_from_the_output", replaces="forward",
                              kills=["one_step_is_the_readout", "vjp[v]"])
def _(B, S, q, k, v, alpha, beta):
    """o_i reads the writes of the steps before i only (a strictly lower mask): step i's own is lost."""
    return _out(B, S, q, k, v, alpha, beta, own_write=False)


@gated_delta_chunk_out.mutant("boundary_state_applied_twice", replaces="forward",
                              kills=["one_step_is_the_readout", "vjp[S]", "vjp[q]"])
def _(B, S, q, k, v, alpha, beta):
    """The state carried into a chunk is read into its outputs twice."""
    return _out(B, S, q, k, v, alpha, beta, before=2)


@gated_delta_rule_chunked.mutant("state_cotangent_not_carried_between_chunks",
                                 kills=["vjp[S]", "vjp[k]", "vjp[v]", "vjp[alpha]", "vjp[beta]"])
def _(B, S, k, v, alpha, beta, q, C, dy):
    """Each chunk starts its backward from its own outputs' cotangent: the later chunks' is dropped, and
    the cotangent of the state before the sequence is the first chunk's alone."""
    T = k.shape[0]
    spans = [(s, min(s + C, T)) for s in range(0, T, C)]
    F, G = BoundNode(gated_delta_chunk_state, B), BoundNode(gated_delta_chunk_out, B)
    starts = [S]
    for s, e in spans:
        starts.append(F(starts[-1], k[s:e], v[s:e], alpha[s:e], beta[s:e]))
    grads = {n: [] for n in ("k", "v", "alpha", "beta", "q")}
    dS = None
    for c in reversed(range(len(spans))):
        s, e = spans[c]
        gS, gq, gk, gv, ga, gb = G.vjp(starts[c], q[s:e], k[s:e], v[s:e], alpha[s:e], beta[s:e], dy[s:e])
        for n, x in zip(("q", "k", "v", "alpha", "beta"), (gq, gk, gv, ga, gb)):
            grads[n].insert(0, x)
        dS = gS
    return (dS, *(np.concatenate(grads[n], axis=0) for n in ("k", "v", "alpha", "beta", "q")))


@gated_delta_rule_chunked.mutant("every_chunk_reads_the_initial_state", replaces="forward",
                                 kills=["equals_the_recurrent_form", "vjp[S]", "vjp[q]"])
def _(B, S, k, v, alpha, beta, q, C):
    """Each chunk's outputs read the state before the sequence, not the state carried to the chunk (right
    while the sequence is one chunk)."""
    G, T = BoundNode(gated_delta_chunk_out, B), k.shape[0]
    return np.concatenate([G(S, q[s:s + C], k[s:s + C], v[s:s + C], alpha[s:s + C], beta[s:s + C])
                           for s in range(0, T, C)], axis=0)
