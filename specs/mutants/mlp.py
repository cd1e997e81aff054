"""Wrong MLP backwards."""
from vjpcert.specs.mlp import mlp


@mlp.mutant("gelu_backward_at_output", kills=["vjp[X]", "vjp[W1]", "vjp[b1]"])
def _(B, X, W1, b1, W2, b2, dy, nodes):
    """The activation's backward evaluated at its output G instead of its input H."""
    H = nodes.dense1(X, W1, b1)
    G = nodes.act(H)
    dG, dW2, db2 = nodes.dense2.vjp(G, W2, b2, dy)
    (dH,) = nodes.act.vjp(G, dG)
    dX, dW1, db1 = nodes.dense1.vjp(X, W1, b1, dH)
    return dX, dW1, db1, dW2, db2


@mlp.mutant("skips_activation_backward", kills=["vjp[X]", "vjp[W1]", "vjp[b1]"])
def _(B, X, W1, b1, W2, b2, dy, nodes):
    H = nodes.dense1(X, W1, b1)
    dG, dW2, db2 = nodes.dense2.vjp(nodes.act(H), W2, b2, dy)
    dX, dW1, db1 = nodes.dense1.vjp(X, W1, b1, dG)
    return dX, dW1, db1, dW2, db2


@mlp.mutant("second_weight_gradient_reshaped", kills=["vjp[W2]"])
def _(B, X, W1, b1, W2, b2, dy, nodes):
    """(G^T dY).reshape(W2.shape): a transpose written as a reshape."""
    H = nodes.dense1(X, W1, b1)
    G = nodes.act(H)
    dG, _, db2 = nodes.dense2.vjp(G, W2, b2, dy)
    (dH,) = nodes.act.vjp(H, dG)
    dX, dW1, db1 = nodes.dense1.vjp(X, W1, b1, dH)
    return dX, dW1, db1, (G.T @ dy).reshape(W2.shape), db2


@mlp.mutant("missing_second_bias_gradient", kills=["vjp[b2]"])
def _(B, X, W1, b1, W2, b2, dy, nodes):
    H = nodes.dense1(X, W1, b1)
    G = nodes.act(H)
    dG, dW2, db2 = nodes.dense2.vjp(G, W2, b2, dy)
    (dH,) = nodes.act.vjp(H, dG)
    dX, dW1, db1 = nodes.dense1.vjp(X, W1, b1, dH)
    return dX, dW1, db1, dW2, db2 * 0
