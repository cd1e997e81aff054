"""The strategies of the proof ladder. Each takes a traced claim and returns a plain dict (it runs in
a forked child, see ``vjpcert.core.budget``): ``{"status": "proved" | "nonzero" | "zero" | "failed" |
"unknown", ...evidence}``. Only ``proved`` from an exact normalisation makes a claim `proved`.
"""
from __future__ import annotations

import random
import re
from fractions import Fraction

import flint

from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.fixed.claims import TracedClaim, split_shifts
from vjpcert.symbolic.fixed.false_pass import PRIME_BITS, BoundField, false_pass_bound, random_prime
from vjpcert.symbolic.fixed.fields import AtomPoolExhausted, MpField, RingField
from vjpcert.symbolic.fixed.modp_field import ModPField
from vjpcert.symbolic.fixed.size_and_display import SizeField
from vjpcert.core.tolerance import digits as _digits, rounding_fit
from vjpcert.core.evaluate import NotRational, QField, SignUndecided
from vjpcert.core.registry import SHIFT_CLAIM
from vjpcert.core.trace import Leaf


# ---------------------------------------------------------------------------- exact ring
def _atom_count(claim: TracedClaim, seed: int) -> int:
    F = ModPField(random.Random(seed))
    claim.residual(F)
    return len(F.atoms) + len(F.inverses)


def _ring_residual(claim: TracedClaim, split_exp: bool, seed: int):
    leaves = claim.leaves()
    count = _atom_count(claim, seed)
    pool = count + count // 4 + 16          # variables cost time in flint: size the ring tightly
    while True:
        try:
            F = RingField(leaves, pool, split_exp=split_exp, lin_min_terms=tol.LIN_ATOM_MIN_TERMS)
            R, lhs, rhs = claim.residual(F, shared=True)
            return F, R, lhs, rhs
        except AtomPoolExhausted:
            pool *= 2


def _evidence(F, R, lhs, rhs, claim) -> dict:
    ev = {"atoms": F.atom_kinds(), "variables": len(F.leaves) + len(F.defs),
          "lhs_terms": len(lhs), "rhs_terms": len(rhs), "residual_terms": len(R)}
    if lhs.is_zero() and rhs.is_zero() and claim.kind == "vjp":
        ev["vacuous"] = "backward and J^T dy are both identically 0"
    return ev


def ring_size(claim: TracedClaim) -> int:
    """An upper bound on the terms of the two sides the ring would expand (``SizeField``)."""
    _, lhs, rhs = claim.residual(SizeField(tol.LIN_ATOM_MIN_TERMS), shared=True)
    return lhs[0] + rhs[0]


def ring(claim: TracedClaim, *, seed: int = 0) -> dict:
    """The fast path: the residual as a polynomial in independent atoms (python-flint), then modulo
    the linear relations of shared intermediates (a row mean kept as an atom). A nonzero residual
    that is certainly nonzero at real atom values (``_certainly_nonzero``) carries its disproof
    under ``certain``."""
    F, R, lhs, rhs = _ring_residual(claim, False, seed)
    ev = _evidence(F, R, lhs, rhs, claim)
    if R.is_zero():
        return {"status": "proved", "method": "flint-atoms", **ev}
    if F.linear_relations():
        ev["linear_intermediates"] = len(F.linear_relations())
        if F.reduce_linear(R).is_zero():
            return {"status": "proved", "method": "flint-atoms", **ev}
    if not F.normal_form(R):          # the atoms' relations, without rebuilding the ring for them
        return {"status": "proved", "method": "flint-atoms+relations", **ev, "relations": len(F.relations())}
    certain = _certainly_nonzero(F, R, claim, seed)
    if certain is not None:     # the ladder shows a rational claim's entry-wise witness first
        return {"status": "nonzero", "certain": {"method": "exact-nonzero-factor", "witness": certain}, **ev}
    return {"status": "nonzero", **ev}


# Atoms that are nonzero at every real point where they are defined: exp(a) > 0, a reciprocal 1/b,
# pi, a positive constant's power; sqrt(c) of a rational c > 0 (the field's constant roots) too.
_NEVER_ZERO = ("exp", "inv", "pi", "cpow")


