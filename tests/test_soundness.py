"""No false passes: user op files written the way the README shows, each trying to talk a checker into
a verdict that is not true (one class of construct per test). Every test here was red before the
checkers were hardened -- the construct got `proved`, `checked` or `checked-probabilistic`, or a
correct spec got `failed` -- and must stay green.
"""
import json
import textwrap
from fractions import Fraction

import pytest

from vjpcert.cli import main


def _file(tmp_path, body: str, name="my_ops.py"):
    path = tmp_path / name
    path.write_text("import numpy as np\nfrom vjpcert import op, Param\n\n" + textwrap.dedent(body))
    return path


def _run(tmp_path, capsys, *argv):
    code = main([*argv, "--reports", str(tmp_path / "reports"), "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _records(tmp_path):
    root = tmp_path / "reports" / "certificates"
    return [json.loads(p.read_text()) for p in root.rglob("*.json")] if root.exists() else []


SQUARE = '''
@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 2}])
def sq(B, x):
    return x * x
'''


def _square_with_backward(tmp_path, module: str, body: str):
    """SQUARE's file with ``module`` code above the op and a backward whose body is ``body`` (its lines,
    the last a return)."""
    lines = "\n    ".join(body.splitlines())
    return _file(tmp_path, SQUARE.replace("@op", module + "\n\n@op") + f"\n@sq.defvjp\ndef _(B, x, dy):\n    {lines}\n")


# ------------------------------------------------------------------------- 1. comparisons
@pytest.mark.parametrize("backward", [
    "np.where(x == 0, 5 * dy, 2 * x * dy)",                        # wrong only at x == 0
    "2 * x * dy * (2 if bool((x[0] == x[1]).all()) else 1)",        # wrong only when two rows agree
    "np.where(x != x, dy, 2 * x * dy)",
    "np.maximum(2 * x * dy, 2 * x * dy)",
])
def test_a_comparison_of_traced_values_is_bad_input(tmp_path, capsys, backward):
    f = _file(tmp_path, SQUARE + f"\n@sq.defvjp\ndef _(B, x, dy):\n    return ({backward},)\n")
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 2, out
    assert "comparison" in out and "my_ops.py:" in out, out       # names the construct, file and line
    assert not _records(tmp_path), "nothing is written for bad input"


def test_a_caught_refusal_is_still_bad_input(tmp_path, capsys):
    """try/except around the comparison: the tracer must not let the spec take the other path."""
    f = _file(tmp_path, SQUARE + '''
@sq.defvjp
def _(B, x, dy):
    try:
        same = bool((x[0] == x[1]).all())
    except Exception:
        same = False
    return (2 * x * dy * (2 if same else 1),)
''')
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 2 and "caught" in out and "my_ops.py:" in out, out


# ------------------------------------------------------------------------- 2. in-place writes
@pytest.mark.parametrize("forward", ["x -= x.mean(-1, keepdims=True)\n    return x",
                                     "x[...] = x[..., ::-1]\n    return x * 1",
                                     "v = x[:, :1]\n    v *= 2\n    return x"])
@pytest.mark.parametrize("backward", ["dy - dy.mean(-1, keepdims=True)", "dy * 7"])
def test_a_write_into_an_input_is_bad_input_never_failed(tmp_path, capsys, forward, backward):
    """A correct in-place spec and a wrong one are both refused (before: a wrong backward was proved
    and a correct one failed, because the tangents were seeded on overwritten leaves)."""
    f = _file(tmp_path, f'''
@op(inputs={{"x": ("rows", "n")}}, output=("rows", "n"), dims=[{{"rows": 1, "n": 3}}])
def f(B, x):
    {forward}

@f.defvjp
def _(B, x, dy):
    return ({backward},)
''')
    code, out = _run(tmp_path, capsys, "all", str(f), "--no-plots")
    assert code == 2 and "in place" in out and "my_ops.py:" in out, out


def test_writing_into_a_fresh_array_is_fine(tmp_path, capsys):
    f = _file(tmp_path, '''
@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 1, "n": 3}])
def f(B, x):
    xc = x - x.mean(-1, keepdims=True)
    xc *= 2
    return xc

@f.defvjp
def _(B, x, dy):
    g = dy * 2
    g -= g.mean(-1, keepdims=True)
    return (g,)
''')
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 0, out


# ------------------------------------------------------------------------- 3. backend identity
@pytest.mark.parametrize("peek", ['B.name == "float64"', 'getattr(B, "dtype", None) == np.float64',
                                  'hasattr(B, "ctx")', "B.__dict__ is None"])
def test_reading_the_backend_identity_is_bad_input(tmp_path, capsys, peek):
    f = _file(tmp_path, SQUARE + f'''
@sq.defvjp
def _(B, x, dy):
    if {peek}:
        return (3 * x * dy,)
    return (2 * x * dy,)
''')
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 2 and "my_ops.py:" in out, out


LSE = '''
@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 1, "n": 3}],
    check_dims={"rows": 3, "n": 5})
def lsm(B, x):
    m = B.max_shift(x)
    return x - B.log(B.exp(x - m).sum(-1, keepdims=True))          # forgets to add m back

@lsm.defvjp
def _(B, x, dy):
    e = B.exp(x - B.max_shift(x))
    return (dy - e / e.sum(-1, keepdims=True) * dy.sum(-1, keepdims=True),)
'''


def test_a_float_path_that_forgets_the_shift_fails_in_both_tiers(tmp_path, capsys):
    """Exact backends shift by 0, floats by the row max: a log-sum-exp that forgets to add it back
    was proved and checked while its float64 reference was off by the row maximum."""
    f = _file(tmp_path, LSE)
    code, out = _run(tmp_path, capsys, "all", str(f), "--no-plots")
    assert code == 1, out
    verdicts = {(r["tier"], r["claim"]): r["verdict"] for r in _records(tmp_path)}
    assert verdicts[("symbolic", "max_shift_free")] == "failed"      # exact: the shift does not cancel
    assert verdicts[("numeric", "max_shift_free")] == "failed"
    assert verdicts[("numeric", "reference")] == "failed"            # the float64 reference is wrong
    assert verdicts[("symbolic", "vjp[x]")] == "proved"              # (its derivative is right)


def test_a_float_path_chosen_by_sniffing_the_dtype_fails_the_reference(tmp_path, capsys):
    """The facade hides the backend's name, but a spec can still look at what arrays it gets; the
    reference claim compares every backend with the traced (proved) function."""
    f = _file(tmp_path, '''
@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 5})
def sq(B, x):
    if B.zeros(1).dtype != object:
        return x * x * (1 + B.c(1, 1000))
    return x * x

@sq.defvjp
def _(B, x, dy):
    return (2 * x * dy,)
''')
    code, out = _run(tmp_path, capsys, "check", str(f), "--no-plots")
    assert code == 1, out
    ref = next(r for r in _records(tmp_path) if r["claim"] == "reference")
    assert ref["verdict"] == "failed" and ref["evidence"]["witness"]["dtype"] in ("float64", "float32")


def test_every_builtin_float_reference_is_checked(ops):
    from vjpcert.numeric.reference import check_reference
    for name in ("softmax", "log_softmax", "layernorm", "gelu_tanh", "attention_causal"):
        cert = check_reference(ops[name], ops[name].check_dims)
        assert cert.verdict == "checked", (name, cert.evidence)
        for case in cert.evidence["cases"].values():
            assert case["mpmath_backend_digits"] >= 40
            for dtype in ("float64", "float32"):
                assert all(v["error_at_most"] in ("0 of the bound", "1e-3 of the bound", "1e-2 of the bound",
                                                  "1e-1 of the bound") or v["error_at_most"].startswith("1e-")
                           for v in case[dtype].values())


# ------------------------------------------------------------------------- 4. exact disagreement
@pytest.mark.parametrize("eps", ["B.c(1, 10**90)", "B.c(1, 10**30)", "B.c(1, 10**300)"])
def test_an_exact_nonzero_residual_is_failed_with_an_exact_witness(tmp_path, capsys, eps):
    f = _file(tmp_path, SQUARE + f"\n@sq.defvjp\ndef _(B, x, dy):\n    return (2 * x * dy + {eps} * x,)\n")
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 1, out
    (cert,) = [r for r in _records(tmp_path) if r["claim"] == "vjp[x]"]
    assert cert["verdict"] == "failed" and cert["method"] == "exact-rational-witness"
    w = cert["evidence"]["witness"]
    assert w["exact"] and Fraction(w["residual"]) != 0
    # the witness replays: at its exact point, backward - J^T dy is exactly the recorded residual
    x = {k: Fraction(v) for k, v in w["point"].items()}
    entry = w["component"]
    assert Fraction(w["backward"]) - Fraction(w["J^T dy"]) == Fraction(w["residual"]), entry
    assert x


def test_checked_never_comes_from_an_exactly_nonzero_rational_residual():
    from vjpcert.symbolic.fixed import strategies
    from vjpcert.symbolic.fixed.claims import trace_claim
    from vjpcert.core.registry import op as declare

    @declare(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}], name="tiny_cube_test")
    def cube(B, x):
        return x * x * x

    @cube.defvjp
    def _(B, x, dy):
        return (3 * x * x * dy + B.c(1, 10**60) * dy / (1 + x * x),)

    from vjpcert.symbolic.fixed.prover import prove_claim
    cert = prove_claim(cube, "vjp[x]", {"n": 2})
    assert cert.verdict == "failed" and cert.method == "exact-rational-witness"
    traced = trace_claim(cube, "vjp[x]", {"n": 2})
    assert strategies.exact_witness(traced)["status"] == "failed"


