"""The randomised exact test at production dims: the spec's own numpy code on ``ModularBackend``.

For an op at its ``modular_dims`` (a ViT-Tiny block: 197 tokens, width 192), one *trial* draws a
prime p in [2^59, 2^60) and a random point (inputs, dy, one tangent t_X per differentiable input X)
from a hash of the claim and of the spec's and checker's code (Fiat-Shamir, as ``strategies.modp``),
runs the forward on dual numbers (value, J t) and the backward on the values, and computes

    R = sum_X <backward_X(x, dy), t_X> - <dy, J t>        (mod p)

R is 0 for every choice of t_X iff every cotangent is J_X^T dy, so one joint trial tests every VJP
claim of the op at once; a nonzero R is split by bisection over the inputs (R is linear in the t_X,
so R_S = R_left + R_right with the same point) to name each input whose claim fails. A composite runs
end to end: its nodes' own forward and backward code on the same backend, so a node called at the
wrong point, or wired wrongly, changes R. Laws that are equalities are checked entry by entry.

Why the stated false-pass probability is an upper bound (``false_pass_bound``). The variables are the
leaves (inputs, dy, tangents, symbolic params: uniform in [1, p)), sqrt(pi) (uniform), and one per
distinct atom -- exp, tanh, erf, ... of a distinct argument polynomial, and for a root s = sqrt(a)
that is only ever inverted (LayerNorm's 1 / sqrt(var + eps)) the variable w = 1 / s instead. Compare
the real trial with an ideal one in which every distinct atom is an independent variable taking each
residue with probability at most HASH_BIAS / p. They agree unless two distinct atoms of one kind have
arguments of equal value at the point (or opposite ones for the odd kinds, or an argument hits a
fold such as exp(0) = 1): for each pair that is the numerator of the arguments' difference vanishing,
at most (its degree) / p by Schwartz-Zippel in the ideal variables, plus the chance that p divides
all its coefficients. In the ideal trial the residual is R = N / D with the degrees and coefficient
sizes that ``bound`` tracks (denominators by provenance, so a shared 1/Z or 1/sqrt is counted
once); D(point) != 0 because a point where an inverted value vanishes is redrawn (probability at most
the pole degree / p, by which the rest is divided); so R(point) = 0 iff N(point) = 0, which for
N != 0 has probability at most deg N HASH_BIAS / p, or N vanishes mod p as a polynomial (p divides
its coefficients: at most log2 |N|_1 / 59 of the primes). Where a root appears both as s and as
1 / s, R is a Laurent polynomial in it and every degree is widened (``Field.atoms_used_both_ways``).
Trials draw independent primes and points, so the total is the per-trial bound to the power trials;
where every trial identified its atoms alike (``Field.atom_partition``), a collision must recur in every
trial, and the collision terms too fall with the power of the trials (``false_pass_bound`` says why):
that is what keeps the bound below 1 for a recurrence's millions of gate atoms.
``tests/test_modular_bound.py`` compares the tracked degree with SymPy's on small cases.

Verdicts: ``checked-probabilistic`` (method ``modp-vectorised``) when R = 0 in every trial, with the
stated false-pass probability (``false_pass_bound``); ``failed`` with the trial, the prime and the
residual when R != 0 -- where atoms enter, only once a float64 point agrees (``confirm``: with
atoms independent, a backward resting on exp(a + b) = exp(a) exp(b) is nonzero too; unconfirmed, the
verdict is ``inconclusive``);
``inconclusive`` when the bound is vacuous or every point hit a pole. A construct the backend cannot
follow exactly (a float, a comparison, an unknown numpy function) is bad input (SpecError).
"""
from __future__ import annotations

import hashlib
import math
import random
import time

import flint
import numpy as np

from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.registry import RESERVED_CLAIMS, Op, SpecError
from vjpcert.core.tracing import run_spec_code
from vjpcert.core.validate import validate
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.modular import bound as bnd
from vjpcert.symbolic.modular.arith import PRIME_LO_BITS, Pole
from vjpcert.symbolic.modular.backend import LEAF, Field, ModArray, ModularBackend, NeedAnotherPrime, derive

CHECKER_SHA256 = checker_code_sha256(__name__)
METHOD = "modp-vectorised"
KINDS = ("exp", "log", "sqrt", "erf", "tanh", "circle", "cpow", "step")