def _certainly_nonzero(F: RingField, R, claim: TracedClaim, seed: int) -> dict | None:
    """A witness that R is nonzero at the *real* atom values, or None.

    Atoms are independent variables of the ring, so R != 0 alone shows nothing where they are related
    (exp(a + b) = exp(a) exp(b)). Two forms are disproofs whatever relations hold:

    - R = m * Q with m a monomial in leaves and never-zero atoms (``_NEVER_ZERO``), so R = 0 exactly
      where Q = 0;
    - Q = sum_k c_k * prod exp(g_j)^(e_kj), with every g_j a polynomial in the leaves: at a rational
      point Q = sum_k c_k exp(h_k) with h_k = sum_j e_kj g_j rational. Grouping the terms by the value
      of h_k, Q != 0 as soon as one group's coefficient sum is nonzero (Lindemann-Weierstrass: the
      exponentials of distinct algebraic numbers are linearly independent over the algebraic numbers).

    That is how a backward off by dy exp(-10^6) or by dy exp(x^2 - 10^4) looks: an error no number
    of digits sees, and a rational point at which it is exactly nonzero."""
    n = len(F.leaves)
    content = R.term_content()
    Q, rem = divmod(R, content)
    if not rem.is_zero():
        return None
    kinds = {var: (kind, arg) for var, kind, arg in F.defs}
    content_vars = [v for v, d in enumerate(content.degrees()) if d]
    factor_atoms = [v for v in content_vars if v >= n]
    for v in factor_atoms:
        kind, arg = kinds[v]
        if not (kind in _NEVER_ZERO or F.const_sqrt.get(v, 0) > 0) or (kind == "cpow" and arg[0] <= 0):
            return None
    exp_atoms = [v for v, d in enumerate(Q.degrees()) if d and v >= n]
    for v in exp_atoms:                      # exponentials of polynomials in the leaves alone
        kind, arg = kinds[v]
        if kind != "exp" or any(arg.degrees()[n:]):
            return None
    rng = random.Random(seed)
    for _ in range(tol.EXACT_WITNESS_POINTS_WIDE):
        point = random_point(F.leaves, rng)
        values = [flint.fmpq(point[leaf].numerator, point[leaf].denominator) for leaf in F.leaves]
        values += [flint.fmpq(0)] * (len(F.gens) - n)
        exponent = {v: kinds[v][1](*values) for v in exp_atoms}
        groups: dict = {}
        for exps, c in Q.terms():
            h = sum((e * exponent[v] for v, e in enumerate(exps) if e and v >= n), flint.fmpq(0))
            term = flint.fmpq(c)
            for v, e in enumerate(exps[:n]):
                if e:
                    term *= values[v] ** e
            groups[h] = groups.get(h, flint.fmpq(0)) + term
        nonzero = {h: c for h, c in groups.items() if c != 0}
        if nonzero and _defined_at(claim, point):
            break
    else:
        return None
    names = {i: leaf.name for i, leaf in enumerate(F.leaves)}
    shown = sorted(nonzero.items(), key=lambda hc: -abs(hc[1]))[:4]
    return {"component": "<backward - J^T dy, t> summed over every entry" if claim.kind == "vjp"
            else "<lhs - rhs, probe>",
            "residual": f"({_named(content, names)}) * Q" + (
                ", Q a polynomial in the inputs alone" if not exp_atoms else
                ", Q a sum of polynomials in the inputs times exponentials of polynomials in the inputs"),
            "never_zero_factor": [_atom_text(F, v, names) for v in factor_atoms]
                                 + [names[v] for v in content_vars if v < n],
            "exponentials": [_atom_text(F, v, names) for v in exp_atoms][:8],
            "Q_at_point": " + ".join(f"({_exact(Fraction(int(c.p), int(c.q)))}) * exp({_exact(Fraction(int(h.p), int(h.q)))})"
                                     for h, c in shown) + (" + ..." if len(nonzero) > len(shown) else ""),
            "exact": True,
            "reason": "at this rational point the residual is a nonzero factor (exp, reciprocals, leaves) "
                      "times a sum of rational multiples of exponentials of distinct rationals, one of "
                      "them nonzero: nonzero by Lindemann-Weierstrass, however small",
            "point": {leaf.name: str(v) for leaf, v in list(point.items())[:tol.WITNESS_MAX_LEAVES]},
            "point_truncated": len(point) > tol.WITNESS_MAX_LEAVES, "seed": seed}


