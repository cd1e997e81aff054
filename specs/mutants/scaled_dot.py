"""Wrong scaled-dot-product backwards."""
from vjpcert.specs.scaled_dot import scaled_dot


@scaled_dot.mutant("dk_missing_scale", kills=["vjp[k]"])
def _(B, q, k, c, dy):
    return c * dy[:, None] * k, dy[:, None] * q


@scaled_dot.mutant("dq_uses_q", kills=["vjp[q]", "euler_homogeneity"])
def _(B, q, k, c, dy):
    return c * dy[:, None] * q, c * dy[:, None] * q


@scaled_dot.mutant("dq_scaled_twice", kills=["vjp[q]", "euler_homogeneity"])
def _(B, q, k, c, dy):
    return c * c * dy[:, None] * k, c * dy[:, None] * q
