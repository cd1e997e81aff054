"""The `reference` claim: every backend computes the function that was proved.

The float64 and float32 evaluations of a spec (``vjpcert.core.reference``) are what kernels and users'
implementations are compared with, and they run code paths the exact tier never sees (``B.max_shift``
is the row maximum in floats and 0 in exact arithmetic). So each op gets one more claim, checked here
at sampled points (the numeric tier's input cases, large logits included). The *truth* is the spec's
traced forward and backward -- the very expression DAG the symbolic tier proves -- evaluated at
``dps`` (+ guard) digits. Then:

  * the mpmath backend's run of the spec (the numeric tier's evaluator) agrees with it to
    ``dps - MPMATH_MARGIN_DIGITS`` digits;
  * for float64 and float32 (inputs rounded to the dtype first; the truth uses the rounded values):
    the spec run with running error analysis (``core.rounding``: the float path, operation by
    operation, with a first-order bound e on its distance to the exact value) must satisfy
        |v - exact| <= e                                   (its own rigorous bound), and
    the real float reference (numpy, summing in its own order) must satisfy
        max |float - exact| <= ORDER(L) * max e + FLOOR u max|exact|,  ORDER(L) = 2 ceil(log2 L) + 2
    -- numpy's pairwise sums err by at most 2 log2(n) times a sequential sum's running bound.
For an op with kinks the points also include the case ``on_kinks``, taken *on* them on purpose (exact
zeros, tied maxima: ``numeric.sampling.sample_on_kinks``): there the truth is the traced spec in exact
rationals with step(0) at the convention (a 70-digit value cannot tell 0 from a rounding residue, and
does not guess), so a float path whose rounding moves a step off its kink, or that breaks a tie
another way, shows. A spec that leaves the rationals there (a square root, an exponential) skips the
case and says so.

A float path that computes another function (a log-sum-exp that forgets to add the shift back, a
branch on the backend) breaks the first inequality by orders of magnitude. The bound comes from the
spec's own float evaluation and never from an implementation under test.

`failed` carries the worst entry (case, dtype, output, index, float value, exact value, error, bound).
"""
from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from vjpcert.core import reference as float_reference
from vjpcert.core.backends import MpmathBackend
from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.evaluate import Evaluator, MpField, NotRational, QField
from vjpcert.core.input_cases import ON_KINKS
from vjpcert.core.registry import Op
from vjpcert.core.rounding import FloatPathErrors, RoundingBackend, max_abs, order_factor, values_and_bounds
from vjpcert.core.tolerance import digits as _digits
from vjpcert.core.tolerance import unit_roundoff
from vjpcert.core.trace import Node, leaf_array
from vjpcert.core.tracing import primal_values, trace_forward, trace_vjp
from vjpcert.core.validate import validate
from vjpcert.numeric import settings as tol
from vjpcert.numeric.sampling import NoPointOnKinks, cotangent, sample_on_kinks, sample_points

# the checker hash of the code that checks this claim: this module and what it imports (the numeric
# tier replaces it by its own, which covers this module too, through ``numeric.check``)
CHECKER_SHA256 = checker_code_sha256(__name__)

CLAIM = "reference"
DTYPES = (np.float64, np.float32)


def rule_in_words(dps: int) -> str:
    return (f"exact = the traced spec at {dps} digits; the mpmath backend agrees to "
            f"{dps - tol.MPMATH_MARGIN_DIGITS} digits; per dtype, the spec's float path with running "
            f"error analysis (v, e) has |v - exact| <= e, and numpy's float reference has "
            f"max|float - exact| <= (2 ceil(log2 L) + 2) max e + {tol.REFERENCE_FLOOR_ROUNDINGS} u max|exact|, "
            f"L = the largest dim")


class _Traced:
    """The spec's forward and backward traced once at these dims, evaluable at any point."""

    def __init__(self, op: Op, dims: dict):
        self.op = op
        self.values = primal_values(op, dims)
        self.y = trace_forward(op, self.values, dims)
        self.dy = leaf_array(self.y.shape, "dy", "dy")
        self.cots = trace_vjp(op, self.values, self.dy, dims)

    def leaf_values(self, point: dict, dy: np.ndarray) -> dict:
        """Leaf -> exact Fraction for a float point (every float is an exact rational)."""
        out = {}
        for name, arr in self.values.items():
            if isinstance(arr, np.ndarray):
                for node, v in zip(arr.ravel(), np.asarray(point[name]).ravel()):
                    out[node.value] = Fraction(float(v))
            elif isinstance(arr, Node) and arr.op == "leaf":
                out[arr.value] = Fraction(self.op.params[name].default)
        for node, v in zip(self.dy.ravel(), np.asarray(dy).ravel()):
            out[node.value] = Fraction(float(v))
        return out

    def evaluate(self, point: dict, dy: np.ndarray, dps: int, exact: bool = False):
        """(y, [cotangents]) as object arrays of mpf at ``dps`` digits; with ``exact``, evaluated in
        exact rationals first (on a kink: step(0) is the convention, not a sign mpmath must guess),
        raising NotRational where the spec leaves them."""
        values = self.leaf_values(point, dy)
        if not exact:
            E = Evaluator(MpField(dps, values))
            return E.array(self.y), [E.array(c) for c in self.cots]
        E, mp = Evaluator(QField(values)), MpField(dps, {})
        as_mp = np.vectorize(mp.const, otypes=[object])
        return as_mp(E.array(self.y)), [as_mp(E.array(c)) for c in self.cots]


