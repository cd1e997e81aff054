"""Wrong LSTM backwards: the forget gate's derivative from the wrong saved value, the output gate
through the cell state instead of its tanh, the cell state's own cotangent ignored, the cell state's
gradient not carried to the previous step, and hand-written backpropagation through time off by one."""
import numpy as np

from vjpcert.specs.lstm import gates, lstm, lstm_cell

WEIGHTS = ("Wi", "Ui", "Wf", "Uf", "Wo", "Uo", "Wg", "Ug")
ALL = ["vjp[s]", "vjp[x]", *(f"vjp[{w}]" for w in WEIGHTS)]


def _cell_backward(B, s, x, weights, dy, *, forget_from_new_c=False, output_through_c=False,
                   own_cotangent=True, carry_c=True):
    """The cell's backward with one bug switched on."""
    h, c = s[0], s[1]
    i, f, o, g = gates(B, h, x, *weights)
    c_new = f * c + i * g
    t = B.tanh(c_new)
    dc = (dy[1] if own_cotangent else 0) + dy[0] * o * (1 - t * t)
    ai = dc * g * i * (1 - i)
    af = dc * (c_new if forget_from_new_c else c) * f * (1 - f)
    ao = dy[0] * (c_new if output_through_c else t) * o * (1 - o)
    ag = dc * i * (1 - g * g)
    Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug = weights
    dh = Ui.T @ ai + Uf.T @ af + Uo.T @ ao + Ug.T @ ag
    dx = Wi.T @ ai + Wf.T @ af + Wo.T @ ao + Wg.T @ ag
    return (np.stack([dh, dc * f if carry_c else dc * 0]), dx, np.outer(ai, x), np.outer(ai, h),
            np.outer(af, x), np.outer(af, h), np.outer(ao, x), np.outer(ao, h), np.outer(ag, x), np.outer(ag, h))


@lstm_cell.mutant("forget_gate_derivative_at_the_new_cell_state", kills=["vjp[s]", "vjp[x]", "vjp[Wf]", "vjp[Uf]"])
def _(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug, dy):
    """df = dc c': the forget gate multiplies the old cell state, but the saved new one is used."""
    return _cell_backward(B, s, x, (Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug), dy, forget_from_new_c=True)


@lstm_cell.mutant("output_gate_through_the_cell_state_not_its_tanh",
                  kills=["vjp[s]", "vjp[x]", "vjp[Wo]", "vjp[Uo]"])
def _(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug, dy):
    """do = dh' c', not dh' tanh(c')."""
    return _cell_backward(B, s, x, (Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug), dy, output_through_c=True)


@lstm_cell.mutant("cell_state_cotangent_ignored",
                  kills=["vjp[s]", "vjp[x]", "vjp[Wi]", "vjp[Ui]", "vjp[Wf]", "vjp[Uf]", "vjp[Wg]", "vjp[Ug]"])
def _(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug, dy):
    """dc = dh' o (1 - tanh(c')^2) alone: what reaches c' directly (the next step's carry) is lost."""
    return _cell_backward(B, s, x, (Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug), dy, own_cotangent=False)


@lstm_cell.mutant("cell_state_gradient_not_carried_back", kills=["vjp[s]"])
def _(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug, dy):
    """The previous cell state's cotangent is 0, not dc f: the long-term memory's gradient stops."""
    return _cell_backward(B, s, x, (Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug), dy, carry_c=False)


@lstm.mutant("reverse_loop_off_by_one", kills=ALL)
def _(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug, dy):
    """for t in reversed(range(1, T)): the first step's backward never runs."""
    weights = (Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug)
    states = lstm(B, s, x, *weights)
    T = len(states)
    ds, dxs, dw = None, [x[t] * 0 for t in range(T)], [w * 0 for w in weights]
    for t in reversed(range(1, T)):
        grads = lstm_cell.vjp(B, states[t - 1], x[t], *weights, dy[t] if ds is None else dy[t] + ds)
        ds, dxs[t] = grads[0], grads[1]
        dw = [a + b for a, b in zip(dw, grads[2:])]
    return (s * 0 if ds is None else ds, np.stack(dxs), *dw)