# ------------------------------------------------------------------------- 5. numeric allowance
def test_a_backward_scaled_by_1e45_fails_the_numeric_tier(tmp_path, capsys):
    f = _file(tmp_path, '''
@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 1, "n": 3}],
    check_dims={"rows": 3, "n": 7})
def sm(B, x):
    e = B.exp(x - B.max_shift(x))
    return e / e.sum(-1, keepdims=True)

@sm.defvjp
def _(B, x, dy):
    y = sm(B, x)
    return (B.c(1, 10**45) * y * (dy - (y * dy).sum(-1, keepdims=True)),)
''')
    code, out = _run(tmp_path, capsys, "check", str(f), "--no-plots", "--dims", "rows=3,n=7")   # no long rows
    assert code == 1
    vjp = [r for r in _records(tmp_path) if r["claim"] == "vjp[x]"]
    assert vjp and all(r["verdict"] == "failed" for r in vjp)
    for r in vjp:             # the allowance came from the forward: it cannot excuse 45 digits
        for case in r["evidence"]["cases"].values():
            assert case.get("conditioning_loss", 0) <= 20


# ------------------------------------------------------------------------- 6. the mod-p prime
def test_an_error_divisible_by_a_fixed_prime_is_caught_by_random_primes():
    """Before: every trial was mod 2^61 - 1, so an error term with that factor vanished in every
    trial while the certificate stated a false-pass probability of 5e-54."""
    from vjpcert.core.registry import op as declare
    from vjpcert.symbolic.fixed import strategies
    from vjpcert.symbolic.fixed.claims import trace_claim

    @declare(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}], name="p61_target_test")
    def f(B, x):
        return B.exp(x)

    @f.defvjp
    def _(B, x, dy):
        return (B.exp(x) * dy + (2**61 - 1) * x * dy,)

    traced = trace_claim(f, "vjp[x]", {"n": 2})
    out = strategies.modp(traced, seed=0, salt="p61")
    assert out["status"] == "nonzero"
    assert int(out["prime"]) != 2**61 - 1 and int(out["prime"]).bit_length() == 63


