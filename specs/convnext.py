"""A ConvNeXt block (ConvNeXt-T's) over images x (N x C x H x W): a depthwise 7x7 convolution with a
bias, then, channels last, LayerNorm over the channels, an inverted MLP (C -> F = 4C -> C, GELU with
erf), a learned layer scale, and the residual sum.

    r = rows(dwconv7x7(x, wd, bd))                      (N H W rows of C channels)
    y = x + images(ls * fc2(gelu(fc1(LN(r)))))
The backward runs the nodes' backwards in reverse and adds the shortcut's gradient: dx = dy + dx_main.
Certified compositionally, each node on its own proof.
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op
from vjpcert.specs.batchnorm import images, rows
from vjpcert.specs.conv2d import depthwise_conv7x7
from vjpcert.specs.gelu import gelu_erf
from vjpcert.specs.layer_scale import layer_scale
from vjpcert.specs.layernorm import layernorm
from vjpcert.specs.linear import linear

INPUTS = {"x": ("N", "C", "H", "W"), "wd": ("C", 7, 7), "bd": ("C",), "g": ("C",), "be": ("C",),
          "W1": ("F", "C"), "b1": ("F",), "W2": ("C", "F"), "b2": ("C",), "ls": ("C",)}
CONVNEXT = dict(
    inputs=INPUTS, output=("N", "C", "H", "W"),
    params={"eps": Param(Fraction(1, 10**6), positive=True, doc="LayerNorm's eps")},
    nodes={"dwconv": depthwise_conv7x7, "norm": layernorm, "fc1": linear, "act": gelu_erf, "fc2": linear,
           "scale": layer_scale},
    proofs=("compositional",),
    dims=[{"N": 1, "C": 2, "F": 2, "H": 7, "W": 7}],       # LayerNorm over one channel is constant: 2;
                                                          # the 7 x 7 depthwise convolution's H, W >= 7
    compositional_dims=[{"N": 2, "C": 8, "F": 32, "H": 7, "W": 7}],
    # ConvNeXt-T's first stage (96 channels at 56 x 56), batch 8: the randomised exact test at
    # production size (vjpcert prove --modular)
    modular_dims=[{"N": 8, "C": 96, "F": 384, "H": 56, "W": 56}],
    # four channels: LayerNorm over two is +-1 whatever the input, and its Jacobian blows up where a
    # pixel's two channels nearly agree (at 7 x 7, 98 pixels, one does: finite differences then
    # call the right block wrong -- JAX's check_grads did on two seeds of three)
    check_dims={"N": 2, "C": 4, "F": 8, "H": 7, "W": 7})


def _branch(x, wd, bd, g, be, W1, b1, W2, b2, eps, nodes):
    r = rows(nodes.dwconv(x, wd, bd))
    n = nodes.norm(r, g, be, eps=eps)
    h = nodes.fc1(n, W1, b1)
    a = nodes.act(h)
    return (r, n, h, a), nodes.fc2(a, W2, b2)


@op(**CONVNEXT)
def convnext_block(B, x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, nodes):
    _, z = _branch(x, wd, bd, g, be, W1, b1, W2, b2, eps, nodes)
    return x + images(nodes.scale(z, ls), x)


@convnext_block.defvjp
def convnext_block_vjp(B, x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes):
    (r, n, h, a), z = _branch(x, wd, bd, g, be, W1, b1, W2, b2, eps, nodes)
    dz, dls = nodes.scale.vjp(z, ls, rows(dy))
    da, dW2, db2 = nodes.fc2.vjp(a, W2, b2, dz)
    (dh,) = nodes.act.vjp(h, da)
    dn, dW1, db1 = nodes.fc1.vjp(n, W1, b1, dh)
    dr, dg, dbe = nodes.norm.vjp(r, g, be, dn, eps=eps)
    dx, dwd, dbd = nodes.dwconv.vjp(x, wd, bd, images(dr, x))
    return dy + dx, dwd, dbd, dg, dbe, dW1, db1, dW2, db2, dls           # the shortcut's gradient: dy
