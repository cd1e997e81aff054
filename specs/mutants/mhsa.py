"""Wrong multi-head attention backwards: head layout, fan-in, scale."""
import numpy as np

from vjpcert.specs.mhsa import head_slices, mhsa


def _back(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes, *, merge="concat", fan_in="sum",
          wo="right"):
    Q, K, V = nodes.q_proj(X, Wq, bq), nodes.k_proj(X, Wk, bk), nodes.v_proj(X, Wv, bv)
    slices = head_slices(X.shape[1], heads)
    A = np.concatenate([nodes.attn(Q[:, s], K[:, s], V[:, s]) for s in slices], -1)
    dA, dWo, dbo = nodes.o_proj.vjp(A, Wo, bo, dy)
    if wo == "transposed":
        dWo = dWo.T
    elif wo == "bias_mean":
        dbo = dy.mean(0)
    per_head = [nodes.attn.vjp(Q[:, s], K[:, s], V[:, s], dA[:, s]) for s in slices]
    if merge == "concat":
        dQ, dK, dV = (np.concatenate([g[i] for g in per_head], -1) for i in range(3))
    else:   # (heads, m, dh) reshaped to (m, D) without moving the head axis: the wrong axis
        dQ, dK, dV = (np.stack([g[i] for g in per_head]).reshape(X.shape) for i in range(3))
    dXq, dWq, dbq = nodes.q_proj.vjp(X, Wq, bq, dQ)
    dXk, dWk, dbk = nodes.k_proj.vjp(X, Wk, bk, dK)
    dXv, dWv, dbv = nodes.v_proj.vjp(X, Wv, bv, dV)
    dX = dXq + dXk + dXv if fan_in == "sum" else dXv
    return dX, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo


@mhsa.mutant("heads_merged_over_wrong_axis",
             kills=["vjp[X]", "vjp[Wq]", "vjp[bq]", "vjp[Wk]", "vjp[bk]", "vjp[Wv]", "vjp[bv]"])
def _(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes):
    return _back(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes, merge="reshape")


@mhsa.mutant("fan_in_keeps_only_v", kills=["vjp[X]"])
def _(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes):
    """dX takes only the V projection's cotangent (the Q and K branches are dropped)."""
    return _back(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes, fan_in="v")


@mhsa.mutant("output_weight_gradient_transposed", kills=["vjp[Wo]"])
def _(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes):
    """dWo stored transposed: the same D x D shape, so nothing but a value check sees it."""
    return _back(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes, wo="transposed")


@mhsa.mutant("output_bias_gradient_mean", kills=["vjp[bo]"])
def _(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes):
    return _back(B, X, Wq, bq, Wk, bk, Wv, bv, Wo, bo, heads, dy, nodes, wo="bias_mean")
