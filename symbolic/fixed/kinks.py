"""The backward on a kink itself (the reserved claim ``at_the_kink``).

A VJP claim over a kink (``B.step``, ``B.relu``) is proved region by region: each kink's sign is a
free Boolean of the exact ring (``fields.RingField.step``), so the proof holds on every open region of
fixed sign pattern and says nothing on the kinks between them, where the function has no derivative.
What a backward returns there is a convention -- PyTorch's relu backward passes the gradient where the
input is > 0, so relu'(0) = 0 -- and a backward written with relu'(0) = 1 (a ``>=`` for a ``>``) is
proved on every region all the same. This check closes that gap: at exact rational points placed *on*
kinks (inputs drawn from {-1, 0, 1}, or 0 and random rationals, so the arguments of the steps are
exactly 0 at many entries; and, for a step whose argument is affine in an input -- relu6's x - 6,
a Huber loss' x - t - delta -- that input at the argument's root, found by probing), each
component of the backward must equal J^T dy of the derivative table, whose step(0) =
``core.derivatives.STEP_AT_KINK`` is the convention. It is a check at sampled points, not a proof:
its verdict is ``checked`` (with how many kink entries the points met), ``failed`` with the exact
point, or ``inconclusive`` when no point met a kink or a claim left the rationals.
"""
from __future__ import annotations

import random
from fractions import Fraction

from vjpcert.core.derivatives import CONVENTION
from vjpcert.core.evaluate import NotRational, QField
from vjpcert.core.registry import Op
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.fixed.claims import trace_claim


class _OnKinks(QField):
    """Exact rationals, counting the steps whose argument is exactly 0."""

    def __init__(self, values: dict):
        super().__init__(values)
        self.on_kink = 0

    def step(self, a):
        self.on_kink += a == 0
        return super().step(a)


def _rational(rng: random.Random) -> Fraction:
    return Fraction(rng.choice((-1, 1)) * rng.randint(1, tol.WITNESS_SPAN), tol.WITNESS_DEN)


def _point(leaves, rng: random.Random, small: bool) -> dict:
    """Inputs on kinks: with ``small``, in {-1, 0, 1} (integer combinations of them vanish often);
    else 0 or a random rational, half and half (so a function that agrees with the convention only
    at integers, relu(x) for step(x), is seen). Cotangents, tangents, probes and parameters random
    nonzero rationals (positive where the leaf must be)."""
    point = {}
    for leaf in leaves:
        if leaf.role in ("input", "nondiff") and not leaf.positive:
            point[leaf] = Fraction(rng.choice((-1, 0, 0, 1))) if small else \
                rng.choice((Fraction(0), _rational(rng)))
        elif leaf.positive:
            point[leaf] = Fraction(rng.randint(tol.WITNESS_POS_LO, tol.WITNESS_POS_HI), tol.WITNESS_DEN)
        else:
            point[leaf] = _rational(rng)
    return point


class _StepArguments(QField):
    """Exact rationals, recording the argument of every step in evaluation order."""

    def __init__(self, values: dict):
        super().__init__(values)
        self.arguments: list = []

    def step(self, a):
        self.arguments.append(a)
        return super().step(a)


def _arguments(claim, point: dict) -> list | None:
    F = _StepArguments(point)
    try:
        claim.components(F)
    except (ZeroDivisionError, NotRational):
        return None
    return F.arguments


def kink_roots(claim, leaves, rng: random.Random) -> tuple[dict, dict]:
    """(base, {input leaf: sorted values}): a random point, and for each input the values at which a
    step's argument, affine in that input with the others held at the base point, is 0. Probed
    exactly: the arguments at the base, then with each input moved by 1 and by 2; an argument that
    moves by equal differences is affine in that input there (the arguments are rational functions,
    so a probe that only looks affine puts a point off the kink: the check stays sound, it meets
    fewer kinks)."""
    inputs = [leaf for leaf in leaves if leaf.role in ("input", "nondiff") and not leaf.positive]
    base = {leaf: _rational(rng) if leaf in inputs else v for leaf, v in _point(leaves, rng, False).items()}
    at0 = _arguments(claim, base)
    if not at0:
        return base, {}
    roots: dict = {}
    for leaf in inputs:
        runs = [_arguments(claim, {**base, leaf: base[leaf] + d}) for d in (1, 2)]
        if not all(r is not None and len(r) == len(at0) for r in runs):
            continue
        for a0, a1, a2 in zip(at0, *runs):
            if a2 - a1 == a1 - a0 != 0:
                roots.setdefault(leaf, set()).add(base[leaf] - a0 / (a1 - a0))
    return base, {leaf: sorted(values) for leaf, values in roots.items()}


def at_the_kink(op: Op, dims: dict, *, seed: int = 0, points: int = tol.KINK_POINTS) -> dict:
    """{"status": "checked" | "failed" | "none-on-kink" | "not-rational", ...} for every differentiable
    input of the op, at ``points`` points each."""
    rng = random.Random(seed)
    met = evaluated = 0
    for wrt in op.inputs:
        claim = trace_claim(op, f"vjp[{wrt}]", dims)
        labels, leaves = claim.component_labels(), claim.leaves()
        base, roots = kink_roots(claim, leaves, rng)
        for k in range(points):
            if roots and k % 3 == 2:            # every third point: inputs at their kinks' roots
                point = {**base, **{leaf: rng.choice(values + [base[leaf]]) for leaf, values in roots.items()}}
            else:
                point = _point(leaves, rng, small=k % 2 == 0)
            F = _OnKinks(point)
            try:
                pairs = claim.components(F)
            except ZeroDivisionError:
                continue                       # a pole of the spec at this point: another one
            except NotRational as exc:
                return {"status": "not-rational", "reason": f"the claim has a non-rational term ({exc})"}
            evaluated += 1
            met += F.on_kink
            if not F.on_kink:
                continue
            for j, (a, b) in enumerate(pairs):
                if a != b:
                    return {"status": "failed", "method": "exact-at-kink", "witness": {
                        "component": labels[j], "backward": str(a), "J^T dy": str(b), "residual": str(a - b),
                        "exact": True, "steps_on_kink": F.on_kink, "convention": CONVENTION,
                        "point": {leaf.name: str(v) for leaf, v in list(point.items())[:tol.WITNESS_MAX_LEAVES]},
                        "point_truncated": len(point) > tol.WITNESS_MAX_LEAVES, "seed": seed}}
    if not met:
        return {"status": "none-on-kink", "points": evaluated}
    return {"status": "checked", "method": "exact-at-kink", "points": evaluated, "steps_on_kink": met,
            "convention": CONVENTION}
