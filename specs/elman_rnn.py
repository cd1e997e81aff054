"""Elman's recurrent network: the cell h' = tanh(W h + U x + b) and its scan over a sequence.

    cell:  h' = tanh(z), z = W h + U x + b      g = dy (1 - h'^2)
           dh = W^T g, dx = U^T g, dW = g h^T, dU = g x^T, db = g
    rnn:   h_t = cell(h_(t-1), x_t) for t = 1..T; the output stacks h_1 .. h_T

The cell's backward is the hand-written part; the network's is backpropagation through time over it
(``core.recurrence``), so its VJP claims hold for every length T by induction from the cell's, which
hold for every width n, k (the every-size tier: the certificate states the induction). At fixed T the
network is also proved unrolled, as any op.
"""
import numpy as np

from vjpcert.core.recurrence import recurrence
from vjpcert.core.registry import op


@op(inputs={"h": ("n",), "x": ("k",), "W": ("n", "n"), "U": ("n", "k"), "b": ("n",)}, output=("n",),
    dims=[{"n": 2, "k": 3}, {"n": 3, "k": 2}], check_dims={"n": 5, "k": 4})
def elman_cell(B, h, x, W, U, b):
    return B.tanh(W @ h + U @ x + b)


@elman_cell.defvjp
def _(B, h, x, W, U, b, dy):
    h_new = B.tanh(W @ h + U @ x + b)
    g = dy * (1 - h_new * h_new)
    return W.T @ g, U.T @ g, np.outer(g, h), np.outer(g, x), g


elman_cell.every_size("vjp[h]", "vjp[x]", "vjp[W]", "vjp[U]", "vjp[b]")


elman_rnn = recurrence(elman_cell, carry="h", over="x", name="elman_rnn",
                       dims=[{"T": 1, "n": 2, "k": 3}, {"T": 2, "n": 2, "k": 3}, {"T": 3, "n": 3, "k": 2}],
                       check_dims={"T": 6, "n": 4, "k": 3}, modular_dims=[{"T": 2048, "n": 64, "k": 32}])
elman_rnn.every_size("vjp[h]", "vjp[x]", "vjp[W]", "vjp[U]", "vjp[b]")
