"""The selective state-space scan (Mamba's ``selective_scan_ref``, one sequence): per step t,

    delta = softplus(dt_t + dt_bias)                     softplus(a) = a if a > 20 else log(1 + e^a)
    h_t   = exp(delta A) h_(t-1) + (delta x_t) b_t^T     (d, N): exp(delta A) the discretised decay
    y_t   = (h_t c_t + D x_t) silu(z_t)                  the readout: C, the D skip and the gate

with b_t, c_t the input-dependent B and C of the paper (``B`` is the backend here) and A, D, dt_bias
shared by every step. softplus' threshold is PyTorch's (``F.softplus(beta=1, threshold=20)``), the
kink ``B.step(a - 20)``: its backward passes the gradient unchanged above it and e^a / (e^a + 1)
below, and on it (a = 20, not > 20) takes the lower branch, as PyTorch's softplus_backward does.

The cell (the state's update) and the readout each have their backward written out by hand; the scan's
is backpropagation through time over them (``core.recurrence``), proved for every length by induction
from theirs, which hold for every width d and state size N.
"""
import numpy as np

from vjpcert.core.recurrence import recurrence
from vjpcert.core.registry import op
from vjpcert.specs.swiglu import sigmoid, silu

THRESHOLD = 20          # PyTorch's softplus threshold: above it softplus(a) is a


def softplus(B, a):
    above = B.step(a - THRESHOLD)
    return above * a + (1 - above) * B.log(1 + B.exp(a))


def softplus_derivative(B, a):
    """PyTorch's softplus_backward: 1 above the threshold, z / (z + 1) with z = e^a below it."""
    above = B.step(a - THRESHOLD)
    z = B.exp(a)
    return above + (1 - above) * z / (z + 1)


CELL_INPUTS = {"h": ("d", "N"), "x": ("d",), "dt": ("d",), "b": ("N",), "A": ("d", "N"), "dt_bias": ("d",)}
READOUT_INPUTS = {"h": ("d", "N"), "c": ("N",), "x": ("d",), "z": ("d",), "D": ("d",)}
STEP_DIMS = dict(dims=[{"d": 2, "N": 2}, {"d": 3, "N": 1}], check_dims={"d": 4, "N": 3})


def negative_rates(rng, shape):
    """A as Mamba holds it, -exp(A_log): a decay exp(delta A) < 1. A positive A is a state growing
    geometrically, which over a thousand steps leaves its small entries below any precision."""
    return -np.exp(rng.standard_normal(shape))


@op(inputs=CELL_INPUTS, output=("d", "N"), sample={"A": negative_rates}, **STEP_DIMS)
def selective_scan_cell(B, h, x, dt, b, A, dt_bias):
    delta = softplus(B, dt + dt_bias)
    return B.exp(delta[:, None] * A) * h + (delta * x)[:, None] * b[None, :]


@selective_scan_cell.defvjp
def _(B, h, x, dt, b, A, dt_bias, dy):
    a = dt + dt_bias
    delta = softplus(B, a)
    decay = B.exp(delta[:, None] * A)
    d_decay = dy * h * decay                              # the cotangent of delta A
    dyb = dy @ b                                          # (d,): the input term's cotangent per channel
    d_delta = (d_decay * A).sum(1) + dyb * x
    da = d_delta * softplus_derivative(B, a)
    return dy * decay, dyb * delta, da, (dy * (delta * x)[:, None]).sum(0), d_decay * delta[:, None], da


@op(inputs=READOUT_INPUTS, output=("d",), **STEP_DIMS)
def selective_scan_readout(B, h, c, x, z, D):
    return (h @ c + D * x) * silu(B, z)


@selective_scan_readout.defvjp
def _(B, h, c, x, z, D, dy):
    s = sigmoid(B, z)
    y = h @ c + D * x
    dy_gated = dy * z * s
    return (np.outer(dy_gated, c), h.T @ dy_gated, dy_gated * D, dy * y * s * (1 + z * (1 - s)),
            dy_gated * x)


selective_scan_cell.every_size("vjp[h]", "vjp[x]", "vjp[dt]", "vjp[b]", "vjp[A]", "vjp[dt_bias]")
selective_scan_readout.every_size("vjp[h]", "vjp[c]", "vjp[x]", "vjp[z]", "vjp[D]")

# The scan over T steps: T = 1, 2 and 3 unrolled exactly; mod p at production size: 2048 steps of
# 768 channels with a state of 16 (a d_model = 768 layer's; ~1 minute a trial, 3 GiB).
selective_scan = recurrence(selective_scan_cell, readout=selective_scan_readout, carry="h",
                            over=("x", "dt", "b", "c", "z"), name="selective_scan",
                            dims=[{"T": 1, "d": 2, "N": 2}, {"T": 2, "d": 2, "N": 1}, {"T": 3, "d": 1, "N": 1}],
                            check_dims={"T": 6, "d": 3, "N": 2},
                            modular_dims=[{"T": 2048, "d": 768, "N": 16}])
selective_scan.every_size(*(c for c in selective_scan.claims() if c.startswith("vjp[")))
