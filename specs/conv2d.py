"""2-d convolutions with a 3x3 kernel and a padding of 1, in NCHW, as deep-learning frameworks define
them (cross-correlation: the kernel is not flipped in the forward).

    conv2d      y[n,o,h,w] = b[o] + sum_{c,i,j} xp[n,c,h+i,w+j] w[o,c,i,j],  xp = x padded by 1
                dx = the same correlation of dy (padded by 1) with the kernel flipped and transposed
                dw[o,c,i,j] = sum_{n,h,w} dy[n,o,h,w] xp[n,c,h+i,w+j],  db[o] = sum dy[n,o,:,:]
    conv2d_s2   stride 2: y[n,o,p,q] = sum xp[n,c,2p+i,2q+j] w[o,c,i,j] (input 2Ho x 2Wo); its dx
                spreads each tap's contribution back to every other entry (an interleave with zeros)
    depthwise   groups = channels: y[n,c,h,w] = sum_{i,j} xp[n,c,h+i,w+j] w[c,i,j]
    depthwise7  ConvNeXt's: a 7x7 kernel per channel, padding 3, and a bias
    transposed  conv_transpose2d, stride 2 (the adjoint of conv2d_s2 in x): y = dx of conv2d_s2 at dy = x
    conv3x3     conv2d without a bias (a BatchNorm follows it in a ResNet block)
    dilated     conv2d_dilated_grouped: dilation 2 (taps 2 apart, padding 2) and 2 groups (each half of
                the outputs sees one half of the inputs; dx and dw stay within their group)
    pointwise   a 1x1 kernel: y[n,o,h,w] = sum_c x[n,c,h,w] w[o,c]; dx = w^T dy, dw = sum dy x^T

Written with np.pad, (strided) slices and einsum. The every-size tier proves them for every batch,
channel count and spatial size at this kernel size: conv2d_s2 and the transposed one from 1 on; the
stride-1 3 x 3 windows cut the padded input at 1 and at H - 1, in one order only from H = 2 on, so
those ops take H, W >= 2 (``from_two``) and are proved for every such size; the dilated one's taps,
2 apart, cut the input padded by 2 at 2 and at H - 2, in one order from H = 4 on (``from_four``); the
7 x 7 depthwise one's, padded by 3, cut at 1, 2, 3 and H - 3, H - 2, H - 1, ordered from H = 7 on
(``from_seven``: ConvNeXt's last stage is 7 x 7), and its statement's edge rows and columns are
proved case by case (the first three and the last three one by one, then the rest).
"""
import numpy as np

from vjpcert.core.registry import op

TAPS = [(i, j) for i in range(3) for j in range(3)]


def at_least(least: int, why: str):
    """A constraint: the spatial sizes H, W are at least ``least`` (``why``: the windows' cuts)."""
    def constraint(d):
        small = [name for name in ("H", "W") if d.get(name, least) < least]
        return f"{' and '.join(small)} must be at least {least} ({why})" if small else None
    return constraint


# the stride-1 3 x 3 ops' sizes: a one-pixel edge is every tap's edge at once
from_two = at_least(2, "a 3 x 3 window with padding 1, stride 1")
# the dilated 3 x 3: below 4, a tap 2 apart reads the padding on both sides of the image at once
from_four = at_least(4, "a 3 x 3 window with dilation 2 and padding 2")
# the 7 x 7 depthwise: its window's three-pixel edges are in one order from 7 on
from_seven = at_least(7, "a 7 x 7 window with padding 3, stride 1")


def taps(k):
    return [(i, j) for i in range(k) for j in range(k)]


def pad(x, p=1):
    return np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))


def window(xp, i, j, h, w, stride=1):
    """The h x w entries xp[..., i + stride p, j + stride q] (the stop is the last one's, plus one)."""
    return xp[:, :, i:i + stride * (h - 1) + 1:stride, j:j + stride * (w - 1) + 1:stride]


@op(inputs={"x": ("N", "C", "H", "W"), "w": ("O", "C", 3, 3), "b": ("O",)}, output=("N", "O", "H", "W"),
    dims=[{"N": 1, "C": 1, "O": 1, "H": 2, "W": 2}, {"N": 2, "C": 2, "O": 2, "H": 3, "W": 2}],
    check_dims={"N": 2, "C": 2, "O": 3, "H": 4, "W": 5}, constraints=from_two)
def conv2d(B, x, w, b):
    return correlate(x, w) + b[None, :, None, None]