# Primes in [2^59, 2^60): pi(2^60) > x/ln x (1 + 1/ln x) = 2.84e16 and pi(2^59) < x/ln x (1 + 1.2762/
# ln x) = 1.45e16 (Dusart 2010), so more than 1.3e16 of them.
PRIMES_IN_RANGE = 1.3e16
# The atom hash reduces a uniform 64-bit value mod p: a residue has probability at most
# (2^64 / p + 1) / 2^64 <= (1 + p / 2^64) / p < (1 + 2^-4) / p for p < 2^60.
HASH_BIAS = 1.0625


def draw_prime(rng: random.Random) -> int:
    while True:
        n = rng.randrange(2 ** PRIME_LO_BITS, 2 ** (PRIME_LO_BITS + 1)) | 1
        if flint.fmpz(n).is_prime():
            return n


def modular_claims(op: Op) -> list[str]:
    """Every claim of the op but the reserved ones (max_shift_free needs a free shift, not 0)."""
    return [c for c in op.claims() if c not in RESERVED_CLAIMS]


def split_dims(op: Op, entry: dict) -> tuple[dict, dict]:
    """A ``modular_dims`` entry gives dims and, optionally, structural params (heads)."""
    import inspect
    params = {k: v for k, v in entry.items() if k in op.params}
    dims = {k: v for k, v in entry.items() if k not in op.params}
    check = op.constraints
    if check is not None and params:
        # a constraint written for the default structural params (heads=4) is asked with the entry's
        accepted = {k: v for k, v in params.items() if k in inspect.signature(check).parameters}
        problem = check(dict(dims), **accepted) if accepted else None
        if problem:
            raise SpecError(op.name, f"modular dims {entry} rejected: {problem}")
        op = _without_constraints(op) if accepted else op
    return op.resolve_dims(dims), params


def _without_constraints(op: Op) -> Op:
    twin = object.__new__(type(op))
    twin.__dict__.update(op.__dict__)
    twin.constraints = None
    return twin


# ------------------------------------------------------------------------------ one evaluation
class _Point:
    """The random point of one trial, drawn once, so a bisection re-runs exactly the same point."""

    def __init__(self, op: Op, dims: dict, params: dict, rng: random.Random, p: int, overrides: dict,
                 roots: frozenset = frozenset()):
        self.p = p
        self.roots = roots
        self.keys = {kind: (rng.getrandbits(64), rng.getrandbits(64)) for kind in KINDS}
        self.sqrt_pi = rng.randrange(1, p)
        gen = np.random.default_rng(rng.getrandbits(128))
        rand = lambda shape: gen.integers(1, p, size=shape, dtype=np.int64)   # noqa: E731
        self.x = {name: rand(op.shape(s, dims)) for name, s in op.inputs.items()}
        self.t = {name: rand(op.shape(s, dims)) for name, s in op.inputs.items()}
        self.nondiff = {name: rand(op.shape(s, dims)) for name, s in op.nondiff.items()}
        self.params = {}
        for name, prm in op.params.items():
            if name in overrides:
                self.params[name] = ("exact", overrides[name]) if prm.symbolic else ("plain", overrides[name])
            elif name in params:
                self.params[name] = ("plain", params[name])
            elif prm.symbolic:
                self.params[name] = ("leaf", rng.randrange(1, p))
            else:
                self.params[name] = ("plain", prm.default)
        self.dy = rand(op.shape(op.output, dims))
        self.probe_seed = rng.getrandbits(64)

    def field(self) -> Field:
        """This trial's field, with the constant roots known so far taken first (those the run at the
        op's smallest dims met, ``_roots_at_small_dims``, and those earlier trials met): a prime
        without one is refused here (NeedAnotherPrime), before a block's worth of work, not midway.
        The primes accepted are the same as when the refusal comes midway -- and the bound counts
        every root in ``F._roots`` as conditioning the prime (``false_pass_bound``)."""
        F = Field(self.p, self.keys, self.sqrt_pi)
        for c in sorted(self.roots):
            F.prime_root(c)
        return F

    def values(self, F: Field, seeded=()) -> dict:
        from fractions import Fraction
        from vjpcert.symbolic.modular.backend import exact_const
        out = {}
        for name, v in self.x.items():
            t = self.t[name] if name in seeded else None
            out[name] = ModArray(F, v, t, LEAF, LEAF if t is not None else None)
            out[name].sid = derive("leaf", name)
        for name, v in self.nondiff.items():
            out[name] = ModArray(F, v, None, LEAF, None)
            out[name].sid = derive("leaf", name)
        for name, (kind, v) in self.params.items():
            if kind == "exact":
                out[name] = exact_const(F, (Fraction(v), ()))
            elif kind == "leaf":
                out[name] = ModArray(F, np.int64(v), None, LEAF, None)
                out[name].sid = derive("leaf", name)
            else:
                out[name] = v
        return out


