"""A ResNet bottleneck block (ResNet-50's, stride 1, identity shortcut) over images x (N x C x H x W):
a 1x1 convolution down to the width Cw, a 3x3 one at the width, a 1x1 one back up to C, each
followed by training-mode BatchNorm, ReLU after the first two and after the residual sum.

    a1 = relu(bn1(conv1x1(x, w1)))      a2 = relu(bn2(conv3x3(a1, w2)))
    y  = relu(bn3(conv1x1(a2, w3)) + x)
The backward runs the nodes' backwards in reverse and adds the shortcut's gradient to the main
path's: dx = dz + dx_main, dz = dy [z > 0]. BatchNorm normalises each channel over the batch and the
image (N H W rows of C channels): the nodes see the activations as rows, a transpose and reshape.
Certified compositionally, each node on its own proof; the relus on every region of their signs.
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op
from vjpcert.specs.batchnorm import batchnorm, norm, norm_vjp
from vjpcert.specs.conv2d import conv3x3, pointwise_conv2d
from vjpcert.specs.relu import act, act_vjp, relu


INPUTS = {"x": ("N", "C", "H", "W"), "w1": ("Cw", "C"), "g1": ("Cw",), "b1": ("Cw",),
          "w2": ("Cw", "Cw", 3, 3), "g2": ("Cw",), "b2": ("Cw",),
          "w3": ("C", "Cw"), "g3": ("C",), "b3": ("C",)}
BOTTLENECK = dict(
    inputs=INPUTS, output=("N", "C", "H", "W"),
    params={"eps": Param(Fraction(1, 10**5), positive=True, doc="BatchNorm's eps")},
    nodes={"conv1": pointwise_conv2d, "bn1": batchnorm, "act1": relu, "conv2": conv3x3, "bn2": batchnorm,
           "act2": relu, "conv3": pointwise_conv2d, "bn3": batchnorm, "act3": relu},
    proofs=("compositional",),
    dims=[{"N": 1, "C": 2, "Cw": 2, "H": 2, "W": 2}],
    compositional_dims=[{"N": 2, "C": 16, "Cw": 4, "H": 6, "W": 6}],
    # ResNet-50 stage 2 (conv2_x): the randomised exact test at production size (vjpcert prove --modular)
    modular_dims=[{"N": 8, "C": 256, "Cw": 64, "H": 56, "W": 56}],
    check_dims={"N": 2, "C": 4, "Cw": 2, "H": 3, "W": 3})


def _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes):
    c1 = nodes.conv1(x, w1)
    n1 = norm(nodes.bn1, c1, g1, b1, eps)
    a1 = act(nodes.act1, n1)
    c2 = nodes.conv2(a1, w2)
    n2 = norm(nodes.bn2, c2, g2, b2, eps)
    a2 = act(nodes.act2, n2)
    c3 = nodes.conv3(a2, w3)
    return (c1, n1, a1, c2, n2, a2, c3), norm(nodes.bn3, c3, g3, b3, eps)


@op(**BOTTLENECK)
def resnet_bottleneck(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes):
    _, main = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    return act(nodes.act3, main + x)


@resnet_bottleneck.defvjp
def resnet_bottleneck_vjp(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes):
    (c1, n1, a1, c2, n2, a2, c3), main = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    dz = act_vjp(nodes.act3, main + x, dy)
    dc3, dg3, db3 = norm_vjp(nodes.bn3, c3, g3, b3, dz, eps)
    da2, dw3 = nodes.conv3.vjp(a2, w3, dc3)
    dc2, dg2, db2 = norm_vjp(nodes.bn2, c2, g2, b2, act_vjp(nodes.act2, n2, da2), eps)
    da1, dw2 = nodes.conv2.vjp(a1, w2, dc2)
    dc1, dg1, db1 = norm_vjp(nodes.bn1, c1, g1, b1, act_vjp(nodes.act1, n1, da1), eps)
    dx, dw1 = nodes.conv1.vjp(x, w1, dc1)
    return dx + dz, dw1, dg1, db1, dw2, dg2, db2, dw3, dg3, db3          # the shortcut's gradient: dz
