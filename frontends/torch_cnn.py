"""ATen rules of convolutional networks: the kinks (relu and its family, spelled with the spec
language's B.step so that the derivative the prover takes on a kink is PyTorch's), 2-d convolution
and its backward, and max-pooling with the index of each window's maximum.

Registered into ``torch_rules.RULES`` when imported (``torch_graph`` imports it).
"""
from __future__ import annotations

import numpy as np

from vjpcert.frontends.torch_rules import rule
from vjpcert.frontends.values import Val, as_array
from vjpcert.frontends.windows import first_winners


# Kinks, spelled with B.step so that the derivative the prover takes on the kink itself (step' = 0,
# step(0) = 0) is PyTorch's: its backwards pass the gradient where the input is strictly inside
# (relu, leaky_relu: x > 0; hardtanh, relu6: min < x < max), so the claim at_the_kink holds them to it.
def _step(c, x, shift=0):
    """step(x - shift). The step of a relu's output is its argument's step, exactly (step(z step(z)) =
    step(z), step(0) = 0): PyTorch's relu backward masks by the output, and an interpreter whose steps
    are keyed by value (mod p) would otherwise see a second kink where there is one."""
    if not shift and isinstance(x, Val) and x.ramp is not None:
        return x.ramp
    return c.unary("step", c.binary("-", x, shift) if shift else x)


@rule("aten.relu.default")
def _relu(c, x):
    m = _step(c, x)
    out = c.binary("*", x, m)
    out.ramp = m
    return out


@rule("aten.threshold_backward.default")
def _threshold_backward(c, grad, x, threshold):
    """grad where x > threshold, else 0."""
    return c.binary("*", grad, _step(c, x, threshold))


@rule("aten.threshold.default")
def _threshold(c, x, threshold, value):
    """x where x > threshold, else value: value + (x - value) step(x - threshold)."""
    return c.binary("+", value, c.binary("*", c.binary("-", x, value), _step(c, x, threshold)))


@rule("aten.leaky_relu.default")
def _leaky_relu(c, x, slope=0.01):
    return c.binary("*", x, _leaky_factor(c, x, slope))


@rule("aten.leaky_relu_backward.default")
def _leaky_relu_backward(c, grad, x, slope, self_is_result=False):
    """grad where x > 0, slope * grad elsewhere (the result has x's sign: the same mask)."""
    return c.binary("*", grad, _leaky_factor(c, x, slope))


def _leaky_factor(c, x, slope):
    s = c.scalar(slope)
    return c.binary("+", s, c.binary("*", c.binary("-", 1, s), _step(c, x)))


@rule("aten.hardtanh.default")
def _hardtanh(c, x, lo=-1.0, hi=1.0):
    """x inside (lo, hi), lo below, hi above: x in(x) + lo (1 - step(x - lo)) + hi (1 - step(hi - x)),
    in(x) = step(x - lo) step(hi - x), so the derivative on either kink is 0 as PyTorch's backward."""
    below, above = _step(c, x, lo), c.unary("step", c.binary("-", hi, x))
    inside = c.binary("*", below, above)
    return c.binary("+", c.binary("*", x, inside),
                    c.binary("+", c.binary("*", lo, c.binary("-", 1, below)),
                             c.binary("*", hi, c.binary("-", 1, above))))


@rule("aten.hardtanh_backward.default")
def _hardtanh_backward(c, grad, x, lo, hi):
    """grad where lo < x < hi, else 0."""
    return c.binary("*", grad, c.binary("*", _step(c, x, lo), c.unary("step", c.binary("-", hi, x))))


@rule("aten.sign.default")
def _sign(c, x):
    return c.binary("-", _step(c, x), c.unary("step", c.neg(x)))


@rule("aten.abs.default")
def _abs(c, x):
    """x sign(x): PyTorch's backward, grad sign(x), is 0 on the kink, as this spelling's derivative."""
    return c.binary("*", x, _sign(c, x))


@rule("aten.maximum.default")
def _maximum(c, a, b):
    """a on a > b, b on b > a; on a tie each gets half the gradient, as in PyTorch's backward."""
    return c.tie_split(a, b)


@rule("aten.minimum.default")
def _minimum(c, a, b):
    return c.neg(_maximum(c, c.neg(a), c.neg(b)))