def _rounded_run(op: Op, dtype, point: dict, dy: np.ndarray):
    """(forward, [cotangents]) of the spec on the running-error backend, as (values, bounds) pairs."""
    R = RoundingBackend(dtype)
    values = {k: R.input(v) for k, v in point.items()}
    for name, p in op.params.items():
        values[name] = R.c(p.default) if p.symbolic else p.default
    y = op.bind(op.forward, R, values)
    cots = op.bind(op.vjp, R, {**values, "dy": R.input(dy)})
    return values_and_bounds(y), [values_and_bounds(c) for c in cots]


def check_reference(op: Op, dims: dict, *, dps: int = tol.DEFAULT_DPS, seed: int = 0,
                    cases=tol.CASES, point: dict | None = None) -> Certificate:
    start = time.perf_counter()
    dims = op.resolve_dims(dims)
    validate(op, dims)
    work = dps + tol.GUARD_DIGITS
    traced = _Traced(op, dims)
    L = max([int(v) for v in dims.values()] + [1])
    K = order_factor(L)
    points, skipped = ({"given": point}, {}) if point is not None else sample_points(op, dims, cases, seed)
    if point is None and op.uses_kinks():
        try:
            points[ON_KINKS] = sample_on_kinks(op, dims, seed)
        except NoPointOnKinks as exc:
            skipped[ON_KINKS] = exc.problem
    if not points:
        return _inconclusive_reference(op, dims, dps, seed, skipped, start)
    per_case, worst = {}, None
    for case, pt in points.items():
        pt = {k: np.asarray(v, dtype=np.float64) for k, v in pt.items()}
        dy = cotangent(traced.y.shape, seed, op.name, case)
        row = {}
        on_kinks = case == ON_KINKS
        try:
            exact64 = traced.evaluate(pt, dy, work, exact=on_kinks)
        except (NotRational, ZeroDivisionError) as exc:
            skipped[case] = (f"on its kinks the truth must be exact (step(0) is a convention, not a sign "
                             f"to round), and the spec leaves the rationals there ({exc})")
            continue
        row["mpmath_backend_digits"] = _mpmath_agreement(op, pt, dy, exact64, dps)
        if row["mpmath_backend_digits"] < dps - tol.MPMATH_MARGIN_DIGITS and worst is None:
            worst = {"case": case, "dtype": "mpmath", "what": "the mpmath backend's run of the spec",
                     "digits": row["mpmath_backend_digits"], "required_digits": dps - tol.MPMATH_MARGIN_DIGITS}
        for dtype in DTYPES:
            name = np.dtype(dtype).name
            pd = {k: v.astype(dtype) for k, v in pt.items()}
            dyd = dy.astype(dtype)
            exact = exact64 if dtype == np.float64 else traced.evaluate(
                {k: v.astype(np.float64) for k, v in pd.items()}, dyd.astype(np.float64), work, exact=on_kinks)
            u = unit_roundoff(dtype)
            params = {k: p.default for k, p in op.params.items()}
            with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
                # (a masked softmax may overflow exp where the mask then discards it: not an error)
                got_y = float_reference.forward(op, dtype, params, **pd)
                got_c = float_reference.vjp(op, dyd, dtype, params, **pd)
                (ry, rc) = _rounded_run(op, dtype, pd, dyd)
            outputs = [("forward", got_y, exact[0], ry)] + [
                (f"backward d{n}", g, e, r) for n, g, e, r in zip(op.inputs, got_c, exact[1], rc)]
            out = {}
            for label, got, truth, (v_seq, e_seq) in outputs:
                got = np.asarray(got)
                rule = FloatPathErrors(got, truth, v_seq, e_seq, u, K)
                ratio = rule.err / rule.bound if rule.bound > 0 else (0.0 if rule.err == 0 else math.inf)
                # float results differ by an ulp from machine to machine (SIMD exp, log, ...): the
                # certificate keeps the bound and the ratio's order of magnitude, so it diffs cleanly
                out[label] = {"bound": f"{rule.bound:.2g}", "error_at_most": _order(ratio) + " of the bound"}
                if got.dtype != np.dtype(dtype) and worst is None:
                    worst = {"case": case, "dtype": name, "what": label,
                             "problem": f"the {name} reference came back as {got.dtype}"}
                if not rule.seq_ok and worst is None:
                    idx = rule.worst_sequential()
                    worst = {"case": case, "dtype": name, "what": f"{label} (the spec's float path)",
                             "entry": list(idx), "float": repr(float(v_seq[idx])), "exact": _s(truth[idx]),
                             "error": f"{rule.seq_err[idx]:.6g}", "bound": f"{e_seq[idx]:.6g}",
                             "meaning": "the float evaluation of the spec is not the proved function"}
                if not rule.float_ok and worst is None:
                    idx = rule.worst_float()
                    worst = {"case": case, "dtype": name, "what": label, "entry": list(idx),
                             "float": repr(float(got.astype(np.float64)[idx])), "exact": _s(truth[idx]),
                             "error": f"{rule.err:.6g}", "bound": f"{rule.bound:.6g}"}
            row[name] = out
        per_case[case] = row
    if not per_case:
        return _inconclusive_reference(op, dims, dps, seed, skipped, start)
    evidence = {"dps": dps, "seed": seed, "rule": rule_in_words(dps), "largest_dim": L, "cases": per_case}
    if skipped:
        evidence["cases_skipped"] = skipped
    verdict = "checked"
    if worst is not None:
        verdict = "failed"
        pt = points[worst["case"]]
        evidence["witness"] = {**worst, "seed": seed, "point": {k: np.asarray(v).tolist() for k, v in pt.items()}
                               if sum(np.size(v) for v in pt.values()) <= tol.WITNESS_POINT_MAX_ENTRIES
                               else "sampled (case and seed above)"}
    assumptions = [f"{n} = {p.default}" for n, p in op.params.items()] + [
        f"evaluated at sampled points ({', '.join(per_case)})",
        "float inputs rounded to the dtype first; the exact side uses the rounded values"]
    return Certificate.issue(op, claim=CLAIM, tier="numeric", verdict=verdict,
                       method=f"float-reference@{dps}", dims=dims, assumptions=assumptions,
                       evidence=evidence, seconds=time.perf_counter() - start,
                       checker_sha256=CHECKER_SHA256)


