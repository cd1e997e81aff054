"""The backward on a kink itself (the reserved claim ``at_the_kink``).

A VJP claim over a kink (``B.step``, ``B.relu``) is proved region by region: each kink's sign is a
free Boolean of the exact ring (``fields.RingField.step``), so the proof holds on every open region of
fixed sign pattern and says nothing on the kinks between them, where the function has no derivative.
What a backward returns there is a convention -- PyTorch's relu backward passes the gradient where the
input is > 0, so relu'(0) = 0 -- and a backward written with relu'(0) = 1 (a ``>=`` for a ``>``) is
proved on every region all the same. This check closes that gap: at exact rational points placed *on*
kinks (inputs drawn from {-1, 0, 1}, or 0 and random rationals, so the arguments of the steps are
exactly 0 at many entries; and, for a step whose argument is affine in an input -- relu6's x - 6,
a Huber loss' x - t - delta, a tie x0 - x1 of the backward's own -- that input at the argument's root,
found by probing, one point per root), each component of the backward must equal J^T dy of the
derivative table, whose step(0) = ``core.derivatives.STEP_AT_KINK`` is the convention. It is a check
at sampled points, not a proof: its verdict is ``checked`` (with how many kink entries the points
met) only when every step whose argument moves with the inputs was on its kink at one of them,
``failed`` with the exact point, or ``inconclusive`` when a step's kink was never met (an argument
not affine in one input, an irrational zero: (x0 - x1)^3, x^3 - 2). Past a transcendental (softplus' log(1 + e^a)
beside its threshold) the values are reals at ``KINK_DIGITS`` digits while the kinks' rational
arguments stay exact (``_Reals``); a difference of reals is reported only when it is there again at
twice the digits.

At every point it also bounds the one-sided derivatives: J^T dy with each step *on* its kink
ranging over [0, 1] (``_OneSided``, exact interval arithmetic) encloses the limit of J^T dy from
every region that meets the point, so a backward outside that enclosure is no one-sided derivative
of any kind -- not merely another convention. The convention's own value lies inside (step(0) = 0
is in [0, 1]), so a backward that meets the convention meets the interval; a failure says which of
the two it misses (JAX's tie split, 1/2 to each of two equal maxima, is inside, a factor 2 is not).
"""
from __future__ import annotations

import random
import time
from fractions import Fraction

from vjpcert.core.budget import run_with_budget
from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.derivatives import CONVENTION
from vjpcert.core.evaluate import MpField, NotRational, QField, SignUndecided
from vjpcert.core.registry import KINK_CLAIM, Op
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.fixed.claims import assumptions_of, trace_claim

CHECKER_SHA256 = checker_code_sha256(__name__)

# Past a transcendental (softplus' log(1 + e^a) beside its threshold) the values are reals in mpmath at
# KINK_DIGITS digits: the two sides are one real number by two formulas, equal to ~60 digits unless
# terms 10^20 times larger cancel, so a difference is one above KINK_REAL_RTOL of their scale,
# confirmed at twice the digits (where a rounding residue shrinks by 10^-60 and a convention's
# difference -- 1 - sigmoid(20) = 2e-9 -- stays). Kept here, not in symbolic/settings.py, which every
# prover imports: these numbers are this check's alone, and its certificates its own.
KINK_DIGITS = 60
KINK_REAL_RTOL = 1e-40


