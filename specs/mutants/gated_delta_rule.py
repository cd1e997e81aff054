"""Wrong gated-delta-rule backwards, from the bug families of hand-written delta-rule kernels: the
erasure's transpose forgotten on the way back to the state, the key's second use (in k^T S) dropped
from its gradient, the erasure left out of beta's gradient, the gate's gradient read off the state
before the erasure, the writing strength left out of the value's gradient, a sign error and a
forgotten cotangent in the readout, the state's cotangent not carried to the step before, the reverse
loop off by one; and a forward that writes without erasing (linear attention with a decay)."""
import numpy as np

from vjpcert.specs.gated_delta_rule import (_keyed, _outer, _per_head, gated_delta_cell, gated_delta_readout,
                                            gated_delta_rule)

SCAN_INPUTS = ("S", "k", "v", "alpha", "beta", "q")


def _cell_backward(B, S, k, v, alpha, beta, dy, *, erase_back=True, second_key=True, beta_erases=True,
                   gate_on_erased=True, value_times_beta=True):
    """The cell's backward with one bug switched on."""
    u = _keyed(S, k)
    P = S - _per_head(beta) * _outer(k, u)
    dP = _per_head(alpha) * dy
    w = _keyed(dP, k)
    dS = dP - _per_head(beta) * _outer(k, w) if erase_back else dP
    d_alpha = (dy * (P if gate_on_erased else S)).sum((1, 2))
    d_beta = (dy * _outer(k, v)).sum((1, 2)) - ((dP * _outer(k, u)).sum((1, 2)) if beta_erases else 0)
    dk = (dy * v[:, None, :]).sum(2) - (dP * u[:, None, :]).sum(2) - ((S * w[:, None, :]).sum(2) if second_key else 0)
    dk = _per_head(beta)[:, :, 0] * dk
    dv = _keyed(dy, k) * (_per_head(beta)[:, :, 0] if value_times_beta else 1)
    return dS, dk, dv, d_alpha, d_beta


@gated_delta_cell.mutant("erasure_not_transposed_back_to_the_state", kills=["vjp[S]"])
def _(B, S, k, v, alpha, beta, dy):
    """dS = alpha dS': the state's cotangent skips (I - beta k k^T)^T, as if the erasure were not there."""
    return _cell_backward(B, S, k, v, alpha, beta, dy, erase_back=False)


@gated_delta_cell.mutant("key_gradient_misses_its_use_in_the_erased_value", kills=["vjp[k]"])
def _(B, S, k, v, alpha, beta, dy):
    """dk without -beta S (dP^T k): k appears twice in beta k (k^T S), and the second use is dropped."""
    return _cell_backward(B, S, k, v, alpha, beta, dy, second_key=False)


@gated_delta_cell.mutant("beta_gradient_misses_the_erasure", kills=["vjp[beta]"])
def _(B, S, k, v, alpha, beta, dy):
    """d beta = <dS', k v^T> alone: beta scales the erasure too."""
    return _cell_backward(B, S, k, v, alpha, beta, dy, beta_erases=False)


@gated_delta_cell.mutant("gate_gradient_from_the_state_before_the_erasure", kills=["vjp[alpha]"])
def _(B, S, k, v, alpha, beta, dy):
    """d alpha = <dS', S>: the gate multiplies the erased state, but the saved state before it is used."""
    return _cell_backward(B, S, k, v, alpha, beta, dy, gate_on_erased=False)


@gated_delta_cell.mutant("value_gradient_without_beta", kills=["vjp[v]"])
def _(B, S, k, v, alpha, beta, dy):
    """dv = dS'^T k: the writing strength beta left out."""
    return _cell_backward(B, S, k, v, alpha, beta, dy, value_times_beta=False)


@gated_delta_readout.mutant("state_gradient_sign_flipped", kills=["vjp[S]"])
def _(B, S, q, dy):
    """dS = -q do^T: a sign error in the readout's backward."""
    return -_outer(q, dy), (S * dy[:, None, :]).sum(2)


@gated_delta_readout.mutant("query_gradient_forgotten", kills=["vjp[q]"])
def _(B, S, q, dy):
    """dq = 0: the query's cotangent never computed (a kernel that returns an unwritten buffer)."""
    return _outer(q, dy), q * 0


def _bptt(B, S, k, v, alpha, beta, q, dy, *, carry=True, first_step=True):
    """Backpropagation through time written out by hand over the cell's and the readout's backwards,
    with one of its classic bugs switched on."""
    T = len(k)
    states = [S]
    for t in range(T):
        states.append(gated_delta_cell(B, states[-1], k[t], v[t], alpha[t], beta[t]))
    grads = {n: [None] * T for n in SCAN_INPUTS[1:]}
    dS = S * 0
    for t in reversed(range(0 if first_step else 1, T)):
        dS_read, dq = gated_delta_readout.vjp(B, states[t + 1], q[t], dy[t])
        g = dS_read + dS if carry else dS_read
        dS, dk, dv, da, db = gated_delta_cell.vjp(B, states[t], k[t], v[t], alpha[t], beta[t], g)
        for n, d in zip(("k", "v", "alpha", "beta", "q"), (dk, dv, da, db, dq)):
            grads[n][t] = d
    zero = {"k": k[0] * 0, "v": v[0] * 0, "alpha": alpha[0] * 0, "beta": beta[0] * 0, "q": q[0] * 0}
    seq = {n: np.stack([d if d is not None else zero[n] for d in ds]) for n, ds in grads.items()}
    return dS, seq["k"], seq["v"], seq["alpha"], seq["beta"], seq["q"]


@gated_delta_rule.mutant("state_cotangent_not_carried_back", kills=["vjp[S]", "vjp[k]", "vjp[v]", "vjp[alpha]",
                                                                     "vjp[beta]"])
def _(B, S, k, v, alpha, beta, q, dy):
    """Each step's state cotangent is what its own readout sends back: the later steps' is lost."""
    return _bptt(B, S, k, v, alpha, beta, q, dy, carry=False)


@gated_delta_rule.mutant("reverse_loop_stops_before_the_first_step", kills=[f"vjp[{n}]" for n in SCAN_INPUTS])
def _(B, S, k, v, alpha, beta, q, dy):
    """for t in reversed(range(1, T)): the first step's backward never runs (at T = 1, none does)."""
    return _bptt(B, S, k, v, alpha, beta, q, dy, first_step=False)


@gated_delta_rule.mutant("writes_without_erasing", replaces="forward",
                         kills=[*(f"vjp[{n}]" for n in SCAN_INPUTS), "a_key_written_at_full_strength_recalls_its_value"])
def _(B, S, k, v, alpha, beta, q):
    """S_t = alpha_t S_(t-1) + beta_t k_t v_t^T: linear attention with a decay where the delta rule was
    meant (the erase term dropped), under the delta rule's backward."""
    out = []
    for t in range(len(k)):
        S = _per_head(alpha[t]) * S + _per_head(beta[t]) * _outer(k[t], v[t])
        out.append(_keyed(S, q[t]))
    return np.stack(out)
