"""Wrong linear attention, from the bug families of hand-written recurrent and chunked kernels: the
state read before its update, the reverse carry without its decay or one step late, the state's
cotangent not carried between chunks or not decayed across one, the boundary state applied twice,
the decay mask transposed."""
import numpy as np

from vjpcert.specs.linear_attention import (_chunks, _powers, chunked_backward, linear_attention,
                                            linear_attention_chunked, next_state, states)

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


@linear_attention_chunked.mutant("state_cotangent_not_carried_between_chunks", kills=["vjp[k]", "vjp[v]"])
def _(B, q, k, v, gamma, C, dy):
    """Each chunk starts its backward from its own outputs' cotangent: the later chunks' is dropped."""
    return chunked_backward(B, q, k, v, gamma, C, dy, carried_back=lambda dS, own, decay: own)


@linear_attention_chunked.mutant("state_cotangent_not_decayed_across_a_chunk", kills=["vjp[k]", "vjp[v]"])
def _(B, q, k, v, gamma, C, dy):
    """The carried cotangent passes a chunk of n steps without its gamma^n."""
    return chunked_backward(B, q, k, v, gamma, C, dy, carried_back=lambda dS, own, decay: dS + own)


def _chunked_forward(B, q, k, v, gamma, C, *, before_twice=False, mask_transposed=False):
    S = B.zeros((k.shape[0], k.shape[2], v.shape[2]))
    out = []
    for s, e in _chunks(q.shape[1], C):
        Q, K, V = q[:, s:e], k[:, s:e], v[:, s:e]
        n = e - s
        g = _powers(B, gamma, n + 1)
        mask = np.tril(np.ones((n, n), dtype=bool))
        A = ((Q / g[:n, None]) @ (K * g[:n, None]).transpose(0, 2, 1) if mask_transposed
             else (Q * g[:n, None]) @ (K / g[:n, None]).transpose(0, 2, 1))
        before = (Q * g[1:, None]) @ S
        out.append(np.where(mask, A, B.c(0)) @ V + (2 * before if before_twice else before))
        S = next_state(S, K, V, g)
    return np.concatenate(out, axis=1)


@linear_attention_chunked.mutant("boundary_state_applied_twice", replaces="forward",
                                 kills=[*VJPS, *(f"chunks_of_{C}_equal_the_recurrent_form" for C in range(1, 5))])
def _(B, q, k, v, gamma, C):
    """The state carried into a chunk is added to its outputs twice (no effect on one chunk alone)."""
    return _chunked_forward(B, q, k, v, gamma, C, before_twice=True)


@linear_attention_chunked.mutant("decay_mask_transposed", replaces="forward",
                                 kills=[*VJPS, *(f"chunks_of_{C}_equal_the_recurrent_form" for C in range(2, 6))])
def _(B, q, k, v, gamma, C):
    """Inside a chunk gamma^(j - i) for gamma^(i - j) (no effect on chunks of one step)."""
    return _chunked_forward(B, q, k, v, gamma, C, mask_transposed=True)
