"""The traced function is the spec's function: every traced call of a claim, run again at a random
point in mpmath and on the float path, must compute what its trace computes there.

The tracer records the function spec code computes on object arrays of nodes. Spec code can read how
its arrays are represented (``x.dtype``, ``type(x[0, 0])``, ``repr(x)``, iterating over entries) and
compute another function in floats or in mpmath, where users run it: a proof of the trace would then
be a proof of a function nobody runs. No construct-by-construct refusal can close that (``type`` of
an entry is not an operation the language sees), so a claim's trace is held to the other
interpreters, as a whole, at one random point of its leaves (``replayed``):

  * mpmath (object arrays of mpf, ``MpmathBackend.strict``) at ``DPS`` digits against the trace
    evaluated at the same digits. A difference above ``SCREEN`` of the scale (the call's outputs, at
    least the point's largest value: a law's residual is 0 in the reals) is confirmed at
    ``CONFIRM_DPS`` digits: two evaluations of one function in different orders differ by a rounding
    residue that shrinks with the precision (an ill-conditioned one may pass the screen at ``DPS``
    and not at ``CONFIRM_DPS``); two functions differ by what does not. Refused when the difference
    is above the screen at both.
  * the float64 and float32 paths (numeric arrays: ``FloatBackend(dtype, shift=False)``, whose
    ``max_shift`` is 0 as in the trace) with the running-error run beside them
    (``RoundingBackend``): each held to the trace by ``core.rounding.FloatPathErrors``, the rule of
    the numeric tier's `reference` claim.

The point (``_point``): inputs from the op's samplers or standard normals, a cotangent standard
normal, a symbolic parameter its default, a shift 0; from the second point on, leaves no sampler
draws are positive (a running variance passed as an input). A point where the trace leaves the reals
or is not finite decides nothing (an entry whose float bound is infinite is left out; an output whose
every bound is, decides nothing). Up to ``POINTS`` points are drawn from fresh entropy (named in
every message), so spec code cannot know them in advance. Each interpreter must agree with the trace
at a point, or be refused at every point (a construct it does not take: it computes no number); one
that disagrees, or runs at one point and is refused at another, refuses the claim, and so does a
claim no point decides (``SpecError``): never proved unreplayed.

What it cannot see: a difference below ``SCREEN`` relative in mpmath, or inside the float path's own
rounding bound -- a float function within its rounding of the proved one; and float32, where its
running bound is infinite at every point drawn while float64 agrees (a deep composite whose float32
path overflows at random points decides nothing there).
"""
from __future__ import annotations

import contextlib
from fractions import Fraction

import numpy as np

from vjpcert.core.backends import FloatBackend, MpmathBackend
from vjpcert.core.errors import SpecError
from vjpcert.core.evaluate import Evaluator, MpField, NotRational, QField, SignUndecided
from vjpcert.core.rounding import FloatPathErrors, RoundingBackend, order_factor, values_and_bounds
from vjpcert.core.tolerance import unit_roundoff
from vjpcert.core.trace import Node
from vjpcert.core.tracing import recording, run_spec_code

DPS = 40
CONFIRM_DPS = 100
SCREEN = 1e-30          # a relative difference below this is a rounding residue: one above it at DPS
                        # digits is confirmed at CONFIRM_DPS, where a residue shrinks by 1e-60
POINTS = 3
DTYPES = (np.float64, np.float32)


class _Undecided(Exception):
    """This point decides nothing (the trace leaves the reals, a sign is undecided, a bound is inf)."""


class _Call:
    """One traced call: the spec function, the values it was bound to (leaves, constants, Python
    values) and what the tracer returned."""

    __slots__ = ("fn", "role", "values", "out")

    def __init__(self, fn, role, values, out):
        self.fn, self.role, self.values, self.out = fn, role, values, out


@contextlib.contextmanager
def replayed(op, claim: str, dims: dict):
    """Record every call ``core.tracing`` traces inside, then replay them all (see the module)."""
    with recording() as calls:
        yield
    if calls:
        replay(op, claim, dims, [_Call(*c) for c in calls])


