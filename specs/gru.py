"""A gated recurrent unit (PyTorch's GRU convention, without biases), the cell and its scan:

    r = sigma(Wr x + Ur h), z = sigma(Wz x + Uz h), n = tanh(Wn x + r (Un h)), h' = (1 - z) n + z h

The cell's backward is written out by hand; the network's is backpropagation through time over it
(``core.recurrence``), proved for every sequence length by induction from the cell's every-size claims.
"""
import numpy as np

from vjpcert.core.recurrence import recurrence
from vjpcert.core.registry import op
from vjpcert.specs.swiglu import sigmoid

N, K = ("n", "n"), ("n", "k")


def gates(B, h, x, Wr, Ur, Wz, Uz, Wn, Un):
    r = sigmoid(B, Wr @ x + Ur @ h)
    z = sigmoid(B, Wz @ x + Uz @ h)
    q = Un @ h
    n = B.tanh(Wn @ x + r * q)
    return r, z, q, n


@op(inputs={"h": ("n",), "x": ("k",), "Wr": K, "Ur": N, "Wz": K, "Uz": N, "Wn": K, "Un": N}, output=("n",),
    dims=[{"n": 2, "k": 3}, {"n": 3, "k": 2}], check_dims={"n": 5, "k": 4})
def gru_cell(B, h, x, Wr, Ur, Wz, Uz, Wn, Un):
    r, z, q, n = gates(B, h, x, Wr, Ur, Wz, Uz, Wn, Un)
    return (1 - z) * n + z * h


@gru_cell.defvjp
def _(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy):
    r, z, q, n = gates(B, h, x, Wr, Ur, Wz, Uz, Wn, Un)
    an = dy * (1 - z) * (1 - n * n)              # through n's tanh
    ar = an * q * r * (1 - r)                    # through r's sigmoid
    az = dy * (h - n) * z * (1 - z)              # through z's sigmoid
    dh = dy * z + Un.T @ (an * r) + Ur.T @ ar + Uz.T @ az
    dx = Wn.T @ an + Wr.T @ ar + Wz.T @ az
    return (dh, dx, np.outer(ar, x), np.outer(ar, h), np.outer(az, x), np.outer(az, h),
            np.outer(an, x), np.outer(an * r, h))


gru_cell.every_size("vjp[h]", "vjp[x]", "vjp[Wr]", "vjp[Ur]", "vjp[Wz]", "vjp[Uz]", "vjp[Wn]", "vjp[Un]")


# T = 3 at n = 1: there the ring proves the three-step loop exactly (at n = 2 it runs past its budget and
# the claim would only be checked mod p); T = 1 and 2 hold the matrices' shapes.
# Mod p at a production size, T = 2048 with 256 units and 128 inputs: each gate's division is a new
# denominator at every step, so the randomised test's degree bound grows as T^2 (about 10^8 there,
# against primes near 2^59); the millions of gate atoms state something only where the trials
# identified them alike (``symbolic/modular/check.py``).
gru = recurrence(gru_cell, carry="h", over="x", name="gru",
                 dims=[{"T": 1, "n": 2, "k": 3}, {"T": 2, "n": 2, "k": 3}, {"T": 3, "n": 1, "k": 2}],
                 check_dims={"T": 6, "n": 4, "k": 3}, modular_dims=[{"T": 2048, "n": 256, "k": 128}])
gru.every_size(*gru.claims())
