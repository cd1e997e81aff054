"""RoPE kernels (spec: specs/rope.py): rotate pair i of every row by theta = pos * base^(-2i/d).

Both layouts, one kernel: pair i is (x[2i], x[2i+1]) interleaved, or (x[i], x[i + d/2]) half-split.
    forward   (y0, y1) = R(theta) (x0, x1)
    backward  (dx0, dx1) = R(theta)^T (dy0, dy1) = R(-theta) (dy0, dy1)   (the same kernel, sign -1)
``inv_freq[i] = base^(-2i/d)`` is computed once on the host in float64 and rounded to float32, as
model code caches it: a device ``powf`` has up to a few ulps of error, and every ulp of inv_freq is
multiplied by pos (up to thousands) inside the angle. The angle itself is the float32 product
``pos * inv_freq`` that the float32 spec forms too.
sin and cos are a float32 ``sincos`` below, not ``math.sin``/``math.cos``: libdevice's ``sinf``
carries a float64 slow path (Payne-Hanek reduction for |x| > 105615), which would put ``.f64``
instructions into a float32 kernel. Here: reduction by pi/4 with a three-part constant and fused
multiply-adds (exact products), then the Cephes single-precision polynomials on [-pi/4, pi/4].
Measured against float64 (numpy emulating the fma): absolute error <= 7.6e-8 for |x| up to 1e6
(numpy's float32 sin/cos: <= 6.3e-8).
``rope_pair`` (spec: one pair per row, theta given) is the interleaved kernel at d = 2, pos = theta:
inv_freq[0] = base^0 = 1 exactly, so the angle is theta exactly.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.cuda_kernels.common import (call, config, cuda, device_constant, elem_grid, empty, float32, int32,
                                         is_device, kernel, launch)
from vjpcert.cuda_kernels.registry import Sizes, fwd_bwd

# pi/4 = HI + MID + LO (each the float32 rounding of what is left), and 4/pi
PIO4_HI = np.float32(0.7853982)
PIO4_MID = np.float32(-2.1855694e-08)
PIO4_LO = np.float32(-8.5756226e-16)
FOUR_OVER_PI = np.float32(4 / math.pi)
# Cephes sinf/cosf minimax coefficients on [-pi/4, pi/4] (S. L. Moshier, public domain)
S1, S2, S3 = np.float32(-1.6666654611e-1), np.float32(8.3321608736e-3), np.float32(-1.9515295891e-4)
C1, C2, C3 = np.float32(4.166664568298827e-2), np.float32(-1.388731625493765e-3), np.float32(2.443315711809948e-5)
HALF, ONE = np.float32(0.5), np.float32(1)


@cuda.jit(device=True)
def sincos(x):
    """(sin x, cos x) in float32 without a float64 path (see the module docstring)."""
    ss = ONE
    if x < float32(0):
        x = -x
        ss = -ONE
    sc = ONE
    j = int32(x * FOUR_OVER_PI)
    y = float32(j)
    if j & 1:
        j += 1
        y += ONE
    j = j & 7
    if j > 3:
        j -= 4
        ss = -ss
        sc = -sc
    if j > 1:
        sc = -sc
    r = cuda.fma(-y, PIO4_HI, x)
    r = cuda.fma(-y, PIO4_MID, r)
    r = cuda.fma(-y, PIO4_LO, r)
    z = r * r
    ps = ((S3 * z + S2) * z + S1) * z * r + r
    pc = ((C3 * z + C2) * z + C1) * z * z - HALF * z + ONE
    if j == 1 or j == 2:
        return ss * pc, sc * ps
    return ss * ps, sc * pc


_CACHE = {}


def build(cfg):
    if cfg.block in _CACHE:
        return _CACHE[cfg.block]

    @kernel("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], int32, float32)", threads=cfg.block)
    def rope_rotate(x, pos, inv_freq, y, half, sign):
        """One thread per (row, pair), grid-strided. ``half`` picks the layout; ``sign`` = -1 rotates
        by -theta (the backward)."""
        rows = x.shape[0]
        d = x.shape[1]
        h = d // 2
        for p in range(cuda.grid(1), rows * h, cuda.gridsize(1)):
            r = p // h
            i = p - r * h
            theta = pos[r] * inv_freq[i]
            s, c = sincos(theta)
            s = sign * s
            if half != 0:
                a = i
                b = i + h
            else:
                a = 2 * i
                b = 2 * i + 1
            x0 = x[r, a]
            x1 = x[r, b]
            y[r, a] = x0 * c - x1 * s
            y[r, b] = x0 * s + x1 * c

    _CACHE[cfg.block] = ns = type("RopeKernels", (), {"rotate": rope_rotate})
    return ns


def inv_freq(d: int, base) -> np.ndarray:
    """base^(-2i/d), i < d/2, in float64 and rounded once to float32."""
    i = np.arange(d // 2, dtype=np.float64)
    return (float(base) ** (-2.0 * i / d)).astype(np.float32)


def _rotate_dev(d_x, d_pos, *, base, half, sign, cfg=None, poison=True):
    cfg = cfg or config()
    rows, d = d_x.shape
    if d % 2:
        raise ValueError(f"RoPE needs an even head width, got d = {d}")
    d_y = empty(d_x.shape, poison)
    inv = device_constant(("rope inv_freq", d, float(base)), lambda: inv_freq(d, base))
    launch(build(cfg).rotate, elem_grid(rows * (d // 2), cfg), cfg.block, d_x, d_pos, inv, d_y, int(half),
           np.float32(sign))
    return d_y


def _pos_rows(x, pos):
    """Positions per row, broadcast over the batch dims that are folded into rows."""
    pos = np.asarray(pos, np.float32)
    lead = np.shape(x)[:-1]
    return np.broadcast_to(pos.reshape(pos.shape + (1,) * (len(lead) - pos.ndim)), lead).reshape(-1) \
        if pos.shape != lead else pos.reshape(-1)


def _run(x, pos, base, half, sign, poison):
    if is_device(x):
        return _rotate_dev(x, pos, base=base, half=half, sign=sign, poison=poison)
    return call(lambda d_x, d_pos: _rotate_dev(d_x, d_pos, base=base, half=half, sign=sign, poison=poison),
                (x,), (_pos_rows(x, pos),))


def rope_interleaved_fwd(x, pos, *, base=10000, poison=True):
    return _run(x, pos, base, 0, 1, poison)


def rope_interleaved_bwd(x, pos, dy, *, base=10000, poison=True):
    """dx = R(-theta) dy (x is not needed: the map is linear in x)."""
    return _run(dy, pos, base, 0, -1, poison)


def rope_half_fwd(x, pos, *, base=10000, poison=True):
    return _run(x, pos, base, 1, 1, poison)


def rope_half_bwd(x, pos, dy, *, base=10000, poison=True):
    return _run(dy, pos, base, 1, -1, poison)


def rope_pair_fwd(x, theta, *, poison=True):
    return _run(x, theta, 1, 0, 1, poison)


def rope_pair_bwd(x, theta, dy, *, poison=True):
    return _run(dy, theta, 1, 0, -1, poison)


# ------------------------------------------------------------------------------ error model
def _rotate_model(x, pos, base, half, sign):
    """rope_rotate: inv_freq rounded on the host (one rounding per pair index, shared by every row),
    theta = pos * inv_freq rounded, sincos to an absolute error, then two products and a sum."""
    from vjpcert.cuda_kernels import error_model as em
    from vjpcert.cuda_kernels import settings as tol
    rows, d = x.shape
    h = d // 2
    i = np.arange(h, dtype=np.float64)
    inv = em.Tracked(float(base) ** (-2.0 * i / d))
    exact32 = inv.v.astype(np.float32).astype(np.float64) == inv.v
    inv = em.Tracked(inv.v, 0.0, 0.0, np.where(exact32, 0.0, np.abs(inv.v)), np.where(exact32, 0.0, np.abs(inv.v)))
    theta = em.exact(np.asarray(pos, np.float64)[:, None]) * inv[None, :]
    sin = em.absolute_error(em._propagate(np.sin(theta.v), (theta, np.cos(theta.v))), tol.SINCOS_ABSOLUTE_ERROR_U)
    cos = em.absolute_error(em._propagate(np.cos(theta.v), (theta, np.sin(theta.v))), tol.SINCOS_ABSOLUTE_ERROR_U)
    s = sin if sign > 0 else -sin
    x = em.exact(x)
    a, b = (x[:, :h], x[:, h:]) if half else (x[:, 0::2], x[:, 1::2])
    ya = a * cos - b * s
    yb = a * s + b * cos
    out = [np.empty((rows, d)) for _ in range(5)]
    first, second = (slice(0, h), slice(h, None)) if half else (slice(0, None, 2), slice(1, None, 2))
    for t, cols in ((ya, first), (yb, second)):
        for o, part in zip(out, (t.v, t.p1, t.p2, t.s1, t.s2)):
            o[:, cols] = part
    return em.Tracked(*out)


def rope_interleaved_fwd_model(cfg, x, pos, *, base=10000):
    return _rotate_model(x, pos, base, 0, 1)


def rope_interleaved_bwd_model(cfg, x, pos, dy, *, base=10000):
    return _rotate_model(dy, pos, base, 0, -1)


def rope_half_fwd_model(cfg, x, pos, *, base=10000):
    return _rotate_model(x, pos, base, 1, 1)


def rope_half_bwd_model(cfg, x, pos, dy, *, base=10000):
    return _rotate_model(dy, pos, base, 1, -1)


def rope_pair_fwd_model(cfg, x, theta):
    return _rotate_model(x, theta, 1, 0, 1)


def rope_pair_bwd_model(cfg, x, theta, dy):
    return _rotate_model(dy, theta, 1, 0, -1)


# ------------------------------------------------------------------------------ registration
_FWD_LAWS = ("inverse_rotation", "preserves_norm")
_BWD_LAWS = ("backward_inverts_forward",)
KERNELS = [*fwd_bwd("rope_pair", rope_pair_fwd, rope_pair_bwd, models=(rope_pair_fwd_model, rope_pair_bwd_model),
                    fwd_laws=_FWD_LAWS, bwd_laws=_BWD_LAWS, doc="the interleaved kernel at d = 2, pos = theta"),
           *fwd_bwd("rope_interleaved", rope_interleaved_fwd, rope_interleaved_bwd,
                    models=(rope_interleaved_fwd_model, rope_interleaved_bwd_model),
                    fwd_laws=_FWD_LAWS, bwd_laws=_BWD_LAWS, doc="one thread per pair"),
           *fwd_bwd("rope_half", rope_half_fwd, rope_half_bwd, models=(rope_half_fwd_model, rope_half_bwd_model),
                    fwd_laws=_FWD_LAWS, bwd_laws=_BWD_LAWS, doc="one thread per pair")]
_SIM = ({"rows": 1, "d": 2}, {"rows": 7, "d": 34}, {"rows": 33, "d": 8}, {"rows": 3, "d": 1026})
_GPU = ({"rows": 1, "d": 2}, {"rows": 4096, "d": 128}, {"rows": 33, "d": 1026})
SIZES = {"rope_pair": Sizes(simulator=({"rows": 1}, {"rows": 33}, {"rows": 1025}),
                            gpu=({"rows": 1}, {"rows": 1 << 20}), gpu_launch=({"rows": 1031},)),
         "rope_interleaved": Sizes(simulator=_SIM, gpu=_GPU, gpu_launch=({"rows": 17, "d": 128},)),
         "rope_half": Sizes(simulator=_SIM, gpu=_GPU, gpu_launch=({"rows": 17, "d": 64},))}