# ---------------------------------------------------------------------------------------------- structure
def _flat(out) -> list[np.ndarray]:
    """What a spec function returned, as a list of object arrays (a tuple of cotangents, a law's
    pair, a nested tuple): the structure every interpreter must give back."""
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flat(o)]
    return [np.asarray(out, dtype=object)]


def _leaf_arrays(call):
    """name -> the call's argument, for each argument that is an array of leaves."""
    return {name: v for name, v in call.values.items() if isinstance(v, np.ndarray) and v.dtype == object
            and v.size and all(isinstance(n, Node) and n.op == "leaf" for n in v.ravel())}


def _point(op, calls, rng, positive: bool = False) -> dict:
    """Leaf -> Fraction for every leaf the calls were bound to: an array of leaves drawn at once (by
    the op's sampler for its name, else standard normals; |z| + 1/2 where a leaf is positive, or
    everywhere with ``positive`` but where a sampler drew), rounded to float32 so every interpreter
    reads the same reals; a symbolic parameter its default."""
    leaves = {}
    for call in calls:
        for name, v in _leaf_arrays(call).items():
            if v.ravel()[0].value in leaves:
                continue
            drawn = op.sample[name](rng, v.shape) if name in op.sample else rng.standard_normal(v.shape)
            a = np.asarray(drawn, dtype=np.float64).astype(np.float32).astype(np.float64)
            for idx in np.ndindex(*v.shape):
                leaf = v[idx].value
                if leaf.positive or (positive and name not in op.sample):
                    a[idx] = float(np.float32(abs(a[idx]) + 0.5))
                leaves[leaf] = Fraction(float(a[idx]))
        for v in call.values.values():
            if isinstance(v, Node) and v.op == "leaf":
                leaves[v.value] = Fraction(op.params[v.value.owner].default)
    return leaves


class _Leaves(dict):
    """Leaf values for the trace's evaluation: a shift leaf (``max_shift_free``'s) is 0."""

    def __missing__(self, leaf):
        if leaf.role == "shift":
            return Fraction(0)
        raise KeyError(leaf)


def _bound_values(call, leaves: dict, B, convert) -> dict:
    """The call's arguments at the point, for backend B (``convert`` takes a float64 array)."""
    arrays = _leaf_arrays(call)
    out = {}
    for name, v in call.values.items():
        if name in arrays:
            out[name] = convert(np.vectorize(lambda n: float(leaves[n.value]), otypes=[np.float64])(v))
        elif isinstance(v, Node) and v.op == "leaf":
            out[name] = B.c(leaves[v.value])
        elif isinstance(v, Node) and v.op == "const":
            out[name] = B.c(v.value)
        elif isinstance(v, np.ndarray) and v.dtype == object and v.size:
            raise SpecError(None, f"{call.role}: its argument {name!r} mixes leaves and values, which "
                                  f"cannot be replayed")
        else:
            out[name] = v
    return out


# ---------------------------------------------------------------------------------------------- the runs
class _Refused(Exception):
    """The interpreter refused to run the spec (a construct it does not take): it computes no number,
    so none of its numbers can be wrong."""


def _run(op, call, B, values, where: str):
    try:
        got = run_spec_code(op, f"{call.role} (run again {where})", lambda: op.bind(call.fn, B, values),
                            passthrough=(ArithmeticError,))
    except SpecError as exc:
        raise _Refused(exc.problem) from None
    flat = _flat(got)
    want = [a.shape for a in _flat(call.out)]
    if [a.shape for a in flat] != want:
        raise SpecError(op.name, f"{call.role}: returns shapes {[a.shape for a in flat]} {where}, but "
                                 f"{want} where traced: the spec reads how its arrays are represented")
    return flat


