"""A nonzero modular VJP residual, confirmed at a real point before it is called `failed`.

The modular tier keys every transcendental subterm by the value of its argument: exp(a + b) and
exp(a) exp(b) are independent residues. Where the residual has no atoms, a nonzero mod p is a
disproof (a rational function that vanishes identically vanishes at every point mod p). With atoms it
is not: a correct backward that rests on an identity between them (exp(a + b) = exp(a) exp(b),
sin^2 + cos^2 = 1) is nonzero too. So the claim is `failed` only when float64 agrees, at the same
production dims: one random real point, one random cotangent dy and tangent t of the input X,

    <backward_X(x, dy), t>   against   <dy, (f(x + h t) - f(x - h t)) / 2h>

at two steps h (``settings.FLOAT64_CONFIRM_*``). A wrong backward's residual is the same at both
steps; a central difference's truncation error shrinks fourfold. Otherwise the verdict is
`inconclusive`, with both residuals in the evidence.
"""
from __future__ import annotations

import hashlib

import numpy as np

from vjpcert.core.backends import F64
from vjpcert.core.registry import Op
from vjpcert.symbolic import settings as tol


def float64_residual(op: Op, dims: dict, params: dict, name: str, seed: int = 0) -> dict:
    """{"confirmed": bool, "relative_residual", "backward_dot_t", "dy_dot_Jt" (per step), ...}."""
    digest = hashlib.sha256(f"{op.name}|{name}|{sorted(dims.items())}|{seed}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:16], "big"))
    values = {}
    for n, decl in {**op.inputs, **op.nondiff}.items():
        shape = op.shape(decl, dims)
        values[n] = op.sample[n](rng, shape) if n in op.sample else rng.standard_normal(shape)
    for k, prm in op.params.items():
        values[k] = params[k] if k in params else (F64.c(prm.default) if prm.symbolic else prm.default)
    x = np.asarray(values[name], dtype=np.float64)
    y = np.asarray(op.bind(op.forward, F64, values))
    dy = rng.standard_normal(y.shape)
    t = rng.standard_normal(x.shape)
    back = np.asarray(op.bind(op.vjp, F64, {**values, "dy": dy})[list(op.inputs).index(name)])
    lhs = float(np.sum(back * t))
    rhs = []
    for h in tol.FLOAT64_CONFIRM_STEPS:
        up = np.asarray(op.bind(op.forward, F64, {**values, name: x + h * t}))
        down = np.asarray(op.bind(op.forward, F64, {**values, name: x - h * t}))
        rhs.append(float(np.sum(dy * (up - down))) / (2 * h))
    residuals = [lhs - r for r in rhs]
    scale = max(abs(lhs), abs(rhs[-1]), tol.GENERAL_SCALE_FLOOR)
    rel = abs(residuals[-1]) / scale
    stable = abs(residuals[0] - residuals[-1]) <= tol.FLOAT64_CONFIRM_STABLE * abs(residuals[-1])
    return {"confirmed": bool(rel > tol.FLOAT64_CONFIRM_REL and stable and np.isfinite(rel)),
            "relative_residual": f"{rel:.3g}", "backward_dot_t": f"{lhs:.17g}",
            "dy_dot_Jt": [f"{r:.17g}" for r in rhs], "steps": list(tol.FLOAT64_CONFIRM_STEPS),
            "point": "float64 inputs from the op's samplers or standard normals, dy and t standard "
                     "normal, seeded by sha256 of the op, the input, the dims and the seed"}
