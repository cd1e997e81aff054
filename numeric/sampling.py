"""Input points that expose bugs: random signed values (never constant), large magnitudes,
near-constant rows, away from declared kinks; every point reproducible from (seed, case)."""
from __future__ import annotations

import zlib

import numpy as np

from vjpcert.numeric import settings as tol
from vjpcert.core.spec_array import running
from vjpcert.core.backends import F64
from vjpcert.core.input_cases import case_values
from vjpcert.core.registry import Op, SpecError


def rng_for(seed: int, *labels) -> np.random.Generator:
    """A generator for (seed, labels...): the same labels replay the same numbers."""
    return np.random.default_rng([seed, *(zlib.crc32(str(l).encode()) for l in labels)])


def _case_values(case: str, rng, shape) -> np.ndarray:
    if case not in tol.CASES:
        raise SpecError(None, f"unknown input case {case!r}; cases: {', '.join(tol.CASES)}")
    return case_values(case, rng, shape)


def sample_point(op: Op, dims: dict, case: str, seed: int) -> dict[str, np.ndarray]:
    """float64 inputs (exact in mpmath): differentiable inputs follow the case, other inputs the op's
    own samplers or standard normals. Resampled until every entry is KINK_MIN_DISTANCE from a kink."""
    for attempt in range(50):
        rng = rng_for(seed, op.name, case, attempt)
        point = {}
        for name, decl in op.inputs.items():
            shape = op.shape(decl, dims)
            point[name] = op.sample[name](rng, shape) if name in op.sample else _case_values(case, rng, shape)
        for name, decl in op.nondiff.items():
            shape = op.shape(decl, dims)
            point[name] = op.sample[name](rng, shape) if name in op.sample else rng.standard_normal(shape)
        if kink_distance(op, point) >= tol.KINK_MIN_DISTANCE:
            return point
    raise SpecError(op.name, f"could not sample a point {tol.KINK_MIN_DISTANCE} away from its kinks")


def kink_distance(op: Op, point: dict) -> float:
    if op.kinks is None:
        return float("inf")
    values = {**{k: np.asarray(v, dtype=np.float64) for k, v in point.items()},
              **{k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()}}
    with running():         # a kink distance is float code by design (|x|, min): not spec language
        d = np.asarray(op.bind(op.kinks, F64, values), dtype=np.float64)
    return float(d.min()) if d.size else float("inf")


def cotangent(shape, seed: int, *labels) -> np.ndarray:
    """Random signed cotangent, never constant: an all-ones dy makes softmax's correct VJP identically
    0, so a wrong one would pass too."""
    rng = rng_for(seed, "dy", *labels)
    while True:
        dy = rng.standard_normal(shape)
        if dy.size < 2 or np.ptp(dy) > tol.COTANGENT_MIN_SPREAD:
            return dy
