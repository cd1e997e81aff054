"""The ground truth and the interpreter columns of the spec-language matrix (``test_language_matrix``).

Ground truth: numpy itself on object arrays of ``Fraction`` with an exact rational ``B`` (plain
ndarrays: numpy's semantics, views and aliases included), and float64 on plain ndarrays; the two must
agree (else the case itself is wrong). Each interpreter runs the same function through its public
entry points at the same rational point and must give the ground truth -- exactly where it is exact,
within a stated float rounding where it rounds -- or refuse with the case's ``SpecError`` message.
"""
from __future__ import annotations

import random
from fractions import Fraction
from functools import lru_cache

import numpy as np
import sympy as sp

from vjpcert.core.backends import F32, F64, MpmathBackend, ObjectBackend, exact, spec_backend
from vjpcert.core.evaluate import Evaluator, QField
from vjpcert.core.spec_array import spec_code
from vjpcert.core.registry import Op, SpecError, read_only, take_refusals
from vjpcert.core.trace import TRACE, Node, leaf_array
from vjpcert.symbolic.every_size.form import build_statement
from vjpcert.symbolic.every_size.concrete import instantiate
from vjpcert.symbolic.every_size.shape_trace import DerivationRefused, derive as derive_every_size
from vjpcert.symbolic.modular.bound import LEAF

from optional import compiled

# imported at the first test that uses them, not at collection: importing the modular tier compiles its
# Numba loops (tests/optional.py)
mb, mc = compiled("vjpcert.symbolic.modular.backend"), compiled("vjpcert.symbolic.modular.check")

from language_cases import SAME

# float results: |got - want| <= ULPS * eps * (1 + max |want|), the rounding of a few exact steps on
# inputs of size <= ~3; the exact columns compare exactly, mpmath to 45 of its 50 digits.
ULPS = 64
MP_DIGITS, MP_AGREE = 50, 45


class FractionBackend(ObjectBackend):
    """Exact rationals: the ground truth's B (transcendentals are outside every computing case)."""

    name = "fraction"

    def c(self, p, q=1):
        return exact(p, q)

    def zeros(self, shape):
        out = np.empty(shape, dtype=object)
        out.fill(Fraction(0))
        return out

    @staticmethod
    def step(a):
        """[a > 0], 0 on the kink: the sign of each rational, written here apart from the code under test."""
        return np.vectorize(lambda v: Fraction(1) if v > 0 else Fraction(0), otypes=[object])(a)


FRACTION = FractionBackend()


def inputs(shape_pair) -> tuple[np.ndarray, np.ndarray]:
    """x (signed, distinct) and y (positive, >= 1/2: a safe divisor) as Fraction object arrays."""
    out = []
    for k, shape in enumerate(shape_pair):
        a = np.empty(shape, dtype=object)
        for i, idx in enumerate(np.ndindex(*shape)):
            if k == 0:
                a[idx] = Fraction((-1) ** i * (i % 5 + 1), 3 + i % 4)
            else:
                a[idx] = Fraction(i % 6 + 3, 2 + i % 3)
        out.append(a)
    return tuple(out)


class Refused(Exception):
    """An interpreter refused: ``message`` is the SpecError's problem."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _call(run):
    """Run one interpreter as spec code runs (``core.spec_array.spec_code``, what ``Op.bind`` does); a
    SpecError becomes Refused (the record of refusals is cleared)."""
    take_refusals()
    try:
        with spec_code():
            return run()
    except SpecError as exc:
        raise Refused(exc.problem) from None
    finally:
        take_refusals()


# ------------------------------------------------------------------ numpy arrays behind the table
def spec_arrays(*arrays):
    """Inputs as spec code sees them in the object and float backends: read-only ``SpecArray`` views
    (``core.registry.read_only``), held to the language table."""
    return tuple(read_only(a) for a in arrays)


# ------------------------------------------------------------------ the ground truth
def _numpy_read_only(a: np.ndarray) -> np.ndarray:
    """A plain read-only view: the ground truth is numpy itself, not an interpreter."""
    v = a.view(np.ndarray)
    v.flags.writeable = False
    return v


def _exact_int(v):
    """numpy ints (a count, a shape-built constant) as Python ints; other values unchanged."""
    return int(v) if isinstance(v, (np.integer, np.bool_)) and not isinstance(v, bool) else v


@lru_cache(maxsize=None)
def _truth(case, shape_pair) -> np.ndarray:
    x, y = inputs(shape_pair)
    fn = case.truth or case.fn
    out = np.asarray(fn(spec_backend(FRACTION), _numpy_read_only(x), _numpy_read_only(y)), dtype=object)
    return np.vectorize(lambda v: Fraction(_exact_int(v)), otypes=[object])(out) if out.size else out


def truth(case, shape_pair) -> np.ndarray:
    """numpy on exact Fractions: the value every interpreter must give (``case.truth`` where numpy's
    object arrays cannot run the construct itself)."""
    return _truth(case, shape_pair).copy()


def float_truth(case, shape_pair) -> np.ndarray:
    """numpy on float64 running the case's own function (plain read-only ndarrays)."""
    x, y = (a.astype(np.float64) for a in inputs(shape_pair))
    return np.asarray(case.fn(spec_backend(F64), _numpy_read_only(x), _numpy_read_only(y)), dtype=np.float64)