def correlate(x, w):
    """sum_{c,i,j} xp[n,c,h+i,w+j] w[o,c,i,j] over the input padded by 1 (stride 1)."""
    H, W = x.shape[2], x.shape[3]
    xp = pad(x)
    return sum(np.einsum("nchw,oc->nohw", window(xp, i, j, H, W), w[:, :, i, j]) for i, j in TAPS)


def kernel_grad(dy, xp, stride=1, tap=lambda i, j: (i, j)):
    """dw[o, c, i, j] = sum_{n,h,w} dy[n,o,h,w] xp[n,c,stride h + i,stride w + j] (``tap``: which window
    fills (i, j))."""
    h, w = dy.shape[2], dy.shape[3]
    return np.stack([np.stack([np.einsum("nohw,nchw->oc", dy, window(xp, *tap(i, j), h, w, stride))
                               for j in range(3)], -1) for i in range(3)], -2)


def input_grad(dy, w, flip=True):
    """The correlation of dy (padded by 1) with the kernel flipped (``flip``) and transposed."""
    H, W = dy.shape[2], dy.shape[3]
    dyp = pad(dy)
    return sum(np.einsum("nohw,oc->nchw", window(dyp, 2 - i if flip else i, 2 - j if flip else j, H, W),
                         w[:, :, i, j]) for i, j in TAPS)


@conv2d.defvjp
def conv2d_vjp(B, x, w, b, dy):
    return input_grad(dy, w), kernel_grad(dy, pad(x)), dy.sum((0, 2, 3))


conv2d.every_size("vjp[x]", "vjp[w]", "vjp[b]")


@op(inputs={"x": ("N", "C", "H", "W"), "w": ("O", "C", 3, 3)}, output=("N", "O", "H", "W"),
    dims=[{"N": 1, "C": 1, "O": 1, "H": 2, "W": 2}, {"N": 2, "C": 2, "O": 2, "H": 3, "W": 2}],
    check_dims={"N": 2, "C": 2, "O": 3, "H": 4, "W": 5}, constraints=from_two)
def conv3x3(B, x, w):
    return correlate(x, w)


@conv3x3.defvjp
def conv3x3_vjp(B, x, w, dy):
    return input_grad(dy, w), kernel_grad(dy, pad(x))


conv3x3.every_size("vjp[x]", "vjp[w]")


@op(inputs={"x": ("N", "C", "H", "W"), "w": ("O", "C")}, output=("N", "O", "H", "W"),
    dims=[{"N": 1, "C": 1, "O": 1, "H": 1, "W": 2}, {"N": 2, "C": 3, "O": 2, "H": 2, "W": 2}],
    check_dims={"N": 2, "C": 3, "O": 4, "H": 3, "W": 2})
def pointwise_conv2d(B, x, w):
    return np.einsum("nchw,oc->nohw", x, w)


@pointwise_conv2d.defvjp
def pointwise_conv2d_vjp(B, x, w, dy):
    return np.einsum("nohw,oc->nchw", dy, w), np.einsum("nohw,nchw->oc", dy, x)


pointwise_conv2d.every_size("vjp[x]", "vjp[w]")


@conv2d.law
def linear_in_the_input(B, x, w, b, forward):
    """conv(2x) - conv(x) = conv(x) - b: the map is affine in x."""
    return forward(2 * x) - forward(x), forward(x) - b[None, :, None, None]




def spread(a):
    """a[..., p, q] placed at [..., 2p, 2q] of an array twice as high and wide, zeros between."""
    N, C, h, w = a.shape
    rows = np.stack([a, 0 * a], axis=3)                 # (N, C, h, 2, w)
    both = np.stack([rows, 0 * rows], axis=5)           # (N, C, h, 2, w, 2)
    return both.reshape(N, C, 2 * h, 2 * w)


@op(inputs={"x": ("N", "C", "2*Ho", "2*Wo"), "w": ("O", "C", 3, 3)}, output=("N", "O", "Ho", "Wo"),
    dims=[{"N": 1, "C": 1, "O": 1, "Ho": 2, "Wo": 2}, {"N": 1, "C": 2, "O": 2, "Ho": 2, "Wo": 3}],
    check_dims={"N": 2, "C": 2, "O": 3, "Ho": 3, "Wo": 2})
