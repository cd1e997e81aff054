"""Wrong SwiGLU MLP backwards: the wiring around the gate."""
from vjpcert.specs.swiglu_mlp import no_bias, swiglu_mlp


def _parts(B, X, Wg, Wu, Wd, dy, nodes):
    A, U = nodes.gate_proj(X, Wg, no_bias(B, Wg)), nodes.up_proj(X, Wu, no_bias(B, Wu))
    dH, dWd, _ = nodes.down_proj.vjp(nodes.gate(A, U), Wd, no_bias(B, Wd), dy)
    return A, U, dH, dWd


@swiglu_mlp.mutant("up_branch_missing_from_dX", kills=["vjp[X]"])
def _(B, X, Wg, Wu, Wd, dy, nodes):
    """dX from the gate branch only: the fan-out of X into two projections forgotten."""
    A, U, dH, dWd = _parts(B, X, Wg, Wu, Wd, dy, nodes)
    dA, dU = nodes.gate.vjp(A, U, dH)
    dXg, dWg, _ = nodes.gate_proj.vjp(X, Wg, no_bias(B, Wg), dA)
    _, dWu, _ = nodes.up_proj.vjp(X, Wu, no_bias(B, Wu), dU)
    return dXg, dWg, dWu, dWd


@swiglu_mlp.mutant("gate_and_up_cotangents_swapped", kills=["vjp[X]", "vjp[Wg]", "vjp[Wu]"])
def _(B, X, Wg, Wu, Wd, dy, nodes):
    """The gate's two cotangents routed to the wrong projections."""
    A, U, dH, dWd = _parts(B, X, Wg, Wu, Wd, dy, nodes)
    dA, dU = nodes.gate.vjp(A, U, dH)
    dXg, dWg, _ = nodes.gate_proj.vjp(X, Wg, no_bias(B, Wg), dU)
    dXu, dWu, _ = nodes.up_proj.vjp(X, Wu, no_bias(B, Wu), dA)
    return dXg + dXu, dWg, dWu, dWd


@swiglu_mlp.mutant("down_weight_cotangent_transposed_input", kills=["vjp[Wd]"])
def _(B, X, Wg, Wu, Wd, dy, nodes):
    """dWd taken at the gate's input A instead of its output H."""
    A, U, dH, _ = _parts(B, X, Wg, Wu, Wd, dy, nodes)
    _, dWd, _ = nodes.down_proj.vjp(A, Wd, no_bias(B, Wd), dy)
    dA, dU = nodes.gate.vjp(A, U, dH)
    dXg, dWg, _ = nodes.gate_proj.vjp(X, Wg, no_bias(B, Wg), dA)
    dXu, dWu, _ = nodes.up_proj.vjp(X, Wu, no_bias(B, Wu), dU)
    return dXg + dXu, dWg, dWu, dWd
