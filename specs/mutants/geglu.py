"""Wrong GeGLU backwards."""
from vjpcert.specs.gelu import Phi, gelu_tanh, phi
from vjpcert.specs.geglu import geglu


@geglu.mutant("erf_derivative_for_tanh_gelu", kills=["vjp[a]", "gate_derivative_is_gelu_tanh_derivative"])
def _(B, a, b, dy):
    """The exact GELU's derivative Phi + a phi under the tanh approximation's forward: close in
    floats (about 1e-3), wrong in exact arithmetic."""
    return dy * b * (Phi(B, a) + a * phi(B, a)), dy * gelu_tanh(B, a)


@geglu.mutant("value_cotangent_is_the_gate", kills=["vjp[b]", "value_cotangent_is_gelu"])
def _(B, a, b, dy):
    """db = dy * a: the activation forgotten on the value path."""
    from vjpcert.specs.gelu import gelu_tanh_vjp
    (da,) = gelu_tanh_vjp(B, a, dy * b)
    return da, dy * a
