"""The one derivative table (core.derivatives): every row against sympy.diff, every primitive the
spec language offers has a row, and a wrong row is caught -- by the comparison, by the proof of a
correct op, by the every-size tier's head check -- while the error model's slopes bound |f'|."""
import ast
import math
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from vjpcert.core import backends, trace
from vjpcert.core.derivatives import RULES, MissingRule, Rule, derivative, missing_rows, uses_value
from vjpcert.core.rounding import slope
from vjpcert.core.trace import TRACE, Leaf, Node
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.every_size import heads
from vjpcert.symbolic.every_size.backend import ShapeBackend
from vjpcert.symbolic.every_size.shape_trace import DerivationRefused
from vjpcert.symbolic.fixed.evaluate import Evaluator, Tangent
from vjpcert.symbolic.fixed.prover import prove_claim
from vjpcert.symbolic.fixed.size_and_display import SympyField

from optional import compiled

modular = compiled("vjpcert.symbolic.modular.check")   # its Numba loops: at first use

ROOT = Path(__file__).resolve().parents[1]
z = sympy.Symbol("z")
# the primitives as SymPy spells them, written here independently of the code under test
SPELLED = {"exp": sympy.exp, "log": sympy.log, "sqrt": sympy.sqrt, "erf": sympy.erf, "tanh": sympy.tanh,
           "sin": sympy.sin, "cos": sympy.cos, "inv": lambda a: 1 / a}
POWERS = [2, 3, 5, -1, -3, Fraction(1, 3), Fraction(3, 2), Fraction(-1, 2)]
CASES = [(kind, None) for kind in SPELLED] + [("pow", k) for k in POWERS]
# a kink's formula on each open region, written here independently: step is 0 below its kink, 1 above
KINK_BRANCHES = {"step": (sympy.Integer(0), sympy.Integer(1))}


def _spelled(kind, k):
    return z ** sympy.Rational(Fraction(k).numerator, Fraction(k).denominator) if kind == "pow" \
        else SPELLED[kind](z)


def row_matches_sympy(kind, k=None) -> bool:
    f = _spelled(kind, k)
    y = f if uses_value(kind, k) else None       # a row that reads y without saying so raises here
    return sympy.simplify(derivative(heads.SYMPY_OPS, kind, z, y, k) - sympy.diff(f, z)) == 0


@pytest.mark.parametrize("kind,k", CASES)
def test_every_row_is_sympy_s_derivative(kind, k):
    assert row_matches_sympy(kind, k)


def test_the_cases_cover_every_row():
    assert {kind for kind, _ in CASES} | set(KINK_BRANCHES) == set(RULES)


@pytest.mark.parametrize("kind", sorted(KINK_BRANCHES))
def test_a_kink_row_is_the_derivative_of_its_formula_on_each_region(kind):
    rule = RULES[kind]
    assert len(rule.pieces) == len(rule.kinks) + 1 == len(KINK_BRANCHES[kind])
    for r, branch in enumerate(KINK_BRANCHES[kind]):
        mine = rule.branches[r](z) if callable(rule.branches[r]) else sympy.Integer(rule.branches[r])
        assert sympy.simplify(mine - branch) == 0
        assert derivative(heads.SYMPY_OPS, kind, z, None, region=r) == sympy.diff(branch, z)


def test_a_wrong_kink_row_is_caught_by_its_regions(monkeypatch):
    monkeypatch.setitem(RULES, "step", Rule(kinks=(Fraction(0),), pieces=(Fraction(0), Fraction(1)),
                                            branches=(0, 1)))
    with pytest.raises(AssertionError):
        test_a_kink_row_is_the_derivative_of_its_formula_on_each_region("step")


def _trace_ops() -> set[str]:
    """Every op name core/trace.py builds a Node with, read off its source, plus the unary kinds."""
    tree = ast.parse((ROOT / "core" / "trace.py").read_text())
    ops = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Node"
           and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)}
    return ops | set(trace.ELEMENTWISE)


