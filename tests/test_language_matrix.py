"""The spec language, construct x interpreter: every row of ``core.language.PRIMITIVES`` run by every
interpreter of spec code, held to numpy on exact rationals (``language_interpreters``).

The parametrisation is derived from the table: a row without a computing case is a red test, so a new
primitive cannot enter the language untested. Each cell is green when the interpreter gives numpy's
value at the rational point (exactly in the exact columns, within a stated rounding in floats), or --
for a construct outside the language -- when it refuses with the case's ``SpecError`` message; one
interpreter refusing where another computes is red. The default run is two small shape pairs per
case; ``--slow`` adds bigger ones. The negative controls at the end prove that the matrix can go red.
"""
from __future__ import annotations

import numpy as np
import pytest

from language_cases import CASES, SAME, SQUARE, Case, by_primitive, keyword_refusal, unknown_rows
from language_interpreters import (FRACTION, INTERPRETERS, Refused, check_cell, equal, inputs, modular_field,
                                   refusal_message, sanity, truth)
from vjpcert.core import language as L
from vjpcert.core.backends import KINK_FAMILY, spec_backend
from vjpcert.core.matrix_functions import DEFINITIONS, unit_lower_inverse

from optional import compiled

# imported at the first test that uses them, not at collection: importing the modular tier compiles its
# Numba loops (tests/optional.py)
modular = compiled("vjpcert.symbolic.modular.backend")
from vjpcert.symbolic.modular.bound import LEAF


# Cells an interpreter does not follow yet, each a strict xfail (it turns red when fixed): a decline
# there is a refusal (the claim inconclusive), never another value. The modular tier's arrays raise a
# value that is not a constant (a decay param) to an array of int powers only with a change to
# symbolic/modular/array.py, which stales every modular certificate: it waits for the next full
# regeneration of them.
KNOWN_GAPS: dict = {}


def _cells(primitives=None):
    out = []
    for prim, cases in by_primitive(primitives).items():
        if not cases:
            out.append(pytest.param(prim, None, None, None, id=f"{prim}-no-case"))
            continue
        for case in cases:
            for slow, shapes in ((False, case.shapes), (True, case.slow_shapes)):
                for k, shape_pair in enumerate(shapes):
                    for interp in INTERPRETERS:
                        # the symbolic-size column derives a statement per cell: its first shape by default
                        later = slow or (interp == "every_size_symbolic" and k > 0)
                        gap = KNOWN_GAPS.get((case.id, interp))
                        marks = ([pytest.mark.slow] if later else []) + \
                            ([pytest.mark.xfail(reason=gap, strict=True)] if gap else [])
                        out.append(pytest.param(prim, case, shape_pair, interp,
                                                id=f"{case.id}-{'slow' if slow else 's'}{k}-{interp}", marks=marks))
    return out


def _refusal_cells():
    return [pytest.param(case, interp, id=f"{case.id}-{interp}")
            for case in CASES if case.refusal is not None for interp in INTERPRETERS]


@pytest.mark.parametrize("prim, case, shape_pair, interpreter", _cells())
def test_cell(prim, case, shape_pair, interpreter):
    if case is None:
        pytest.fail(f"primitive {prim!r} of core.language.PRIMITIVES has no case in tests/language_cases.py")
    reason = check_cell(case, shape_pair, interpreter)
    if reason is not None and _a_decline_allowed(interpreter, reason):
        pytest.xfail(reason)
    assert reason is None, reason


def _a_decline_allowed(interpreter: str, reason: str) -> bool:
    """The every-size tier may decline (its claim is then inconclusive, never proved) what no one
    statement says where sizes are symbols; with every size a constant it follows every row, except a
    transpose or reshape read after its base was written (numpy decides view or copy by layout). It
    may never compute a value numpy does not."""
    if interpreter == "every_size_symbolic":
        return any(k in reason for k in ("refused a construct numpy computes", "raised NormalFormError"))
    return interpreter == "every_size" and "refused a construct numpy computes" in reason \
        and "through a view" in reason


@pytest.mark.parametrize("case, interpreter", _refusal_cells())
def test_refused(case, interpreter):
    reason = check_cell(case, case.shapes[0], interpreter)
    assert reason is None, reason