def close(got: np.ndarray, want: np.ndarray, eps: float) -> str | None:
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    w = want.astype(np.float64)
    scale = 1 + (np.abs(w).max() if w.size else 0)
    err = np.abs(got.astype(np.float64) - w)
    bad = np.argwhere(~(err <= ULPS * eps * scale))
    if bad.size:
        idx = tuple(bad[0])
        return f"entry {idx} is {got[idx]!r}, expected {want[idx]} (tolerance {ULPS} eps)"
    return None


def equal(got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    for idx in np.ndindex(*want.shape):
        if got[idx] != want[idx]:
            return f"entry {idx} is {got[idx]}, expected {want[idx]}"
    return None


# ------------------------------------------------------------------ the columns
def run_float(backend, case, shape_pair):
    x, y = inputs(shape_pair)
    args = spec_arrays(x.astype(backend.dtype), y.astype(backend.dtype))
    out = _call(lambda: case.fn(spec_backend(backend), *args))
    got = np.asarray(out)
    if case.refusal is not None:
        return got, None
    if got.dtype != backend.dtype:
        return None, f"the result is {got.dtype}, not {backend.dtype} (a step left {backend.name})"
    return got, close(got, truth(case, shape_pair), np.finfo(backend.dtype).eps)


def run_mpmath(case, shape_pair):
    B = MpmathBackend(MP_DIGITS)
    x, y = inputs(shape_pair)
    args = spec_arrays(B.convert(x), B.convert(y))
    with B.strict():
        out = _call(lambda: case.fn(spec_backend(B), *args))
    got = np.asarray(out, dtype=object)
    if case.refusal is not None:
        return got, None
    want = truth(case, shape_pair)
    if got.shape != want.shape:
        return got, f"shape {got.shape}, expected {want.shape}"
    for idx in np.ndindex(*want.shape):
        w, g = B.convert(np.array(want[idx], dtype=object))[()], _exact_int(got[idx])
        if not isinstance(g, (B.ctx.mpf, int, Fraction)):
            return got, f"entry {idx} is a {type(g).__name__} ({g!r}), not an mpmath number"
        if abs(B.ctx.mpf(g) - w) > B.ctx.mpf(10) ** -MP_AGREE * max(1, abs(w)):
            return got, f"entry {idx} is {g}, expected {want[idx]} (to {MP_AGREE} digits)"
    return got, None


def run_trace(case, shape_pair):
    """The tracer (TRACE backend, leaf_array inputs), evaluated in exact rationals (QField)."""
    x, y = inputs(shape_pair)
    lx, ly = leaf_array(x.shape, "x", "input"), leaf_array(y.shape, "y", "input")
    values = {}
    for leaves, vals in ((lx, x), (ly, y)):
        for idx in np.ndindex(*vals.shape):
            values[leaves[idx].value] = vals[idx]
    args = spec_arrays(lx, ly)
    out = _call(lambda: case.fn(spec_backend(TRACE), *args))
    ev = Evaluator(QField(values))
    if case.refusal is not None:
        return out, None
    arr = np.vectorize(_exact_int, otypes=[object])(np.asarray(out, dtype=object))
    if not all(isinstance(v, (Node, int, Fraction)) and not isinstance(v, bool) for v in arr.ravel()):
        bad = next(v for v in arr.ravel() if not isinstance(v, (Node, int, Fraction)) or isinstance(v, bool))
        return None, f"an entry is a {type(bad).__name__} ({bad!r}), not a traced value"
    got = ev.array(arr)
    return got, equal(got, truth(case, shape_pair))


@lru_cache(maxsize=None)
def modular_field():
    rng = random.Random(20240611)
    p = mc.draw_prime(rng)
    return p, {k: (rng.getrandbits(64), rng.getrandbits(64)) for k in mc.KINDS}, rng.randrange(1, p)


def run_modular(case, shape_pair):
    """ModArray mod one prime: the rational inputs lifted to residues, the result compared with the
    ground truth's Fractions mod p."""
    p, keys, sqrt_pi = modular_field()
    F = mb.Field(p, keys, sqrt_pi)
    x, y = inputs(shape_pair)
    args = []
    for name, a in (("x", x), ("y", y)):
        res = np.array([F.residue(v) for v in a.ravel()], dtype=np.int64).reshape(a.shape)
        m = mb.ModArray(F, res, None, LEAF, None)
        m.sid = mb.derive("leaf", name)
        args.append(m)
    out = _call(lambda: case.fn(spec_backend(mb.ModularBackend(F)), *args))
    if case.refusal is not None:
        return out, None
    if not isinstance(out, mb.ModArray):
        if isinstance(out, np.ndarray) and out.dtype == object:
            return None, "the result is an object array, not a ModArray"
        out = _call(lambda: mb.lift(F, out))
    want = truth(case, shape_pair)
    got = np.asarray(out.v, dtype=np.int64) % p
    expected = np.array([F.residue(v) for v in want.ravel()], dtype=np.int64).reshape(want.shape)
    return got, equal(got, expected)


def run_every_size(case, shape_pair, symbolic: bool = False):
    """The every-size tier through its public path: the function as a law of an op, ``derive`` (the
    shape-polymorphic trace), ``build_statement`` and ``instantiate`` at the rational point. With
    ``symbolic``, as it proves an op: each axis longer than 1 is a dim (one per distinct length, so
    equal lengths stay equal and a broadcast axis of 1 stays 1), the statement derived once for every
    size and written out at these lengths -- where sizes are symbols (np.ones of a dim, a pad of a
    mask, a slice cut at n - 1), which constant shapes never meet."""
    from vjpcert.symbolic.every_size.concrete import _dim_values
    want = truth(case, shape_pair) if case.refusal is None else None
    lengths = sorted({n for shape in shape_pair for n in shape if n > 1}) if symbolic else []
    name = {n: "abcdefgh"[k] for k, n in enumerate(lengths)}
    shapes = {k: tuple(name.get(n, n) for n in shape) for k, shape in zip(("x", "y"), shape_pair)}
    sizes = {name[n]: n for n in lengths}
    fn = case.fn

    def forward(B, x, y):
        return fn(B, x, y)
    op = Op(forward, name="language_case", inputs=shapes, output=(1,) if want is None else want.shape,
            nondiff=None, params=None, dims=[sizes], large_dims=None, check_dims=None, assumptions=(),
            constraints=None)

    def value(B, x, y):
        return fn(B, x, y)
    op.law(value, name="value")
    take_refusals()
    try:
        stmt = build_statement(op, "value", derive_every_size(op, "value"))
    except DerivationRefused as exc:
        # the reason is "[spec file:line: ]law value: <the refusal>": the refusal is what is compared
        reason = str(exc.args[0]) if exc.args else str(exc)
        raise Refused(reason.split("law value: ", 1)[-1]) from None
    except SpecError as exc:
        raise Refused(exc.problem) from None
    finally:
        take_refusals()
    if want is None:
        return stmt, None
    x, y = inputs(shape_pair)
    rational = np.vectorize(lambda q: sp.Rational(q.numerator, q.denominator), otypes=[object])
    got = instantiate(stmt.law, want.shape, _dim_values(stmt.G, sizes) if sizes else {},
                      {"x": rational(x), "y": rational(y)})
    out = np.empty(got.shape, dtype=object)
    for idx in np.ndindex(*got.shape):
        v = sp.nsimplify(got[idx]) if not sp.sympify(got[idx]).is_Rational else sp.sympify(got[idx])
        if not v.is_Rational:
            return got, f"entry {idx} is {got[idx]}, not a rational number"
        out[idx] = Fraction(int(v.p), int(v.q))
    return out, equal(out, want)


INTERPRETERS = {
    "trace": run_trace,
    "mpmath": run_mpmath,
    "float64": lambda c, s: run_float(F64, c, s),
    "float32": lambda c, s: run_float(F32, c, s),
    "modular": run_modular,
    "every_size": run_every_size,
    "every_size_symbolic": lambda c, s: run_every_size(c, s, symbolic=True),
}


# ------------------------------------------------------------------ one cell
def sanity(case, shape_pair) -> str | None:
    """The case itself: numpy on Fractions and float64 agree (computing cases only)."""
    try:
        want = truth(case, shape_pair)
        got = float_truth(case, shape_pair)
    except Exception as exc:     # the case is not valid numpy: its own bug, not an interpreter's
        return f"numpy itself cannot run the case: {type(exc).__name__}: {exc}"
    return close(got, want, np.finfo(np.float64).eps)


def check_cell(case, shape_pair, interpreter: str, runner=None) -> str | None:
    """None when the interpreter follows numpy on this case (or refuses it with the case's message),
    else the reason the cell is red."""
    runner = runner or INTERPRETERS[interpreter]
    where = f"{case.id} x {interpreter} at {shape_pair}"
    if case.refusal is None:
        bad = sanity(case, shape_pair)
        if bad is not None:
            return f"{where}: the case is wrong: {bad}"
    try:
        _, bad = runner(case, shape_pair)
    except Refused as exc:
        if case.refusal is None:
            return f"{where}: refused a construct numpy computes: {exc.message}"
        if case.refusal != SAME and exc.message != case.refusal:
            return f"{where}: refused with another message: {exc.message!r}, expected {case.refusal!r}"
        return None
    except Exception as exc:       # any other exception: the interpreter neither computes nor refuses
        return f"{where}: raised {type(exc).__name__}: {str(exc)[:300]}"
    if case.refusal is not None:
        return f"{where}: computed a construct every interpreter must refuse ({case.refusal[:80]})"
    return None if bad is None else f"{where}: {bad}"


def refusal_message(case, shape_pair, interpreter: str) -> str | None:
    """The message an interpreter refuses the case with (None: it did not refuse)."""
    try:
        INTERPRETERS[interpreter](case, shape_pair)
    except Refused as exc:
        return exc.message
    except Exception:
        return None
    return None
