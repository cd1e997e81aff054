"""SwiGLU gate, elementwise: the gated product inside Llama-style MLPs (and Liger's SwiGLU kernel).

    y  = silu(a) * b,          silu(a) = a sigmoid(a),   sigmoid(a) = 1 / (1 + exp(-a))
    da = dy * b * sigmoid(a) * (1 + a (1 - sigmoid(a)))      (silu' = sigmoid + a sigmoid')
    db = dy * silu(a)
The gate a and the value b are both differentiated. A SwiGLU MLP is a composite around this node.
"""
from vjpcert.core.registry import op

SHAPES = dict(inputs={"a": ("rows", "n"), "b": ("rows", "n")}, output=("rows", "n"),
              dims=[{"rows": 1, "n": 1}, {"rows": 2, "n": 3}], large_dims=[{"rows": 4, "n": 64}],
              check_dims={"rows": 3, "n": 7})


def sigmoid(B, a):
    return 1 / (1 + B.exp(-a))


def silu(B, a):
    return a * sigmoid(B, a)


@op(**SHAPES)
def swiglu(B, a, b):
    return silu(B, a) * b


@swiglu.defvjp
def swiglu_vjp(B, a, b, dy):
    s = sigmoid(B, a)
    return dy * b * s * (1 + a * (1 - s)), dy * a * s


@swiglu.law
def silu_derivative_formula(B, a, backward):
    """silu'(a) = (1 + exp(-a) + a exp(-a)) / (1 + exp(-a))^2, written from exp alone: the gate's
    cotangent at b = 1, dy = 1."""
    one = a * 0 + 1
    da, _ = backward(a, one, one)
    e = B.exp(-a)
    return da, (1 + e + a * e) / (1 + e) ** 2


@swiglu.law
def value_cotangent_is_silu(B, a, b, dy, forward, backward):
    """db = dy * silu(a): y is linear in b, with slope the forward at b = 1."""
    _, db = backward(a, b, dy)
    return db, dy * forward(a, a * 0 + 1)


@swiglu.law
def odd_part_is_identity(B, a, forward):
    """silu(a) - silu(-a) = a, because sigmoid(a) + sigmoid(-a) = 1."""
    one = a * 0 + 1
    return forward(a, one) - forward(-a, one), a


# Proved for every shape: the statement is derived from the code above (symbolic.every_size.shape_trace).
swiglu.every_size("vjp[a]", "vjp[b]", "silu_derivative_formula", "value_cotangent_is_silu",
                  "odd_part_is_identity")
