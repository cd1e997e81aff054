"""Wrong backwards of Elman's network, from the bug families of hand-written backpropagation through
time, and a wrong cell backward."""
import numpy as np

from vjpcert.specs.elman_rnn import elman_cell, elman_rnn


def _states(B, h, x, W, U, b):
    return elman_rnn(B, h, x, W, U, b)


def _bptt(B, h, x, W, U, b, dy, *, carry=True, shift=0, shared_last_only=False, reverse=True):
    """Backpropagation through time written out by hand, with one of its classic bugs switched on."""
    hs = _states(B, h, x, W, U, b)
    T = len(hs)
    dh = None
    dxs = [None] * T
    dW = dU = db = None
    for t in (reversed(range(T)) if reverse else range(T)):
        s = t - shift
        h_prev = h if s <= 0 else hs[s - 1]
        g = dy[t] if dh is None or not carry else dy[t] + dh
        g = g * (1 - hs[t] * hs[t])
        dh = W.T @ g
        dxs[t] = U.T @ g
        if shared_last_only and dW is not None:
            continue
        dW = np.outer(g, h_prev) if dW is None else dW + np.outer(g, h_prev)
        dU = np.outer(g, x[t]) if dU is None else dU + np.outer(g, x[t])
        db = g if db is None else db + g
    return dh, np.stack(dxs), dW, dU, db


@elman_rnn.mutant("carry_gradient_dropped", kills=["vjp[h]", "vjp[x]", "vjp[W]", "vjp[U]", "vjp[b]"])
def _(B, h, x, W, U, b, dy):
    """Each step's cotangent is dy_t alone: the gradient the later steps send back is lost."""
    return _bptt(B, h, x, W, U, b, dy, carry=False)


@elman_rnn.mutant("off_by_one_saved_state", kills=["vjp[W]"])
def _(B, h, x, W, U, b, dy):
    """dW pairs step t's cotangent with h_(t-2), the state one step too early."""
    return _bptt(B, h, x, W, U, b, dy, shift=1)


@elman_rnn.mutant("shared_gradient_of_the_last_step_only", kills=["vjp[W]", "vjp[U]", "vjp[b]"])
def _(B, h, x, W, U, b, dy):
    """The shared weights' gradient from the last step alone, not summed over time."""
    return _bptt(B, h, x, W, U, b, dy, shared_last_only=True)


@elman_rnn.mutant("forward_order_loop", kills=["vjp[h]", "vjp[x]", "vjp[W]", "vjp[U]", "vjp[b]"])
def _(B, h, x, W, U, b, dy):
    """The backward loop runs t = 1..T, so each step sees the carry cotangent of the step before."""
    return _bptt(B, h, x, W, U, b, dy, reverse=False)


@elman_cell.mutant("tanh_derivative_unsquared", kills=["vjp[h]", "vjp[x]", "vjp[W]", "vjp[U]", "vjp[b]"])
def _(B, h, x, W, U, b, dy):
    """tanh' written as 1 - tanh, not 1 - tanh^2."""
    h_new = B.tanh(W @ h + U @ x + b)
    g = dy * (1 - h_new)
    return W.T @ g, U.T @ g, np.outer(g, h), np.outer(g, x), g