def _inconclusive_reference(op: Op, dims: dict, dps: int, seed: int, skipped: dict, start: float) -> Certificate:
    return Certificate.issue(op, claim=CLAIM, tier="numeric", verdict="inconclusive",
                             method=f"float-reference@{dps}", dims=dims, assumptions=[],
                             evidence={"reason": "no input case could be checked (see cases_skipped)",
                                       "cases_skipped": skipped, "dps": dps, "seed": seed},
                             seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256)


def _mpmath_agreement(op: Op, point: dict, dy, exact, dps: int) -> float:
    """Digits to which the mpmath backend's run of the spec agrees with the traced spec."""
    B = MpmathBackend(dps + tol.GUARD_DIGITS)
    values = {k: B.convert(v) for k, v in point.items()}
    for name, p in op.params.items():
        values[name] = B.c(p.default) if p.symbolic else p.default
    with B.strict():
        y = np.asarray(op.bind(op.forward, B, values), dtype=object)
        cots = op.bind(op.vjp, B, {**values, "dy": B.convert(dy)})
    worst = float(dps)
    # a cotangent that is exactly 0 (a key bias's) is measured against its siblings' scale
    sibling = max([max_abs(c) for c in exact[1]] + [np.finfo(np.float64).tiny])
    for k, (got, truth) in enumerate([(y, exact[0]), *zip(cots, exact[1])]):
        got = np.asarray(got, dtype=object)
        scale = max(max_abs(truth), sibling if k else np.finfo(np.float64).tiny)
        err = max((abs(g - t) for g, t in zip(got.ravel(), np.asarray(truth, dtype=object).ravel())), default=0)
        worst = min(worst, _digits(err, scale, dps))
    return round(worst, 1)


def _order(ratio: float) -> str:
    """The least power of ten >= ratio (0 stays 0), as text."""
    if ratio == 0:
        return "0"
    if not math.isfinite(ratio):
        return "inf"
    return f"1e{math.ceil(math.log10(ratio))}"


def _s(x) -> str:
    import mpmath         # third-party and slow to import: loaded at its first use
    return mpmath.nstr(x, 20)
