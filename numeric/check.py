"""The numeric tier: an op's backward against derivatives of its forward, in mpmath at ``dps`` digits.

Tiny shapes compare the full Jacobian (columns J e_j from the forward, rows J^T e_i from the
backward); larger ones random signed directions, <v, J u> against <J^T v, u>. Laws are evaluated
directly. Each claim reports its digits of agreement; a shortfall is `failed` only when it persists at
twice the digits (a wrong backward does not improve with precision; rounding does).
"""
from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from vjpcert.numeric import settings as tol
from vjpcert.numeric.derivatives import METHODS, derivative
from vjpcert.numeric.reference import check_reference
from vjpcert.numeric.sampling import cotangent, kink_distance, rng_for, sample_point, sample_points
from vjpcert.core.backends import MpmathBackend
from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.tolerance import digits as _digits, rounding_fit, rounding_words
from vjpcert.core.registry import KINK_CLAIM, SHIFT_CLAIM, Op, SpecError
from vjpcert.core.validate import validate

CHECKER_SHA256 = checker_code_sha256(__name__)


class Contamination(SpecError):
    pass


def _mp_values(op: Op, B: MpmathBackend, point: dict, overrides: dict | None = None) -> dict:
    values = {k: B.convert(v) for k, v in point.items()}
    for name, p in op.params.items():
        v = (overrides or {}).get(name, p.default)
        values[name] = B.c(v) if p.symbolic else v
    return values


def _check_clean(op: Op, arr, what: str, ctx) -> np.ndarray:
    """Every entry must be an mpmath number of this context: a Python float means the spec left
    mpmath (a float literal or a math.* call) and silently capped the precision at 16 digits."""
    arr = np.asarray(arr, dtype=object)
    for v in arr.ravel():
        if isinstance(v, (float, np.floating)) or not isinstance(v, (ctx.mpf, ctx.mpc, int)):
            raise Contamination(op.name, f"{what} produced a {type(v).__name__} ({v!r}) under mpmath: "
                                         f"a Python float or math.* call leaked into the spec")
    return arr




REFERENCE_CLAIM = "reference"
OTHER_PARAMS = "other_params"


def other_params(op: Op) -> dict:
    """Values of the symbolic parameters away from their defaults (eps = 1e-5 -> 37/11 * 1e-5 ...)."""
    out = {}
    for name, p in op.params.items():
        if p.symbolic:
            d = Fraction(p.default)
            out[name] = d * tol.OTHER_PARAM_FACTOR if d != 0 else Fraction(1)
    return out



def numeric_claims(op: Op) -> list[str]:
    """What the numeric tier checks for an op: the spec's claims, and its float references. Not the
    value on a kink: a finite difference measures no derivative there (the exact tier checks it)."""
    return [*(c for c in op.claims() if c != KINK_CLAIM), REFERENCE_CLAIM]


def required_digits(method: str, dps: int) -> float:
    return tol.METHOD_FRACTION[method] * dps - tol.MARGIN_DIGITS


