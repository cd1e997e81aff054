"""GeGLU gate, elementwise, with GELU's tanh approximation (as Liger's GeGLU kernel computes it).

    y  = gelu_tanh(a) * b
    da = dy * b * gelu_tanh'(a),     db = dy * gelu_tanh(a)
gelu_tanh and its derivative are the ones `specs/gelu.py` proves; this file only gates them.
"""
from vjpcert.core.registry import op
from vjpcert.specs.gelu import gelu_tanh, gelu_tanh_vjp
from vjpcert.specs.swiglu import SHAPES


@op(**SHAPES)
def geglu(B, a, b):
    return gelu_tanh(B, a) * b


@geglu.defvjp
def geglu_vjp(B, a, b, dy):
    (da,) = gelu_tanh_vjp(B, a, dy * b)
    return da, dy * gelu_tanh(B, a)


@geglu.law
def gate_derivative_is_gelu_tanh_derivative(B, a, backward):
    """d/da gelu_tanh(a) = (1 + t)/2 + a (1 - t^2) u'(a)/2, t = tanh u(a), u = sqrt(2/pi)(a + k a^3),
    written out here again: the gate's cotangent at b = 1, dy = 1."""
    one = a * 0 + 1
    da, _ = backward(a, one, one)
    k = B.c("0.044715")
    t = B.tanh(B.sqrt(2 / B.pi) * (a + k * a ** 3))
    return da, (1 + t) / 2 + a * (1 - t ** 2) * B.sqrt(2 / B.pi) * (1 + 3 * k * a ** 2) / 2


@geglu.law
def value_cotangent_is_gelu(B, a, b, dy, forward, backward):
    """db = dy * gelu_tanh(a): y is linear in b, with slope the forward at b = 1."""
    _, db = backward(a, b, dy)
    return db, dy * forward(a, a * 0 + 1)


# Proved for every shape: the statement is derived from the code above (symbolic.every_size.shape_trace).
geglu.every_size("vjp[a]", "vjp[b]", "gate_derivative_is_gelu_tanh_derivative", "value_cotangent_is_gelu")