def _run(op: Op, fn, role: str, values: dict, B: ModularBackend):
    """Spec code on the modular backend, run as every interpreter runs it (``core.tracing.run_spec_code``);
    a pole is passed up to resample -- also when the spec caught it and carried on."""
    F = B.F
    poles_before = getattr(F, "poles", 0)
    out = run_spec_code(op, f"{role} (modular backend)", lambda: op.bind(fn, B, values),
                        passthrough=(Pole, NeedAnotherPrime))
    if getattr(F, "poles", 0) != poles_before:
        raise SpecError(op.name, f"{role} (modular backend): the spec caught a division by zero and "
                                 f"carried on; a checker cannot follow that path faithfully")
    return out


def _as_mod(value, what: str, op: Op, F: Field, shape) -> ModArray:
    from vjpcert.symbolic.modular.backend import lift
    if not isinstance(value, ModArray):
        if isinstance(value, np.ndarray) and value.dtype == object:
            raise SpecError(op.name, f"{what} returned an object array")
        value = lift(F, value)
    if shape is not None and value.shape != tuple(shape):
        raise SpecError(op.name, f"{what} has shape {value.shape}, expected {tuple(shape)}")
    return value


def _inner(F: Field, a, b):
    return int(F.sum(F.mul(np.broadcast_to(a, np.broadcast_shapes(np.shape(a), np.shape(b))), b), None))


def vjp_residual(op: Op, dims: dict, point: _Point, seeded) -> tuple[int, int, int, tuple]:
    """(R, lhs, rhs, bound of R) at one point with the inputs ``seeded`` carrying tangents."""
    with point.field() as F:          # the trial's cached values dropped however it ends
        B = ModularBackend(F)
        values = point.values(F, seeded)
        y = _as_mod(_run(op, op.forward, "forward", values, B), "the forward", op, F, op.shape(op.output, dims))
        plain = point.values(F, ())
        dy = ModArray(F, point.dy, None, LEAF, None)
        dy.sid = derive("leaf", "dy")
        cots = _run(op, op.vjp, "backward", {**plain, "dy": dy}, B)
        names = list(op.inputs)
        if not isinstance(cots, (tuple, list)) or len(cots) != len(names):
            raise SpecError(op.name, f"the backward must return one cotangent per differentiable input {names}")
        lhs, lhs_b = 0, None
        for name, cot in zip(names, cots):
            cot = _as_mod(cot, f"the backward's cotangent for {name}", op, F, values[name].shape)
            cot.used()
            if name in seeded:
                lhs = (lhs + _inner(F, cot.v, point.t[name])) % F.p
                lhs_b = bnd.add(lhs_b, bnd.sum_axes(bnd.mul(cot.b, LEAF, cot.ndim), cot.shape, range(cot.ndim)), 0)
        jt = y.t if y.t is not None else np.zeros(y.shape, np.int64)
        rhs = _inner(F, point.dy, jt)
        rhs_b = bnd.sum_axes(bnd.mul(LEAF, y.tb, y.ndim), y.shape, range(y.ndim))
        total = bnd.add(lhs_b, rhs_b, 0)
        return (lhs - rhs) % F.p, lhs, rhs, None if total is None else total.numbers(), F


def law_residual(op: Op, claim: str, dims: dict, point: _Point):
    """(index of the first entry where the law's sides differ or None, lhs, rhs, bound, F)."""
    law = op.get_law(claim)
    with point.field() as F:          # the trial's cached values dropped however it ends
        B = ModularBackend(F)
        values = point.values(F, ())
        if law.needs_dy:
            values["dy"] = ModArray(F, point.dy, None, LEAF, None)
            values["dy"].sid = derive("leaf", "dy")
        out = _run(op, law.fn, f"law {law.name}", values, B)
        if isinstance(out, tuple):
            if len(out) != 2:
                raise SpecError(op.name, f"law {law.name} returned a tuple of {len(out)}")
            lhs, rhs = (_as_mod(v, f"law {law.name}", op, F, None) for v in out)
        else:
            lhs = _as_mod(out, f"law {law.name}", op, F, None)
            rhs = B.zeros(lhs.shape)
        lv, rv = np.broadcast_arrays(lhs.v, rhs.v)
        if lv.size == 0:
            raise SpecError(op.name, f"law {law.name} returned an empty array")
        diff = np.argwhere(lv != rv)
        first = tuple(int(i) for i in diff[0]) if len(diff) else None
        at = first if first is not None else ()
        lhs.used(), rhs.used()
        diff_b = bnd.add(lhs.b, rhs.b, lv.ndim)
        return first, int(lv[at]) if first is not None else 0, int(rv[at]) if first is not None else 0, \
            None if diff_b is None else diff_b.numbers(), F


