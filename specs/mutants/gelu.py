"""Wrong GELU backwards and forwards."""
from vjpcert.specs.gelu import K, Phi, _u, gelu_erf, gelu_tanh, phi


@gelu_erf.mutant("missing_pdf_term", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    return (dy * Phi(B, x),)


@gelu_erf.mutant("unnormalised_pdf", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    """exp(-x^2/2) without its 1/sqrt(2 pi)."""
    return (dy * (Phi(B, x) + x * B.exp(-x * x / 2)),)


@gelu_erf.mutant("one_plus_missing", replaces="forward", kills=["vjp[x]", "odd_part_is_identity"])
def _(B, x):
    """x erf(x / sqrt 2) / 2: the gate lost its 1 +."""
    return x * B.erf(x / B.sqrt(B.c(2))) / 2


@gelu_tanh.mutant("missing_sech2_term", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    return (dy * (1 + B.tanh(_u(B, x))) / 2,)


@gelu_tanh.mutant("cubic_term_not_tripled", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    """d/dx (x + k x^3) written as 1 + k x^2."""
    t = B.tanh(_u(B, x))
    du = B.sqrt(2 / B.pi) * (1 + B.c(K) * x * x)
    return (dy * ((1 + t) / 2 + x * (1 - t * t) * du / 2),)


@gelu_tanh.mutant("one_plus_missing", replaces="forward", kills=["vjp[x]", "odd_part_is_identity"])
def _(B, x):
    return x * B.tanh(_u(B, x)) / 2


@gelu_tanh.mutant("erf_backward_for_tanh_forward", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    """The exact-GELU derivative used with the tanh approximation: off by ~1e-3, smooth."""
    return (dy * (Phi(B, x) + x * phi(B, x)),)


@gelu_tanh.mutant("constant_rounded_to_12_digits", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    """sqrt(2/pi) typed as 0.797884560803: wrong by 2e-13, under the floor of every float64
    finite-difference check (~1e-11 at the best step), and a clear witness at 50 digits."""
    k = B.c("0.797884560803")
    t = B.tanh(k * (x + B.c(K) * x * x * x))
    du = k * (1 + 3 * B.c(K) * x * x)
    return (dy * ((1 + t) / 2 + x * (1 - t * t) * du / 2),)


def _negative_part(B, x):
    """min(x, 0), branch-free: (x - |x|) / 2 with |x| = sqrt(x^2)."""
    return (x - B.sqrt(x * x)) / 2


@gelu_erf.mutant("wrong_for_negative_inputs", kills=["vjp[x]", "derivative_formula"])
def _(B, x, dy):
    """Right for x >= 0, off by min(x, 0) / 100 below: half of all sampled entries see it."""
    return (dy * (Phi(B, x) + x * phi(B, x) + _negative_part(B, x) / 100),)


@gelu_tanh.mutant("wrong_below_minus_three", kills=["vjp[x]", "derivative_formula"], evades=("random",))
def _(B, x, dy):
    """Right except where x < -3, a region a standard-normal sampler hits 0.13% of the time."""
    t = B.tanh(_u(B, x))
    du = B.sqrt(2 / B.pi) * (1 + 3 * B.c(K) * x * x)
    return (dy * ((1 + t) / 2 + x * (1 - t * t) * du / 2 + _negative_part(B, x + 3)),)


@gelu_erf.mutant("branch_on_backend_name", refused=True)
def _(B, x, dy):
    """A backward that asks which backend it runs on could be right where it is proved and wrong in
    floats: reading anything but the documented functions of B is refused as bad input."""
    if B.name == "float64":
        return (dy * Phi(B, x),)
    return (dy * (Phi(B, x) + x * phi(B, x)),)