class _Reals(QField):
    """Exact rationals while the values are rational; a transcendental's value (exp, log, ...) and what
    is computed from it in mpmath at ``digits`` digits (a private context). The kinks' arguments stay
    exact wherever they are rational -- an input's kink, softplus' threshold at dt + bias = 20 -- and a
    step of a transcendental value is decided only away from 0 (``SignUndecided``: the point decides
    nothing)."""

    def __init__(self, values: dict, digits: int = KINK_DIGITS):
        super().__init__(values)
        self.mp = MpField(digits, values)

    def real(self, a):
        return self.mp.const(a) if isinstance(a, Fraction) else a

    def pow(self, a, k):
        if isinstance(a, Fraction) and Fraction(k).denominator == 1:
            return super().pow(a, int(k))
        if a == 0 and k < 0:
            raise ZeroDivisionError("division by zero at the sampled point")
        return self.real(a) ** self.real(Fraction(k))

    def cpow(self, base, k):
        return self.pow(Fraction(base), k)

    def pi(self):
        return self.mp.pi()

    def step(self, a):
        return super().step(a) if isinstance(a, Fraction) else self.mp.step(a)

    def __getattr__(self, kind):       # exp, log, sqrt, erf, tanh, sin, cos
        if kind.startswith("_"):
            raise AttributeError(kind)
        exact, real = super().__getattr__(kind), getattr(self.mp, kind)

        def transcendental(a):
            if isinstance(a, Fraction):
                try:
                    return exact(a)             # a rational's exact square root
                except NotRational:
                    pass
            return real(self.real(a))
        return transcendental

    def differ(self, a, b) -> bool:
        """Whether the two sides differ: exactly, for rationals; else by more than
        ``KINK_REAL_RTOL`` of their scale (two formulas of one real number agree far closer at
        ``digits`` digits; a difference is confirmed at twice the digits before it is reported)."""
        if isinstance(a, Fraction) and isinstance(b, Fraction):
            return a != b
        a, b = self.real(a), self.real(b)
        return abs(a - b) > KINK_REAL_RTOL * max(1, abs(a), abs(b))

    def relative(self, a, b) -> str:
        """|a - b| over their scale, as a witness states it."""
        a, b = self.real(a), self.real(b)
        return self.mp.ctx.nstr(abs(a - b) / max(1, abs(a), abs(b)), 6)


class _OnKinks(_Reals):
    """Exact rationals (and reals past a transcendental), counting the steps whose argument is exactly 0,
    and recording every step's argument in evaluation order."""

    def __init__(self, values: dict, digits: int = KINK_DIGITS):
        super().__init__(values, digits)
        self.on_kink = 0
        self.arguments: list = []

    def step(self, a):
        self.on_kink += a == 0
        self.arguments.append(a)
        return super().step(a)