def test_primes_are_recorded_and_change_with_the_claim():
    from vjpcert.core.registry import op as declare
    from vjpcert.symbolic.fixed import strategies
    from vjpcert.symbolic.fixed.claims import trace_claim

    @declare(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}], name="modp_record_test")
    def g(B, x):
        return B.exp(x) * x

    @g.defvjp
    def _(B, x, dy):
        return ((B.exp(x) * x + B.exp(x)) * dy,)

    traced = trace_claim(g, "vjp[x]", {"n": 2})
    a = strategies.modp(traced, seed=0, salt="claim-a")
    b = strategies.modp(traced, seed=0, salt="claim-b")
    assert a["status"] == b["status"] == "proved-probabilistic"
    assert len(a["primes"]) == 3 and a["primes"] != b["primes"]
    assert a == strategies.modp(traced, seed=0, salt="claim-a")          # reproducible
    assert float(a["false_pass_probability"]) < 1e-40


# ------------------------------------------------------------------------- 7. laws that say nothing
def test_an_empty_law_is_bad_input(tmp_path, capsys):
    f = _file(tmp_path, SQUARE + '''
@sq.defvjp
def _(B, x, dy):
    return (2 * x * dy,)

@sq.law
def nothing(B, x, forward):
    return forward(x)[5:], x[5:] * 7
''')
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 2 and "empty" in out, out


# ------------------------------------------------------------------------- 8. forged certificates
def test_a_forged_verdict_passes_the_digest_but_not_replay(tmp_path, capsys):
    from vjpcert.core.certificate import record_digest
    f = _file(tmp_path, SQUARE + "\n@sq.defvjp\ndef _(B, x, dy):\n    return (3 * x * dy,)\n")
    code, out = _run(tmp_path, capsys, "prove", str(f))
    assert code == 1
    path = next((tmp_path / "reports" / "certificates").rglob("symbolic__vjp-x*.json"))
    record = json.loads(path.read_text())
    record.update(verdict="proved", trust="exact proof at these dims", method="flint-atoms")
    record["digest"] = record_digest(record)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    assert main(["render", str(tmp_path / "reports"), "--spec", str(f)]) == 0   # a thorough forger re-renders
    verify = ["verify", str(tmp_path / "reports"), "--spec", str(f), "--no-missing"]
    assert main(verify) == 0                      # the digest only catches accidental edits
    capsys.readouterr()
    assert main([*verify, "--replay"]) == 1
    assert "replay" in capsys.readouterr().out


def test_replay_of_a_sample_is_reproducible_and_names_its_seed(tmp_path, capsys):
    f = _file(tmp_path, SQUARE + "\n@sq.defvjp\ndef _(B, x, dy):\n    return (2 * x * dy,)\n")
    assert _run(tmp_path, capsys, "all", str(f), "--no-plots", "--dims", "rows=2,n=2")[0] == 0   # no long rows
    argv = ["verify", str(tmp_path / "reports"), "--spec", str(f), "--no-missing", "--replay",
            "--sample", "2", "--replay-seed", "7"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first and "--replay-seed 7" in first


# ------------------------------------------------------------------------- exact evidence outranks digits
# what these tests judge is each tier's verdict at the op's own n = 2 (the long-row numeric dims and
# the plots would add seconds and nothing to the verdicts read)
AT_N2 = ("--dims", "n=2", "--no-plots")

SQ1 = '''
@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}])
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    return (%s,)
'''


@pytest.mark.parametrize("backward", [
    "2 * x * dy + dy * B.exp(B.c(-10**6))",          # off by dy e^(-10^6): no digits see it
    "2 * x * dy + dy * B.exp(x * x - B.c(10**4))",   # off by dy e^(x^2 - 10^4), a different atom per entry
])
def test_an_error_below_every_digit_is_failed_with_an_exact_witness_in_both_tiers(tmp_path, capsys, backward):
    """The ring finds the residual nonzero, the relations too, and mpmath at 100 digits sees nothing:
    before, both tiers said `checked`. A residual of the form (never-zero atoms) * sum c_k exp(h_k)
    is nonzero at a rational point by Lindemann-Weierstrass: `failed`, with that point."""
    f = _file(tmp_path, SQ1 % backward)
    code, out = _run(tmp_path, capsys, "all", str(f), *AT_N2)
    assert code == 1, out
    recs = {(r["tier"], r["dims"]["n"]): r for r in _records(tmp_path) if r["claim"] == "vjp[x]"}
    for tier in ("symbolic", "numeric"):
        rec = recs[(tier, 2)]
        assert rec["verdict"] == "failed" and rec["method"] == "exact-nonzero-factor", rec
        w = rec["evidence"]["witness"]
        assert w["exact"] and w["point"] and "exp(" in w["Q_at_point"]


@pytest.mark.parametrize("backward", [
    "2 * x * dy * B.exp(x) * B.exp(-x)",                 # exp(x) exp(-x) = 1: the relations prove it
    "2 * x * dy * B.exp(x / 2) ** 2 / B.exp(x)",
])
def test_a_correct_backward_through_atoms_is_proved_not_failed(tmp_path, capsys, backward):
    f = _file(tmp_path, SQ1 % backward)
    code, out = _run(tmp_path, capsys, "all", str(f), *AT_N2)
    assert code == 0, out
    verdicts = {r["tier"]: r["verdict"] for r in _records(tmp_path) if r["claim"] == "vjp[x]"
                and r["dims"]["n"] == 2}
    assert verdicts == {"symbolic": "proved", "numeric": "checked"}, verdicts


TANH = '''
@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}])
def th(B, x):
    return B.tanh(x)

@th.defvjp
def _(B, x, dy):
    return (%s,)
'''


@pytest.mark.parametrize("backward, wrong", [
    ("4 * dy / (B.exp(x) + B.exp(-x)) ** 2", False),                      # right: tanh' as exps
    ("4 * dy / (B.exp(x) + B.exp(-x)) ** 2 * (1 + B.c(1, 10**45))", True),  # off by 1e-45
])
def test_a_nonzero_the_relations_leave_is_never_checked(tmp_path, capsys, backward, wrong):
    """tanh' written through exp, right or off by 1e-45 (which no digits here see). Off, the ring and
    the relations leave a nonzero residual that is not of a certain form (tanh is an atom of its own):
    exact evidence of a nonzero is `inconclusive` in both tiers, never `checked`. Right, it is proved
    (SymPy knows tanh), never `failed`."""
    f = _file(tmp_path, TANH % backward)
    code, out = _run(tmp_path, capsys, "all", str(f), *AT_N2)
    recs = [r for r in _records(tmp_path) if r["claim"] == "vjp[x]" and r["dims"]["n"] == 2]
    verdicts = {r["tier"]: r["verdict"] for r in recs}
    if not wrong:
        assert verdicts == {"symbolic": "proved", "numeric": "checked"}, out
        return
    assert verdicts == {"symbolic": "inconclusive", "numeric": "inconclusive"}, out
    assert all("nonzero" in r["evidence"]["reason"] for r in recs)


@pytest.mark.parametrize("backward, verdict", [
    ("2 * x * dy + dy * x * B.c(1, 10**120)", "failed"),           # rational: nonzero mod p is a disproof
    ("dy * (1 - B.tanh(x) ** 2) * (1 + B.c(1, 10**120))", "inconclusive"),   # with an atom: not certain
])
def test_when_the_ring_runs_out_a_nonzero_mod_p_is_never_checked(monkeypatch, backward, verdict):
    """The ring did not finish (here: made to hang), so the ladder goes to the randomised exact test,
    which finds the residual nonzero; 100 digits cannot see 1e-120. Before, that was `checked`."""
    import time
    from vjpcert import op
    from vjpcert.symbolic.fixed import strategies
    from vjpcert.symbolic.fixed.prover import prove_claim

    monkeypatch.setattr(strategies, "ring", lambda claim, seed=0: time.sleep(60))

    @op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}], name="ring_runs_out")
    def f(B, x):
        return B.tanh(x) if "tanh" in backward else x * x

    ns = {}
    exec(f"def back(B, x, dy):\n    return ({backward},)", ns)
    f.defvjp(ns["back"])
    cert = prove_claim(f, "vjp[x]", {"n": 2}, budget=6)
    assert cert.verdict == verdict, cert.evidence
    if verdict == "failed":
        assert cert.method == "modp-rational-witness" and cert.evidence["witness"]["exact"]


