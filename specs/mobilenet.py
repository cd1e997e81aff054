"""A MobileNetV2 inverted residual block (stride 1, as many channels out as in, so the shortcut is the
identity) over images x (N x C x H x W): a 1x1 expansion to E = t C channels, a depthwise 3x3 at the
expanded width, a linear 1x1 projection back to C; BatchNorm after each convolution, ReLU6 after the
first two, no activation after the projection (the "linear bottleneck").

    a1 = relu6(bn1(conv1x1(x, w1)))     a2 = relu6(bn2(depthwise3x3(a1, w2)))
    y  = bn3(conv1x1(a2, w3)) + x
The backward runs the nodes' backwards in reverse and adds the shortcut's gradient: dx = dy + dx_main.
Certified compositionally, each node on its own proof; the relu6s on every region of their signs.
"""
from fractions import Fraction

from vjpcert.core.registry import Param, op
from vjpcert.specs.batchnorm import batchnorm, norm, norm_vjp
from vjpcert.specs.conv2d import depthwise_conv2d, pointwise_conv2d
from vjpcert.specs.relu import act, act_vjp, relu6

INPUTS = {"x": ("N", "C", "H", "W"), "w1": ("E", "C"), "g1": ("E",), "b1": ("E",),
          "w2": ("E", 3, 3), "g2": ("E",), "b2": ("E",),
          "w3": ("C", "E"), "g3": ("C",), "b3": ("C",)}
INVERTED_RESIDUAL = dict(
    inputs=INPUTS, output=("N", "C", "H", "W"),
    params={"eps": Param(Fraction(1, 10**5), positive=True, doc="BatchNorm's eps")},
    nodes={"expand": pointwise_conv2d, "bn1": batchnorm, "act1": relu6, "depthwise": depthwise_conv2d,
           "bn2": batchnorm, "act2": relu6, "project": pointwise_conv2d, "bn3": batchnorm},
    proofs=("compositional",),
    dims=[{"N": 1, "C": 1, "E": 2, "H": 2, "W": 2}],
    compositional_dims=[{"N": 2, "C": 4, "E": 24, "H": 6, "W": 6}],
    # MobileNetV2's 14 x 14 stage (96 channels, expansion 6), batch 8: the randomised exact test at
    # production size (vjpcert prove --modular)
    modular_dims=[{"N": 8, "C": 96, "E": 576, "H": 14, "W": 14}],
    check_dims={"N": 2, "C": 2, "E": 4, "H": 3, "W": 3})


def _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes):
    c1 = nodes.expand(x, w1)
    n1 = norm(nodes.bn1, c1, g1, b1, eps)
    a1 = act(nodes.act1, n1)
    c2 = nodes.depthwise(a1, w2)
    n2 = norm(nodes.bn2, c2, g2, b2, eps)
    a2 = act(nodes.act2, n2)
    c3 = nodes.project(a2, w3)
    return (c1, n1, a1, c2, n2, a2, c3), norm(nodes.bn3, c3, g3, b3, eps)


@op(**INVERTED_RESIDUAL)
def inverted_residual(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes):
    _, main = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    return main + x


@inverted_residual.defvjp
def inverted_residual_vjp(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes):
    (c1, n1, a1, c2, n2, a2, c3), _ = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    dc3, dg3, db3 = norm_vjp(nodes.bn3, c3, g3, b3, dy, eps)
    da2, dw3 = nodes.project.vjp(a2, w3, dc3)
    dc2, dg2, db2 = norm_vjp(nodes.bn2, c2, g2, b2, act_vjp(nodes.act2, n2, da2), eps)
    da1, dw2 = nodes.depthwise.vjp(a1, w2, dc2)
    dc1, dg1, db1 = norm_vjp(nodes.bn1, c1, g1, b1, act_vjp(nodes.act1, n1, da1), eps)
    dx, dw1 = nodes.expand.vjp(x, w1, dc1)
    return dx + dy, dw1, dg1, db1, dw2, dg2, db2, dw3, dg3, db3          # the shortcut's gradient: dy