@pytest.mark.parametrize("case", [c for c in CASES if c.refusal == SAME], ids=lambda c: c.id)
def test_refused_alike(case):
    """A construct the language names no message for: every interpreter refuses it, with one message."""
    messages = {name: refusal_message(case, case.shapes[0], name) for name in INTERPRETERS}
    assert None not in messages.values() and len(set(messages.values())) == 1, \
        f"{case.id}: refusals differ across interpreters: {messages}"


# ------------------------------------------------------------------ the cases themselves
def test_every_case_names_a_row():
    assert unknown_rows() == [], f"cases name primitives the table does not have: {unknown_rows()}"


@pytest.mark.parametrize("case", [c for c in CASES if c.refusal is None], ids=lambda c: c.id)
def test_case_is_numpy(case):
    """Ground-truth sanity: numpy on Fractions and on float64 agree at every shape of the case."""
    for shape_pair in (*case.shapes, *case.slow_shapes):
        bad = sanity(case, shape_pair)
        assert bad is None, f"{case.id} at {shape_pair}: {bad}"


def test_keyword_refusals_come_from_the_table():
    """The refusal cases expect check_call's own text: a keyword added to a row changes them."""
    assert "dtype" not in L.PRIMITIVES["sum"].keywords
    assert keyword_refusal("pad", mode="reflect").startswith("np.pad(..., mode='reflect')")
    with pytest.raises(AssertionError):
        keyword_refusal("pad", mode="constant")


# ------------------------------------------------------------------ negative controls
def _case(prim, name):
    return next(c for c in CASES if c.prim == prim and c.name == name)


def test_control_a_row_without_a_case_is_red():
    rows = {**L.PRIMITIVES, "hypot_new_row": L.Primitive("hypot_new_row", "arithmetic")}
    params = [p for p in _cells(rows) if p.id == "hypot_new_row-no-case"]
    assert len(params) == 1
    with pytest.raises(pytest.fail.Exception, match="'hypot_new_row' .* has no case"):
        test_cell(*params[0].values)


def test_control_modular_reshape_ignoring_order_F_is_red(monkeypatch):
    case = _case("reshape", "order_F_method")
    shape_pair = case.shapes[0]
    original = modular.ModArray.reshape

    def reshape_ignoring_order(self, *shape, **kw):
        kw.pop("order", None)
        return original(self, *shape, **kw)
    monkeypatch.setattr(modular.ModArray, "reshape", reshape_ignoring_order)
    reason = check_cell(case, shape_pair, "modular")
    assert reason is not None and "reshape:order_F_method x modular" in reason, reason


def test_control_perturbed_expected_value_is_red():
    case = _case("add", "op")
    shape_pair = case.shapes[0]
    good = truth(case, shape_pair)
    wrong = good.copy()
    wrong[0, 0] += 1

    def runner(c, s):
        x, y = inputs(s)
        got = np.asarray(c.fn(spec_backend(FRACTION), x, y), dtype=object)
        return got, equal(got, wrong)
    reason = check_cell(case, shape_pair, "perturbed", runner)
    assert reason is not None and "entry (0, 0)" in reason, reason
    assert check_cell(case, shape_pair, "fraction", lambda c, s: (None, None)) is None


def test_control_computing_a_refused_construct_is_red():
    case = _case("pad", "reflect")

    def plain_numpy(c, s):
        x, y = inputs(s)
        return c.fn(spec_backend(FRACTION), x, y), None
    reason = check_cell(case, case.shapes[0], "plain numpy", plain_numpy)
    assert reason is not None and "computed a construct every interpreter must refuse" in reason


def test_control_refusing_a_computing_construct_is_red():
    case = _case("sum", "axis0")

    def refuses(c, s):
        raise Refused(L.COMPARISON)
    reason = check_cell(case, case.shapes[0], "refuser", refuses)
    assert reason is not None and "refused a construct numpy computes" in reason


def test_control_another_refusal_message_is_red():
    case = _case("sum", "dtype")

    def refuses_otherwise(c, s):
        raise Refused("something else")
    reason = check_cell(case, case.shapes[0], "other", refuses_otherwise)
    assert reason is not None and "refused with another message" in reason


# ------------------------------------------------------------------ the kink: B.step and what is made of it
KINK_CASES = [
    Case("B.step", "of_an_input", lambda B, x, y: B.step(x) * y),
    Case("B.step", "of_a_combination", lambda B, x, y: B.step(x - y / 2) + x),
    Case("B.step", "on_the_kink", lambda B, x, y: B.step(x - x) + y),          # step(0): the convention, 0
    Case("B.relu", "of_a_combination", lambda B, x, y: B.relu(x - y / 3) * y),
]
KINK_VALUE_COLUMNS = ("trace", "mpmath", "float64", "float32", "every_size")