# ------------------------------------------------------------------------- the ring's shortcuts
# The exact ring folds three identities into its atoms: exp(k log P) = P^k for an integer k, one
# reciprocal atom for a long sum however it is reached (through its shared linear atom or expanded),
# and a claim past its reach is left to the randomised exact test. Each is an exact identity or a
# weaker verdict; none may turn a false claim into `proved`.
LOG_EXP = '''
@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}])
def lg(B, x):
    return B.log(x * x + 1)

@lg.defvjp
def _(B, x, dy):
    return (2 * x * dy / (x * x + 1),)

@lg.law
def exp_of_log(B, x):
    return B.exp(K * B.log(x * x + 1)), (x * x + 1) ** K2
'''


@pytest.mark.parametrize("k,k2,verdict", [("1", "1", "proved"), ("2", "2", "proved"), ("-1", "-1", "proved"),
                                          ("2", "1", "failed"), ("1", "2", "failed")])
def test_exp_of_an_integer_multiple_of_a_log_is_the_power_and_nothing_else(tmp_path, capsys, k, k2, verdict):
    f = _file(tmp_path, LOG_EXP.replace("K2", k2).replace("K", k))
    _run(tmp_path, capsys, "prove", f"{f}::lg", "--no-general")
    (law,) = [r for r in _records(tmp_path) if r["claim"] == "exp_of_log"]
    assert law["verdict"] == verdict, law["evidence"]


LONG_SUM = '''
@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 20}])
def share(B, x):
    s = x.sum()
    return x / s

@share.defvjp
def _(B, x, dy):
    s = x.sum()
    return (dy / s - (dy * x).sum() / (s * s),)

@share.law
def reciprocal(B, x):
    s = x.sum()
    return (x / s).sum(), B.c(1) + 0 * x[0] / (s + SHIFT)
'''


@pytest.mark.parametrize("shift,verdict", [("0", "proved"), ("x[0]", "proved"), ("B.c(1)", "proved")])
def test_the_reciprocal_of_a_long_sum_is_one_atom_only_for_that_very_sum(tmp_path, capsys, shift, verdict):
    """sum(x / s) = 1 holds; the right side's 1/(s + shift) only ever multiplies 0, so every variant
    is true -- and the reciprocal of s + x[0] or s + 1 (another sum) must not be taken for 1/s."""
    f = _file(tmp_path, LONG_SUM.replace("SHIFT", shift))
    _run(tmp_path, capsys, "prove", f"{f}::share", "--no-general")
    records = {r["claim"]: r for r in _records(tmp_path)}
    assert records["reciprocal"]["verdict"] == verdict, records["reciprocal"]["evidence"]
    assert records["vjp[x]"]["verdict"] == "proved"


WRONG_RECIPROCAL = LONG_SUM.replace('''    return (x / s).sum(), B.c(1) + 0 * x[0] / (s + SHIFT)''',
                                    '''    return (x / s).sum(), (x / (s + x[0])).sum()''')


def test_two_reciprocals_of_different_long_sums_stay_apart(tmp_path, capsys):
    f = _file(tmp_path, WRONG_RECIPROCAL)
    _run(tmp_path, capsys, "prove", f"{f}::share", "--no-general")
    law = next(r for r in _records(tmp_path) if r["claim"] == "reciprocal")
    assert law["verdict"] == "failed" and law["evidence"]["witness"], law


def test_a_claim_past_the_ring_s_reach_is_never_proved_and_a_wrong_one_fails(monkeypatch):
    """With the ring's reach set to nothing, every claim goes to the randomised exact test: a correct
    one is `checked-probabilistic` (never `proved`: no exact normalisation ran), a wrong one fails."""
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic import settings
    from vjpcert.symbolic.fixed.prover import prove_claim
    monkeypatch.setattr(settings, "RING_MAX_TERMS", 0)
    op = builtin_ops()["rmsnorm"]
    right = prove_claim(op, "vjp[x]", op.dims[0])
    assert right.verdict == "checked-probabilistic", right.evidence
    assert right.evidence["strategies"][0] == {"strategy": "ring", "seconds": 0.0, "status": "skipped",
                                                 "estimated_terms": right.evidence["strategies"][0]["estimated_terms"]}
    twin = op.with_mutant(next(m for m in op.mutants if m.name == "eps_outside_sqrt"))
    assert prove_claim(twin, "vjp[x]", op.dims[0]).verdict == "failed"


