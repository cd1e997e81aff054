"""Wrong selective-scan backwards, from the bug families of hand-written state-space kernels:
softplus' threshold taken on the kink (>= for >, in the cell and in a fused loop), its derivative at
dt without the bias, the discretised decay's derivative without A, dA without delta, the state's, the
input's and B's gradients each missing a factor, the gate left out of a gradient of the readout or
differentiated as the sigmoid alone, the state's cotangent not carried to the step before, and the
reverse loop off by one."""
import numpy as np

from vjpcert.specs.selective_scan import (THRESHOLD, selective_scan, selective_scan_cell, selective_scan_readout,
                                          sigmoid, softplus, softplus_derivative)

SCAN_INPUTS = ("h", "x", "dt", "b", "A", "dt_bias", "c", "z", "D")


def _cell_backward(B, h, x, dt, b, A, dt_bias, dy, *, derivative=softplus_derivative, at=None, decay_times_A=True,
                   dA_times_delta=True, dh_decayed=True, dx_times_delta=True, db_times_x=True):
    """The cell's backward with one bug switched on."""
    a = dt + dt_bias
    delta = softplus(B, a)
    decay = B.exp(delta[:, None] * A)
    d_decay = dy * h * decay
    dyb = dy @ b
    d_delta = ((d_decay * A) if decay_times_A else d_decay).sum(1) + dyb * x
    da = d_delta * derivative(B, a if at is None else at)
    dA = d_decay * delta[:, None] if dA_times_delta else d_decay
    db = (dy * ((delta * x) if db_times_x else delta)[:, None]).sum(0)
    return dy * decay if dh_decayed else dy, dyb * delta if dx_times_delta else dyb, da, db, dA, da


def _kink_derivative(B, a):
    """softplus' derivative with [a >= 20] for [a > 20]."""
    above = 1 - B.step(THRESHOLD - a)
    return above + (1 - above) * sigmoid(B, a)