# ------------------------------------------------------------------------------ one point, one precision
def _compare_vjp(op: Op, wrt: str, point: dict, dy: np.ndarray, dirs, dps: int, method: str, full: bool,
                 params: dict | None = None):
    """(digits, details) for backward_wrt against derivatives of the forward at this point; worked at
    dps + GUARD_DIGITS so an ill-conditioned derivative still has its dps digits to report."""
    work = dps + tol.GUARD_DIGITS
    B = MpmathBackend(work)
    ctx = B.ctx
    values = _mp_values(op, B, point, params)
    x = values[wrt]

    def f(xx):
        with B.strict():
            return _check_clean(op, op.bind(op.forward, B, {**values, wrt: xx}), "the forward", ctx)

    def back(v):
        with B.strict():
            cots = op.bind(op.vjp, B, {**values, "dy": v})
        return _check_clean(op, cots[list(op.inputs).index(wrt)], "the backward", ctx)

    y = f(x)
    step = fd_scale(point[wrt])
    if full:
        n, m = x.size, y.size
        J = np.empty((m, n), dtype=object)
        for j in range(n):
            e = np.zeros(x.shape, dtype=object)
            e.flat[j] = 1
            col = derivative(lambda h: f(x + h * e), ctx, method, work, step)
            J[:, j] = np.asarray(col, dtype=object).ravel()
        Bm = np.empty((m, n), dtype=object)
        for i in range(m):
            e = np.full(y.shape, ctx.mpf(0), dtype=object)   # mpf zeros: int 0 / n would be a float
            e.flat[i] = ctx.mpf(1)
            Bm[i, :] = back(e).ravel()
        diff = np.vectorize(lambda a, b: abs(a - b), otypes=[object])(J, Bm)
        k = int(np.argmax(np.vectorize(float)(diff)))
        scale = max(max(abs(v) for v in J.ravel()), max(abs(v) for v in Bm.ravel()))
        natural = _natural_scale(y, x)
        zero = scale <= ctx.mpf(10) ** (tol.ZERO_GRADIENT_DIGITS - dps) * natural
        digits = _digits(diff.flat[k], natural if zero else scale, dps)
        i, j = divmod(k, n)
        jac = max(abs(v) for v in J.ravel())          # from the forward only, never the backward
        loss = 0.0 if zero else _conditioning_loss(y, jac, x)
        return digits, {"mode": "full-jacobian", "conditioning_loss": loss, **({"zero_gradient": True} if zero else {}),
                        "_residuals": list((J - Bm).ravel()),
                        "worst": f"d y{np.unravel_index(i, y.shape)} / d {wrt}"
                        f"{np.unravel_index(j, x.shape)}", "from_forward": _s(J.flat[k]),
                        "from_backward": _s(Bm.flat[k]), "vjp_max": _s(max(abs(v) for v in Bm.ravel()))}
    v_mp = B.convert(dy)
    cot = back(v_mp)
    worst, info, directional, residuals = float(dps), {}, [], []
    for k, u in enumerate(dirs):
        u_mp = B.convert(u)
        a = derivative(lambda h: sum((v_mp * f(x + h * u_mp)).ravel()), ctx, method, work, step)
        directional.append(abs(a) / max(abs(t) for t in u_mp.ravel()))
        terms = (cot * u_mp).ravel()
        b = sum(terms)
        scale = max(abs(a), abs(b), sum(abs(t) for t in terms))
        natural = _natural_scale(v_mp * y, x) * max(abs(t) for t in u_mp.ravel())
        zero = scale <= ctx.mpf(10) ** (tol.ZERO_GRADIENT_DIGITS - dps) * natural
        d = _digits(abs(a - b), natural if zero else scale, dps)
        residuals.append(a - b)
        if d <= worst:
            worst, info = d, {"mode": "directions", "direction": k, "<v, J u>": _s(a), "<J^T v, u>": _s(b),
                              **({"zero_gradient": True} if zero else {})}
    info["vjp_max"] = _s(max(abs(c) for c in cot.ravel()))
    info["_residuals"] = residuals
    # The digits finite differences cannot resolve come from the *forward's* directional derivatives
    # <v, J u> (never from the backward under test: a backward scaled by 1e-45 must not buy itself an
    # allowance of 45 digits).
    info["conditioning_loss"] = 0.0 if info.get("zero_gradient") else _conditioning_loss(
        np.asarray(v_mp * y, dtype=object), max(directional), x)
    return worst, info


def _natural_scale(y, x):
    """The size a derivative of y along x has when nothing cancels: |y| / |x|. A gradient far below
    it is numerically 0 (the cotangent of a key bias: softmax ignores a shift common to a row), and
    its agreement is measured against this scale instead of against itself."""
    fy = max(abs(v) for v in np.asarray(y, dtype=object).ravel())
    fx = max(abs(v) for v in np.asarray(x, dtype=object).ravel())
    return fy / fx if fx != 0 else fy