class _OneSided(QField):
    """Closed intervals (lo, hi) of exact rationals, with every step whose argument may be 0 taking
    [0, 1]: the value of any region's branch at this point lies inside. Interval arithmetic only
    over-approximates, so "outside" is exact and "inside" a necessary condition."""

    def const(self, q):
        q = super().const(q)
        return (q, q)

    def leaf(self, leaf):
        q = Fraction(self.values[leaf])
        return (q, q)

    def add(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def neg(self, a):
        return (-a[1], -a[0])

    def mul(self, a, b):
        products = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return (min(products), max(products))

    def inv(self, a):
        if a[0] <= 0 <= a[1]:
            raise ZeroDivisionError("a denominator's interval holds 0")
        return (1 / a[1], 1 / a[0])

    def pow(self, a, k):
        if not isinstance(k, int) and Fraction(k).denominator != 1:
            raise NotRational(f"^{k}")
        k = int(k)
        if k < 0:
            return self.inv(self.pow(a, -k))
        lo, hi = a[0] ** k, a[1] ** k
        if k % 2:
            return (lo, hi)
        if a[0] <= 0 <= a[1]:
            return (Fraction(0), max(lo, hi))
        return (min(lo, hi), max(lo, hi))

    def step(self, a):
        if a[0] > 0:
            return (Fraction(1), Fraction(1))
        if a[1] < 0:
            return (Fraction(0), Fraction(0))
        return (Fraction(0), Fraction(1))          # on the kink (or an interval over it): either side

    def __getattr__(self, kind):
        transcendental = super().__getattr__(kind)

        def on_points(a):
            if a[0] != a[1]:
                raise NotRational(f"{kind} of an interval")
            v = transcendental(a[0])
            return (v, v)
        return on_points


def _one_sided(claim, point: dict):
    """[(lo, hi)] per component: the enclosure of J^T dy's one-sided limits at ``point``, or None
    when it cannot be bounded there (a denominator's interval holds 0)."""
    try:
        return [b for _, b in claim.components(_OneSided(point))]
    except (ZeroDivisionError, NotRational):
        return None


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


def _arguments(claim, point: dict) -> list | None:
    """The argument of every step the claim's comparison evaluates (the backward, and J^T dy, which
    meets the kinks through the primal values), in evaluation order: the steps whose value on a kink
    the check is about. A step the comparison never reaches (the forward's kinks, in the claim of an
    input whose cotangent does not pass through them) is no concern of this claim's."""
    F = _OnKinks(point)
    try:
        claim.components(F)
    except (ZeroDivisionError, NotRational, SignUndecided):
        return None
    return F.arguments


def kink_roots(claim, leaves, rng: random.Random) -> tuple[dict, dict, set | None]:
    """(base, {input leaf: sorted values}, moving): a random point; for each input the values at which
    a step's argument, affine in that input with the others held at the base point, is 0; and which
    steps (by their place in evaluation order) have an argument that moves with some input -- a
    step of a constant is on no kink; None where the base point is a pole and no one can tell. Probed exactly: the arguments at the base, then with each input
    moved by 1 and by 2; an argument that moves by equal differences is affine in that input there
    (the arguments are rational functions, so a probe that only looks affine puts a point off the
    kink: the check stays sound, it meets fewer kinks, and says which it never met)."""
    inputs = [leaf for leaf in leaves if leaf.role in ("input", "nondiff") and not leaf.positive]
    base = {leaf: _rational(rng) if leaf in inputs else v for leaf, v in _point(leaves, rng, False).items()}
    at0 = _arguments(claim, base)
    if at0 is None:
        return base, {}, None          # the base point is a pole: which steps move is not known
    if not at0:
        return base, {}, set()
    roots: dict = {}
    moving: set = set()
    for leaf in inputs:
        runs = [_arguments(claim, {**base, leaf: base[leaf] + d}) for d in (1, 2)]
        if not all(r is not None and len(r) == len(at0) for r in runs):
            moving |= set(range(len(at0)))        # cannot tell: every step counts
            continue
        for i, (a0, a1, a2) in enumerate(zip(at0, *runs)):
            if not (a0 == a1 == a2):
                moving.add(i)
            if all(isinstance(a, Fraction) for a in (a0, a1, a2)) and a2 - a1 == a1 - a0 != 0:
                roots.setdefault(leaf, set()).add(base[leaf] - a0 / (a1 - a0))
    return base, {leaf: sorted(values) for leaf, values in roots.items()}, moving


# Points placed on affine roots, one per (input, root) -- each meets the kink it was solved for --
# at most this many per differentiable input (the rest of a large op's kinks are then reported unmet)
KINK_ROOT_POINTS_MAX = 256


def _worst(pairs, enclosure, missed: list) -> tuple[int, dict]:
    """(component, what the one-sided interval says of it) for a point where the backward misses the
    convention at the components ``missed``: one outside the interval first, the graver finding."""
    if enclosure is None:
        return missed[0], {"bounded": False, "in_words": "the backward misses the convention (the one-sided "
                                                         "interval cannot be bounded at this point)"}
    for lo_hi, (_, b) in zip(enclosure, pairs):
        if not lo_hi[0] <= b <= lo_hi[1]:      # the convention's value is one of the branches' values
            raise AssertionError(f"the enclosure [{lo_hi[0]}, {lo_hi[1]}] lost the convention's value {b}")
    outside = [j for j in missed if not enclosure[j][0] <= pairs[j][0] <= enclosure[j][1]]
    j = (outside or missed)[0]
    return j, {"interval": [str(enclosure[j][0]), str(enclosure[j][1])], "within": not outside,
               "in_words": "the backward lies outside the interval of the one-sided derivatives: no branch "
                           "at this point, nor any mix of them, has this value" if outside else
                           "the backward lies within the interval of the one-sided derivatives: another "
                           "convention than the one stated (a one-sided value, or a mix of them)"}


def _text(v) -> str:
    return str(v) if isinstance(v, Fraction) else v.context.nstr(v, 30)


def _confirmed(claim, point: dict, pairs, missed: list) -> list:
    """The components of ``missed`` that are real differences: rationals that differ, and reals that
    differ again at twice the digits (a rounding residue of cancelling terms shrinks far below the
    tolerance there; a convention's difference stays as it was)."""
    if all(isinstance(v, Fraction) for j in missed for v in pairs[j]):
        return missed
    F = _OnKinks(point, 2 * KINK_DIGITS)
    try:
        again = claim.components(F)
    except (ZeroDivisionError, SignUndecided):
        return []
    return [j for j in missed if F.differ(*again[j])]


def at_the_kink(op: Op, dims: dict, *, seed: int = 0, points: int = tol.KINK_POINTS) -> dict:
    """{"status": "checked" | "failed" | "none-on-kink", ...} for every differentiable
    input of the op, at ``points`` points each."""
    rng = random.Random(seed)
    met = evaluated = bounded = 0
    unmet: dict[str, int] = {}
    for wrt in op.inputs:
        claim = trace_claim(op, f"vjp[{wrt}]", dims)
        labels, leaves = claim.component_labels(), claim.leaves()
        base, roots, moving = kink_roots(claim, leaves, rng)
        on_roots = [{**base, leaf: v} for leaf, values in roots.items() for v in values][:KINK_ROOT_POINTS_MAX]
        met_steps: set = set()
        for k in range(points + len(on_roots)):
            # the drawn points (inputs in {-1, 0, 1}, or 0 and rationals), then one on each affine root
            point = _point(leaves, rng, small=k % 2 == 0) if k < points else on_roots[k - points]
            F = _OnKinks(point)
            try:
                pairs = claim.components(F)
            except (ZeroDivisionError, SignUndecided):
                continue                       # a pole of the spec, or a step it cannot decide: another point
            evaluated += 1
            met += F.on_kink
            if not F.on_kink:
                continue
            met_steps |= {i for i, a in enumerate(F.arguments) if isinstance(a, Fraction) and a == 0}
            enclosure = _one_sided(claim, point)
            bounded += enclosure is not None
            missed = _confirmed(claim, point, pairs, [j for j, (a, b) in enumerate(pairs) if F.differ(a, b)])
            if missed:
                j, one_sided = _worst(pairs, enclosure, missed)
                exact = all(isinstance(v, Fraction) for v in pairs[j])
                return {"status": "failed", "method": "exact-at-kink", "witness": {
                    "component": labels[j], "backward": _text(pairs[j][0]), "J^T dy": _text(pairs[j][1]),
                    "residual": _text(F.real(pairs[j][0]) - F.real(pairs[j][1]) if not exact else pairs[j][0] - pairs[j][1]),
                    "exact": exact,
                    **({} if exact else {"digits": KINK_DIGITS, "relative": F.relative(*pairs[j])}),
                    "steps_on_kink": F.on_kink,
                    "convention": CONVENTION, "one_sided": one_sided,
                    "point": {leaf.name: str(v) for leaf, v in list(point.items())[:tol.WITNESS_MAX_LEAVES]},
                    "point_truncated": len(point) > tol.WITNESS_MAX_LEAVES, "seed": seed}}
        if moving is None:
            unmet[wrt] = "not known (the probes' base point is a pole)"
        elif moving - met_steps:
            unmet[wrt] = len(moving - met_steps)
    if not met:
        return {"status": "none-on-kink", "points": evaluated}
    if unmet:
        return {"status": "unmet", "points": evaluated, "steps_on_kink": met, "unmet": unmet}
    return {"status": "checked", "method": "exact-at-kink", "points": evaluated, "steps_on_kink": met,
            "convention": CONVENTION, "one_sided": {
                "points_bounded": bounded,
                "statement": "at each bounded point every component of the backward lies in the interval of "
                             "J^T dy's one-sided limits (each step on its kink ranging over [0, 1], exact "
                             "interval arithmetic)"}}


def prove_at_the_kink(op: Op, dims: dict, *, budget: float = tol.DEFAULT_CLAIM_BUDGET_S,
                      seed: int = 0) -> Certificate:
    """The certificate of the claim ``at_the_kink``: ``at_the_kink`` under the budget."""
    start = time.perf_counter()
    out = run_with_budget(lambda: at_the_kink(op, dims, seed=seed), budget)
    r = out.value if out.status == "ok" else {"status": out.status, "error": out.error.splitlines()[0][:300]
                                              if out.error else ""}
    status = r.get("status")
    verdict = {"checked": "checked", "failed": "failed"}.get(status, "inconclusive")
    evidence = {k: v for k, v in r.items() if k not in ("status", "method")}
    if status == "none-on-kink":
        evidence["reason"] = (f"none of the {r['points']} exact points met a kink (inputs 0, +-1 or rationals): "
                              "the backward's value there is not checked")
    elif status == "unmet":
        evidence["reason"] = ("some steps' kinks were met by no exact point (per differentiable input, how many: "
                              f"{r['unmet']}): their arguments are not affine in one input, or their zeros are "
                              "irrational, so no point was placed on them, and the backward's value there is "
                              "not checked")
    elif verdict == "inconclusive":
        evidence.setdefault("reason", f"the check did not finish ({status})")
    evidence["regions"] = ("the VJP claims are proved on each open region of the kinks' signs; this claim "
                           "checks the value on the kinks, where only a convention defines it")
    return Certificate.issue(op, claim=KINK_CLAIM, tier="symbolic", verdict=verdict,
                             method=r.get("method", "none") if verdict != "inconclusive" else "none",
                             dims=op.resolve_dims(dims), assumptions=assumptions_of(op, {}), evidence=evidence,
                             seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256)