def _defined_at(claim: TracedClaim, point: dict) -> bool:
    """Both sides evaluate to finite reals at the point (it lies where the spec is defined: no pole,
    no root or log of a negative), so the disproof is not about a point outside the claim's domain."""
    try:
        _, _, pairs = _rel_residuals(claim, point, tol.LOW_DPS)
    except (ZeroDivisionError, ValueError):
        return False
    # a complex value has imag != 0; an infinite or NaN real gives a nonzero (NaN) v - v
    return all(v.imag == 0 and not (v.real - v.real) for pair in pairs for v in pair)


def _named(poly, names: dict[int, str]) -> str:
    """A ring polynomial as text, its leaf variables by their names (atoms as a<k>)."""
    return re.sub(r"\bv(\d+)\b", lambda m: names.get(int(m.group(1)), f"a{m.group(1)}"), str(poly))


def _atom_text(F: RingField, var: int, names: dict[int, str]) -> str:
    _, kind, arg = F.defs[var - len(F.leaves)]
    if kind == "cpow":
        return f"a{var} = {arg[0]}^({arg[1]})"
    if kind == "pi":
        return f"a{var} = pi"
    inner = _named(arg, names) if arg is not None else ""
    return f"a{var} = {'1/' if kind == 'inv' else kind}({inner})"


def relations(claim: TracedClaim, *, seed: int = 0) -> dict:
    """Atoms are not independent: eliminate them through their defining relations (w Z = 1,
    r^2 = arg, sin^2 + cos^2 = 1, linear intermediates). Then again with exp(a + b) = E(a) E(b)."""
    tried = []
    for split in (False, True):
        F, R, lhs, rhs = _ring_residual(claim, split, seed)
        # without the split this is the ring's own residual, whose cheap normal form the ring has
        # already found nonzero (this step runs only after it): go straight to the elimination
        left = F.reduce_relations(R, cheap_first=split)
        tried.append(sum(len(p) for p in left))
        if not left:
            return {"status": "proved", "method": "flint-atoms+relations" + ("+exp-split" if split else ""),
                    **_evidence(F, R, lhs, rhs, claim), "relations": len(F.relations())}
    return {"status": "nonzero", "reduced_terms": tried}


# ---------------------------------------------------------------------------- numeric witness
def random_point(leaves: list[Leaf], rng: random.Random, scale=1) -> dict[Leaf, Fraction]:
    """Exact rational values (so 50 and 100 digits evaluate the *same* point): signed, never constant,
    within [-2, 2] * scale; positive parameters drawn away from 0 so a witness is not an artefact of
    eps -> 0."""
    point = {}
    for leaf in leaves:
        if leaf.positive:
            point[leaf] = Fraction(rng.randint(tol.WITNESS_POS_LO, tol.WITNESS_POS_HI), tol.WITNESS_DEN)
        else:
            v = 0
            while v == 0:
                v = rng.randint(-tol.WITNESS_SPAN, tol.WITNESS_SPAN)
            point[leaf] = Fraction(v, tol.WITNESS_DEN) * scale
    return point


def _points(claim: TracedClaim, rng: random.Random, points: int, evaluate):
    """(point, evaluate(point)) for ``points`` random exact points at the witness scales, resampling a
    point where the evaluation hits a pole (ZeroDivisionError) or a step whose sign rounding hides
    (``SignUndecided``); (None, None) once 10x too many did."""
    leaves = claim.leaves()
    tries = done = 0
    while done < points:
        tries += 1
        if tries > 10 * points:
            yield None, None
            return
        point = random_point(leaves, rng, tol.WITNESS_SCALES[done % len(tol.WITNESS_SCALES)])
        try:
            result = evaluate(point)
        except (ZeroDivisionError, SignUndecided):      # a pole, or a kink's sign rounding cannot tell
            continue
        done += 1
        yield point, result


