"""Wrong MobileNetV2 inverted-residual backwards: the shortcut, a saved tensor mixed up."""
from vjpcert.specs.batchnorm import norm_vjp
from vjpcert.specs.mobilenet import _main_path, inverted_residual
from vjpcert.specs.relu import act, act_vjp


def _back(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes, *, shortcut=True, projection_at_a1=False):
    (c1, n1, a1, c2, n2, a2, c3), _ = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    dc3, dg3, db3 = norm_vjp(nodes.bn3, c3, g3, b3, dy, eps)
    da2, dw3 = nodes.project.vjp(a1 if projection_at_a1 else a2, w3, dc3)
    dc2, dg2, db2 = norm_vjp(nodes.bn2, c2, g2, b2, act_vjp(nodes.act2, n2, da2), eps)
    da1, dw2 = nodes.depthwise.vjp(a1, w2, dc2)
    dc1, dg1, db1 = norm_vjp(nodes.bn1, c1, g1, b1, act_vjp(nodes.act1, n1, da1), eps)
    dx, dw1 = nodes.expand.vjp(x, w1, dc1)
    return dx + dy if shortcut else dx, dw1, dg1, db1, dw2, dg2, db2, dw3, dg3, db3


@inverted_residual.mutant("shortcut_gradient_not_added", kills=["vjp[x]"])
def _(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes):
    """dx of the main path only: the identity shortcut's gradient is dropped."""
    return _back(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes, shortcut=False)


@inverted_residual.mutant("projection_weight_gradient_at_the_expansion", kills=["vjp[w3]"])
def _(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes):
    """The projection's backward at the first activation a1 (a saved tensor mixed up; both have E
    channels) instead of its own input a2: dw3 goes wrong, the rest does not read the point."""
    return _back(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, dy, nodes, projection_at_a1=True)


@inverted_residual.mutant("relu6_after_the_projection", replaces="forward",
                          kills=[f"vjp[{k}]" for k in ("x", "w1", "g1", "b1", "w2", "g2", "b2", "w3", "g3", "b3")])
def _(B, x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes):
    """A relu6 after the projection's BatchNorm: the linear bottleneck made nonlinear (the block of
    MobileNetV1's habit), which the backward does not know."""
    _, main = _main_path(x, w1, g1, b1, w2, g2, b2, w3, g3, b3, eps, nodes)
    return act(nodes.act2, main) + x
