"""Wrong GRU backwards: a gate's derivative from the wrong saved value, the reset gate left out of the
candidate's weight gradient, and hand-written backpropagation through time off by one or without the
carry's gradient."""
import numpy as np

from vjpcert.specs.gru import gates, gru, gru_cell

WEIGHTS = ("Wr", "Ur", "Wz", "Uz", "Wn", "Un")
ALL = ["vjp[h]", "vjp[x]", *(f"vjp[{w}]" for w in WEIGHTS)]


def _cell_backward(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy, *, z_slope_of_r=False, r_in_dUn=True, tanh_slope=True):
    """The cell's backward with one bug switched on."""
    r, z, q, n = gates(B, h, x, Wr, Ur, Wz, Uz, Wn, Un)
    an = dy * (1 - z) * ((1 - n * n) if tanh_slope else 1)
    ar = an * q * r * (1 - r)
    az = dy * (h - n) * (r * (1 - r) if z_slope_of_r else z * (1 - z))
    dh = dy * z + Un.T @ (an * r) + Ur.T @ ar + Uz.T @ az
    dx = Wn.T @ an + Wr.T @ ar + Wz.T @ az
    return (dh, dx, np.outer(ar, x), np.outer(ar, h), np.outer(az, x), np.outer(az, h),
            np.outer(an, x), np.outer(an * r if r_in_dUn else an, h))


@gru_cell.mutant("update_gate_derivative_from_the_reset_gate", kills=["vjp[h]", "vjp[x]", "vjp[Wz]", "vjp[Uz]"])
def _(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy):
    """z's sigmoid derivative computed from r, the other gate's saved value."""
    return _cell_backward(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy, z_slope_of_r=True)


@gru_cell.mutant("reset_gate_missing_from_dUn", kills=["vjp[Un]"])
def _(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy):
    """dUn = an h^T: the reset gate that scales Un h in the forward is forgotten."""
    return _cell_backward(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy, r_in_dUn=False)


def _bptt(B, h, x, weights, dy, *, first=0, carry=True):
    hs = gru(B, h, x, *weights)
    T = len(hs)
    dh, dxs, dw = None, [x[t] * 0 for t in range(T)], [w * 0 for w in weights]
    for t in reversed(range(first, T)):
        g = dy[t] if dh is None or not carry else dy[t] + dh
        grads = gru_cell.vjp(B, h if t == 0 else hs[t - 1], x[t], *weights, g)
        dh, dxs[t] = grads[0], grads[1]
        dw = [a + b for a, b in zip(dw, grads[2:])]
    return (h * 0 if dh is None else dh, np.stack(dxs), *dw)      # T = 1 with first = 1: no step ran


@gru.mutant("reverse_loop_stops_before_the_first_step", kills=ALL)
def _(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy):
    """for t in reversed(range(1, T)): the first step's backward never runs."""
    return _bptt(B, h, x, (Wr, Ur, Wz, Uz, Wn, Un), dy, first=1)


@gru.mutant("carry_gradient_dropped", kills=ALL)
def _(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy):
    """Each step's cotangent is dy_t alone: what the later steps send back to h_t is lost."""
    return _bptt(B, h, x, (Wr, Ur, Wz, Uz, Wn, Un), dy, carry=False)


@gru_cell.mutant("candidate_tanh_derivative_dropped",
                 kills=["vjp[h]", "vjp[x]", "vjp[Wr]", "vjp[Ur]", "vjp[Wn]", "vjp[Un]"])
def _(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy):
    """The candidate n's tanh left out of the chain: an = dy (1 - z), not dy (1 - z) (1 - n^2)."""
    return _cell_backward(B, h, x, Wr, Ur, Wz, Uz, Wn, Un, dy, tanh_slope=False)
