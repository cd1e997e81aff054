"""JAX's convolution, as the rule of its one primitive, ``conv_general_dilated``: the forward and every
backward JAX derives from it (the input gradient is a convolution with input dilation and the kernel
reversed, the kernel gradient one with kernel dilation and batch and feature dims swapped), so a
jax.lax.conv_general_dilated is proved from JAX's own backward at fixed dims.

Registered into ``jax_rules.RULES`` when imported (``jax_graph`` imports it).
"""
from __future__ import annotations

import numpy as np

from vjpcert.frontends.jax_rules import rule
from vjpcert.frontends.values import Val, as_array


def _spec(s) -> tuple:
    return tuple(int(i) for i in s)


def _dilated(c, x, d):
    """x with d - 1 zeros between neighbouring entries of each spatial axis (a fresh zero array)."""
    if d == (1, 1):
        return x
    N, C, H, W = x.shape
    z = c.B.zeros((N, C, (H - 1) * d[0] + 1, (W - 1) * d[1] + 1))
    view = z[:, :, ::d[0], ::d[1]]
    view += x
    return z


def _padded(x, padding):
    """Padding (lo, hi) per spatial axis: zeros where positive, a crop where negative (transposes)."""
    (l0, h0), (l1, h1) = padding
    x = np.pad(x, ((0, 0), (0, 0), (max(l0, 0), max(h0, 0)), (max(l1, 0), max(h1, 0))))
    return x[:, :, max(-l0, 0):x.shape[2] - max(-h0, 0), max(-l1, 0):x.shape[3] - max(-h1, 0)]


@rule("conv_general_dilated")
def _conv_general_dilated(c, lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                          feature_group_count=1, batch_group_count=1, **_):
    """out[n, o, p, q] = sum_{c in o's group, i, j} xd[n, c, s p + d i, s q + d j] w[o, c, i, j], with xd
    the input dilated by lhs_dilation and padded (or cropped) by padding; the axes read and written in
    the layouts of dimension_numbers; feature groups split the input's channels, batch groups its batch
    (the kernel gradient of a grouped convolution)."""
    specs = [_spec(getattr(dimension_numbers, k)) for k in ("lhs_spec", "rhs_spec", "out_spec")]
    if any(len(sp) != 4 for sp in specs):
        c.refuse("conv_general_dilated of other than two spatial dims")
    G, BG = int(feature_group_count), int(batch_group_count)
    if G > 1 and BG > 1:
        c.refuse("conv_general_dilated with both feature and batch groups")
    s, ld, rd = _spec(window_strides), _spec(lhs_dilation), _spec(rhs_dilation)
    x = np.transpose(c.lift(lhs), specs[0])                       # (N, C, H, W)
    w = np.transpose(c.lift(rhs), specs[1])                       # (O, I, kh, kw)
    x = _padded(_dilated(c, x, ld), [(int(a), int(b)) for a, b in padding])
    kh, kw = int(w.shape[2]), int(w.shape[3])
    out = tuple((int(x.shape[2 + k]) - rd[k] * ((kh, kw)[k] - 1) - 1) // s[k] + 1 for k in range(2))
    if min(out) < 1:
        c.refuse(f"conv_general_dilated with no output ({out})")
    groups = max(G, BG)
    O, I, N = int(w.shape[0]), int(w.shape[1]), int(x.shape[0])
    parts = []
    for g in range(groups):
        xg = x[:, g * I:(g + 1) * I] if G > 1 else (x[g * (N // BG):(g + 1) * (N // BG)] if BG > 1 else x)
        wg = w[g * (O // groups):(g + 1) * (O // groups)]
        parts.append(sum(np.einsum("nchw,oc->nohw",
                                   xg[:, :, i * rd[0]:i * rd[0] + s[0] * (out[0] - 1) + 1:s[0],
                                      j * rd[1]:j * rd[1] + s[1] * (out[1] - 1) + 1:s[1]], wg[:, :, i, j])
                         for i in range(kh) for j in range(kw)))
    y = parts[0] if groups == 1 else np.concatenate(parts, axis=1)
    return Val(as_array(np.transpose(y, np.argsort(specs[2]))), False)
