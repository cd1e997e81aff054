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


# A modular pass the float path contradicts. The modular tier runs spec code on its own arrays; spec code
# that reads their type (``isinstance(x, np.ndarray)``) computes there a function numpy's floats do not,
# and a branch on a size only production dims have keeps it from the fixed dims too. So a VJP pass at
# production dims is held to the same pairing on float64 arrays, all inputs at once: off by more than
# FLOAT_VETO_REL of its scale at two steps that agree (a correct backward's float64 residual is
# truncation and rounding: ~1e-8 at the first step, another size at the second), it is not a pass. It
# never makes a `failed` (float64 decides nothing, above); it makes the claim `inconclusive`. Kept here,
# not in symbolic/settings.py, which every prover imports: these numbers are this check's alone.
FLOAT_VETO_REL = 1e-2
FLOAT_VETO_STEPS = (1e-5, 1e-3)
FLOAT_VETO_PERSIST = 0.1


def float_path_disagrees(op: Op, dims: dict, params: dict, seed: int = 0) -> dict:
    """{input: evidence} for each input whose float64 pairing <backward_X(x, dy), t_X> against
    <dy, J t_X> (central differences) contradicts a modular pass. Every input's tangent at once first
    (one backward, two forwards a step); only where that pairing is off, each input's alone."""
    names = list(op.inputs)
    values, dy, _ = _point(op, dims, params, names[0], seed)
    digest = hashlib.sha256(f"{op.name}|all|{sorted(dims.items())}|{seed}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:16], "big"))
    t = {n: rng.standard_normal(values[n].shape) for n in names}
    vals = {**values, **_params(op, params, F64)}
    with np.errstate(all="ignore"):
        back = dict(zip(names, op.bind(op.vjp, F64, {**vals, "dy": dy})))
        if _off(op, vals, dy, back, t, names) is None:
            return {}
        return {n: off for n in names if (off := _off(op, vals, dy, back, t, [n])) is not None}


def _off(op: Op, vals: dict, dy, back: dict, t: dict, names: list) -> dict | None:
    """The pairing along the inputs ``names`` (the others held), where it is off by more than
    FLOAT_VETO_REL at both steps and the two agree; else None."""
    lhs = float(sum(np.sum(np.asarray(back[n], dtype=np.float64) * t[n]) for n in names))
    rel = []
    for h in FLOAT_VETO_STEPS:
        up = np.asarray(op.bind(op.forward, F64, {**vals, **{n: vals[n] + h * t[n] for n in names}}), dtype=np.float64)
        down = np.asarray(op.bind(op.forward, F64, {**vals, **{n: vals[n] - h * t[n] for n in names}}),
                          dtype=np.float64)
        rhs = float(np.sum(dy * (up - down)) / (2 * h))
        rel.append((lhs - rhs) / max(abs(lhs), abs(rhs), tol.GENERAL_SCALE_FLOOR))
    if not all(np.isfinite(rel)) or min(abs(r) for r in rel) <= FLOAT_VETO_REL \
            or abs(rel[0] - rel[1]) > FLOAT_VETO_PERSIST * abs(rel[0]):
        return None
    return {"backward_dot_t": f"{lhs:.17g}", "steps": list(FLOAT_VETO_STEPS),
            "relative_residual": [f"{r:.3g}" for r in rel],
            "point": "float64 inputs from the op's samplers or standard normals; dy and a tangent per input "
                     "standard normal, seeded by sha256 of the op, the dims and the seed"}
