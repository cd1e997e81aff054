"""The float64 finite-difference gradient check most users run (what ``torch.autograd.gradcheck``
does by default): the full Jacobian by central differences with eps = 1e-6, against the Jacobian
the backward gives with unit cotangents, passing where |J_fd - J| <= atol + rtol |J| everywhere.

It is here as the peer our checks are measured against (``vjpcert mutate``), not as a verdict tier.
"""
from __future__ import annotations

import numpy as np

from vjpcert.numeric.sampling import sample_point
from vjpcert.core.backends import F64
from vjpcert.core.registry import Op

EPS, ATOL, RTOL = 1e-6, 1e-5, 1e-3     # torch.autograd.gradcheck's defaults


def fd64_check(op: Op, dims: dict, *, seed: int = 0, case: str = "random") -> tuple[bool, dict]:
    """(passes, the worst entry). Every differentiable input, every entry."""
    point = sample_point(op, dims, case, seed)
    values = {**point, **{k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()}}
    y = np.asarray(op.bind(op.forward, F64, values))
    worst = {"excess": -np.inf}
    for idx, wrt in enumerate(op.inputs):
        x = np.asarray(point[wrt], dtype=np.float64)
        J_fd = np.empty((y.size, x.size))
        for j in range(x.size):
            e = np.zeros(x.size)
            e[j] = EPS
            e = e.reshape(x.shape)
            up = np.asarray(op.bind(op.forward, F64, {**values, wrt: x + e}))
            down = np.asarray(op.bind(op.forward, F64, {**values, wrt: x - e}))
            J_fd[:, j] = ((up - down) / (2 * EPS)).ravel()
        J = np.empty_like(J_fd)
        for i in range(y.size):
            dy = np.zeros(y.size)
            dy[i] = 1.0
            J[i] = np.asarray(op.bind(op.vjp, F64, {**values, "dy": dy.reshape(y.shape)})[idx]).ravel()
        excess = np.abs(J_fd - J) - (ATOL + RTOL * np.abs(J))
        k = int(np.argmax(excess))
        if excess.flat[k] > worst["excess"]:
            worst = {"excess": float(excess.flat[k]), "input": wrt, "entry": int(k % x.size),
                     "fd": float(J_fd.flat[k]), "backward": float(J.flat[k])}
    return worst["excess"] <= 0, worst