# ------------------------------------------------------------------------------ the bound
FOLDED = ("erf", "tanh", "circle")       # hashed by |a|: a pair also collides where a = -b


def false_pass_bound(bound, F_stats: list[Field], trials: int, sqrt_constants: int) -> dict:
    """The false-pass probability (the module docstring says why each term bounds what it names). Per
    trial: Schwartz-Zippel on the residual's numerator (deg N HASH_BIAS / p) plus p dividing its
    coefficients (in Z[sqrt(c1), ...] for the spec's constant roots: its norm's bits / 59 of the
    ``primes`` candidates) -- ``zero`` -- plus, for each of the count^2 / 2 pairs of one kind's atoms (and
    count folds), their arguments' difference vanishing -- ``pair`` each; all conditioned on avoiding the
    poles. ``total`` is at most the per-trial bound to the power ``trials`` (independent primes and points),
    and where every trial identified its atoms alike (``Field.atom_partition``) also at most
    zero^trials + pairs pair^trials: the trials passing with the true identifications is the first term;
    else take the first atom computation at which their common partition is not the true one -- every
    trial computed honestly up to it and made the same false identification there, one pair colliding
    in every trial at its own prime and point. (Arguments equal as functions are equal at any point, so
    no trial splits a true class.)"""
    p_min = 2.0 ** PRIME_LO_BITS
    primes = PRIMES_IN_RANGE / 2 ** (sqrt_constants + 1 if sqrt_constants else 0)
    if bound is None:
        return {"per_trial": 0.0, "total": 0.0, "degree": 0, "coefficient_bits": 0.0, "atoms": {},
                "identifications_agreed": False, "vacuous": False}
    n, d, h, _ = bound
    widen = 2 ** sqrt_constants
    # 1 / s of a root atom s is the variable w; where some s also entered as s, the residual is a
    # Laurent polynomial in it: clearing s^b (b <= the degree) multiplies every degree by 1 + their count
    laurent = 1 + max((getattr(F, "atoms_used_both_ways", 0) for F in F_stats), default=0)
    n = n * laurent

    roots = set().union(*(F._roots for F in F_stats)) if F_stats else set()
    # a coefficient sum_S q_S prod_{c in S} sqrt(c) with |q_S| <= 2^bits has each conjugate below
    # 2^bits prod (1 + sqrt(c)); its norm is the product of 2^s conjugates
    conj = sum(math.log2(1 + math.sqrt(c)) for c in roots)

    def divides(bits):
        return (widen * (bits + conj) + 1) / PRIME_LO_BITS / primes

    pole_degree = laurent * max((getattr(F, "pole_degree", 0.0) for F in F_stats), default=0.0)
    # an accepted point is one that avoided the poles: each trial's terms are conditioned on that
    avoid = max(1e-300, 1 - min(0.5, HASH_BIAS * pole_degree / p_min))
    zero = (HASH_BIAS * n / p_min + divides(h)) / avoid
    atoms: dict[str, int] = {}
    for F in F_stats:
        for kind, count in F.atom_count.items():
            atoms[kind] = max(atoms.get(kind, 0), count)
    collisions, agreed_collisions, worst_pair = 0.0, 0.0, 0.0
    for kind, count in atoms.items():
        args = [F.atom_arg[kind] for F in F_stats if kind in F.atom_arg]
        an, ad, ah, ak = (max(a[i] for a in args) for i in range(4)) if args else (0, 0, 0.0, 0.0)
        pairs = count * (count - 1) / 2 * (2 if kind in FOLDED else 1) + count
        pair = (HASH_BIAS * (an + ad) * laurent / p_min + divides(ah + ak + 1)) / avoid
        collisions += pairs * pair
        worst_pair = max(worst_pair, pair)
        agreed_collisions += pairs * min(1.0, pair) ** trials
    per = min(1.0, zero + collisions)
    total = per ** trials
    # digested only here, where a second trial is compared (``Field.atom_partition``)
    digests = {getattr(F, "atom_partition", None) for F in F_stats} if trials >= 2 else {None}
    agreed = trials >= 2 and len(F_stats) >= trials and len(digests) == 1 and None not in digests
    if agreed:
        total = min(total, min(1.0, min(1.0, zero) ** trials + agreed_collisions))
    return {"per_trial": per, "total": total, "degree": n, "denominator_degree": d,
            "coefficient_bits": round(h, 1), "atoms": atoms, "atom_collision_per_trial": collisions,
            "identifications_agreed": agreed,
            # no number of trials states anything: each one's bound is vacuous, and where they agree
            # on their atoms, so is its Schwartz-Zippel part or some pair's collision
            "vacuous": per >= tol.MODULAR_VACUOUS and not (
                agreed and zero < tol.MODULAR_VACUOUS and worst_pair < tol.MODULAR_VACUOUS),
            "pole_degree": pole_degree, "laurent_factor": laurent}


