"""Wrong linear attention, from the bug families of hand-written recurrent and chunked kernels: the
state read before its update, the reverse carry without its decay or one step late, the state's
cotangent not carried between chunks or not decayed across one, the boundary state applied twice or
not at all, the decay mask transposed, the decay applied inside the chunk instead of across it."""
import numpy as np

from vjpcert.core.registry import BoundNode
from vjpcert.specs.linear_attention import (_outer, _read, linear_attention, linear_attention_cell,
                                            linear_attention_chunk_out, linear_attention_chunk_state,
                                            linear_attention_chunked, linear_attention_readout, powers)


def states(B, k, v, gamma):
    """S_1 .. S_T, the recurrent form's states, by the loop people write."""
    S = B.zeros((k.shape[0], k.shape[2], v.shape[2]))
    out = []
    for t in range(k.shape[1]):
        S = gamma * S + k[:, t][:, :, None] * v[:, t][:, None, :]
        out.append(S)
    return out

VJPS = ["vjp[q]", "vjp[k]", "vjp[v]"]


def _recurrent_backward(B, q, k, v, gamma, dy, *, decay=True, late=False, previous_state=False):
    """The recurrent form's backward with one bug switched on."""
    S = states(B, k, v, gamma)
    dq, dk, dv = [None] * q.shape[1], [None] * q.shape[1], [None] * q.shape[1]
    dS = B.zeros(S[0].shape)
    for t in reversed(range(q.shape[1])):
        here = q[:, t][:, :, None] * dy[:, t][:, None, :]
        dS = dS if late else dS + here
        state = (S[t - 1] if t else S[0] * 0) if previous_state else S[t]
        dq[t] = (state * dy[:, t][:, None, :]).sum(2)
        dk[t] = (dS * v[:, t][:, None, :]).sum(2)
        dv[t] = (dS * k[:, t][:, :, None]).sum(1)
        dS = (dS + here) if late else dS
        dS = gamma * dS if decay else dS
    return np.stack(dq, axis=1), np.stack(dk, axis=1), np.stack(dv, axis=1)


@linear_attention.mutant("reverse_carry_without_the_decay", kills=["vjp[k]", "vjp[v]"])
def _(B, q, k, v, gamma, dy):
    """dS_t = q_t do_t^T + dS_(t+1): the decay of S_t = gamma S_(t-1) + ... is left out going back."""
    return _recurrent_backward(B, q, k, v, gamma, dy, decay=False)


@linear_attention.mutant("state_cotangent_one_step_late", kills=["vjp[k]", "vjp[v]"])
def _(B, q, k, v, gamma, dy):
    """dk_t, dv_t from dS before q_t do_t^T is added: step t's own output is left out of them."""
    return _recurrent_backward(B, q, k, v, gamma, dy, late=True)


@linear_attention.mutant("dq_from_the_previous_state", kills=["vjp[q]"])
def _(B, q, k, v, gamma, dy):
    """dq_t = S_(t-1) do_t: the saved state one step off."""
    return _recurrent_backward(B, q, k, v, gamma, dy, previous_state=True)


@linear_attention.mutant("state_read_before_its_update", replaces="forward",
                         kills=[*VJPS, "without_decay_it_is_causal_attention_without_softmax"])
def _(B, q, k, v, gamma):
    """o_t = S_(t-1)^T q_t: the diagonal s = t left out of the sum."""
    S = states(B, k, v, gamma)
    return np.stack([((S[t - 1] if t else S[0] * 0) * q[:, t][:, :, None]).sum(1) for t in range(q.shape[1])],
                    axis=1)


# ------------------------------------------------------------------------------ the cell and the readout
@linear_attention_cell.mutant("state_gradient_without_the_decay", kills=["vjp[S]"])
def _(B, S, k, v, gamma, dy):
    """dS = dS': the decay of S' = gamma S + k v^T forgotten going back."""
    return dy, (dy * v[:, None, :]).sum(2), _read(dy, k)


@linear_attention_cell.mutant("key_gradient_decayed", kills=["vjp[k]"])
def _(B, S, k, v, gamma, dy):
    """dk = gamma dS' v: the state's decay applied to the new term too."""
    return gamma * dy, gamma * (dy * v[:, None, :]).sum(2), _read(dy, k)


@linear_attention_cell.mutant("value_gradient_decayed", kills=["vjp[v]"])
def _(B, S, k, v, gamma, dy):
    """dv = gamma dS'^T k: the same, for the value."""
    return gamma * dy, (dy * v[:, None, :]).sum(2), gamma * _read(dy, k)


@linear_attention_readout.mutant("state_gradient_sign_flipped", kills=["vjp[S]"])
def _(B, S, q, dy):
    return -_outer(q, dy), (S * dy[:, None, :]).sum(2)


@linear_attention_readout.mutant("query_gradient_forgotten", kills=["vjp[q]"])
def _(B, S, q, dy):
    return _outer(q, dy), q * 0


