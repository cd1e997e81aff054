"""JAX's convolution, as the rule of its one primitive, ``conv_general_dilated``: the forward and every
backward JAX derives from it (the input gradient is a convolution with input dilation and the kernel
reversed, the kernel gradient one with kernel dilation and batch and feature dims swapped), so a
jax.lax.conv_general_dilated is proved from JAX's own backward at fixed dims. And pooling, as
``lax.reduce_window`` lowers it: ``reduce_window_max`` (``min``) with its backward
``select_and_scatter_add`` (the gradient to the first maximum of each window, as PyTorch's), and
``reduce_window_sum`` with its backward, a ``pad`` with interior zeros summed again.

Registered into ``jax_rules.RULES`` when imported (``jax_graph`` imports it).
"""
from __future__ import annotations

import numpy as np

from vjpcert.frontends.jax_rules import rule
from vjpcert.frontends.values import Val, as_array
from vjpcert.frontends.windows import first_winners, tap_view, window_offsets


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


# ------------------------------------------------------------------------------------ pooling
def _window_geometry(c, shape, window_dimensions, window_strides, padding, base_dilation=None,
                     window_dilation=None, what="reduce_window"):
    """(window, strides, padding, output size) of a reduce_window over an array of ``shape``, any rank
    and layout: NCHW's window (1, 1, 2, 2) and NHWC's (1, 2, 2, 1) alike."""
    k, s = _spec(window_dimensions), _spec(window_strides)
    pads = [(int(a), int(b)) for a, b in padding]
    for name, dil in (("base", base_dilation), ("window", window_dilation)):
        if dil is not None and any(int(v) != 1 for v in dil):
            c.refuse(f"{what} with {name} dilation {tuple(int(v) for v in dil)} has no rule yet")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        c.refuse(f"{what} with a negative padding {pads}")
    out = tuple((int(n) + lo + hi - kk) // ss + 1 for n, (lo, hi), kk, ss in zip(shape, pads, k, s))
    if len(k) != len(shape) or min(out, default=1) < 1:
        c.refuse(f"{what} of a {tuple(shape)} array with window {k}: no output")
    return k, s, pads, out


def _window_taps(c, x, k, s, pads, out):
    """[(offsets, values read, static mask of the entries inside the array)] in scan order."""
    xp = np.pad(c.lift(x), pads)
    inside = np.pad(np.ones(tuple(int(n) for n in x.shape), dtype=bool), pads)
    return [(o, tap_view(xp, o, s, out), tap_view(inside, o, s, out)) for o in window_offsets(k)]


# XLA's select-and-scatter keeps its selection while select(selected, candidate) holds: with ge (le) an
# equal later tap never replaces it, the first maximum (minimum) wins; with gt (lt) it does, the last
_SELECTS = {"ge": (1, False), "le": (-1, False), "gt": (1, True), "lt": (-1, True)}


def _winners(c, x, k, s, pads, out, select="ge"):
    """Each window's taps and which of them XLA selects with ``select``: the first maximum (ge), the
    last (gt), the first or last minimum (le, lt: the maximum of -x)."""
    taps = _window_taps(c, x, k, s, pads, out)
    if not all(np.any(np.stack([m for _, _, m in taps]), axis=0).ravel()):
        c.refuse("a window that reads only padding (its value is the init value, not an entry)")
    if select not in _SELECTS:
        c.refuse(f"select_and_scatter_add with select_prim={select}: only ge, gt (max) and le, lt (min) are "
                 "followed")
    sign, last = _SELECTS[select]
    order = taps[::-1] if last else taps
    wins = first_winners(c.B.step, [(sign * e, m) for _, e, m in order])
    return taps, wins[::-1] if last else wins


def _window_extreme(c, operand, window_dimensions, window_strides, padding, base_dilation, window_dilation,
                    select):
    k, s, pads, out = _window_geometry(c, operand.shape, window_dimensions, window_strides, padding,
                                       base_dilation, window_dilation)
    taps, wins = _winners(c, operand, k, s, pads, out, select)
    return Val(as_array(sum(win * e for win, (_, e, _) in zip(wins, taps))), False)


@rule("reduce_window_max")
def _reduce_window_max(c, operand, window_dimensions, window_strides, padding, base_dilation=None,
                       window_dilation=None, **_):
    """Each window's maximum (padding is the init value -inf, never the maximum of a window with an
    entry): sum_t win_t e_t, win_t the first maximum (``windows.first_winners``), as XLA's
    select-and-scatter then routes the gradient -- the derivative of this sum is that routing."""
    return _window_extreme(c, operand, window_dimensions, window_strides, padding, base_dilation,
                           window_dilation, "ge")


@rule("reduce_window_min")
def _reduce_window_min(c, operand, window_dimensions, window_strides, padding, base_dilation=None,
                       window_dilation=None, **_):
    """Each window's minimum: the first minimum's entry (padding is +inf)."""
    return _window_extreme(c, operand, window_dimensions, window_strides, padding, base_dilation,
                           window_dilation, "le")


@rule("select_and_scatter_add")
def _select_and_scatter_add(c, source, operand, select_prim, window_dimensions, window_strides, padding, **_):
    """The backward of a max-pool: each window's source entry added at the tap XLA selects in the
    operand (a fresh zero array over the padded operand, cropped of its padding)."""
    k, s, pads, out = _window_geometry(c, operand.shape, window_dimensions, window_strides, padding,
                                       what="select_and_scatter_add")
    taps, wins = _winners(c, operand, k, s, pads, out, getattr(select_prim, "name", str(select_prim)))
    src = c.lift(source)
    xp = c.B.zeros(tuple(int(n) + lo + hi for n, (lo, hi) in zip(operand.shape, pads)))
    for (offsets, _, _), win in zip(taps, wins):
        view = tap_view(xp, offsets, s, out)
        view += src * win
    return Val(as_array(xp[tuple(slice(lo, lo + int(n)) for n, (lo, _) in zip(operand.shape, pads))]), False)


@rule("reduce_window_sum")
def _reduce_window_sum(c, operand, window_dimensions, window_strides, padding, base_dilation=None,
                       window_dilation=None, **_):
    """Each window's sum over the array padded with zeros (average pooling divides it afterwards)."""
    k, s, pads, out = _window_geometry(c, operand.shape, window_dimensions, window_strides, padding,
                                       base_dilation, window_dilation)
    return Val(as_array(sum(e for _, e, _ in _window_taps(c, operand, k, s, pads, out))), False)


@rule("pad")
def _pad(c, operand, padding_value, padding_config, **_):
    """lax.pad: ``interior`` zeros between neighbouring entries of each axis, then ``lo`` and ``hi``
    entries of padding (a crop where negative); the padding value a static 0 (what a transpose pads
    with)."""
    if not padding_value.static or np.any(padding_value.a != 0):
        c.refuse("lax.pad with a padding value other than a constant 0")
    x = c.lift(operand)
    config = [(int(lo), int(hi), int(interior)) for lo, hi, interior in padding_config]
    if any(interior < 0 for _, _, interior in config):
        c.refuse(f"lax.pad with a negative interior padding {config}")
    if any(interior for _, _, interior in config):
        grown = c.B.zeros(tuple((int(n) - 1) * (i + 1) + 1 if int(n) else 0 for n, (_, _, i) in zip(x.shape, config)))
        view = grown[tuple(slice(None, None, i + 1) for _, _, i in config)]
        view += x
        x = grown
    x = np.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi, _ in config])
    return Val(as_array(x[tuple(slice(max(-lo, 0), int(n) - max(-hi, 0)) for n, (lo, hi, _) in zip(x.shape, config))]),
               False)