def _truth(calls, leaves: dict, dps: int) -> list[list[np.ndarray]]:
    """Each call's traced outputs at the point, as mpf arrays; _Undecided off the reals. Where a
    step's sign is undecided at ``dps`` digits (its argument is 0 in the reals, as in a tie of a
    value with itself), the trace is evaluated in exact rationals instead, where step(0) is the
    convention every interpreter computes."""
    field = MpField(dps, _Leaves(leaves))
    try:
        return _evaluated(calls, Evaluator(field), field.ctx, lambda x: x)
    except SignUndecided:
        try:
            return _evaluated(calls, Evaluator(QField(_Leaves(leaves))), field.ctx, field.const)
        except NotRational as exc:
            raise _Undecided(f"a step's sign is undecided there, and the trace leaves the rationals ({exc})") from None


def _evaluated(calls, E, ctx, as_mp) -> list[list[np.ndarray]]:
    out = []
    for call in calls:
        arrays = []
        for a in _flat(call.out):
            v = np.empty(a.shape, dtype=object)
            for idx in np.ndindex(*a.shape):
                x = as_mp(E(a[idx]))
                if not isinstance(x, ctx.mpf) or not ctx.isfinite(x):
                    raise _Undecided(f"{call.role} is {x} there")
                v[idx] = x
            arrays.append(v)
        out.append(arrays)
    return out


def _mp_difference(ctx, got: list, truth: list) -> tuple:
    """(max |got - truth|, max |truth|) over every entry of one call."""
    err, scale = ctx.mpf(0), ctx.mpf(0)
    for g, t in zip(got, truth):
        for a, b in zip(g.ravel(), t.ravel()):
            a = ctx.mpf(a) if not isinstance(a, Fraction) else ctx.mpf(a.numerator) / a.denominator
            err, scale = max(err, abs(a - b)), max(scale, abs(b))
    return err, scale


def _mpmath(op, calls, point, dps: int, truth=None) -> list:
    """Per call: (max difference, scale) of the mpmath run against the trace, at ``dps`` digits."""
    truth = truth or _truth(calls, point, dps)
    B = MpmathBackend(dps)
    out = []
    for call, t in zip(calls, truth):
        with B.strict():
            got = _run(op, call, B, _bound_values(call, point, B, B.convert), "in mpmath")
        out.append(_mp_difference(B.ctx, got, t))
    return out


def _check_mpmath(op, claim, calls, point, truth) -> None:
    # the scale of a difference: the call's outputs, and never below the point's own values (a law's
    # residual is 0 in the reals and a residue of the working precision in both evaluations)
    floor = float(max((abs(v) for v in point.values()), default=0))

    def differs(err, scale) -> bool:
        return err > SCREEN * max(scale, floor)
    first = _mpmath(op, calls, point, DPS, truth)
    if not any(differs(*d) for d in first):
        return
    confirm = _mpmath(op, calls, point, CONFIRM_DPS)
    for call, d, (err2, scale2) in zip(calls, first, confirm):
        if differs(*d) and differs(err2, scale2):
            raise SpecError(op.name, f"{claim}: {call.role} computes another function in mpmath than "
                                     f"where traced (they differ by {float(err2):.3g}, at most "
                                     f"{float(scale2):.3g} in size, at {CONFIRM_DPS} digits as at {DPS}): "
                                     f"the spec reads how its arrays are represented, so the trace "
                                     f"that would be proved is not the function it computes")