# ------------------------------------------------------------------------------ the check
_MEMO: dict = {}


def _salt(op: Op, dims: dict, params: dict, claim_set: str) -> str:
    return f"{op.name}|{claim_set}|{sorted(dims.items())}|{sorted(params.items())}|{op.spec_sha256}|{CHECKER_SHA256}"


def _points(op, dims, params, salt, seed, trials, overrides=None, roots: set | None = None):
    """Yield points with fresh primes; a pole or a missing constant root redraws. ``roots``: the
    constants whose square roots the trials so far needed (the caller adds to it as it learns)."""
    digest = hashlib.sha256(f"{salt}|{seed}".encode()).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    for _ in range(10 * max(trials, tol.MODULAR_MAX_TRIALS)):
        p = draw_prime(rng)
        yield _Point(op, dims, params, rng, p, overrides or {}, frozenset(roots or ()))


def _roots_at_small_dims(op: Op, params: dict, residual, overrides: dict | None = None) -> set:
    """The constant square roots the spec's code takes (GELU's sqrt(2/pi) needs sqrt(2) mod p), learned
    by running ``residual(small_dims, point)`` at the op's smallest dims before the first trial at
    production dims: a prime without one of them is then refused before any work, not midway through a
    trial that is thrown away (a GPT-2 block's first trial met sqrt(2) at its MLP's GELU: 8 s lost before
    a 20 s trial, one thread). Constants are exact, so most roots are the same at every size; one
    that depends on a size (1 / sqrt(d)) can differ: a root the production dims need and these did not
    still redraws the prime midway, and one they do not need conditions the prime all the same -- the
    bound counts every root a trial's field takes (``false_pass_bound``), so it is never understated.
    The structural params (heads) are the production ones where the op's constraints allow them at the
    small dims, else the defaults. A spec error there is left to the trials to report."""
    small = dict(op.dims[0])
    try:
        small_dims, small_params = split_dims(op, {**small, **params})
    except SpecError:
        small_dims, small_params = op.resolve_dims(small), {}
    roots: set = set()
    for point in _points(op, small_dims, small_params, _salt(op, small_dims, small_params, "roots"), 0, 1,
                          overrides, roots=roots):
        try:
            F = residual(small_dims, point)
        except SpecError:
            break
        except Pole:
            continue
        except NeedAnotherPrime as exc:
            _learn_roots(roots, exc)
            continue
        _learn_roots(roots, F=F)
        break
    return roots


def _learn_roots(roots: set, exc: NeedAnotherPrime | None = None, F: Field | None = None):
    if exc is not None and exc.root is not None:
        roots.add(exc.root)
    if F is not None:
        roots.update(F._roots)


