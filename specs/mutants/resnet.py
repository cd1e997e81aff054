"""Wrong ResNet-bottleneck backwards: the shortcut's gradient, the mask read at the wrong point."""
from vjpcert.specs.resnet import _main_path, act_vjp, norm_vjp, resnet_bottleneck


def _back(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes, *, shortcut=True, mask_before_sum=False):
    (c1, n1, a1, c2, n2, a2, c3), main = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    dz = act_vjp(nodes.act3, main if mask_before_sum else main + x, dy)
    dc3, dg3, db3 = norm_vjp(nodes.bn3, c3, g3, b3, dz, eps)
    da2, dw3 = nodes.conv3.vjp(a2, w3, dc3)
    dc2, dg2, db2 = norm_vjp(nodes.bn2, c2, g2, b2, act_vjp(nodes.act2, n2, da2), eps)
    da1, dw2 = nodes.conv2.vjp(a1, w2, dc2)
    dc1, dg1, db1 = norm_vjp(nodes.bn1, c1, g1, b1, act_vjp(nodes.act1, n1, da1), eps)
    dx, dw1 = nodes.conv1.vjp(x, w1, dc1)
    return dx + dz if shortcut else dx, dw1, dg1, db1, dw2, dg2, db2, dw3, dg3, db3


@resnet_bottleneck.mutant("shortcut_gradient_not_added", kills=["vjp[x]"])
def _(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes):
    """dx of the main path only: the identity shortcut's gradient is dropped."""
    return _back(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes, shortcut=False)


@resnet_bottleneck.mutant("last_relu_mask_before_the_sum",
                          kills=[f"vjp[{k}]" for k in ("x", "w1", "g1", "b1", "w2", "g2", "b2", "w3", "g3", "b3")])
def _(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes):
    """The last relu's mask read from the main path alone, before the shortcut is added."""
    return _back(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes, mask_before_sum=True)
