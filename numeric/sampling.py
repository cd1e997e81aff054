"""Input points that expose bugs: random signed values (never constant), large magnitudes,
near-constant rows, away from declared kinks; every point reproducible from (seed, case)."""
from __future__ import annotations

import zlib

import numpy as np

from vjpcert.numeric import settings as tol
from vjpcert.core.spec_array import running
from vjpcert.core.backends import F64, FloatBackend
from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.core.input_cases import ON_KINKS, case_values
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
    raise NoPointAwayFromKinks(op.name, f"could not sample a point of the case {case!r} "
                                        f"{tol.KINK_MIN_DISTANCE} away from its kinks")


def sample_points(op: Op, dims: dict, cases, seed: int) -> tuple[dict, dict]:
    """({case: point}, {case: why it was skipped}): a case with no point away from the kinks is skipped
    (and named), the others sampled as ``sample_point`` does."""
    points, skipped = {}, {}
    for case in cases:
        try:
            points[case] = sample_point(op, dims, case, seed)
        except NoPointAwayFromKinks as exc:
            skipped[case] = exc.problem
    return points, skipped


def sample_on_kinks(op: Op, dims: dict, seed: int) -> dict[str, np.ndarray]:
    """float64 inputs *on* the kinks, on purpose: the differentiable inputs small integers (the case
    ``on_kinks``: exact zeros, exact ties of a maximum), the others as ``sample_point`` draws them;
    drawn again until a step's argument is exactly 0 (``NoPointOnKinks`` after 50 draws)."""
    for attempt in range(50):
        rng = rng_for(seed, op.name, ON_KINKS, attempt)
        point = {}
        for name, decl in op.inputs.items():
            shape = op.shape(decl, dims)
            point[name] = op.sample[name](rng, shape) if name in op.sample else case_values(ON_KINKS, rng, shape)
        for name, decl in op.nondiff.items():
            shape = op.shape(decl, dims)
            point[name] = op.sample[name](rng, shape) if name in op.sample else rng.standard_normal(shape)
        if kink_distance(op, point) == 0:
            return point
    raise NoPointOnKinks(op.name, "no draw of small integers put a step's argument exactly on its kink")


class NoPointAwayFromKinks(SpecError):
    """No sampled point of this input case keeps its distance from every kink (a near-constant image
    under max-pooling is all ties): the case is skipped, and said so."""


class NoPointOnKinks(SpecError):
    """No draw of the case ``on_kinks`` met a kink (a step's argument computed from the inputs, never
    exactly 0 at integers): the case is skipped, and said so."""


class _KinkRecorder(FloatBackend):
    """float64, recording how close the argument of every B.step (relu, ...) came to its kink."""

    def __init__(self):
        super().__init__(np.float64)
        self.nearest = float("inf")
        self.step = self._checked(self._step)

    def _step(self, a):
        if np.size(a):
            self.nearest = min(self.nearest, float(np.min(np.abs(a))))
        return np.heaviside(a, float(STEP_AT_KINK))


def kink_distance(op: Op, point: dict) -> float:
    """How close the point is to a kink: the op's declared ``kinks`` distance, and the smallest |a| of
    every B.step(a) its forward and backward evaluate in float64 (a finite difference across a kink
    measures no derivative)."""
    values = {**{k: np.asarray(v, dtype=np.float64) for k, v in point.items()},
              **{k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()}}
    nearest = float("inf")
    if op.kinks is not None:
        with running():     # a declared kink distance is float code by design (|x|, min): not spec language
            d = np.asarray(op.bind(op.kinks, F64, values), dtype=np.float64)
        nearest = float(d.min()) if d.size else nearest
    B = _KinkRecorder()
    try:
        y = np.asarray(op.bind(op.forward, B, values), dtype=np.float64)
        if op.vjp is not None:
            op.bind(op.vjp, B, {**values, "dy": np.ones(y.shape)})
    except (SpecError, ArithmeticError, ValueError, TypeError):
        pass                # the checks themselves report a spec that does not run in float64
    return min(nearest, B.nearest)


def cotangent(shape, seed: int, *labels) -> np.ndarray:
    """Random signed cotangent, never constant: an all-ones dy makes softmax's correct VJP identically
    0, so a wrong one would pass too."""
    rng = rng_for(seed, "dy", *labels)
    while True:
        dy = rng.standard_normal(shape)
        if dy.size < 2 or np.ptp(dy) > tol.COTANGENT_MIN_SPREAD:
            return dy