@pytest.mark.parametrize("name, mutant", [("attention", None), ("attention", "denominator_unshifted"),
                                           ("softmax", None), ("softmax", "denominator_unshifted"),
                                           ("log_softmax", "lse_forgets_shift")])
def test_past_the_ring_the_shift_claim_is_decided_mod_p_and_a_shift_that_stays_is_never_passed(
        monkeypatch, name, mutant):
    """max_shift_free with the ring out of reach: mod p with exp(u - c) written exp(u) / exp(c) sees
    a shift that cancels (checked-probabilistic) and one that does not (never passed)."""
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic import settings
    from vjpcert.symbolic.fixed.prover import prove_claim
    monkeypatch.setattr(settings, "RING_MAX_TERMS", 0)
    op = builtin_ops()[name]
    if mutant:
        op = op.with_mutant(next(m for m in op.mutants if m.name == mutant))
    cert = prove_claim(op, "max_shift_free", op.dims[-1])
    if mutant:
        assert cert.verdict in ("failed", "inconclusive"), cert.evidence
    else:
        assert cert.verdict == "checked-probabilistic", cert.evidence


def test_splitting_the_shifts_keeps_every_value():
    """split_shifts rewrites exp(u + k c) into exp(u) exp(c)^k: at a point both claims agree entry by
    entry (mpmath, 30 digits), and no exponential of a shifted argument is left but exp(c) (the
    control: the traced claim has them)."""
    from vjpcert.core.evaluate import Evaluator, MpField, postorder
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic.fixed.claims import split_shifts, trace_claim
    c = trace_claim(builtin_ops()["attention_causal"], "max_shift_free", {"m": 3, "d": 2})
    s = split_shifts(c)
    values = {leaf: Fraction(k % 7 - 3, 5) + Fraction(k % 3, 7) for k, leaf in enumerate(c.leaves())}
    a = Evaluator(MpField(30, values)).array(c.lhs).ravel()
    b = Evaluator(MpField(30, values)).array(s.lhs).ravel()
    assert all(abs(x - y) <= 1e-25 * (1 + abs(x)) for x, y in zip(a, b))

    def shifted_exps(arr):
        memo, count = {}, 0
        for root in arr.ravel():
            for node in postorder(root, memo):
                memo[id(node)] = node
                if node.op == "exp" and node.args[0].op != "leaf":       # exp(c) itself is the atom
                    inner = {}
                    for n in postorder(node.args[0], inner):
                        inner[id(n)] = n
                    count += any(n.op == "leaf" and n.value.role == "shift" for n in inner.values())
        return count
    assert shifted_exps(c.lhs) > 0 and shifted_exps(s.lhs) == 0


def test_a_numpy_integer_in_spec_code_never_wraps_around_in_the_exact_fields():
    """Fraction(np.int64(3)) keeps numpy's int64 as its numerator, and int64 products wrap around
    silently (a residue mod a 60-bit prime is a product of that size): every constant is a Python int
    by the time a field reads it."""
    import random
    from fractions import Fraction

    import numpy as np

    from vjpcert.core.backends import exact
    from vjpcert.core.evaluate import QField
    from vjpcert.core.trace import Node
    from vjpcert.symbolic.fixed.modp_field import ModPField
    big = np.int64(2**40 + 7)
    assert type(Node.lift(big).value.numerator) is int
    assert type(Node.lift(Fraction(big, 3)).value.numerator) is int
    assert type(exact(big, np.int64(3)).numerator) is int
    F = ModPField(random.Random(0))
    assert F.const(Fraction(big)) == F.const(Fraction(2**40 + 7))
    assert type(QField({}).const(Fraction(big)).numerator) is int


# ------------------------------------------------------------------------- spec code that reads its interpreter
# A backward that asks how its arrays are represented is right where traced (object arrays of nodes)
# and wrong in floats (and, for some, in mpmath). The symbolic tier replays every traced call in mpmath
# and on the float paths (core.replay), so it refuses each; the numeric tier fails each too: its
# `reference` claim holds the float path (and mpmath's run) to the traced function.
READS_ITS_INTERPRETER = {
    "dtype": "k = 2 if x.dtype == object else 3",
    "asarray_dtype": "k = 2 if np.asarray(x).dtype == object else 3",
    "entry_type": "k = 2 if 'mpf' not in type(x[0, 0]).__name__ and not isinstance(x[0, 0], np.ndarray) else 3",
    "repr": "k = 2 if 'mpf' not in repr(x) and '.' not in repr(x) else 3",
    "iteration": "k = 2 if all(hasattr(e, 'op') for row in x for e in row) else 3",
    "float32_only": "k = 2 if x.dtype != np.float32 else 3",
    "tiny": "k = 2 if x.dtype == object else B.c(2) + B.c(1, 10**12)",
}
HONEST = "k = 2"       # the control: the same file, reading nothing, passes every tier


def _backward_choosing_k(tmp_path, line):
    return _file(tmp_path, SQUARE + f'''
@sq.defvjp
def _(B, x, dy):
    {line}
    return (k * x * dy,)
''')


@pytest.mark.parametrize("how", [h for h in READS_ITS_INTERPRETER if h not in ("float32_only", "tiny")])
def test_a_backward_that_reads_its_interpreter_fails_in_the_numeric_tier(tmp_path, capsys, how):
    path = _backward_choosing_k(tmp_path, READS_ITS_INTERPRETER[how])
    code, out = _run(tmp_path, capsys, "check", str(path))
    assert code == 1, out
    failed = {r["claim"] for r in _records(tmp_path) if r["verdict"] == "failed"}
    assert failed & {"reference", "vjp[x]"}, out      # the float path, or mpmath's run, against the trace