def _rel_residuals(claim: TracedClaim, point: dict, dps: int):
    F = MpField(dps, point)
    pairs = claim.components(F)
    diffs = [a - b for a, b in pairs]
    scale = max([abs(a) for a, _ in pairs] + [abs(b) for _, b in pairs] + [F.ctx.mpf(1)])
    return diffs, scale, pairs




def witness(claim: TracedClaim, *, seed: int = 0, points: int = tol.WITNESS_POINTS) -> dict:
    """Evaluate every component of the claim at random points, at LOW and HIGH digits. `failed` needs
    a residual far above rounding at LOW digits that persists at HIGH digits; `zero` means agreement
    to near HIGH digits at every point (numeric evidence only)."""
    rng = random.Random(seed)
    labels = claim.component_labels()
    worst_digits = float(tol.HIGH_DPS)

    def at(point):
        return _rel_residuals(claim, point, tol.LOW_DPS), _rel_residuals(claim, point, tol.HIGH_DPS)
    for point, found in _points(claim, rng, points, at):
        if found is None:
            return {"status": "unknown", "reason": "every sampled point hit a pole or a kink whose sign rounding hides"}
        (lo, scale_lo, _), (hi, scale_hi, pairs) = found
        j = max(range(len(hi)), key=lambda k: abs(hi[k]))
        rel_lo = abs(lo[j]) / scale_lo
        rel_hi = abs(hi[j]) / scale_hi
        if rel_lo > tol.FAIL_REL and abs(hi[j] - lo[j]) <= tol.PERSIST_REL * abs(hi[j]):
            a, b = pairs[j]
            return {"status": "failed", "method": "mpmath-witness", "witness": {
                "component": labels[j],
                "backward" if claim.kind == "vjp" else "lhs": _s(a),
                "J^T dy" if claim.kind == "vjp" else "rhs": _s(b),
                "residual": _s(hi[j]), "relative": _s(rel_hi, 6),
                "digits": [tol.LOW_DPS, tol.HIGH_DPS],
                "point": {leaf.name: str(v) for leaf, v in list(point.items())[:tol.WITNESS_MAX_LEAVES]},
                "point_truncated": len(point) > tol.WITNESS_MAX_LEAVES,
                "seed": seed,
            }}
        worst_digits = min(worst_digits, _digits(abs(hi[j]), scale_hi, tol.HIGH_DPS))
    if worst_digits >= tol.ZERO_DIGITS:
        return {"status": "zero", "digits": round(worst_digits, 1), "points": points,
                "dps": tol.HIGH_DPS, "seed": seed}
    return {"status": "unknown", "digits": round(worst_digits, 1),
            "reason": "the residual is neither clearly 0 nor a persistent nonzero"}


