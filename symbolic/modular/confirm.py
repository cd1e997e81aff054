"""A nonzero modular VJP residual, confirmed at a real point before it is called `failed`.

The modular tier keys every transcendental subterm by the value of its argument: exp(a + b) and
exp(a) exp(b) are independent residues. Where the residual has no atoms, a nonzero mod p is a
disproof (a rational function that vanishes identically vanishes at every point mod p). With atoms it
is not: a correct backward that rests on an identity between them (exp(a + b) = exp(a) exp(b),
sin^2 + cos^2 = 1) is nonzero too. So the claim is `failed` only when a real point agrees, at the same
production dims: one random point x (float64 numbers, exact binary rationals), one random cotangent dy
and tangent t of the input X,

    <backward_X(x, dy), t>   against   <dy, (f(x + h t) - f(x - h t)) / 2h>

evaluated in mpmath at LOW and HIGH digits (``settings.CONFIRM_*``), each with its own step
h = 10^(-dps/3). Confirmation needs what the exact tier's mpmath witness needs: a relative residual far
above what LOW digits can leave (rounding ~10^(-2 dps/3), truncation ~h^2), the same at HIGH digits.
A correct formula cannot pass: its residual is rounding and truncation, which shrink by ~30 orders
between the two precisions. float64 decides nothing: a correct backward whose own float64 evaluation
cancels (dy (h - 1/h) h with h = e^(a/2) at a ~ 1e-11) is as stable between two steps as a wrong one.
Its residual is recorded beside the verdict, as information.

mpmath runs the spec on object arrays: out of reach at a GPT-2 block's dims. There, and wherever the
budget runs out, the verdict is `inconclusive` with both residuals (mod p and float64).
"""
from __future__ import annotations

import hashlib

import numpy as np

from vjpcert.core.backends import F64, MpmathBackend
from vjpcert.core.budget import run_with_budget
from vjpcert.core.registry import Op
from vjpcert.symbolic import settings as tol


def _point(op: Op, dims: dict, params: dict, name: str, seed: int):
    digest = hashlib.sha256(f"{op.name}|{name}|{sorted(dims.items())}|{seed}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:16], "big"))
    values = {}
    for n, decl in {**op.inputs, **op.nondiff}.items():
        shape = op.shape(decl, dims)
        values[n] = np.asarray(op.sample[n](rng, shape) if n in op.sample else rng.standard_normal(shape),
                               dtype=np.float64)
    y = np.asarray(op.bind(op.forward, F64, {**values, **_params(op, params, F64)}), dtype=np.float64)
    dy = rng.standard_normal(y.shape)
    t = rng.standard_normal(values[name].shape)
    return values, dy, t


def _params(op: Op, params: dict, B) -> dict:
    return {k: (B.c(params.get(k, prm.default)) if prm.symbolic else params.get(k, prm.default))
            for k, prm in op.params.items()}


def _sides(op: Op, B, conv, values: dict, dy, t, name: str, h, params: dict):
    """(<backward_X, t>, <dy, central difference of f along t at step h>) on backend B, the arrays
    converted by ``conv`` (exactly, for mpmath: float64 numbers are binary rationals)."""
    vals = {**{k: conv(v) for k, v in values.items()}, **_params(op, params, B)}
    x, dyv, tv = vals[name], conv(dy), conv(t)
    back = np.asarray(op.bind(op.vjp, B, {**vals, "dy": dyv})[list(op.inputs).index(name)], dtype=object)
    lhs = np.sum(back * tv)
    up = np.asarray(op.bind(op.forward, B, {**vals, name: x + h * tv}), dtype=object)
    down = np.asarray(op.bind(op.forward, B, {**vals, name: x - h * tv}), dtype=object)
    return lhs, np.sum(dyv * (up - down)) / (2 * h)


def _mpmath_residuals(op: Op, params: dict, values: dict, dy, t, name: str) -> list[dict]:
    out = []
    for dps in (tol.CONFIRM_LOW_DPS, tol.CONFIRM_HIGH_DPS):
        B = MpmathBackend(dps)
        h = B.ctx.mpf(10) ** (-(dps // 3))
        with B.strict():
            lhs, rhs = _sides(op, B, B.convert, values, dy, t, name, h, params)
        out.append({"dps": dps, "lhs": str(lhs), "rhs": str(rhs)})      # text: exact across the pipe
    return out


def confirm_residual(op: Op, dims: dict, params: dict, name: str, seed: int = 0,
                     budget: float = tol.CONFIRM_BUDGET_S) -> dict:
    """{"confirmed": bool, "mpmath": {...} or the reason it did not decide, "float64": {...}}."""
    values, dy, t = _point(op, dims, params, name, seed)
    evidence = {"point": "float64 inputs from the op's samplers or standard normals, dy and t standard "
                         "normal, seeded by sha256 of the op, the input, the dims and the seed",
                "float64": _float64_residual(op, params, values, dy, t, name)}
    run = run_with_budget(lambda: _mpmath_residuals(op, params, values, dy, t, name), budget)
    if run.status != "ok":
        evidence["mpmath"] = {"status": run.status, "seconds": round(run.seconds, 1),
                              **({"error": run.error.splitlines()[0][:300]} if run.error else {})}
        evidence["confirmed"] = False
        return evidence
    lo, hi = run.value
    import mpmath
    ctx = mpmath.MPContext()
    ctx.dps = tol.CONFIRM_HIGH_DPS
    rel = []
    for side in (lo, hi):
        lhs, rhs = ctx.mpf(side["lhs"]), ctx.mpf(side["rhs"])     # exact: printed at full precision
        scale = max(abs(lhs), abs(rhs), ctx.mpf(tol.GENERAL_SCALE_FLOOR))
        rel.append((lhs - rhs, (lhs - rhs) / scale))
    (r_lo, rel_lo), (r_hi, rel_hi) = rel
    persists = abs(r_hi - r_lo) <= tol.CONFIRM_PERSIST_REL * abs(r_hi)
    confirmed = bool(abs(rel_lo) > tol.CONFIRM_FAIL_REL and persists and ctx.isfinite(rel_hi))
    evidence["mpmath"] = {"digits": [lo["dps"], hi["dps"]], "steps": [f"1e-{lo['dps'] // 3}", f"1e-{hi['dps'] // 3}"],
                          "backward_dot_t": hi["lhs"][:40], "dy_dot_Jt": hi["rhs"][:40],
                          "residual": [mpmath.nstr(r_lo, 12), mpmath.nstr(r_hi, 12)],
                          "relative_residual": mpmath.nstr(abs(rel_hi), 6), "seconds": round(run.seconds, 1)}
    evidence["confirmed"] = confirmed
    return evidence


def _float64_residual(op: Op, params: dict, values: dict, dy, t, name: str) -> dict:
    """The same pairing in float64 (central differences at one step): information, never a verdict."""
    h = tol.FLOAT64_CONFIRM_STEP
    with np.errstate(all="ignore"):
        lhs, rhs = _sides(op, F64, lambda a: np.asarray(a, dtype=np.float64), values, dy, t, name, h, params)
        lhs, rhs = float(lhs), float(rhs)
        rel = abs(lhs - rhs) / max(abs(lhs), abs(rhs), tol.GENERAL_SCALE_FLOOR)
    return {"backward_dot_t": f"{lhs:.17g}", "dy_dot_Jt": f"{rhs:.17g}", "step": h,
            "relative_residual": f"{rel:.3g}"}
