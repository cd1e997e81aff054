"""Wrong SwiGLU backwards."""
from vjpcert.specs.swiglu import sigmoid, swiglu


@swiglu.mutant("sigmoid_prime_for_silu_prime", kills=["vjp[a]", "silu_derivative_formula"])
def _(B, a, b, dy):
    """sigmoid'(a) = s (1 - s) where silu'(a) = s (1 + a (1 - s)) belongs: the gate's derivative taken
    for the wrong activation."""
    s = sigmoid(B, a)
    return dy * b * s * (1 - s), dy * a * s


@swiglu.mutant("value_cotangent_without_a", kills=["vjp[b]", "value_cotangent_is_silu"])
def _(B, a, b, dy):
    """db = dy * sigmoid(a): silu written as the bare sigmoid."""
    s = sigmoid(B, a)
    return dy * b * s * (1 + a * (1 - s)), dy * s


@swiglu.mutant("gate_cotangent_without_b", kills=["vjp[a]"])
def _(B, a, b, dy):
    """da = dy * silu'(a), the value b dropped (right only where b = 1, which is where the derivative
    law looks)."""
    s = sigmoid(B, a)
    return dy * s * (1 + a * (1 - s)), dy * a * s


@swiglu.mutant("sigmoid_without_its_one", replaces="forward",
               kills=["vjp[a]", "vjp[b]", "value_cotangent_is_silu", "odd_part_is_identity"])
def _(B, a, b):
    """silu written as a / exp(-a): the 1 + of the sigmoid's denominator lost."""
    return a / B.exp(-a) * b
