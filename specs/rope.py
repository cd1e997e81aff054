"""Rotary position embedding (RoPE).

The 2x2 pair rotation, for x = (x0, x1) and angle theta:
    y  = R(theta) x,     R(theta) = [[cos theta, -sin theta], [sin theta, cos theta]]
    dx = R(theta)^T dy = R(-theta) dy
A head vector of even width d at position pos rotates pair i by theta_i = pos * base^(-2i/d),
i = 0 .. d/2 - 1, with pairs laid out either
    interleaved  (x[2i], x[2i+1])            -- the original RoFormer / GPT-J layout
    half-split   (x[i], x[i + d/2])           -- "rotate_half", GPT-NeoX / Llama
Positions (and angles) are not differentiated.
"""
import numpy as np

from vjpcert.core.registry import Param, op


def _rotate_pairs(B, a, b, cos, sin):
    return a * cos - b * sin, a * sin + b * cos


@op(inputs={"x": ("rows", 2)}, nondiff={"theta": ("rows",)}, output=("rows", 2),
    dims=[{"rows": 1}, {"rows": 3}], check_dims={"rows": 5})
def rope_pair(B, x, theta):
    y0, y1 = _rotate_pairs(B, x[:, 0], x[:, 1], B.cos(theta), B.sin(theta))
    return np.stack([y0, y1], axis=-1)


@rope_pair.defvjp
def rope_pair_vjp(B, x, theta, dy):
    dx0, dx1 = _rotate_pairs(B, dy[:, 0], dy[:, 1], B.cos(theta), -B.sin(theta))
    return (np.stack([dx0, dx1], axis=-1),)


@rope_pair.law
def inverse_rotation(B, x, theta, forward):
    """R(-theta) R(theta) = I."""
    return forward(forward(x, theta), -theta), x


@rope_pair.law
def backward_inverts_forward(B, x, theta, forward, backward):
    """backward(forward(x)) = x: the backward is the inverse rotation."""
    (back,) = backward(x, theta, forward(x, theta))
    return back, x


@rope_pair.law
def preserves_norm(B, x, theta, forward):
    """|R(theta) x|^2 = |x|^2 per row: the rotation is orthogonal."""
    y = forward(x, theta)
    return (y * y).sum(-1), (x * x).sum(-1)


# Proved for every number of rows: the statement is derived from the code above (symbolic.every_size.shape_trace).
rope_pair.every_size("vjp[x]", "inverse_rotation", "backward_inverts_forward", "preserves_norm")


# ------------------------------------------------------------------------------ head vectors
def angles(B, pos, d, base):
    """theta[r, i] = pos[r] * base^(-2i/d), exact: base^(-2i/d) is an algebraic constant, not a float.
    Vectorised (no loop over d), so it traces with a symbolic d; the float backends compute the same
    numbers as a loop of scalar powers would (-2i exactly, one rounded division, one power)."""
    i = B.array(np.arange(d // 2))
    inv_freq = B.c(base) ** (B.c(-2) * i / B.c(d))
    return pos[:, None] * inv_freq[None, :]


def _even(dims):
    return None if dims["d"] % 2 == 0 else "RoPE needs an even head width d"


ROPE = dict(inputs={"x": ("rows", "d")}, nondiff={"pos": ("rows",)}, output=("rows", "d"),
            params={"base": Param(10000, symbolic=False, doc="frequency base")},
            dims=[{"rows": 1, "d": 2}, {"rows": 2, "d": 6}], large_dims=[{"rows": 2, "d": 64}],
            check_dims={"rows": 3, "d": 8}, constraints=_even,
            sample={"pos": lambda rng, shape: rng.integers(0, 4096, shape).astype(float)})


@op(**ROPE)
def rope_interleaved(B, x, pos, base):
    th = angles(B, pos, x.shape[-1], base)
    y0, y1 = _rotate_pairs(B, x[:, 0::2], x[:, 1::2], B.cos(th), B.sin(th))
    return np.stack([y0, y1], axis=-1).reshape(x.shape)


@rope_interleaved.defvjp
def rope_interleaved_vjp(B, x, pos, base, dy):
    th = angles(B, pos, x.shape[-1], base)
    d0, d1 = _rotate_pairs(B, dy[:, 0::2], dy[:, 1::2], B.cos(th), -B.sin(th))
    return (np.stack([d0, d1], axis=-1).reshape(x.shape),)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[:, h:], x[:, :h]], axis=-1)


@op(**ROPE)
def rope_half(B, x, pos, base):
    th = angles(B, pos, x.shape[-1], base)
    cos, sin = np.concatenate([B.cos(th)] * 2, -1), np.concatenate([B.sin(th)] * 2, -1)
    return x * cos + rotate_half(x) * sin


@rope_half.defvjp
def rope_half_vjp(B, x, pos, base, dy):
    """The transpose of x -> x*cos + rotate_half(x)*sin is dy -> dy*cos - rotate_half(dy*sin)."""
    th = angles(B, pos, x.shape[-1], base)
    cos, sin = np.concatenate([B.cos(th)] * 2, -1), np.concatenate([B.sin(th)] * 2, -1)
    return (dy * cos - rotate_half(dy * sin),)


for _rope in (rope_interleaved, rope_half):
    @_rope.law(name="inverse_rotation")
    def _inverse(B, x, pos, forward):
        """Rotating by -pos undoes rotating by pos: R(-theta) R(theta) = I for every pair."""
        return forward(forward(x, pos), -pos), x

    @_rope.law(name="backward_inverts_forward")
    def _roundtrip(B, x, pos, forward, backward):
        """backward(forward(x)) = x."""
        (back,) = backward(x, pos, dy=forward(x, pos))
        return back, x

    @_rope.law(name="preserves_norm")
    def _norm(B, x, pos, forward):
        """|RoPE(x)|^2 = |x|^2 per row."""
        y = forward(x, pos)
        return (y * y).sum(-1), (x * x).sum(-1)


# Proved for every rows and every even d = 2h (the constraint above): the statement is derived from the
# code above (symbolic.every_size.shape_trace), layouts included.
for _rope in (rope_interleaved, rope_half):
    _rope.every_size("vjp[x]", "inverse_rotation", "backward_inverts_forward")