def conv2d_s2(B, x, w):
    Ho, Wo = x.shape[2] // 2, x.shape[3] // 2
    xp = pad(x)
    return sum(np.einsum("nchw,oc->nohw", window(xp, i, j, Ho, Wo, 2), w[:, :, i, j]) for i, j in TAPS)


def spread_grad(dy, w):
    """dx of the stride-2 convolution, padded by 1: each tap's contribution spread to every other entry."""
    return sum(np.pad(spread(np.einsum("nohw,oc->nchw", dy, w[:, :, i, j])), ((0, 0), (0, 0), (i, 2 - i), (j, 2 - j)))
               for i, j in TAPS)


@conv2d_s2.defvjp
def conv2d_s2_vjp(B, x, w, dy):
    return spread_grad(dy, w)[:, :, 1:-1, 1:-1], kernel_grad(dy, pad(x), 2)


conv2d_s2.every_size("vjp[x]", "vjp[w]")


@op(inputs={"x": ("N", "C", "H", "W"), "w": ("C", "O", 3, 3)}, output=("N", "O", "2*H", "2*W"),
    dims=[{"N": 1, "C": 1, "O": 1, "H": 2, "W": 2}, {"N": 1, "C": 2, "O": 2, "H": 2, "W": 3}],
    check_dims={"N": 2, "C": 2, "O": 3, "H": 3, "W": 2})
def conv_transpose2d(B, x, w):
    """conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), weights (in, out, 3, 3): the
    adjoint of conv2d_s2 in its input, each entry spread to every other output entry."""
    return spread_grad(x, w)[:, :, 1:-1, 1:-1]


def strided_correlation(dy, w, stride=2):
    """dx of the transposed convolution: conv2d_s2's forward of dy (padded by 1) with w read (in, out)."""
    H, W = dy.shape[2] // stride, dy.shape[3] // stride          # dy is 2H x 2W
    dyp = pad(dy)
    return sum(np.einsum("nohw,co->nchw", window(dyp, i, j, H, W, stride), w[:, :, i, j]) for i, j in TAPS)


@conv_transpose2d.defvjp
def conv_transpose2d_vjp(B, x, w, dy):
    return strided_correlation(dy, w), kernel_grad(x, pad(dy), 2)


conv_transpose2d.every_size("vjp[x]", "vjp[w]")


@op(inputs={"x": ("N", "C", "H", "W"), "w": ("C", 3, 3)}, output=("N", "C", "H", "W"),
    dims=[{"N": 1, "C": 1, "H": 2, "W": 2}, {"N": 1, "C": 2, "H": 3, "W": 2}],
    check_dims={"N": 2, "C": 3, "H": 4, "W": 5}, constraints=from_two)
def depthwise_conv2d(B, x, w):
    H, W = x.shape[2], x.shape[3]
    xp = pad(x)
    return sum(window(xp, i, j, H, W) * w[None, :, i, j, None, None] for i, j in TAPS)