def _check_float(op, claim, calls, point, truth, dims: dict, dtype) -> None:
    K = order_factor(max([int(v) for v in dims.values()] + [1]))
    name, u = np.dtype(dtype).name, unit_roundoff(dtype)
    F, R = FloatBackend(dtype, shift=False), RoundingBackend(dtype, shift=False)
    for call, t in zip(calls, truth):
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            got = _run(op, call, F, _bound_values(call, point, F, lambda a: a.astype(dtype)), f"in {name}")
            seq = _run(op, call, R, _bound_values(call, point, R, lambda a: R.input(a.astype(dtype))),
                       f"in {name} with running error bounds")
        for g, truth_a, s in zip(got, t, seq):
            g = np.asarray(g)
            if g.dtype == object:          # an entry the float path never rounded (a Fraction)
                g = g.astype(np.float64)
            v_seq, e_seq = values_and_bounds(s)
            # an entry whose running bound is infinite (an overflow, a RoPE angle of 4000 in
            # float32) decides nothing; the others are held to the rule
            decided = np.isfinite(e_seq)
            if g.size and not decided.any():
                raise _Undecided(f"every {name} bound of {call.role} is infinite there")
            rule = FloatPathErrors(g[decided], truth_a[decided], v_seq[decided], e_seq[decided], u, K)
            if not (rule.seq_ok and rule.float_ok):
                k = rule.worst_sequential() if not rule.seq_ok else rule.worst_float()
                idx = tuple(int(i) for i in np.argwhere(decided)[k[0]])
                which = v_seq if not rule.seq_ok else g
                raise SpecError(op.name, f"{claim}: {call.role} computes another function in {name} "
                                         f"than where traced: entry {list(idx)} is "
                                         f"{float(np.asarray(which, dtype=np.float64)[idx]):.17g} there, "
                                         f"{float(truth_a[idx]):.17g} traced, beyond its rounding bound "
                                         f"{rule.bound:.3g}: the spec reads how its arrays are represented, "
                                         f"so the trace that would be proved is not the function it computes")


INTERPRETERS = {
    "mpmath": lambda op, claim, calls, point, truth, dims: _check_mpmath(op, claim, calls, point, truth),
    **{np.dtype(d).name: (lambda op, claim, calls, point, truth, dims, d=d:
                          _check_float(op, claim, calls, point, truth, dims, d)) for d in DTYPES},
}


def replay(op, claim: str, dims: dict, calls: list, entropy: int | None = None) -> None:
    """Raise SpecError unless every call computes its trace in mpmath and on the float paths: each
    interpreter must agree with the trace at a point, or refuse the spec at every point tried (it
    then computes nothing); none may disagree, nor refuse at one point and run at another. The
    points are fresh random numbers (``entropy``, named in every message), so spec code cannot know
    them in advance."""
    entropy = np.random.SeedSequence().entropy if entropy is None else entropy
    agreed, refused, notes = set(), {}, []

    def refuse(problem: str):
        return SpecError(op.name, f"{claim}: {problem} (replay entropy {entropy})")
    for attempt in range(POINTS):
        point = _point(op, calls, np.random.default_rng([entropy, attempt]), positive=attempt > 0)
        try:
            truth = _truth(calls, point, DPS)
        except (_Undecided, ArithmeticError) as exc:
            notes.append(f"{type(exc).__name__}: {exc}")
            continue
        for name, check in INTERPRETERS.items():
            if name in agreed:
                continue
            try:
                check(op, claim, calls, point, truth, dims)
                agreed.add(name)
            except _Refused as exc:
                refused[name] = str(exc)
            except (_Undecided, ArithmeticError) as exc:
                notes.append(f"{name}: {type(exc).__name__}: {exc}")
            except SpecError as exc:
                raise refuse(exc.problem.split(": ", 1)[1] if exc.problem.startswith(claim + ": ")
                             else exc.problem) from None
            if name in agreed and name in refused:
                raise refuse(f"the spec runs in {name} at one random point and is refused at another "
                             f"({refused[name]}): what it computes there depends on more than its values")
        if agreed == set(INTERPRETERS):
            return
    undecided = [n for n in INTERPRETERS if n not in agreed and n not in refused]
    if undecided == ["float32"] and "float64" in agreed:
        return      # float32's running bound is infinite at every point drawn (an overflow in a deep
                    # composite, a RoPE angle of 4000): it decides nothing there, float64 has
    if undecided:
        raise refuse(f"no random point decides whether {', '.join(undecided)} computes the traced "
                     f"function ({'; '.join(notes[:3])}), so it is not proved")