# ------------------------------------------------------------------------------------ convolution
def _pair(v) -> tuple:
    v = [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return (v[0], v[0]) if len(v) == 1 else tuple(v)


def _conv_geometry(c, x_shape, w_shape, stride, padding, dilation, transposed, output_padding, groups):
    """(stride, padding, dilation, groups, output size) of a 2-d convolution (for a transposed one, the
    size of the output it writes into before the padding is cropped); the rest refused."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        c.refuse(f"a convolution of input shape {tuple(x_shape)}: only 2-d convolutions (N, C, H, W) are followed")
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    g = int(groups)
    if transposed:
        o = _pair(output_padding)
        out = tuple((x_shape[2 + k] - 1) * s[k] + d[k] * (w_shape[2 + k] - 1) + 1 + o[k] for k in range(2))
        if min(out[k] - 2 * p[k] for k in range(2)) < 1:
            c.refuse(f"a transposed convolution with no output ({out})")
        return s, p, d, g, out
    out = tuple((x_shape[2 + k] + 2 * p[k] - d[k] * (w_shape[2 + k] - 1) - 1) // s[k] + 1 for k in range(2))
    if min(out) < 1:
        c.refuse(f"a convolution with no output ({out})")
    return s, p, d, g, out


def _taps(w_shape):
    return [(i, j) for i in range(int(w_shape[2])) for j in range(int(w_shape[3]))]


def _window(xp, i, j, s, d, out):
    """The entries of the padded input tap (i, j) reads for every output position."""
    return xp[:, :, i * d[0]:i * d[0] + s[0] * (out[0] - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (out[1] - 1) + 1:s[1]]


def _padded(x, p):
    return np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))


@rule("aten.convolution.default")
def _convolution(c, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    """y[n, o] = b[o] + sum_{c in o's group, i, j} xp[n, c, s h + d i, s w + d j] w[o, c, i, j]."""
    s, p, d, g, out = _conv_geometry(c, x.shape, w.shape, stride, padding, dilation, transposed,
                                     output_padding, groups)
    if transposed:
        return _transposed(c, x, w, bias, s, p, d, g, out)
    xa, wa = c.lift(x), c.lift(w)
    xp = _padded(xa, p)
    ci, co = int(w.shape[1]), int(w.shape[0]) // g
    parts = []
    for k in range(g):
        xg, wg = xp[:, k * ci:(k + 1) * ci], wa[k * co:(k + 1) * co]
        parts.append(sum(np.einsum("nchw,oc->nohw", _window(xg, i, j, s, d, out), wg[:, :, i, j])
                         for i, j in _taps(w.shape)))
    y = parts[0] if g == 1 else np.concatenate(parts, axis=1)
    if bias is not None:
        y = y + c.lift(bias)[None, :, None, None]
    return Val(as_array(y), False)


@rule("aten.convolution_backward.default")
def _convolution_backward(c, dy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    """(dx, dw, db): each tap's contribution added back at the entries it read (in place, into a fresh
    zero array), dw correlating dy with those entries, db the sum of dy; None where not asked."""
    s, p, d, g, out = _conv_geometry(c, x.shape, w.shape, stride, padding, dilation, transposed,
                                     output_padding, groups)
    if transposed:
        return _transposed_backward(c, dy, x, w, s, p, d, g, out, output_mask)
    dya, xa, wa = c.lift(dy), c.lift(x), c.lift(w)
    xp = _padded(xa, p)
    ci, co = int(w.shape[1]), int(w.shape[0]) // g
    taps = _taps(w.shape)
    dx = dw = db = None
    if output_mask[0]:
        dxp = c.B.zeros(xp.shape)
        for k in range(g):
            dyg, wg = dya[:, k * co:(k + 1) * co], wa[k * co:(k + 1) * co]
            for i, j in taps:
                view = _window(dxp[:, k * ci:(k + 1) * ci], i, j, s, d, out)
                view += np.einsum("nohw,oc->nchw", dyg, wg[:, :, i, j])
        H, W = int(x.shape[2]), int(x.shape[3])
        dx = Val(as_array(dxp[:, :, p[0]:p[0] + H, p[1]:p[1] + W]), False)
    if output_mask[1]:
        groups_dw = []
        for k in range(g):
            dyg, xg = dya[:, k * co:(k + 1) * co], xp[:, k * ci:(k + 1) * ci]
            rows = [np.stack([np.einsum("nohw,nchw->oc", dyg, _window(xg, i, j, s, d, out))
                              for j in range(int(w.shape[3]))], -1) for i in range(int(w.shape[2]))]
            groups_dw.append(np.stack(rows, -2))
        dw = Val(as_array(groups_dw[0] if g == 1 else np.concatenate(groups_dw, axis=0)), False)
    if output_mask[2]:
        db = Val(as_array(dya.sum((0, 2, 3))), False)
    return (dx, dw, db)


# ------------------------------------------------------------------------------------ transposed convolution
# conv_transpose2d is the adjoint of a convolution in its input: each input entry x[n, c, h, w] spreads
# x w[c, o, i, j] to y_full[n, o, s h + d i, s w + d j] (weights laid out (in, out / groups, kh, kw)),
# and y is y_full with the padding cropped from both sides (output_padding only lengthens the end).
def _transposed(c, x, w, bias, s, p, d, g, full):
    xa, wa = c.lift(x), c.lift(w)
    ci, co = int(w.shape[0]) // g, int(w.shape[1])
    yfull = c.B.zeros((int(x.shape[0]), co * g) + full)
    for k in range(g):
        xg, wg = xa[:, k * ci:(k + 1) * ci], wa[k * ci:(k + 1) * ci]
        for i, j in _taps(w.shape):
            view = _window(yfull[:, k * co:(k + 1) * co], i, j, s, d, tuple(int(v) for v in x.shape[2:]))
            view += np.einsum("nchw,co->nohw", xg, wg[:, :, i, j])
    y = yfull[:, :, p[0]:full[0] - p[0], p[1]:full[1] - p[1]]
    if bias is not None:
        y = y + c.lift(bias)[None, :, None, None]
    return Val(as_array(y), False)


def _transposed_backward(c, dy, x, w, s, p, d, g, full, output_mask):
    """dx reads dy (placed back into the uncropped output) at every entry x spread to, dw correlates x
    with those entries, db sums dy."""
    dya, xa, wa = c.lift(dy), c.lift(x), c.lift(w)
    dyfull = _padded(dya, p)
    ci, co = int(w.shape[0]) // g, int(w.shape[1])
    size = tuple(int(v) for v in x.shape[2:])
    dx = dw = db = None
    if output_mask[0]:
        parts = [sum(np.einsum("nohw,co->nchw", _window(dyfull[:, k * co:(k + 1) * co], i, j, s, d, size),
                               wa[k * ci:(k + 1) * ci, :, i, j]) for i, j in _taps(w.shape)) for k in range(g)]
        dx = Val(as_array(parts[0] if g == 1 else np.concatenate(parts, axis=1)), False)
    if output_mask[1]:
        groups_dw = []
        for k in range(g):
            xg, dyg = xa[:, k * ci:(k + 1) * ci], dyfull[:, k * co:(k + 1) * co]
            rows = [np.stack([np.einsum("nchw,nohw->co", xg, _window(dyg, i, j, s, d, size))
                              for j in range(int(w.shape[3]))], -1) for i in range(int(w.shape[2]))]
            groups_dw.append(np.stack(rows, -2))
        dw = Val(as_array(groups_dw[0] if g == 1 else np.concatenate(groups_dw, axis=0)), False)
    if output_mask[2]:
        db = Val(as_array(dya.sum((0, 2, 3))), False)
    return (dx, dw, db)


# ------------------------------------------------------------------------------------ max-pooling
class _Argmax(Val):
    """The ``indices`` output of max_pool2d_with_indices: which tap of each window holds its maximum,
    kept as the taps' 0/1 indicators (made of B.step) for the backward to route the gradient by. It is
    no number: any other use of it is refused (its entries are None)."""

    __slots__ = ("taps",)

    def __init__(self, shape, taps):
        super().__init__(np.full(shape, None, dtype=object), False)
        self.taps = taps


def _pool_geometry(c, x_shape, kernel_size, stride, padding, dilation, ceil_mode, what="max_pool2d"):
    if ceil_mode:
        c.refuse(f"{what} with ceil_mode=True has no exact rule yet")
    if len(x_shape) != 4:
        c.refuse(f"{what} of input shape {tuple(x_shape)}: only (N, C, H, W) is followed")
    k = _pair(kernel_size)
    s = _pair(stride) if stride else k
    p, d = _pair(padding), _pair(dilation)
    out = tuple((x_shape[2 + a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(2))
    return k, s, p, d, out


def _pool_taps(c, x, k, s, p, d, out):
    """[(tap, entries it reads, static mask of the entries inside the input)] in PyTorch's scan order."""
    xp = _padded(c.lift(x), p)
    inside = _padded(np.ones(x.shape, dtype=bool), p)
    return [((i, j), _window(xp, i, j, s, d, out), _window(inside, i, j, s, d, out))
            for i in range(k[0]) for j in range(k[1])]


@rule("aten.max_pool2d_with_indices.default")
def _max_pool2d(c, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Each window's maximum, and which tap holds it (``windows.first_winners``: PyTorch keeps the
    first maximum in scan order, so on a tie the gradient goes to the first); the maximum is
    sum_t win_t e_t, whose derivative routes dy to the winner -- PyTorch's backward, ties included."""
    k, s, p, d, out = _pool_geometry(c, x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    taps = _pool_taps(c, x, k, s, p, d, out)
    wins = first_winners(c.B.step, [(e_t, in_t) for _, e_t, in_t in taps])
    value = sum(win * e_t for win, (_, e_t, _) in zip(wins, taps))
    return (Val(as_array(value), False), _Argmax(np.shape(value), wins))


@rule("aten.max_pool2d_with_indices_backward.default")
def _max_pool2d_backward(c, dy, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """dy added back at each window's winning tap (a fresh zero array, cropped of its padding)."""
    if not isinstance(indices, _Argmax):
        c.refuse("max_pool2d's backward with indices it did not compute itself")
    k, s, p, d, out = _pool_geometry(c, x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    dya = c.lift(dy)
    dxp = c.B.zeros(_padded(c.lift(x), p).shape)
    for (i, j), win in zip([(i, j) for i in range(k[0]) for j in range(k[1])], indices.taps):
        view = _window(dxp, i, j, s, d, out)
        view += dya * win
    H, W = int(x.shape[2]), int(x.shape[3])
    return Val(as_array(dxp[:, :, p[0]:p[0] + H, p[1]:p[1] + W]), False)


# ------------------------------------------------------------------------------------ average pooling
def _avg_divisor(x_shape, k, s, p, out, count_include_pad, divisor_override):
    """What each window's sum is divided by: the override, the window's size, or (count_include_pad
    False) how many of its entries are inside the input -- static integers either way."""
    if divisor_override:
        return int(divisor_override)
    if count_include_pad:
        return k[0] * k[1]
    inside = _padded(np.ones(tuple(int(v) for v in x_shape), dtype=int), p)
    return sum(_window(inside, i, j, s, (1, 1), out) for i in range(k[0]) for j in range(k[1]))


def _divided(a, divisor):
    """a / divisor in a's own dtype (a count array as Python ints where a is exact, floats where not)."""
    if isinstance(divisor, np.ndarray):
        divisor = np.array(divisor.tolist(), dtype=object) if a.dtype == object else divisor.astype(a.dtype)
    return a / divisor


@rule("aten.avg_pool2d.default")
def _avg_pool2d(c, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    """Each window's sum (over the input padded with zeros) divided by its divisor."""
    k, s, p, _, out = _pool_geometry(c, x.shape, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    xp = _padded(c.lift(x), p)
    total = sum(_window(xp, i, j, s, (1, 1), out) for i in range(k[0]) for j in range(k[1]))
    return Val(as_array(_divided(total, _avg_divisor(x.shape, k, s, p, out, count_include_pad, divisor_override))),
               False)


@rule("aten.avg_pool2d_backward.default")
def _avg_pool2d_backward(c, dy, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """dy divided by each window's divisor, added back at every entry of the window."""
    k, s, p, _, out = _pool_geometry(c, x.shape, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    share = _divided(c.lift(dy), _avg_divisor(x.shape, k, s, p, out, count_include_pad, divisor_override))
    dxp = c.B.zeros(_padded(c.lift(x), p).shape)
    for i in range(k[0]):
        for j in range(k[1]):
            view = _window(dxp, i, j, s, (1, 1), out)
            view += share
    H, W = int(x.shape[2]), int(x.shape[3])
    return Val(as_array(dxp[:, :, p[0]:p[0] + H, p[1]:p[1] + W]), False)