def test_every_primitive_of_the_dag_and_of_B_has_a_row():
    ops = _trace_ops()
    assert {"add", "mul", "inv", "pow", "exp"} <= ops          # the source reading is not vacuous
    functions = set(backends.SPEC_API) - {"pi", "c", "zeros", "array", "max_shift"} - set(backends.KINK_FAMILY)
    every_size = set(vars(ShapeBackend())) | set(heads.SYMPY_HEADS.values())
    assert "tanh" in every_size
    for kinds in (ops, backends.ELEMENTWISE, functions, every_size):
        assert missing_rows(kinds) == [], kinds
    assert set(backends.ELEMENTWISE) <= set(RULES)


def test_a_primitive_without_a_row_is_missing_and_refused():
    assert missing_rows(["exp", "relu"]) == ["relu"]
    node = Node("relu", (Node("leaf", (), Leaf("x", "input")) + 1,))
    S = SympyField()
    with pytest.raises(MissingRule):
        Tangent(Evaluator(S), {node.args[0].args[0].value: S.const(1)})(node)
    X = sympy.IndexedBase("x", real=True)
    with pytest.raises(DerivationRefused):
        heads.check_heads(sympy.atan(X[0]) + sympy.exp(X[0]), X)
    heads.check_heads(sympy.atan(sympy.Symbol("n")) * sympy.exp(X[0]) + sympy.sqrt(X[1]) ** 3, X)


def test_abs_is_sympy_s_spelling_of_the_root_of_a_square_and_held_to_those_rows(monkeypatch):
    """|a| has no row of its own: its derivative must be the sqrt row after the square row, so a wrong
    sqrt row refuses it too."""
    X = sympy.IndexedBase("x", real=True)
    heads.agrees.cache_clear()
    heads.check_heads(sympy.Abs(X[0]) + sympy.exp(X[0]), X)
    monkeypatch.setitem(RULES, "sqrt", Rule(lambda F, a, y, k: F.inv(y), uses_value=True))     # 1/y: wrong
    heads.agrees.cache_clear()
    try:
        with pytest.raises(DerivationRefused):
            heads.check_heads(sympy.Abs(X[0]), X)
    finally:
        heads.agrees.cache_clear()


def test_a_kink_row_is_taken_only_region_by_region(monkeypatch):
    monkeypatch.setitem(RULES, "relu", Rule(kinks=(Fraction(0),), pieces=(Fraction(0), Fraction(1))))
    assert derivative(heads.SYMPY_OPS, "relu", z, None, region=1) == 1
    with pytest.raises(MissingRule):
        derivative(heads.SYMPY_OPS, "relu", z, None)


WRONG_TANH = Rule(lambda F, a, y, k: F.add(F.c(Fraction(1)), F.mul(y, y)), uses_value=True)   # 1 + y^2


def test_a_wrong_row_is_caught_by_the_sympy_comparison(monkeypatch):
    monkeypatch.setitem(RULES, "tanh", WRONG_TANH)
    assert not row_matches_sympy("tanh")


def test_a_wrong_row_fails_the_proof_of_a_correct_op(monkeypatch):
    op = builtin_ops()["gelu_tanh"]
    dims = op.dims[0]
    assert prove_claim(op, "vjp[x]", dims).verdict == "proved"
    monkeypatch.setitem(RULES, "tanh", WRONG_TANH)
    cert = prove_claim(op, "vjp[x]", dims)
    assert cert.verdict == "failed", cert.verdict