def check_vjps(op: Op, dims: dict, params: dict | None = None, *, seed: int = 0,
               trials: int = tol.MODULAR_TRIALS) -> dict:
    """Every VJP claim of ``op`` at ``dims`` by joint trials. Returns {"claims": {claim: outcome},
    "primes", "trials", "seconds_per_trial", "bound", ...}; an outcome is {"status": "zero"} or
    {"status": "nonzero", "witness": ...}."""
    params = dict(params or {})
    bnd.forget_products()
    names = list(op.inputs)
    salt = _salt(op, dims, params, "vjp")
    outcome = {f"vjp[{x}]": {"status": "zero"} for x in names}
    alive = list(names)
    needed = _roots_at_small_dims(op, params, lambda d, point: vjp_residual(op, d, point, names)[-1])
    primes, fields, bound, done, seconds, poles, refused, lost = [], [], None, 0, [], 0, 0, 0
    for point in _points(op, dims, params, salt, seed, trials, roots=needed):
        start = time.perf_counter()
        try:
            R, lhs, rhs, b, F = vjp_residual(op, dims, point, alive)
        except Pole:
            poles += 1
            continue
        except NeedAnotherPrime as exc:
            # a root already known refuses the prime before any work; a new one, midway
            refused += exc.root in needed
            lost += exc.root not in needed
            _learn_roots(needed, exc)
            continue
        _learn_roots(needed, F=F)
        seconds.append(time.perf_counter() - start)
        fields.append(F)
        bound = _join_numbers(bound, b)
        if R:
            for name, (r, l_, r_) in _bisect(op, dims, point, alive, R, lhs, rhs).items():
                outcome[f"vjp[{name}]"] = {"status": "nonzero", "witness": {
                    "component": f"vjp[{name}]", "trial": done + 1, "prime": str(point.p),
                    "residual_mod_p": str(r), "backward_dot_t_mod_p": str(l_), "dy_dot_Jt_mod_p": str(r_),
                    "exact": True, "seed": seed,
                    "point": "random residues mod p drawn from the Fiat-Shamir seed (sha256 of the claim, "
                             "the spec and checker hashes, and the seed): rerun with the same seed"}}
                alive.remove(name)
        primes.append(str(point.p))
        done += 1
        if not alive or _enough(bound, fields, done, trials):
            break
    return {"claims": outcome, "primes": primes, "trials": done, "fields": _settle(fields), "bound": bound,
            "seconds_per_trial": seconds, "poles_resampled": poles, "primes_refused_for_roots": refused,
            "trials_thrown_away": lost + poles}


def _settle(fields: list[Field]) -> list[Field]:
    """The trials' fields as the run keeps them (``check_modular`` memoises joint runs): with two
    trials or more, each one's digest taken; else the atoms' arguments dropped, as nothing compares them."""
    for F in fields:
        if len(fields) >= 2:
            F.atom_partition
        else:
            F.forget_atom_arguments()
    return fields


def _join_numbers(a, b):
    """The larger of two trials' (deg N, deg D, log2 |N|_1, log2 |D|_1)."""
    if a is None or b is None:
        return a if b is None else b
    return tuple(max(x, y) for x, y in zip(a, b))


def _enough(bound, fields, done: int, trials: int) -> bool:
    """At least ``trials`` trials; then more (up to MODULAR_MAX_TRIALS) while the stated false-pass
    probability is above MODULAR_MAX_FALSE_PASS -- unless one trial's bound is vacuous, when more
    trials would state nothing either."""
    if done < trials:
        return False
    if done >= max(trials, tol.MODULAR_MAX_TRIALS):
        return True
    stated = false_pass_bound(bound, fields, done, max(len(F._roots) for F in fields))
    if stated["total"] < tol.MODULAR_MAX_FALSE_PASS:
        return True
    return stated["vacuous"]


def _bisect(op, dims, point, group, R, lhs, rhs) -> dict:
    """{input: (R_X, lhs_X, rhs_X)} for each input of ``group`` whose own residual is nonzero, given
    the group's (R, lhs, rhs) at this point: R is linear in the tangents, R_group = R_left + R_right."""
    if len(group) == 1:
        return {group[0]: (R, lhs, rhs)}
    half = len(group) // 2
    left, right = group[:half], group[half:]
    Rl, ll, rl, _, F = vjp_residual(op, dims, point, left)
    p = point.p
    Rr, lr, rr = (R - Rl) % p, (lhs - ll) % p, (rhs - rl) % p
    out = {}
    if Rl:
        out.update(_bisect(op, dims, point, left, Rl, ll, rl))
    if Rr:
        out.update(_bisect(op, dims, point, right, Rr, lr, rr))
    return out


def check_law(op: Op, claim: str, dims: dict, params: dict | None = None, *, seed: int = 0,
              trials: int = tol.MODULAR_TRIALS) -> dict:
    params = dict(params or {})
    bnd.forget_products()
    law = op.get_law(claim)
    salt = _salt(op, dims, params, claim)
    needed = _roots_at_small_dims(op, params, lambda d, point: law_residual(op, claim, d, point)[-1],
                                  law.params)
    primes, fields, bound, done, seconds = [], [], None, 0, []
    for point in _points(op, dims, params, salt, seed, trials, law.params, roots=needed):
        start = time.perf_counter()
        try:
            first, lv, rv, b, F = law_residual(op, claim, dims, point)
        except Pole:
            continue
        except NeedAnotherPrime as exc:
            _learn_roots(needed, exc)
            continue
        _learn_roots(needed, F=F)
        seconds.append(time.perf_counter() - start)
        fields.append(F)
        bound = _join_numbers(bound, b)
        primes.append(str(point.p))
        done += 1
        if first is not None:
            return {"claims": {claim: {"status": "nonzero", "witness": {
                "component": f"{claim}{list(first)}", "trial": done, "prime": str(point.p),
                "lhs_mod_p": str(lv), "rhs_mod_p": str(rv), "residual_mod_p": str((lv - rv) % point.p),
                "exact": True, "seed": seed}}},
                "primes": primes, "trials": done, "fields": _settle(fields), "bound": bound,
                "seconds_per_trial": seconds}
        if _enough(bound, fields, done, trials):
            break
    return {"claims": {claim: {"status": "zero"}}, "primes": primes, "trials": done, "fields": _settle(fields),
            "bound": bound, "seconds_per_trial": seconds}