def _conditioning_loss(y, jac_scale, x) -> float:
    """Digits a derivative cannot have at this point: |f| / (|f'| |x|), with f' from the forward.
    Finite differences resolve f' to a fraction of |f|, so where the derivative is atypically small
    (attention over near-constant rows: |J| ~ 1e-13) fewer of its digits are attainable; a wrong
    backward still shows 0-7 digits. Capped at MAX_CONDITIONING_LOSS: the evaluations carry that many
    guard digits, so no allowance beyond it is ever needed."""
    fy = max(abs(v) for v in np.asarray(y, dtype=object).ravel())
    fx = max([abs(v) for v in np.asarray(x, dtype=object).ravel()] + [np.finfo(np.float64).tiny])
    if jac_scale == 0 or fy == 0:
        return 0.0
    import mpmath         # third-party and slow to import: loaded at its first use
    loss = max(0.0, float(mpmath.log10(fy / (jac_scale * fx))))
    return round(min(loss, tol.MAX_CONDITIONING_LOSS), 1)


def fd_scale(x: np.ndarray) -> float:
    """The smallest spread of a row of x (a near-constant row sets the step), within [1e-12, 1]."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    spread = np.ptp(x.reshape(-1, x.shape[-1]), axis=-1) if x.shape[-1] > 1 else np.abs(x).ravel()
    return float(np.clip(spread.min(), tol.FD_SCALE_MIN, 1.0))


class _ShiftedMpmath(MpmathBackend):
    """mpmath whose ``B.max_shift`` is a random constant per distinct row (as in floats, where it is
    a function of the row); a composite's nodes run unshifted (they carry their own claim)."""

    def __init__(self, dps: int, seed: int):
        super().__init__(dps)
        self.node_backend = MpmathBackend(dps)
        self._rng = rng_for(seed, "max_shift")
        self._shifts: dict = {}

    def max_shift(self, x, mask=None):
        x = np.asarray(x, dtype=object)
        m = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), x.shape)
        out = np.empty(x.shape[:-1] + (1,), dtype=object)
        for idx in np.ndindex(*x.shape[:-1]):
            key = (tuple(x[idx].tolist()), None if m is None else tuple(m[idx].tolist()))
            if key not in self._shifts:
                self._shifts[key] = self.convert([self._rng.uniform(-tol.LARGE_SCALE, tol.LARGE_SCALE)])[0]
            out[idx + (0,)] = self._shifts[key]
        return out


def _shift_sides(op: Op, point: dict, dy: np.ndarray, work: int, seed: int, params=None):
    """The forward and every cotangent with B.max_shift random per row, and with it 0."""
    sides = []
    for B in (_ShiftedMpmath(work, seed), MpmathBackend(work)):
        values = _mp_values(op, B, point, params)
        with B.strict():
            y = np.asarray(op.bind(op.forward, B, values), dtype=object)
            cots = op.bind(op.vjp, B, {**values, "dy": B.convert(dy)})
        side = np.concatenate([np.ravel(np.asarray(a, dtype=object)) for a in [y, *cots]])
        sides.append(_check_clean(op, side, f"law {SHIFT_CLAIM}", B.ctx))
    to_plain = np.frompyfunc(B.ctx.mpf, 1, 1)          # one context for the comparison
    return to_plain(sides[0]).astype(object), sides[1], B