def test_a_wrong_row_fails_the_modular_check_of_a_correct_op(monkeypatch):
    """The modular tier's dual numbers take f' from the table too: with tanh' = 1 + y^2 the correct
    backward of gelu_tanh no longer matches J t mod p. The real point (central differences of the true
    forward, no table) agrees with the backward, so the certificate is inconclusive, never checked."""
    op, dims = builtin_ops()["gelu_tanh"], {"rows": 2, "n": 3}
    d, params = modular.split_dims(op, dims)
    monkeypatch.setattr("vjpcert.symbolic.modular.check._MEMO", {})          # a fresh joint run each time
    assert modular.check_vjps(op, d, params, trials=2)["claims"]["vjp[x]"]["status"] == "zero"
    assert modular.check_modular(op, "vjp[x]", dims, trials=2).verdict == "checked-probabilistic"
    monkeypatch.setitem(RULES, "tanh", WRONG_TANH)
    monkeypatch.setattr("vjpcert.symbolic.modular.check._MEMO", {})
    assert modular.check_vjps(op, d, params, trials=2)["claims"]["vjp[x]"]["status"] == "nonzero"
    cert = modular.check_modular(op, "vjp[x]", dims, trials=2)
    assert cert.verdict == "inconclusive", cert.verdict
    assert cert.evidence["nonzero_at"]["residual_mod_p"] != "0"
    assert not cert.evidence["real_point"]["confirmed"]


def test_a_wrong_row_is_refused_by_the_every_size_tier(monkeypatch):
    X = sympy.IndexedBase("x", real=True)
    heads.agrees.cache_clear()
    heads.check_heads(sympy.tanh(X[0]), X)
    monkeypatch.setitem(RULES, "tanh", WRONG_TANH)
    heads.agrees.cache_clear()
    try:
        with pytest.raises(DerivationRefused):
            heads.check_heads(sympy.tanh(X[0]), X)
    finally:
        monkeypatch.undo()
        heads.agrees.cache_clear()


# ------------------------------------------------------------------ the error model's slopes
PRIME = {"exp": math.exp, "log": lambda a: 1 / a, "sqrt": lambda a: 0.5 / math.sqrt(a),
         "erf": lambda a: 2 / math.sqrt(math.pi) * math.exp(-a * a), "tanh": lambda a: 1 - math.tanh(a) ** 2,
         "sin": math.cos, "cos": lambda a: -math.sin(a)}


def _grid_max(kind, a, e):
    return max(abs(PRIME[kind](a - e + 2 * e * i / 2000)) for i in range(2001))


def _ends_only(kind, a, e):
    """The old rule: |f'| at the ends and the middle only."""
    return max(abs(PRIME[kind](t)) for t in (a - e, a, a + e))


INTERVALS = [(0.5, 1.0), (-0.3, 0.4), (3.0, 0.1), (2.0, 1.5), (10.0, 0.3), (0.2, 4.0)]


@pytest.mark.parametrize("kind", sorted(PRIME))
def test_the_slope_bounds_f_prime_over_the_whole_interval(kind):
    for a, e in INTERVALS:
        if kind in ("log", "sqrt") and a - e <= 0:
            assert slope(kind, a, e) == math.inf           # unbounded near 0: no finite slope
            continue
        assert slope(kind, a, e) >= _grid_max(kind, a, e) * (1 - 1e-12), (kind, a, e)


def test_the_ends_alone_would_miss_the_peak():
    """Negative control of the grid check: |tanh'| and |erf'| peak at 0, inside 0.5 +- 1."""
    for kind in ("tanh", "erf", "sin"):
        a, e = (0.5, 1.0) if kind != "sin" else (3.0, 0.5)
        assert _ends_only(kind, a, e) < _grid_max(kind, a, e) * (1 - 1e-3)
        assert slope(kind, a, e) >= _grid_max(kind, a, e) * (1 - 1e-12)


def test_the_slopes_come_from_the_table(monkeypatch):
    before = slope("tanh", 1.5, 0.1)            # about 0.2: the true |tanh'| there
    monkeypatch.setitem(RULES, "tanh", WRONG_TANH)
    assert slope("tanh", 1.5, 0.1) > 5 * before


def test_tangent_rows_come_from_the_table(monkeypatch):
    X = Node("leaf", (), Leaf("x", "input"))
    S = SympyField()
    node = TRACE.tanh(X)
    good = Tangent(Evaluator(S), {X.value: S.const(1)})(node)
    monkeypatch.setitem(RULES, "tanh", WRONG_TANH)
    bad = Tangent(Evaluator(S), {X.value: S.const(1)})(node)
    assert sympy.simplify(good - bad) != 0
