"""Wrong RoPE backwards and forwards: rotation direction, layout, position, orthogonality."""
import numpy as np

from vjpcert.specs.rope import _rotate_pairs, angles, rope_half, rope_interleaved, rope_pair, rotate_half


@rope_pair.mutant("rotates_forward_again", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, theta, dy):
    """Applies R(theta) instead of R(theta)^T = R(-theta)."""
    d0, d1 = _rotate_pairs(B, dy[:, 0], dy[:, 1], B.cos(theta), B.sin(theta))
    return (np.stack([d0, d1], axis=-1),)


@rope_pair.mutant("swapped_pair", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, theta, dy):
    """Writes the two cotangent components into each other's slot."""
    d0, d1 = _rotate_pairs(B, dy[:, 0], dy[:, 1], B.cos(theta), -B.sin(theta))
    return (np.stack([d1, d0], axis=-1),)


@rope_pair.mutant("missing_cos_forward", replaces="forward",
                  kills=["vjp[x]", "inverse_rotation", "backward_inverts_forward", "preserves_norm"])
def _(B, x, theta):
    """y1 = x0 sin + x1 (a dropped cos): a shear, not a rotation."""
    return np.stack([x[:, 0] * B.cos(theta) - x[:, 1] * B.sin(theta),
                     x[:, 0] * B.sin(theta) + x[:, 1]], axis=-1)


def _interleaved_back(B, x, pos, base, dy, sign=-1, shift=0):
    th = angles(B, pos + shift, x.shape[-1], base)
    d0, d1 = _rotate_pairs(B, dy[:, 0::2], dy[:, 1::2], B.cos(th), sign * B.sin(th))
    return np.stack([d0, d1], axis=-1).reshape(x.shape)


def _half_back(B, x, pos, base, dy, sign=-1, shift=0):
    th = angles(B, pos + shift, x.shape[-1], base)
    cos, sin = np.concatenate([B.cos(th)] * 2, -1), np.concatenate([B.sin(th)] * 2, -1)
    return dy * cos + sign * rotate_half(dy * sin)


@rope_interleaved.mutant("half_split_layout", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, pos, base, dy):
    """The backward of the other layout (GPT-NeoX rotate_half) on interleaved pairs."""
    return (_half_back(B, x, pos, base, dy),)


@rope_half.mutant("interleaved_layout", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, pos, base, dy):
    """The backward of the interleaved layout on half-split pairs."""
    return (_interleaved_back(B, x, pos, base, dy),)


@rope_interleaved.mutant("off_by_one_position", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, pos, base, dy):
    return (_interleaved_back(B, x, pos, base, dy, shift=1),)


@rope_half.mutant("off_by_one_position", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, pos, base, dy):
    return (_half_back(B, x, pos, base, dy, shift=1),)


@rope_interleaved.mutant("rotates_forward_again", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, pos, base, dy):
    return (_interleaved_back(B, x, pos, base, dy, sign=1),)


@rope_half.mutant("rotates_forward_again", kills=["vjp[x]", "backward_inverts_forward"])
def _(B, x, pos, base, dy):
    return (_half_back(B, x, pos, base, dy, sign=1),)


@rope_interleaved.mutant("missing_cos_forward", replaces="forward",
                         kills=["vjp[x]", "inverse_rotation", "backward_inverts_forward", "preserves_norm"])
def _(B, x, pos, base):
    th = angles(B, pos, x.shape[-1], base)
    y0 = x[:, 0::2] * B.cos(th) - x[:, 1::2] * B.sin(th)
    y1 = x[:, 0::2] * B.sin(th) + x[:, 1::2]
    return np.stack([y0, y1], axis=-1).reshape(x.shape)


@rope_half.mutant("missing_cos_forward", replaces="forward",
                  kills=["vjp[x]", "inverse_rotation", "backward_inverts_forward", "preserves_norm"])
def _(B, x, pos, base):
    th = angles(B, pos, x.shape[-1], base)
    sin = np.concatenate([B.sin(th)] * 2, -1)
    return x + rotate_half(x) * sin