@selective_scan_cell.mutant("softplus_threshold_taken_on_the_kink", kills=["at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """[a >= 20] for [a > 20]: right on both sides, 1 on the threshold itself, where PyTorch's
    softplus_backward (and the forward as written) takes the lower branch."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, derivative=_kink_derivative)


@selective_scan_cell.mutant("softplus_derivative_without_the_bias", kills=["vjp[dt]", "vjp[dt_bias]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """softplus'(dt), not softplus'(dt + dt_bias): the bias added in the forward, forgotten after."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, at=dt)


@selective_scan_cell.mutant("decay_derivative_without_A", kills=["vjp[dt]", "vjp[dt_bias]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """d exp(delta A) / d delta written as exp(delta A): the inner derivative A dropped."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, decay_times_A=False)


@selective_scan_cell.mutant("dA_without_delta", kills=["vjp[A]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """dA = dh' h exp(delta A): the factor delta of the exponent's derivative dropped."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, dA_times_delta=False)


@selective_scan_cell.mutant("state_cotangent_without_the_decay", kills=["vjp[h]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """dh = dh', not dh' exp(delta A): the decay forgotten on the way back to the previous state."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, dh_decayed=False)


@selective_scan_cell.mutant("input_gradient_without_delta", kills=["vjp[x]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """dx = dh' b, not delta (dh' b): the input's discretisation step dropped."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, dx_times_delta=False)


@selective_scan_cell.mutant("b_gradient_without_x", kills=["vjp[b]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, dy):
    """db = dh'^T delta, not dh'^T (delta x): the input left out of B's gradient."""
    return _cell_backward(B, h, x, dt, b, A, dt_bias, dy, db_times_x=False)


def _readout_backward(B, h, c, x, z, D, dy, *, gate=True, silu_prime=True, skip_gated=True, dD_times_x=True,
                      dc_gated=True):
    """The readout's backward with one bug switched on."""
    s = sigmoid(B, z)
    y = h @ c + D * x
    g = dy * z * s
    dz = dy * y * s * (1 + z * (1 - s)) if silu_prime else dy * y * s
    return (np.outer(g if gate else dy, c), h.T @ (g if dc_gated else dy), (g if skip_gated else dy) * D, dz,
            g * x if dD_times_x else g)


@selective_scan_readout.mutant("gate_derivative_is_the_sigmoid", kills=["vjp[z]"])
def _(B, h, c, x, z, D, dy):
    """d silu(z) / dz written as sigmoid(z): the product rule's z s (1 - s) term dropped."""
    return _readout_backward(B, h, c, x, z, D, dy, silu_prime=False)


@selective_scan_readout.mutant("state_gradient_not_gated", kills=["vjp[h]"])
def _(B, h, c, x, z, D, dy):
    """dh = dy c^T: the gate silu(z) the output was multiplied by left out of the state's gradient."""
    return _readout_backward(B, h, c, x, z, D, dy, gate=False)


@selective_scan_readout.mutant("c_gradient_not_gated", kills=["vjp[c]"])
def _(B, h, c, x, z, D, dy):
    """dc = h^T dy: C's gradient without the gate."""
    return _readout_backward(B, h, c, x, z, D, dy, dc_gated=False)


@selective_scan_readout.mutant("skip_gradient_not_gated", kills=["vjp[x]"])
def _(B, h, c, x, z, D, dy):
    """The D skip's input gradient dy D, not (dy silu(z)) D."""
    return _readout_backward(B, h, c, x, z, D, dy, skip_gated=False)


@selective_scan_readout.mutant("D_gradient_without_x", kills=["vjp[D]"])
def _(B, h, c, x, z, D, dy):
    """dD = dy silu(z), not dy silu(z) x: the skip's input left out."""
    return _readout_backward(B, h, c, x, z, D, dy, dD_times_x=False)


def _bptt(B, h, x, dt, b, A, dt_bias, c, z, D, dy, *, carry=True, first_step=True, cell_vjp=None):
    """Backpropagation through time written out by hand over the cell's and the readout's backwards,
    with one of its classic bugs switched on."""
    hs = [h]
    for t in range(len(x)):
        hs.append(selective_scan_cell(B, hs[-1], x[t], dt[t], b[t], A, dt_bias))
    T = len(x)
    grads = {n: [None] * T for n in ("x", "dt", "b", "c", "z")}
    dA, d_bias, dD, dh = A * 0, dt_bias * 0, D * 0, h * 0
    for t in reversed(range(0 if first_step else 1, T)):
        r = selective_scan_readout.vjp(B, hs[t + 1], c[t], x[t], z[t], D, dy[t])
        g = r[0] + dh if carry else r[0]
        k = (cell_vjp or selective_scan_cell.vjp)(B, hs[t], x[t], dt[t], b[t], A, dt_bias, g)
        dh = k[0]
        grads["x"][t], grads["dt"][t], grads["b"][t] = r[2] + k[1], k[2], k[3]
        grads["c"][t], grads["z"][t] = r[1], r[3]
        dA, d_bias, dD = dA + k[4], d_bias + k[5], dD + r[4]
    zero = {"x": x[0] * 0, "dt": dt[0] * 0, "b": b[0] * 0, "c": c[0] * 0, "z": z[0] * 0}
    seq = {n: np.stack([g if g is not None else zero[n] for g in gs]) for n, gs in grads.items()}
    return dh, seq["x"], seq["dt"], seq["b"], dA, d_bias, seq["c"], seq["z"], dD


@selective_scan.mutant("state_cotangent_not_carried_back",
                       kills=["vjp[h]", "vjp[x]", "vjp[dt]", "vjp[b]", "vjp[A]", "vjp[dt_bias]", "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, c, z, D, dy):
    """Each step's state cotangent is what its own output sends back: the later steps' is lost."""
    return _bptt(B, h, x, dt, b, A, dt_bias, c, z, D, dy, carry=False)


@selective_scan.mutant("reverse_loop_stops_before_the_first_step",
                       kills=[*(f"vjp[{n}]" for n in SCAN_INPUTS), "at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, c, z, D, dy):
    """for t in reversed(range(1, T)): the first step's backward never runs (at T = 1, none does)."""
    return _bptt(B, h, x, dt, b, A, dt_bias, c, z, D, dy, first_step=False)


@selective_scan.mutant("threshold_taken_on_the_kink_in_a_fused_loop", kills=["at_the_kink"])
def _(B, h, x, dt, b, A, dt_bias, c, z, D, dy):
    """A fused backward loop whose softplus derivative takes [a >= 20]: right off the threshold, 1 on it."""
    def cell_vjp(B, h, x, dt, b, A, dt_bias, g):
        return _cell_backward(B, h, x, dt, b, A, dt_bias, g, derivative=_kink_derivative)
    return _bptt(B, h, x, dt, b, A, dt_bias, c, z, D, dy, cell_vjp=cell_vjp)