# ------------------------------------------------------------------------------ the chunked form
def _chunked_backward(B, q, k, v, gamma, C, dy, *, carried=True):
    """The chunked backward written by hand over the chunk ops' backwards (``carried``: the state's
    cotangent handed from a chunk to the one before it)."""
    T = q.shape[1]
    spans = [(s, min(s + C, T)) for s in range(0, T, C)]
    F, G = BoundNode(linear_attention_chunk_state, B), BoundNode(linear_attention_chunk_out, B)
    starts = [B.zeros((k.shape[0], k.shape[2], v.shape[2]))]
    for s, e in spans:
        starts.append(F(starts[-1], k[:, s:e], v[:, s:e], gamma=gamma))
    dq, dk, dv, dS = [], [], [], None
    for c in reversed(range(len(spans))):
        s, e = spans[c]
        gS, gq, gk, gv = G.vjp(starts[c], q[:, s:e], k[:, s:e], v[:, s:e], dy[:, s:e], gamma=gamma)
        if dS is not None:
            fS, fk, fv = F.vjp(starts[c], k[:, s:e], v[:, s:e], dS, gamma=gamma)
            gS, gk, gv = gS + fS, gk + fk, gv + fv
        dS = gS if carried else None
        dq.insert(0, gq), dk.insert(0, gk), dv.insert(0, gv)
    return np.concatenate(dq, axis=1), np.concatenate(dk, axis=1), np.concatenate(dv, axis=1)


@linear_attention_chunked.mutant("state_cotangent_not_carried_between_chunks", kills=["vjp[k]", "vjp[v]"])
def _(B, q, k, v, gamma, C, dy):
    """Each chunk starts its backward from its own outputs' cotangent: the later chunks' is dropped."""
    return _chunked_backward(B, q, k, v, gamma, C, dy, carried=False)


@linear_attention_chunk_state.mutant("state_cotangent_not_decayed_across_a_chunk", kills=["vjp[S]"])
def _(B, S, k, v, gamma, dy):
    """The cotangent carried back passes a chunk of n steps without its gamma^n."""
    n = k.shape[1]
    w = gamma ** n / (powers(B, gamma, n) * gamma)
    return dy, (v @ dy.transpose(0, 2, 1)) * w[None, :, None], (k * w[None, :, None]) @ dy


@linear_attention_chunk_state.mutant("decay_inside_the_chunk_not_across_it", replaces="forward",
                                     kills=["vjp[k]", "vjp[v]", "one_more_step_is_the_cell"])
def _(B, S, k, v, gamma):
    """k_j weighted by gamma^j, the decay from the chunk's start, for gamma^(n-1-j), the decay to its end."""
    n = k.shape[1]
    return gamma ** n * S + (k * powers(B, gamma, n)[None, :, None]).transpose(0, 2, 1) @ v


@linear_attention_chunk_state.mutant("state_decayed_one_step_short", replaces="forward",
                                     kills=["vjp[S]", "one_step_is_the_cell"])
def _(B, S, k, v, gamma):
    """gamma^(n-1) S for gamma^n S. Each chunk is then the one before it and one more cell step (that law
    holds), so only the base, one step is the cell, tells it from the recurrence."""
    n = k.shape[1]
    w = gamma ** n / (powers(B, gamma, n) * gamma)
    return gamma ** (n - 1) * S + (k * w[None, :, None]).transpose(0, 2, 1) @ v


def _chunk_out(B, S, q, k, v, gamma, *, before=1, transposed=False):
    n = q.shape[1]
    g = powers(B, gamma, n)[None, :, None]
    mask = np.tril(np.ones((n, n), dtype=bool))
    A = (q / g) @ (k * g).transpose(0, 2, 1) if transposed else (q * g) @ (k / g).transpose(0, 2, 1)
    return np.where(mask, A, B.c(0)) @ v + before * ((q * g * gamma) @ S)


@linear_attention_chunk_out.mutant("boundary_state_applied_twice", replaces="forward",
                                   kills=["vjp[S]", "vjp[q]", "one_step_is_the_readout",
                                          "one_more_step_is_the_readout"])
def _(B, S, q, k, v, gamma):
    """The state carried into a chunk is added to its outputs twice."""
    return _chunk_out(B, S, q, k, v, gamma, before=2)


@linear_attention_chunk_out.mutant("boundary_state_not_applied", replaces="forward",
                                   kills=["vjp[S]", "vjp[q]", "one_step_is_the_readout",
                                          "one_more_step_is_the_readout"])
def _(B, S, q, k, v, gamma):
    """The chunk's outputs leave out what came before it (right for the first chunk only)."""
    return _chunk_out(B, S, q, k, v, gamma, before=0)


@linear_attention_chunk_out.mutant("decay_mask_transposed", replaces="forward",
                                   kills=["vjp[q]", "vjp[k]", "vjp[v]", "one_more_step_is_the_readout"])
def _(B, S, q, k, v, gamma):
    """Inside a chunk gamma^(j - i) for gamma^(i - j) (no effect on chunks of one step)."""
    return _chunk_out(B, S, q, k, v, gamma, transposed=True)


@linear_attention_chunked.mutant("chunks_start_from_a_zero_state", replaces="forward",
                                 kills=["vjp[q]", "vjp[k]", "vjp[v]", "equals_the_recurrent_form"])
def _(B, q, k, v, gamma, C):
    """The state is not carried into the next chunk: each chunk's outputs see only the chunk itself
    (right while the sequence is one chunk)."""
    G, T = BoundNode(linear_attention_chunk_out, B), q.shape[1]
    zero = B.zeros((k.shape[0], k.shape[2], v.shape[2]))
    return np.concatenate([G(zero, q[:, s:s + C], k[:, s:s + C], v[:, s:s + C], gamma=gamma)
                           for s in range(0, T, C)], axis=1)