def check_modular(op: Op, claim: str, dims: dict, *, seed: int = 0, trials: int = tol.MODULAR_TRIALS,
                  params: dict | None = None) -> Certificate:
    """The certificate of one claim at production dims (``dims`` may carry structural params, such as
    heads, as ``modular_dims`` entries do). VJP claims share one joint run per (op, dims, seed)."""
    start = time.perf_counter()
    entry = {**dims, **(params or {})}
    dims_only, params = split_dims(op, entry)
    if claim not in modular_claims(op):
        raise SpecError(op.name, f"has no claim {claim!r} the modular test checks; it has {modular_claims(op)}")
    validate(op)                     # spec hygiene by the tracer at the op's smallest dims first
    if claim.startswith("vjp["):
        key = (op.name, op.spec_sha256, id(op.vjp), id(op.forward), tuple(sorted(entry.items())), seed, trials)
        run = _MEMO.get(key)
        if run is None:
            run = _MEMO[key] = check_vjps(op, dims_only, params, seed=seed, trials=trials)
    else:
        run = check_law(op, claim, dims_only, params, seed=seed, trials=trials)
    out = run["claims"][claim]
    sqrt_constants = max((len(F._roots) for F in run["fields"]), default=0)
    bound = false_pass_bound(run["bound"], run["fields"], max(1, run["trials"]), sqrt_constants)
    per_trial = run["seconds_per_trial"]
    evidence = {
        "primes": run["primes"], "prime_range": "[2^59, 2^60)", "trials": run["trials"],
        "joint": claim.startswith("vjp["),
        "residual": ("sum over the inputs X of <backward_X(x, dy), t_X> - <dy, J t>, one random "
                     "tangent t_X per input, J t by dual numbers through the forward"
                     if claim.startswith("vjp[") else "every entry of the law's two sides compared"),
        "degree_bound": _num(bound["degree"]), "coefficient_bits_bound": _num(bound["coefficient_bits"]),
        "atoms": bound["atoms"],
        "false_pass_probability": f"{bound['total']:.3g}",
        "false_pass_per_trial": f"{bound['per_trial']:.3g}",
        "false_pass_covers": "a zero at a random point (Schwartz-Zippel on the residual's numerator), the "
                             "prime dividing its coefficients, two atoms of one kind colliding mod p, the "
                             "atom hash's bias; conditioned on avoiding the poles" + (
                                 "; the trials identified their atoms alike (the same classes, folds and "
                                 "signs), so a collision counts only where the same one recurs in every trial"
                                 if bound["identifications_agreed"] else ""),
        "atom_identifications_agreed": bound["identifications_agreed"],
        "seeded_by": "sha256 of the op, the claims, the dims, the spec and checker hashes, and the seed",
        # not recorded (core.certificate.TIMING_KEYS): a rerun of unchanged code writes the same bytes
        "timings": {"seconds_per_trial": [round(s, 3) for s in per_trial],
                    "seconds_digesting_atoms": round(sum(F.digest_seconds for F in run["fields"]), 3)},
    }
    if run.get("poles_resampled"):
        evidence["poles_resampled"] = run["poles_resampled"]
    relational = sorted(bound["atoms"]) if not claim.startswith("vjp[") else []
    if out["status"] == "nonzero" and relational:
        # A law is often an identity *between* atoms (sin^2 + cos^2 = 1, exp(a - log Z) = exp(a) / Z),
        # which independent atoms do not satisfy: a nonzero here is no disproof.
        verdict, method = "inconclusive", "none"
        evidence["reason"] = (f"the law's sides differ with the atoms {relational} independent; it may rest "
                              f"on a relation between them (the exact tier's relations step decides)")
        evidence["nonzero_at"] = out["witness"]
    elif out["status"] == "nonzero" and bound["atoms"]:
        # With atoms a nonzero is no disproof by itself (symbolic/modular/confirm.py): mpmath at the
        # same dims decides, at 50 and 100 digits; float64 is recorded, never decides
        from vjpcert.symbolic.modular.confirm import confirm_residual
        real = confirm_residual(op, dims_only, params, claim[len("vjp["):-1], seed)
        if real["confirmed"]:
            verdict, method = "failed", METHOD
            evidence["witness"] = {**out["witness"], "real_point": real}
        else:
            verdict, method = "inconclusive", "none"
            mp = real["mpmath"]
            seen = (f"mpmath at {mp['digits']} digits sees a relative residual of only {mp['relative_residual']}"
                    if "digits" in mp else f"mpmath did not finish at these dims ({mp['status']} after "
                                            f"{mp['seconds']} s)")
            evidence["reason"] = (f"the residual is nonzero with the atoms {sorted(bound['atoms'])} independent, "
                                  f"but {seen} (float64: {real['float64']['relative_residual']}): the backward "
                                  f"may rest on an identity between atoms (exp(a + b) = exp(a) exp(b), ...), "
                                  f"which the exact tier's relations step decides, or be wrong by less than the "
                                  f"digits see")
            evidence["nonzero_at"] = out["witness"]
            evidence["real_point"] = real
    elif out["status"] == "nonzero":
        verdict, method = "failed", METHOD          # no atoms: a nonzero rational residual is a disproof
        evidence["witness"] = out["witness"]
    elif run["trials"] == 0:
        verdict, method = "inconclusive", "none"
        evidence["reason"] = "every sampled point hit a pole or a prime without the constant roots"
    elif bound["total"] >= tol.MODULAR_MAX_FALSE_PASS:
        verdict, method = "inconclusive", "none"
        evidence["reason"] = (f"the residual vanished in every trial, but the false-pass bound "
                              f"{bound['total']:.3g} is not below {tol.MODULAR_MAX_FALSE_PASS:g}")
    else:
        verdict, method = "checked-probabilistic", METHOD
        off = _float_disagreement(op, dims_only, params, seed).get(claim[len("vjp["):-1]) \
            if claim.startswith("vjp[") else None
        if off is not None:
            verdict, method = "inconclusive", "none"
            evidence["float64"] = off
            evidence["reason"] = ("the residual vanished mod p, but on float64 arrays at these dims <backward, t> "
                                  f"and <dy, J t> differ by {off['relative_residual'][0]} of their scale, at two "
                                  "steps that agree: the spec's code computes another function on numpy's arrays "
                                  "than on the modular tier's (a test of the arrays' type), so the pass is not of "
                                  "the code that runs")
    rounded = op.rounded_constants(dims_only) if verdict == "failed" else []
    if rounded:
        # a framework graph's constant read as its decimal, where the code means the real it rounds: the
        # residual may be that rounding alone, which only the fixed-dims tier's fit can tell apart
        verdict, method = "inconclusive", "none"
        evidence["nonzero_at"] = evidence.pop("witness")
        evidence["reason"] = (f"the residual is nonzero, but the graph reads the constants {rounded} as their "
                              f"decimals and they are the roundings of reals: it may be their rounding alone "
                              f"(the fixed-dims tier fits it; --constants named reads the reals where it can)")
    from vjpcert.symbolic.fixed.claims import assumptions_of
    assumptions = assumptions_of(op, {}) + [
        "transcendental subterms are atoms keyed by the value of their argument (the exact tier's ring "
        "semantics: exp, sqrt, erf, ... of distinct arguments independent; inverses exact; exact constants "
        "such as sqrt(2), 1/sqrt(2 pi) exact)",
        "B.max_shift is 0 (exact arithmetic); the claim max_shift_free covers the float path"]
    return Certificate.issue(op, claim=claim, tier="symbolic", verdict=verdict, method=method,
                             dims=entry, assumptions=assumptions, evidence=evidence,
                             seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256,
                             options={"method": "modular", "seed": seed, "trials": trials})


def _float_disagreement(op: Op, dims: dict, params: dict, seed: int):
    """``confirm.float_path_disagrees``, once per (op, dims, seed): the VJP claims share it."""
    key = ("float", op.name, op.spec_sha256, id(op.vjp), tuple(sorted({**dims, **params}.items())), seed)
    if key not in _MEMO:
        from vjpcert.symbolic.modular.confirm import float_path_disagrees
        _MEMO[key] = float_path_disagrees(op, dims, params, seed)
    return _MEMO[key]


def _num(x):
    return int(x) if float(x).is_integer() and abs(x) < 2 ** 63 else float(f"{x:.4g}")