def test_the_same_backward_reading_nothing_passes_both_tiers(tmp_path, capsys):
    path = _backward_choosing_k(tmp_path, HONEST)
    for command in ("prove", "check"):
        code, out = _run(tmp_path, capsys, command, str(path))
        assert code == 0, out
    verdicts = {(r["tier"], r["verdict"]) for r in _records(tmp_path)}
    assert verdicts == {("symbolic", "proved"), ("numeric", "checked")}, verdicts


@pytest.mark.parametrize("how", READS_ITS_INTERPRETER)
def test_a_backward_that_reads_its_interpreter_is_never_proved(tmp_path, capsys, how):
    path = _backward_choosing_k(tmp_path, READS_ITS_INTERPRETER[how])
    code, out = _run(tmp_path, capsys, "prove", str(path))
    verdicts = {r["verdict"] for r in _records(tmp_path)}
    assert verdicts and "proved" not in verdicts, verdicts           # no interpreter's reading is proved
    assert "reads how its arrays are represented" in out, out
    assert verdicts == {"inconclusive"}


def test_a_forward_and_a_law_that_read_their_interpreter_are_never_proved(tmp_path, capsys):
    """The forward computes x^2 where traced and x^3 in floats, its backward 2 x: proved of the trace,
    wrong of the function that runs. A law that holds only where traced is refused the same way."""
    path = _file(tmp_path, '''
@op(inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 2}])
def cube_in_floats(B, x):
    return x * x if x.dtype == object else x * x * x

@cube_in_floats.defvjp
def _(B, x, dy):
    return (2 * x * dy,)

@cube_in_floats.law
def twice(B, x):
    return np.sum(x if x.dtype == object else 2 * x) - np.sum(x)
''')
    code, out = _run(tmp_path, capsys, "prove", str(path))
    verdicts = {r["verdict"] for r in _records(tmp_path)}
    assert verdicts and "proved" not in verdicts, verdicts           # no interpreter's reading is proved
    assert out.count("reads how its arrays are represented") == 2, out       # the backward's and the law's
    assert verdicts == {"inconclusive"}


# Spec code that keeps state between its calls: (module-level code, the backward's line setting k, the
# name the refusal gives). Each computes 2 x dy for its first 40 calls (or almost always), 3 x dy after.
KEEPS_STATE = {
    "list": ("CALLS = [0]", "CALLS[0] += 1; k = 2 if CALLS[0] <= 40 else 3", "CALLS"),
    "global_int": ("CALLS = 0", "global CALLS; CALLS += 1; k = 2 if CALLS <= 40 else 3", "CALLS"),
    "dict": ("STATE = {}", "STATE['n'] = STATE.get('n', 0) + 1; k = 2 if STATE['n'] <= 40 else 3", "STATE"),
    "default_argument": ("def count(_n=[0]):\n    _n[0] += 1\n    return _n[0]",
                         "k = 2 if count() <= 40 else 3", "count"),
    "closure": ("def counter():\n    n = 0\n    def step():\n        nonlocal n\n        n += 1\n        return n\n"
                "    return step\nSTEP = counter()", "k = 2 if STEP() <= 40 else 3", "STEP"),
    "function_attribute": ("def tick():\n    tick.n = getattr(tick, 'n', 0) + 1\n    return tick.n",
                           "k = 2 if tick() <= 40 else 3", "tick"),
    "class_attribute": ("class C:\n    n = 0", "C.n += 1; k = 2 if C.n <= 40 else 3", "C"),
    "instance": ("class C:\n    def __init__(self):\n        self.n = 0\nOBJ = C()",
                 "OBJ.n += 1; k = 2 if OBJ.n <= 40 else 3", "OBJ"),
    "itertools_count": ("import itertools\nCOUNT = itertools.count(1)", "k = 2 if next(COUNT) <= 40 else 3", "COUNT"),
    "iterator": ("STEPS = iter(range(10**6))", "k = 2 if next(STEPS) < 40 else 3", "STEPS"),
    "generator": ("def steps():\n    n = 0\n    while True:\n        n += 1\n        yield n\nGEN = steps()",
                  "k = 2 if next(GEN) <= 40 else 3", "GEN"),
    "numpy_array": ("STATE = np.zeros(1)", "STATE[0] += 1; k = 2 if STATE[0] <= 40 else 3", "STATE"),
    "functools_cache": ("import functools\n@functools.cache\ndef box():\n    return [0]",
                        "box()[0] += 1; k = 2 if box()[0] <= 40 else 3", "box"),
    "lru_cache": ("import functools\n@functools.lru_cache(maxsize=4)\ndef box():\n    return np.zeros(1)",
                  "box()[0] += 1; k = 2 if box()[0] <= 40 else 3", "box"),
    "on_the_op": ("", "sq.calls = getattr(sq, 'calls', 0) + 1; k = 2 if sq.calls <= 40 else 3", "sq (my_ops.py)"),
    "generator_object": ("RNG = np.random.default_rng()", "k = 2 if RNG.random() < 0.999 else 3", "RNG"),
    "library_module": ("import math", "math.calls = getattr(math, 'calls', 0) + 1; k = 2 if math.calls <= 40 else 3",
                       "the attributes of math"),
    "library_function": ("import json", "json.dumps.calls = getattr(json.dumps, 'calls', 0) + 1; "
                         "k = 2 if json.dumps.calls <= 40 else 3", "the attributes of json"),
    "library_class": ("from fractions import Fraction", "Fraction.calls = getattr(Fraction, 'calls', 0) + 1; "
                      "k = 2 if Fraction.calls <= 40 else 3", "Fraction"),
    "module_annotations": ("LIMIT: int = 40", "__annotations__['n'] = __annotations__.get('n', 0) + 1; "
                           "k = 2 if __annotations__['n'] <= 40 else 3", "__annotations__"),
    "builtins_dict": ("", "__builtins__['calls'] = __builtins__.get('calls', 0) + 1; "
                      "k = 2 if __builtins__['calls'] <= 40 else 3", "the attributes of builtins"),
    "helper_module": ("import counting_helper", "counting_helper.CALLS[0] += 1; "
                      "k = 2 if counting_helper.CALLS[0] <= 40 else 3", "CALLS (counting_helper.py)"),
    # what the import system gives the module: its spec, its loader, its own names, its class
    "module_spec": ("", "__spec__.calls = getattr(__spec__, 'calls', 0) + 1; k = 2 if __spec__.calls <= 40 else 3",
                    "__spec__"),
    "module_loader": ("", "__loader__.calls = getattr(__loader__, 'calls', 0) + 1; "
                      "k = 2 if __loader__.calls <= 40 else 3", "__loader__"),
    "module_file": ("", "global __file__; __file__ += '.'; k = 2 if __file__.count('.') <= 41 else 3", "__file__"),
    "module_class": ("import sys, types\nclass _Counting(types.ModuleType):\n    n = 0\n"
                     "sys.modules[__name__].__class__ = _Counting\ndel _Counting",
                     "type(sys.modules[__name__]).n += 1; k = 2 if type(sys.modules[__name__]).n <= 40 else 3",
                     "the class of"),
}