def test_every_function_of_the_kink_has_a_case():
    assert {c.prim for c in KINK_CASES} == {f"B.{L.KINK}", *(f"B.{k}" for k in KINK_FAMILY)}


@pytest.mark.parametrize("interpreter", KINK_VALUE_COLUMNS)
@pytest.mark.parametrize("case", KINK_CASES, ids=lambda c: c.id)
def test_a_kink_is_numpy_s_value_where_an_interpreter_evaluates_at_the_point(case, interpreter):
    """The exact rationals (the tracer's DAG in QField), mpmath and floats take the sign at the point;
    the every-size statement, a Step atom per entry, takes it when instantiated at the point."""
    for shape_pair in case.shapes:
        reason = check_cell(case, shape_pair, interpreter)
        assert reason is None, reason


def _modular(case, shape_pair):
    p, keys, sqrt_pi = modular_field()
    F = modular.Field(p, keys, sqrt_pi)
    args = []
    for name, a in zip(("x", "y"), inputs(shape_pair)):
        m = modular.ModArray(F, np.array([F.residue(v) for v in a.ravel()], dtype=np.int64).reshape(a.shape), None, LEAF, None)
        m.sid = modular.derive("leaf", name)
        args.append(m)
    return F, spec_backend(modular.ModularBackend(F)), args


def test_mod_p_a_kink_is_a_free_boolean_of_its_region_and_the_convention_on_it():
    """Mod p a step is no sign: a keyed residue S(a), free like the ring's Boolean atom, so an identity
    that holds mod p holds on every region. What the tiers share: S(-a) = 1 - S(a), relu(a) = a S(a),
    and on the kink (an argument exactly 0) the convention."""
    shape_pair = SQUARE[1]
    F, B, (x, y) = _modular(KINK_CASES[0], shape_pair)
    p = F.p
    s, s_neg = B.step(x - y / 2), B.step(y / 2 - x)
    assert np.all((np.asarray(s.v) + np.asarray(s_neg.v)) % p == 1)
    assert np.all((np.asarray(B.relu(x).v) - np.asarray((x * B.step(x)).v)) % p == 0)
    assert not np.all(np.isin(np.asarray(s.v) % p, (0, 1)))           # free, not the sign
    assert np.all(np.asarray(B.step(x - x).v) % p == 0)
    reason = check_cell(KINK_CASES[2], shape_pair, "modular")            # on the kink: numpy's value
    assert reason is None, reason


def test_a_float_kink_with_another_convention_is_a_red_cell(monkeypatch):
    """The control: float64 taking step(0) = 1 (numpy's heaviside(a, 1)) differs on the kink."""
    from vjpcert.core.backends import F64
    monkeypatch.setattr(F64, "step", F64._checked(lambda a: np.heaviside(a, 1.0)))
    assert check_cell(KINK_CASES[2], KINK_CASES[2].shapes[0], "float64") is not None
    assert check_cell(KINK_CASES[0], KINK_CASES[0].shapes[0], "float64") is None   # off the kink: the same


# ------------------------------------------------------------------ the language's matrix functions
# Each is defined once in the language (core.matrix_functions): the columns that run spec code run that
# definition; the every-size columns read it as atoms, written out at the point by their own forward
# substitution, and must give the definition's value (tests/test_matrix_functions.py holds the
# definition to the inverse).
MATRIX_CASES = [
    Case("unit_lower_inverse", "of_a_product", lambda B, x, y: unit_lower_inverse(B, x.T @ y)),
    Case("unit_lower_inverse", "of_a_stack_times_an_input",
         lambda B, x, y: unit_lower_inverse(B, np.stack([x.T @ y, y.T @ x])) @ y.T),
]


def test_every_matrix_function_has_a_case():
    assert {c.prim for c in MATRIX_CASES} == set(DEFINITIONS)


@pytest.mark.parametrize("interpreter", list(INTERPRETERS))
@pytest.mark.parametrize("case", MATRIX_CASES, ids=lambda c: c.id)
def test_a_matrix_function_is_its_definition_in_every_interpreter(case, interpreter):
    for shape_pair in case.shapes[:1] if interpreter == "every_size_symbolic" else case.shapes:
        reason = check_cell(case, shape_pair, interpreter)
        assert reason is None, reason
