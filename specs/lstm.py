"""Long short-term memory (PyTorch's LSTM convention, without biases), the cell and its scan:

    i = sigma(Wi x + Ui h), f = sigma(Wf x + Uf h), o = sigma(Wo x + Uo h), g = tanh(Wg x + Ug h)
    c' = f c + i g, h' = o tanh(c')

The carry is the state s = (h, c), one array of shape (2, n): s[0] is h, s[1] is c. The network's
output stacks s_1 .. s_T (torch.nn.LSTM's output is its first row, h_1 .. h_T). The cell's backward is
written out by hand; the network's is backpropagation through time over it (``core.recurrence``).
"""
import numpy as np

from vjpcert.core.recurrence import recurrence
from vjpcert.core.registry import op
from vjpcert.specs.swiglu import sigmoid

N, K = ("n", "n"), ("n", "k")


def gates(B, h, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug):
    return (sigmoid(B, Wi @ x + Ui @ h), sigmoid(B, Wf @ x + Uf @ h), sigmoid(B, Wo @ x + Uo @ h),
            B.tanh(Wg @ x + Ug @ h))


@op(inputs={"s": ("2", "n"), "x": ("k",), "Wi": K, "Ui": N, "Wf": K, "Uf": N, "Wo": K, "Uo": N, "Wg": K, "Ug": N},
    output=("2", "n"), dims=[{"n": 2, "k": 3}, {"n": 3, "k": 2}], check_dims={"n": 5, "k": 4})
def lstm_cell(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug):
    h, c = s[0], s[1]
    i, f, o, g = gates(B, h, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug)
    c_new = f * c + i * g
    return np.stack([o * B.tanh(c_new), c_new])


@lstm_cell.defvjp
def _(B, s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug, dy):
    h, c = s[0], s[1]
    i, f, o, g = gates(B, h, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug)
    t = B.tanh(f * c + i * g)
    dc = dy[1] + dy[0] * o * (1 - t * t)         # c' reaches the output directly and through h'
    ai = dc * g * i * (1 - i)
    af = dc * c * f * (1 - f)
    ao = dy[0] * t * o * (1 - o)
    ag = dc * i * (1 - g * g)
    dh = Ui.T @ ai + Uf.T @ af + Uo.T @ ao + Ug.T @ ag
    dx = Wi.T @ ai + Wf.T @ af + Wo.T @ ao + Wg.T @ ag
    return (np.stack([dh, dc * f]), dx, np.outer(ai, x), np.outer(ai, h), np.outer(af, x), np.outer(af, h),
            np.outer(ao, x), np.outer(ao, h), np.outer(ag, x), np.outer(ag, h))


lstm_cell.every_size(*lstm_cell.claims())


# T = 3 at n = 1, where the ring proves the three-step loop exactly; T = 1 and 2 hold the matrices'
# shapes. Mod p at T = 2048 with 256 units and 128 inputs, as the GRU.
lstm = recurrence(lstm_cell, carry="s", over="x", name="lstm",
                  dims=[{"T": 1, "n": 2, "k": 3}, {"T": 2, "n": 2, "k": 3}, {"T": 3, "n": 1, "k": 2}],
                  check_dims={"T": 6, "n": 4, "k": 3}, modular_dims=[{"T": 2048, "n": 256, "k": 128}])
lstm.every_size(*lstm.claims())