def depthwise_input_grad(dy, w, flip=True):
    """The depthwise correlation of dy (padded by k // 2) with each channel's k x k kernel flipped."""
    H, W, k = dy.shape[2], dy.shape[3], w.shape[1]
    dyp = pad(dy, k // 2)
    return sum(window(dyp, k - 1 - i if flip else i, k - 1 - j if flip else j, H, W) * w[None, :, i, j, None, None]
               for i, j in taps(k))


def depthwise_kernel_grad(dy, xp, k=3, tap=lambda i, j: (i, j)):
    H, W = dy.shape[2], dy.shape[3]
    return np.stack([np.stack([(dy * window(xp, *tap(i, j), H, W)).sum((0, 2, 3)) for j in range(k)], -1)
                     for i in range(k)], -2)


@depthwise_conv2d.defvjp
def depthwise_conv2d_vjp(B, x, w, dy):
    return depthwise_input_grad(dy, w), depthwise_kernel_grad(dy, pad(x))


depthwise_conv2d.every_size("vjp[x]", "vjp[w]")



@op(inputs={"x": ("N", "C", "H", "W"), "w": ("C", 7, 7), "b": ("C",)}, output=("N", "C", "H", "W"),
    dims=[{"N": 1, "C": 1, "H": 7, "W": 7}, {"N": 2, "C": 2, "H": 8, "W": 7}],
    check_dims={"N": 2, "C": 2, "H": 7, "W": 8}, constraints=from_seven)
def depthwise_conv7x7(B, x, w, b):
    """ConvNeXt's spatial mixing: a depthwise 7 x 7 kernel, padding 3, with a bias."""
    H, W = x.shape[2], x.shape[3]
    xp = pad(x, 3)
    return sum(window(xp, i, j, H, W) * w[None, :, i, j, None, None] for i, j in taps(7)) + b[None, :, None, None]


@depthwise_conv7x7.defvjp
def depthwise_conv7x7_vjp(B, x, w, b, dy):
    return depthwise_input_grad(dy, w), depthwise_kernel_grad(dy, pad(x, 3), 7), dy.sum((0, 2, 3))


depthwise_conv7x7.every_size("vjp[x]", "vjp[w]", "vjp[b]")


GROUPS, DILATION = 2, 2


def grouped(a, groups=GROUPS):
    """(N, C, H, W) as (N, groups, C / groups, H, W): group g holds channels g C/G .. (g + 1) C/G - 1."""
    N, C, H, W = a.shape
    return a.reshape(N, groups, C // groups, H, W)


def dilated_correlation(xp, wg, H, W, offset=lambda i, j: (DILATION * i, DILATION * j)):
    """sum_{i,j} xp[n, g, c, h + d i, w + d j] wg[g, o, c, i, j] per group, as (N, G * O/G, H, W)."""
    N, C = xp.shape[0], xp.shape[1]
    terms = [np.einsum("ngchw,goc->ngohw", grouped(window(xp, *offset(i, j), H, W)), wg[:, :, :, i, j])
             for i, j in TAPS]
    out = sum(terms)
    return out.reshape(N, out.shape[1] * out.shape[2], H, W)


@op(inputs={"x": ("N", "2*Cg", "H", "W"), "w": ("2*Og", "Cg", 3, 3)}, output=("N", "2*Og", "H", "W"),
    dims=[{"N": 1, "Cg": 1, "Og": 1, "H": 4, "W": 4}, {"N": 1, "Cg": 2, "Og": 1, "H": 4, "W": 5}],
    check_dims={"N": 2, "Cg": 2, "Og": 2, "H": 5, "W": 6}, constraints=from_four,
    # a dilated 3 x 3 of a DeepLab-style stage at production size (vjpcert prove --modular)
    modular_dims=[{"N": 8, "Cg": 64, "Og": 64, "H": 28, "W": 28}])
def conv2d_dilated_grouped(B, x, w):
    """F.conv2d(x, w, padding=2, dilation=2, groups=2): each half of the output channels sees one half of
    the input channels, through a 3 x 3 kernel whose taps are 2 apart (the output keeps H x W)."""
    H, W = x.shape[2], x.shape[3]
    return dilated_correlation(pad(x, DILATION), w.reshape(GROUPS, w.shape[0] // GROUPS, *w.shape[1:]), H, W)


def dilated_input_grad(dy, w):
    """dx[n, c, h, w] = sum over c's group's outputs o and taps of dy padded by 2 at (h + 2(2 - i), w + 2(2 - j))
    times w[o, c, i, j]: the kernel flipped, transposed within each group."""
    H, W = dy.shape[2], dy.shape[3]
    wt = w.reshape(GROUPS, w.shape[0] // GROUPS, *w.shape[1:]).transpose(0, 2, 1, 3, 4)     # (G, C/G, O/G, 3, 3)
    return dilated_correlation(pad(dy, DILATION), wt, H, W, lambda i, j: (DILATION * (2 - i), DILATION * (2 - j)))


def dilated_kernel_grad(dy, xp, offset=lambda i, j: (DILATION * i, DILATION * j)):
    """dw[g O/G + o, c, i, j] = sum_{n,h,w} dy[n, g O/G + o, h, w] xp[n, g C/G + c, h + 2 i, w + 2 j]."""
    H, W = dy.shape[2], dy.shape[3]
    dyg = grouped(dy)
    per_tap = [[np.einsum("ngohw,ngchw->goc", dyg, grouped(window(xp, *offset(i, j), H, W))) for j in range(3)]
               for i in range(3)]
    dw = np.stack([np.stack(row, -1) for row in per_tap], -2)                       # (G, O/G, C/G, 3, 3)
    return dw.reshape(dw.shape[0] * dw.shape[1], *dw.shape[2:])


@conv2d_dilated_grouped.defvjp
def conv2d_dilated_grouped_vjp(B, x, w, dy):
    return dilated_input_grad(dy, w), dilated_kernel_grad(dy, pad(x, DILATION))


conv2d_dilated_grouped.every_size("vjp[x]", "vjp[w]")