@pytest.mark.parametrize("how", KEEPS_STATE)
def test_a_backward_that_keeps_state_between_its_calls_is_never_proved(tmp_path, capsys, monkeypatch, how):
    """No number of calls tells a counter's first 40 from the rest: the state itself is watched, and
    an op whose code changes it while it runs is refused, the state named."""
    module, line, name = KEEPS_STATE[how]
    (tmp_path / "counting_helper.py").write_text("CALLS = [0]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _square_with_backward(tmp_path, module, f"{line}\nreturn (k * x * dy,)")
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    verdicts = {r["verdict"] for r in _records(tmp_path)}
    assert "proved" not in verdicts and code != 0, (verdicts, out)
    assert "state it reads again on its next call" in out and name in out, out


@pytest.mark.parametrize("draw, name", [("random.random()", "random.random"), ("np.random.rand()", "numpy.random.rand"),
                                        ("np.random.uniform(0, 1)", "numpy.random.uniform")])
def test_a_backward_that_draws_from_the_shared_random_stream_is_never_proved(tmp_path, capsys, draw, name):
    """The shared streams change under every thread, so the draw itself is seen, made from spec code."""
    path = _square_with_backward(tmp_path, "import random", f"k = 2 if {draw} < 0.999 else 3\nreturn (k * x * dy,)")
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert "proved" not in {r["verdict"] for r in _records(tmp_path)} and code != 0, out
    assert "drew random numbers from the process's shared stream" in out and name in out, out


def _lazy_helper_op(tmp_path, before_import):
    """A backward that imports a helper on its first call, whose body rebinds a name of a library
    module (as importing torch._dynamo rebinds torch.manual_seed), after ``before_import``."""
    (tmp_path / "rebinding_helper.py").write_text("import json\njson.first_load = object()\n")
    return _square_with_backward(tmp_path, "import json", f"{before_import}\nimport rebinding_helper\nreturn (2 * x * dy,)")


def test_what_an_import_rebinds_in_a_library_is_the_library_loading_not_kept_state(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _lazy_helper_op(tmp_path, "pass")
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert code == 0 and {r["verdict"] for r in _records(tmp_path)} == {"proved"}, out


def test_a_counter_in_a_library_s_bindings_is_seen_though_a_module_loads_in_between(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _lazy_helper_op(tmp_path, "json.calls = getattr(json, 'calls', 0) + 1")
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert code != 0 and "proved" not in {r["verdict"] for r in _records(tmp_path)}, out
    assert "the attributes of json (as json): calls" in out and "first_load" not in out, out


# What differs from one call or one run to the next and is no argument: (module-level code, the
# backward's line setting k, what the refusal names). Each gives k = 2 almost always, 3 otherwise.
VARIES = {
    "clock": ("import time", "k = 2 if time.time() < 1.9e9 else 3", "time.time"),
    "clock_ns": ("import time", "k = 2 if time.perf_counter_ns() % 100 < 99 else 3", "time.perf_counter_ns"),
    "pid": ("import os", "k = 2 if os.getpid() % 1000 != 7 else 3", "os.getpid"),
    "folder": ("from pathlib import Path", "k = 2 if Path.cwd().name != 'elsewhere' else 3", "Path.cwd"),
    "host": ("import socket", "k = 2 if socket.gethostname() != 'elsewhere' else 3", "socket.gethostname"),
    "machine": ("import os", "k = 2 if os.cpu_count() < 10**6 else 3", "os.cpu_count"),
    "urandom": ("import os", "k = 2 if os.urandom(1)[0] < 253 else 3", "os.urandom"),
    "system_random": ("import random", "k = 2 if random.SystemRandom().random() < 0.99 else 3",
                      "random.SystemRandom.random"),
    "secrets": ("import secrets", "k = 2 if secrets.randbelow(100) < 99 else 3", "random.SystemRandom.getrandbits"),
    "uuid4": ("import uuid", "k = 2 if uuid.uuid4().int % 100 < 99 else 3", "os.urandom"),
    "unseeded_random": ("import random", "k = 2 if random.Random().random() < 0.99 else 3",
                        "random.Random() unseeded"),
    "unseeded_rng": ("", "k = 2 if np.random.default_rng().random() < 0.99 else 3",
                     "numpy.random.default_rng() unseeded"),
    # read once, by the module's body as it loads: one function in this process, another in the next
    "clock_at_load": ("import time\nK = 2 if time.time() < 1.9e9 else 3", "k = K", "time.time when my_ops.py loaded"),
    "urandom_at_load": ("import os\nK = 2 if os.urandom(1)[0] < 253 else 3", "k = K", "os.urandom when my_ops.py loaded"),
    "draw_at_load": ("import random\nK = 2 if random.random() < 0.99 else 3", "k = K",
                     "random.random when my_ops.py loaded"),
}


@pytest.mark.parametrize("how", VARIES)
def test_a_backward_that_reads_the_clock_or_the_os_entropy_is_never_proved(tmp_path, capsys, how):
    module, line, name = VARIES[how]
    path = _square_with_backward(tmp_path, module, f"{line}\nreturn (k * x * dy,)")
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert "proved" not in {r["verdict"] for r in _records(tmp_path)} and code != 0, out
    assert "differs from one call or one run to the next" in out and name in out, out


def test_a_spec_that_logs_and_seeds_its_generators_is_proved(tmp_path, capsys):
    """The negative control: logging stamps its records with the clock and the process's id (a library
    reading them for itself), and generators seeded by the spec are the same in every run."""
    path = _square_with_backward(
        tmp_path, "import logging\nimport random\nW = np.random.default_rng(0).random()\nR = random.Random(5).random()",
        'logging.getLogger("my_ops").warning("backward of sq")\nk = 2 if W < 1 and R < 1 else 3\nreturn (k * x * dy,)')
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert code == 0 and {r["verdict"] for r in _records(tmp_path)} == {"proved"}, out


def test_a_law_that_keeps_state_between_its_calls_is_never_proved(tmp_path, capsys):
    path = _file(tmp_path, SQUARE.replace("@op", "CALLS = [0]\n\n@op") + '''
@sq.defvjp
def _(B, x, dy):
    return (2 * x * dy,)

@sq.law
def zero_for_a_while(B, x):
    CALLS[0] += 1
    return np.sum(x - x) if CALLS[0] <= 40 else np.sum(x)
''')
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert "proved" not in {r["verdict"] for r in _records(tmp_path) if r["claim"] == "zero_for_a_while"}
    assert code != 0 and "state it reads again on its next call: CALLS" in out, out


def test_a_backward_that_only_reads_module_constants_is_proved(tmp_path, capsys):
    """The control: a table, a dict, a seeded generator drawn from once when the module loads, read and
    never changed; caches of pure functions, which fill with what cannot be changed in place."""
    path = _file(tmp_path, SQUARE.replace("@op", '''import functools
TABLE = np.arange(4.0)
SCALE = {'k': 2}
NOISE = np.random.default_rng(0).random(3)

@functools.cache
def two():
    return 2

@functools.cache
def ramp(n):
    r = np.arange(float(n))
    r.flags.writeable = False
    return r

@op''') + '''
@sq.defvjp
def _(B, x, dy):
    k = SCALE['k'] if TABLE[1] == 1.0 and NOISE[0] < 1 and ramp(x.shape[1])[1] == 1.0 else two()
    return (two() * x * dy,) if k == 2 else (k * x * dy,)
''')
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert code == 0, out
    assert {r["verdict"] for r in _records(tmp_path)} == {"proved"}


KINK_OF_ITS_OWN = {   # the argument a of the backward's switch (1 - step(-a)) - step(a) = [a == 0] -> exit codes
    "x[0] - x[1]": {1},             # a tie, affine in each input: a point is placed on it, and fails it
    "(x[0] - x[1]) ** 3": {1, 3},   # a tie not affine: failed where a drawn point has x0 == x1, else unmet
    "x[0] ** 3 - 2": {3},           # zero at 2^(1/3), which no exact point reaches: never checked
    "0 * x[0] + 1": {0},            # never 0: the switch is 0 everywhere, the backward right
}


@pytest.mark.parametrize("argument", list(KINK_OF_ITS_OWN))
def test_a_backward_wrong_only_on_a_kink_of_its_own_never_passes(tmp_path, capsys, argument):
    """(1 - step(-a)) - step(a) is [a == 0]: 0 on every open region, where the ring proves the VJP
    claim, and 1 on a = 0, where the forward (relu(x) + x^2, kinked at x = 0 only) is smooth and the
    backward is off by 5 dy. at_the_kink placed points on the kinks at random and passed it when none
    fell on a = 0; now a point sits on each affine root, and a step whose kink no point met leaves the
    claim inconclusive, never checked."""
    path = _file(tmp_path, f'''
@op(inputs={{"x": ("n",)}}, output=("n",), dims=[{{"n": 2}}])
def relu_plus_square(B, x):
    return B.relu(x) + x * x

@relu_plus_square.defvjp
def _(B, x, dy):
    a = {argument}
    return (dy * B.step(x) + 2 * x * dy + 5 * dy * ((1 - B.step(-a)) - B.step(a)),)
''')
    code, out = _run(tmp_path, capsys, "prove", "--no-general", str(path))
    assert code in KINK_OF_ITS_OWN[argument], out


ARRAY_TYPE_TESTS = {   # the backward's factor k -> the modular certificates' verdicts
    '2 if type(x).__name__ == "ModArray" else 3': {"inconclusive"},
    '3 if x.shape[0] >= 8 and isinstance(x, np.ndarray) else 2': {"inconclusive"},    # only production dims
    '2': {"checked-probabilistic"},
}


@pytest.mark.parametrize("factor", list(ARRAY_TYPE_TESTS))
def test_a_backward_right_only_on_the_modular_tier_s_arrays_never_passes_there(tmp_path, capsys, factor):
    """The modular tier runs spec code on its own arrays (ModArray) at production dims: a backward that
    reads their type computes there a function numpy's floats do not -- and, gated on a size only the
    production dims have, one the fixed dims never run either. A pass there is held to the same
    pairing on float64 arrays, and is no pass where they disagree; the honest twin passes."""
    path = _file(tmp_path, f'''
@op(inputs={{"x": ("rows", "n")}}, output=("rows", "n"), dims=[{{"rows": 2, "n": 2}}],
    modular_dims=[{{"rows": 8, "n": 8}}])
def sq(B, x):
    return x * x

@sq.defvjp
def _(B, x, dy):
    k = {factor}
    return (k * x * dy,)
''')
    _run(tmp_path, capsys, "prove", "--modular", str(path))
    modular = {r["verdict"] for r in _records(tmp_path) if r.get("options", {}).get("method") == "modular"}
    assert modular == ARRAY_TYPE_TESTS[factor], _records(tmp_path)