def constant_rounding(claim: TracedClaim, retrace, names: list[str], *, seed: int = 0) -> dict:
    """Whether a failing claim fails only by the rounding of its op's float constants (``names``,
    read as decimals): its residual at CONSTANT_FIT_POINTS random points, against how that residual
    moves when each constant moves by one unit in its last place (``retrace({name: 1})`` is the claim
    traced so), fitted by ``core.tolerance.rounding_fit``. ``explained``: the failure is the
    constants' rounding, not the formula."""
    rng = random.Random(seed)
    # at least twice as many residual components as constants to fit, and two more: a fit with as
    # many unknowns as equations cancels anything small
    per_point = len(claim.component_labels())
    count = max(tol.CONSTANT_FIT_POINTS, -(-(2 * len(names) + 2) // max(per_point, 1)))
    points = [random_point(claim.leaves(), rng) for _ in range(count)]
    by_name = [{leaf.name: v for leaf, v in p.items()} for p in points]

    def residual(c: TracedClaim) -> list:
        out = []
        for named in by_name:
            diffs, _, _ = _rel_residuals(c, {leaf: named[leaf.name] for leaf in c.leaves()}, tol.HIGH_DPS)
            out += diffs
        return out
    r0 = residual(claim)
    sensitivity = {}
    for name in names:
        moved = residual(retrace({name: 1}))
        sensitivity[name] = [a - b for a, b in zip(moved, r0)]
    fit = rounding_fit(r0, sensitivity)
    return {"status": "explained" if fit["explained"] else "not-explained", **fit,
            "points": len(points), "dps": tol.HIGH_DPS}


def exact_witness(claim: TracedClaim, *, seed: int = 0, points: int = tol.EXACT_WITNESS_POINTS) -> dict:
    """Every component of a claim built from + - * / and integer powers, evaluated *exactly* at
    random rational points: a component where the two sides differ is a disproof, however small the
    difference (a backward off by 1e-90 x is as wrong as one off by x). `not-rational` when the claim
    has a transcendental (the exact value is then out of reach; the mpmath witness takes over)."""
    rng = random.Random(seed)
    labels = claim.component_labels()
    try:
        sampled = list(_points(claim, rng, points, lambda point: claim.components(QField(point))))
    except NotRational as exc:
        return {"status": "not-rational", "reason": f"the claim has a non-rational term ({exc})"}
    for point, pairs in sampled:
        if pairs is None:
            return {"status": "unknown", "reason": "every sampled point hit a pole"}
        for j, (a, b) in enumerate(pairs):
            if a != b:
                side = ("backward", "J^T dy") if claim.kind == "vjp" else ("lhs", "rhs")
                return {"status": "failed", "method": "exact-rational-witness", "witness": {
                    "component": labels[j], side[0]: _exact(a), side[1]: _exact(b),
                    "residual": _exact(a - b), "exact": True,
                    "relative": _s(abs(a - b) / max(abs(a), abs(b)), 6),
                    "point": {leaf.name: str(v) for leaf, v in list(point.items())[:tol.WITNESS_MAX_LEAVES]},
                    "point_truncated": len(point) > tol.WITNESS_MAX_LEAVES,
                    "seed": seed,
                }}
    return {"status": "zero", "points": len(sampled)}


def _exact(q: Fraction) -> str:
    """An exact rational as text; a very long one keeps its value to 30 digits and says so."""
    text = str(q)
    if len(text) <= tol.EXACT_TEXT_MAX_CHARS:
        return text
    return f"{_s(q)} (exact value: {len(str(q.numerator))}-digit numerator / {len(str(q.denominator))}-digit denominator)"


def _s(x, digits=30) -> str:
    import mpmath
    if isinstance(x, Fraction):
        ctx = mpmath.MPContext()
        ctx.dps = digits + 10
        x = ctx.mpf(x.numerator) / x.denominator
    return mpmath.nstr(x, digits)


# ---------------------------------------------------------------------------- randomised exact
def modp(claim: TracedClaim, *, seed: int = 0, salt: str = "", trials: int = tol.MODP_TRIALS) -> dict:
    """Schwartz-Zippel over GF(p) for a fresh 63-bit prime p per trial: residual at random points,
    atoms independent. The primes and points come from a hash of ``salt`` (the claim's identity and
    the spec's and checker's code hashes) and the seed, Fiat-Shamir style: reproducible, yet a spec
    cannot be written against them, because changing the spec changes them. A fixed prime could be
    targeted: an error term whose coefficients it divides vanishes in every trial."""
    import hashlib
    digest = hashlib.sha256(f"{salt}|{seed}".encode()).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    if claim.claim == SHIFT_CLAIM:     # exp(u - c) = exp(u) / exp(c): the shift may cancel mod p too
        claim = split_shifts(claim)
    B = BoundField()
    bounds = claim.residual(B)[0]
    primes, done = [], 0
    for _ in range(10 * trials):
        p = random_prime(rng)
        F = ModPField(rng, p)
        try:
            R = claim.residual(F)[0]
        except ZeroDivisionError:
            continue
        if R != 0:
            out = {"status": "nonzero", "trials": done + 1, "prime": str(p), "atoms": len(F.atoms)}
            if not F.atoms:
                # + - * / only: a rational function nonzero at a point mod p (no pole there) has a
                # nonzero numerator over Q -- the claim is false, however small the difference is
                out.update(status="failed", method="modp-rational-witness", witness={
                    "component": "<backward - J^T dy, t> summed over every entry" if claim.kind == "vjp"
                    else "<lhs - rhs, probe>", "prime": str(p), "residual_mod_p": str(R), "exact": True,
                    "point_mod_p": {leaf.name: str(v) for leaf, v in list(F.values.items())[:tol.WITNESS_MAX_LEAVES]},
                    "point_truncated": len(F.values) > tol.WITNESS_MAX_LEAVES,
                    "reason": "the residual is a rational function of the inputs (no transcendental), "
                              "nonzero at this point mod p: it is not identically zero"})
            return out
        primes.append(str(p))
        done += 1
        if done == trials:
            bound = false_pass_bound(bounds, B, trials)
            return {"status": "proved-probabilistic", "method": "modp-schwartz-zippel",
                    "primes": primes, "prime_bits": PRIME_BITS, "trials": trials,
                    "degree_bound": bounds[0] if bounds else 0,
                    "coefficient_bits_bound": round(bounds[2], 1) if bounds else 0,
                    "atoms": B.atoms, "seeded_by": "sha256 of the claim, the spec and checker hashes, and the seed",
                    "false_pass_probability": f"{bound:.3g}",
                    "false_pass_covers": "a zero at a random point (Schwartz-Zippel), the prime dividing "
                                         "the residual's coefficients, two atoms colliding mod p"}
    return {"status": "unknown", "reason": "every sampled point hit a pole"}


# ---------------------------------------------------------------------------- SymPy, independently
def sympy_simplify(claim: TracedClaim) -> dict:
    """An independent derivation: run the spec on the SymPy backend, differentiate the forward with
    ``sympy.diff`` and normalise each component with ``cancel``, then ``simplify``."""
    import numpy as np
    import sympy

    from vjpcert.core.backends import SYMPY
    from vjpcert.symbolic.fixed.size_and_display import SympyField

    op = claim.op
    if claim.claim == SHIFT_CLAIM:         # not a spec function SymPy could rerun: the ring decides it
        return {"status": "unknown", "reason": "no independent SymPy derivation of max_shift_free"}
    S = SympyField()

    def sym_array(leaves):
        return np.vectorize(lambda n: S.leaf(n.value), otypes=[object])(leaves)

    values = {}
    from vjpcert.core.tracing import primal_values
    traced = primal_values(op, claim.dims, claim.overrides)
    for name, v in traced.items():
        if isinstance(v, np.ndarray):
            values[name] = sym_array(v)
        elif hasattr(v, "op"):
            values[name] = S.leaf(v.value) if v.op == "leaf" else sympy.Rational(v.value.numerator, v.value.denominator)
        else:
            values[name] = v
    y = np.asarray(op.bind(op.forward, SYMPY, values), dtype=object)
    if claim.kind == "vjp":
        dy = sym_array(claim.dy)
        cot = np.asarray(op.bind(op.vjp, SYMPY, {**values, "dy": dy})[list(op.inputs).index(claim.wrt)],
                         dtype=object)
        xs = values[claim.wrt]
        residuals = []
        for idx in np.ndindex(*xs.shape):
            jt = sum((dy[k] * sympy.diff(y[k], xs[idx]) for k in np.ndindex(*y.shape)), sympy.S.Zero)
            residuals.append(cot[idx] - jt)
    else:
        law = op.get_law(claim.claim)
        if law.needs_dy:
            values["dy"] = sym_array(leaf_like(claim, y.shape))
        out = op.bind(law.fn, SYMPY, values)
        lhs, rhs = (out if isinstance(out, tuple) else (out, 0))
        residuals = list(np.ravel(np.asarray(lhs, dtype=object) - np.asarray(rhs, dtype=object)))
    used = "cancel"
    for r in residuals:
        if sympy.cancel(r) != 0:
            used = "simplify"
            if sympy.simplify(r) != 0:
                return {"status": "nonzero"}
    return {"status": "proved", "method": f"sympy-{used}", "components": len(residuals)}


def leaf_like(claim, shape):
    from vjpcert.core.trace import leaf_array
    return leaf_array(shape, "dy", "dy")
