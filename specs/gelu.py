"""GELU, elementwise.

Exact (erf) form:   y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2,  phi(x) = exp(-x^2/2) / sqrt(2 pi)
                    dx = dy * (Phi(x) + x phi(x))
tanh approximation: y = x (1 + tanh u) / 2,  u = sqrt(2/pi) (x + 0.044715 x^3)
                    dx = dy * ((1 + tanh u) / 2 + x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2)
The constant 0.044715 is exact (a decimal), and sqrt(2/pi) is computed, never a rounded literal.
"""
from vjpcert.core.registry import op

SHAPES = dict(inputs={"x": ("rows", "n")}, output=("rows", "n"),
              dims=[{"rows": 1, "n": 1}, {"rows": 2, "n": 3}], large_dims=[{"rows": 4, "n": 64}],
              check_dims={"rows": 3, "n": 7})


def Phi(B, x):
    return (1 + B.erf(x / B.sqrt(B.c(2)))) / 2


def phi(B, x):
    return B.exp(-x * x / 2) / B.sqrt(2 * B.pi)


@op(**SHAPES)
def gelu_erf(B, x):
    return x * Phi(B, x)


@gelu_erf.defvjp
def gelu_erf_vjp(B, x, dy):
    return (dy * (Phi(B, x) + x * phi(B, x)),)


@gelu_erf.law
def derivative_formula(B, x, backward):
    """gelu'(x) = Phi(x) + x phi(x), with Phi written via erfc-free erf and phi via exp."""
    (d,) = backward(x, dy=x * 0 + 1)
    return d, (1 + B.erf(x / B.sqrt(B.c(2)))) / 2 + x * B.exp(-x * x / 2) / B.sqrt(2 * B.pi)


K = "0.044715"


def _u(B, x):
    return B.sqrt(2 / B.pi) * (x + B.c(K) * x * x * x)


@op(**SHAPES)
def gelu_tanh(B, x):
    return x * (1 + B.tanh(_u(B, x))) / 2


@gelu_tanh.defvjp
def gelu_tanh_vjp(B, x, dy):
    t = B.tanh(_u(B, x))
    du = B.sqrt(2 / B.pi) * (1 + 3 * B.c(K) * x * x)
    return (dy * ((1 + t) / 2 + x * (1 - t * t) * du / 2),)


@gelu_tanh.law(name="derivative_formula")
def _derivative_formula_tanh(B, x, backward):
    """gelu_tanh'(x) = (1 + t)/2 + x (1 - t^2) u'(x) / 2 with t = tanh u(x)."""
    (d,) = backward(x, dy=x * 0 + 1)
    t = B.tanh(B.sqrt(2 / B.pi) * (x + B.c(K) * x ** 3))
    return d, (1 + t) / 2 + x * (1 - t ** 2) * B.sqrt(2 / B.pi) * (1 + 3 * B.c(K) * x ** 2) / 2


for _gelu in (gelu_erf, gelu_tanh):
    @_gelu.law(name="odd_part_is_identity")
    def _odd(B, x, forward):
        """gelu(x) - gelu(-x) = x, because Phi(x) + Phi(-x) = 1 (erf and tanh are odd)."""
        return forward(x) - forward(-x), x


# Proved for every shape: the statement is derived from the code above (symbolic.every_size.shape_trace).
for _gelu in (gelu_erf, gelu_tanh):
    _gelu.every_size("vjp[x]", "derivative_formula", "odd_part_is_identity")
