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


# ------------------------------------------------------------------ general forms (every size n)
def general_scaled_dot(G):
    """s[r] = c sum_i q[r, i] k[r, i] with symbolic rows and n."""
    n = G.dim("n")
    G.dim("rows")
    q, k, dy, c = G.array("q"), G.array("k"), G.array("dy"), G.param("c")

    def s(r):
        return c * G.sum(lambda i: q[r, i] * k[r, i], n)

    def dq(a, j):
        return c * dy[a] * k[a, j]

    def dk(a, j):
        return c * dy[a] * q[a, j]
    return dict(n=n, q=q, k=k, dy=dy, c=c, s=s, dq=dq, dk=dk)


@scaled_dot.general_form("vjp[q]")
def _(G):
    f = general_scaled_dot(G)
    return G.vjp("q", forward=f["s"], backward=f["dq"])


@scaled_dot.general_form("vjp[k]")
def _(G):
    f = general_scaled_dot(G)
    return G.vjp("k", forward=f["s"], backward=f["dk"])