def _compare_law(op: Op, law_name: str, point: dict, dy: np.ndarray, dps: int, seed: int = 0,
                 params: dict | None = None):
    law = op.get_law(law_name)
    if law_name == SHIFT_CLAIM:
        lhs, rhs, B = _shift_sides(op, point, dy, dps + tol.GUARD_DIGITS, seed, params)
        out = (lhs, rhs)
    else:
        B = MpmathBackend(dps + tol.GUARD_DIGITS)
        values = _mp_values(op, B, point, {**(params or {}), **law.params})
        if law.needs_dy:
            values["dy"] = B.convert(dy)
        with B.strict():
            out = op.bind(law.fn, B, values)
    lhs, rhs = out if isinstance(out, tuple) else (out, 0)
    lhs = _check_clean(op, np.asarray(lhs, dtype=object), f"law {law_name}", B.ctx)
    rhs = _check_clean(op, np.broadcast_to(np.asarray(rhs, dtype=object), lhs.shape), f"law {law_name}", B.ctx)
    res = [abs(a - b) for a, b in zip(lhs.ravel(), rhs.ravel())]
    k = int(np.argmax([float(r) for r in res])) if res else 0
    scale = max([abs(a) for a in lhs.ravel()] + [abs(b) for b in rhs.ravel()] + [B.ctx.mpf(1)])
    return _digits(res[k] if res else 0, scale, dps), {"component": k, "lhs": _s(lhs.ravel()[k]),
                                                      "rhs": _s(rhs.ravel()[k]),
                                                      "_residuals": list(lhs.ravel() - rhs.ravel())}


def _s(x) -> str:
    import mpmath         # third-party and slow to import: loaded at its first use
    return mpmath.nstr(x, 20)


# ------------------------------------------------------------------------------ a claim
_VALIDATED: dict = {}       # (id(op), dims) -> op: held, so the id is never another op's


def _validate_once(op: Op, dims: dict) -> None:
    """``validate`` once per op and dims in a process: every claim of an op at the same dims traces the
    same forward, backward and laws (0.4 s at a row of 1,025 entries), and a spec that failed
    validation raises again, since only a success is kept."""
    key = (id(op), tuple(sorted((k, repr(v)) for k, v in dims.items())))
    if _VALIDATED.get(key) is not op:
        validate(op, dims)
        _VALIDATED[key] = op


