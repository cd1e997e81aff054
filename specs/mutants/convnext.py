"""Wrong ConvNeXt-block backwards: the layer scale skipped, LayerNorm's backward in the wrong layout."""
from vjpcert.specs.batchnorm import images, rows
from vjpcert.specs.convnext import _branch, convnext_block


def _back(x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes, *, scale_skipped=False):
    (r, n, h, a), z = _branch(x, wd, bd, g, be, W1, b1, W2, b2, eps, nodes)
    dz, dls = nodes.scale.vjp(z, ls, rows(dy))
    if scale_skipped:
        dz = rows(dy)
    da, dW2, db2 = nodes.fc2.vjp(a, W2, b2, dz)
    (dh,) = nodes.act.vjp(h, da)
    dn, dW1, db1 = nodes.fc1.vjp(n, W1, b1, dh)
    dr, dg, dbe = nodes.norm.vjp(r, g, be, dn, eps=eps)
    dx, dwd, dbd = nodes.dwconv.vjp(x, wd, bd, images(dr, x))
    return dy + dx, dwd, dbd, dg, dbe, dW1, db1, dW2, db2, dls


@convnext_block.mutant("layer_scale_left_out_of_the_branch_gradient",
                       kills=["vjp[x]", "vjp[wd]", "vjp[bd]", "vjp[g]", "vjp[be]", "vjp[W1]", "vjp[b1]", "vjp[W2]",
                              "vjp[b2]"])
def _(B, x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes):
    """The branch's cotangent passed on as dy, not dy * ls: layer scale treated as a forward-only gain."""
    return _back(x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes, scale_skipped=True)


@convnext_block.mutant("shortcut_gradient_not_added", kills=["vjp[x]"])
def _(B, x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes):
    out = _back(x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes)
    return (out[0] - dy,) + out[1:]


@convnext_block.mutant("layer_scale_gradient_of_the_normalised_rows", kills=["vjp[ls]"])
def _(B, x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes):
    """dls read at the LayerNorm's output (a saved tensor mixed up) instead of the MLP's."""
    out = _back(x, wd, bd, g, be, W1, b1, W2, b2, ls, eps, dy, nodes)
    (r, n, h, a), z = _branch(x, wd, bd, g, be, W1, b1, W2, b2, eps, nodes)
    _, dls = nodes.scale.vjp(n, ls, rows(dy))
    return out[:-1] + (dls,)
