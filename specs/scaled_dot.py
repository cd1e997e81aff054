"""Scaled dot product per row:  s = c * sum_j q_j k_j.

    dq = c * ds * k,   dk = c * ds * q
The scale c is a symbol, so the proof holds for every c (attention uses c = 1/sqrt(d)).
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op


@op(inputs={"q": ("rows", "n"), "k": ("rows", "n")}, output=("rows",),
    params={"c": Param(Fraction(1, 2), doc="the scale; any real value")},
    dims=[{"rows": 1, "n": 1}, {"rows": 2, "n": 3}], large_dims=[{"rows": 4, "n": 64}],
    check_dims={"rows": 3, "n": 8})
def scaled_dot(B, q, k, c):
    return c * (q * k).sum(-1)


@scaled_dot.defvjp
def scaled_dot_vjp(B, q, k, c, dy):
    return c * dy[:, None] * k, c * dy[:, None] * q


@scaled_dot.law
def euler_homogeneity(B, q, k, c, dy, forward, backward):
    """s is linear in q, so <q, dq> = s * ds per row (and likewise for k)."""
    dq, dk = backward(q, k, dy)
    s = forward(q, k)
    return (q * dq).sum(-1), s * dy


# Proved for every size n and rows: the statement is derived from the code above (symbolic.every_size.shape_trace).
scaled_dot.every_size("vjp[q]", "vjp[k]", "euler_homogeneity")