def check_claim(op: Op, claim: str, dims: dict, *, dps: int = tol.DEFAULT_DPS, method: str = "mpmath-diff",
                seed: int = 0, cases=tol.CASES, point: dict | None = None) -> Certificate:
    """Check one claim at every input case; `checked`, `failed` (with witness) or `inconclusive`.
    The claim ``reference`` (every op has it) checks the float references: ``numeric.reference``."""
    if claim == REFERENCE_CLAIM:
        return check_reference(op, dims, dps=dps, seed=seed, cases=cases, point=point)
    if claim == KINK_CLAIM:
        raise SpecError(op.name, f"the numeric tier does not check {KINK_CLAIM}: a finite difference measures "
                                 f"no derivative on a kink (vjpcert prove checks it, exactly)")
    start = time.perf_counter()
    if dps < tol.MIN_DPS:
        raise SpecError(op.name, f"--dps {dps} is below {tol.MIN_DPS}: too few digits to check anything")
    if method not in METHODS:
        raise SpecError(op.name, f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    dims = op.resolve_dims(dims)
    _validate_once(op, dims)
    is_vjp = claim.startswith("vjp[")
    wrt = claim[4:-1] if is_vjp else None
    if is_vjp and wrt not in op.inputs:
        raise SpecError(op.name, f"has no differentiable input {wrt!r}")
    if not is_vjp:
        op.get_law(claim)
    need = required_digits(method, dps) if is_vjp else dps - tol.LAW_MARGIN_DIGITS

    def certificate(verdict, evidence):
        return Certificate.issue(op, claim=claim, tier="numeric", verdict=verdict,
                           method=f"{method}@{dps}" if is_vjp else f"mpmath-eval@{dps}", dims=dims,
                           assumptions=[f"{n} = {p.default}" + (f" (and {other_params(op)[n]} at the point "
                                                                f"'{OTHER_PARAMS}')" if p.symbolic else "")
                                        for n, p in op.params.items()]
                           + [f"evaluated at sampled points ({', '.join(cases) if point is None else 'given point'})"],
                           evidence=evidence, seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256)

    points, skipped = {}, {}
    if point is not None:
        for k, v in point.items():
            if not np.all(np.isfinite(np.asarray(v, dtype=np.float64))):
                raise SpecError(op.name, f"the given point has NaN or Inf in {k!r}")
        points["given"] = {k: np.asarray(v, dtype=np.float64) for k, v in point.items()}
        if kink_distance(op, points["given"]) < tol.KINK_MIN_DISTANCE:
            return certificate("inconclusive", {"reason": "the given point is at a declared kink, where "
                                                          "the op has no derivative", "dps": dps})
    else:
        points, skipped = sample_points(op, dims, cases, seed)
        if not points:
            return certificate("inconclusive", {"reason": "no sampled point stays away from the op's kinks",
                                                "cases_skipped": skipped, "dps": dps})
    # symbolic parameters are checked away from their defaults too: a composite that calls a node
    # without a parameter (the node's default then stands in) agrees with itself at the defaults only
    other = other_params(op)
    case_params = {case: None for case in points}
    if other and point is None:
        points[OTHER_PARAMS] = sample_point(op, dims, "random", seed + 1)
        case_params[OTHER_PARAMS] = other

    y_shape = op.shape(op.output, dims)
    in_size = points[next(iter(points))][wrt].size if is_vjp else 0
    full = is_vjp and in_size <= tol.FULL_JACOBIAN_MAX and int(np.prod(y_shape)) <= tol.FULL_JACOBIAN_MAX
    per_case, warnings, residuals = {}, [], {}

    def compare(case, pt, digits):
        dy = cotangent(y_shape, seed, op.name, case)
        if is_vjp:
            dirs = [cotangent(pt[wrt].shape, seed, op.name, case, "u", k) for k in range(tol.DIRECTIONS)]
            return _compare_vjp(op, wrt, pt, dy, dirs, digits, method, full, case_params[case])
        return _compare_law(op, claim, pt, dy, digits, seed, case_params[case])
    for case, pt in points.items():
        digits, info = compare(case, pt, dps)
        if is_vjp and float(info["vjp_max"]) <= tol.TINY_VJP * max(1.0, float(np.abs(
                cotangent(y_shape, seed, op.name, case)).max())):
            warnings.append(f"{case}: the VJP is ~0 at this point; the check proves little there")
        residuals[case] = info.pop("_residuals")
        per_case[case] = {"digits": round(digits, 1), **info}
        if case_params[case]:
            per_case[case]["params"] = {k: str(v) for k, v in case_params[case].items()}

    # the worst case is the one with the least margin over what its conditioning allows
    worst_case = min(per_case, key=lambda c: per_case[c]["digits"] + per_case[c].get("conditioning_loss", 0))
    worst = per_case[worst_case]["digits"]
    need = need - per_case[worst_case].get("conditioning_loss", 0)
    evidence = {"dps": dps, "method": method if is_vjp else "direct evaluation", "seed": seed,
                "mode": per_case[worst_case].get("mode", "law"),
                "digits": min(c["digits"] for c in per_case.values()), "decided_by": worst_case,
                "required_digits": round(need, 1), "cases": per_case,
                "max_rel_error": f"{10 ** -worst:.3g}"}
    if is_vjp and not full:
        evidence["directions"] = tol.DIRECTIONS
    if warnings:
        evidence["warnings"] = warnings
    if skipped:
        evidence["cases_skipped"] = skipped
    evidence["required_digits"] = round(need, 1)
    if worst >= need:
        return certificate("checked", evidence)
    # Confirm at more digits: a wrong backward stays wrong, rounding and truncation do not. For a VJP,
    # mpmath.diff must agree at the higher precision too, so no limit of one method is called a bug.
    dps2 = tol.CONFIRM_FACTOR * dps
    pt = points[worst_case]
    dy = cotangent(y_shape, seed, op.name, worst_case)
    if is_vjp:
        dirs = [cotangent(pt[wrt].shape, seed, op.name, worst_case, "u", k) for k in range(tol.DIRECTIONS)]
        digits2, info2 = _compare_vjp(op, wrt, pt, dy, dirs, dps2, method, full, case_params[worst_case])
        persists = digits2 <= worst + tol.PERSIST_GAIN
        if persists and method != "mpmath-diff":
            alt, _ = _compare_vjp(op, wrt, pt, dy, dirs, dps2, "mpmath-diff", full, case_params[worst_case])
            evidence["confirm_independent"] = {"method": "mpmath-diff", "dps": dps2, "digits": round(alt, 1)}
            persists = alt < required_digits("mpmath-diff", dps)
    else:
        digits2, info2 = _compare_law(op, claim, pt, dy, dps2, seed, case_params[worst_case])
        persists = digits2 <= worst + tol.PERSIST_GAIN
    evidence["confirm"] = {"dps": dps2, "digits": round(digits2, 1)}
    info2.pop("_residuals", None)
    if persists and (names := op.rounded_constants(dims)):
        # a failure only by the rounding of the op's float constants: the residual at every case is
        # cancelled by moving each constant a few units in its last place
        def moved(name):
            with op.constants_shifted({name: 1}):
                return [m - r for case, pt in points.items()
                        for m, r in zip(compare(case, pt, dps)[1]["_residuals"], residuals[case])]
        fit = rounding_fit([r for rs in residuals.values() for r in rs], {n: moved(n) for n in names})
        if fit["explained"]:
            evidence["witness"] = {"case": worst_case, **info2, "digits": round(digits2, 1)}
            evidence["constant_fit"] = {k: fit[k] for k in ("ulps", "left")}
            evidence["reason"] = rounding_words(names, fit)
            return certificate("inconclusive", evidence)
    if persists:
        evidence["witness"] = {"case": worst_case, **info2, "digits": round(digits2, 1),
                               "point": {k: np.asarray(v).tolist() for k, v in pt.items()},
                               "dy": np.asarray(dy).tolist(), "seed": seed}
        if is_vjp and info2.get("mode") == "directions":
            evidence["witness"]["u"] = np.asarray(dirs[info2["direction"]]).tolist()
        return certificate("failed", evidence)
    evidence["reason"] = (f"{worst} digits at {dps}, {digits2:.1f} at {dps2}: limited by the method, "
                          f"not the backward")
    return certificate("inconclusive", evidence)


def numeric_dims(op: Op) -> list[dict]:
    """Where the numeric tier checks by default: the op's check dims (odd sizes), and long rows
    (LONG_ROW entries, crossing 1024) where the op has a row dim and allows it; for a recurrence, its
    length instead (LONG_LENGTH steps, at the check dims' widths)."""
    base = op.resolve_dims(op.check_dims)
    recurrence = getattr(op, "recurrence", None)
    if recurrence is not None:
        return [base, op.resolve_dims({**base, recurrence.length: tol.LONG_LENGTH})]
    first = next(iter(op.inputs.values()))
    row = first[-1] if first and isinstance(first[-1], str) and first[-1].isidentifier() else None
    out = [base]
    if row is not None:
        for size in (tol.LONG_ROW, tol.LONG_ROW + 1):
            try:
                long = op.resolve_dims({**base, row: size, **({"rows": 1} if "rows" in base else {})})
            except SpecError:
                continue
            # long rows, not long everything: a 1025 x 1025 weight in mpmath is not a row test
            if sum(int(np.prod(op.shape(s, long))) for s in op.inputs.values()) <= tol.LONG_ROW_MAX_ENTRIES:
                out.append(long)
            break
    return out
