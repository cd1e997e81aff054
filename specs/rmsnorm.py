"""RMSNorm over the last axis, with gain offset + gamma and eps > 0.

    r   = sqrt(mean_j x_j^2 + eps),    y_i = (offset + gamma_i) x_i / r
    g   = dy * (offset + gamma)
    dx  = (g - x * mean_j(g_j x_j) / r^2) / r
    dgamma = sum_rows dy * x / r

``offset`` is Gemma's: its RMSNorm stores w and scales by 1 + w (Liger-Kernel's ``offset=1.0``). It is
a symbol in proofs (every real offset at once) and 0 by default, which is the plain RMSNorm. Where an
implementation rounds (Liger's casting modes: statistics in float32, or everything in float32) is not
part of the function; the kernel tiers judge it (triton_kernels/liger.py).
"""
from fractions import Fraction


from vjpcert.core.registry import Param, op


@op(inputs={"x": ("rows", "n"), "gamma": ("n",)}, output=("rows", "n"),
    params={"eps": Param(Fraction(1, 10**6), positive=True, doc="added to the mean square"),
            "offset": Param(0, doc="added to the gain: Gemma's 1 + w is offset = 1")},
    dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 1, "n": 8}],
    large_dims=[{"rows": 1, "n": 32}], check_dims={"rows": 3, "n": 7})
def rmsnorm(B, x, gamma, eps, offset):
    rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * rstd * (offset + gamma)


@rmsnorm.defvjp
def rmsnorm_vjp(B, x, gamma, eps, offset, dy):
    rstd = 1 / B.sqrt((x * x).mean(-1, keepdims=True) + eps)
    g = dy * (offset + gamma)
    dx = rstd * (g - x * rstd * rstd * (g * x).mean(-1, keepdims=True))
    dgamma = (dy * x * rstd).sum(0)
    return dx, dgamma


@rmsnorm.law(params={"eps": 0})
def dx_orthogonal_to_x(B, x, gamma, dy, backward):
    """At eps = 0, y(a x) = y(x) for a > 0, so <dx, x> = 0 per row (false for eps > 0)."""
    dx, _ = backward(x, gamma, dy=dy)
    return (dx * x).sum(-1)


@rmsnorm.law
def offset_is_a_gain_shift(B, x, gamma, dy, offset, backward):
    """The offset only shifts the gain: dx(gamma; offset) = dx(offset + gamma; 0). A backward that
    forgets the offset (Gemma's 1 + w) is right at offset 0 and wrong for every other offset, which a
    proof with offset a symbol covers."""
    dx, _ = backward(x, gamma, dy=dy)
    dx0, _ = backward(x, offset + gamma, dy=dy, offset=0)
    return dx, dx0


# Proved for every size n and rows: the statement is derived from the code above (symbolic.every_size.shape_trace).
rmsnorm.every_size("vjp[x]", "vjp[gamma]", "dx_orthogonal_to_x", "offset_is_a_gain_shift")
