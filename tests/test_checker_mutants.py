"""Properties of the checkers' own code that a small bug in it would break, written so that such a bug
is noticed before it says `proved` or `checked` (benchmarks/checker_mutation.py injects those bugs and
reports which of these, and of the other tests, catch them).

- A claim that only the mpmath witness can judge, wrong by a relative 1e-45 (or 1e-75), is never
  `checked`: agreement to 45 digits at 100-digit precision is a persistent nonzero, not "numerically 0".
- The exact arithmetic mod p is exact where its float64 quotient estimates are off by one: products
  (and the matmul recombinations) whose value lies just below or just above a multiple of p, compared
  with Python's integers. Just below, the truncated estimate is one too high for many entries, and the
  tests check that their construction gets there; just above, round-to-nearest and truncation make an
  estimate one too low rare (none at all for some primes), so those entries are exactness checks only.
- Stated bounds are upper bounds (false-pass probabilities, degree and coefficient bounds), and a bound
  not below the limit leaves a modular claim `inconclusive`.
- The numeric digit rule (30 correct digits fail; the conditioning allowance is capped; a small
  derivative is not a zero one), the tolerance rule (k times the dtype spec, plus a floor), the wiring
  (a structural factor a backward drops) and ATen rules with alpha, beta and a variance's correction.
"""
from __future__ import annotations

import functools
import json
import random
import textwrap

import numpy as np
import pytest
import sympy

from vjpcert.cli import main

from optional import compiled

ma = compiled("vjpcert.symbolic.modular.arith")     # the modular tier's Numba loops: at first use
modular_check = compiled("vjpcert.symbolic.modular.check")


# ------------------------------------------------------------------------------------- numeric-only claims
def _prove(tmp_path, capsys, body: str) -> dict:
    path = tmp_path / "my_ops.py"
    path.write_text("import numpy as np\nfrom vjpcert import op, Param\n\n" + textwrap.dedent(body))
    code = main(["prove", str(path), "--reports", str(tmp_path / "reports"), "--quiet"])
    out = capsys.readouterr()
    records = [json.loads(p.read_text()) for p in (tmp_path / "reports" / "certificates").rglob("*.json")]
    (cert,) = [r for r in records if r["claim"] == "vjp[x]"]
    return {"code": code, "cert": cert, "out": out.out + out.err}


# exp * sin: a transcendental claim (no exact rational witness), whose atoms are independent, so only
# the mpmath witness at 50 and 100 digits sees the backward's relative error
EXP_SIN = '''
@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}])
def exp_sin(B, x):
    return B.exp(x) * B.sin(x)

@exp_sin.defvjp
def _(B, x, dy):
    return (dy * (B.exp(x) * B.sin(x) + B.exp(x) * B.cos(x)) * (1 + B.c(1, 10**%d)),)
'''


@pytest.mark.parametrize("digits", [45, 75])
def test_a_claim_decidable_only_numerically_off_by_1e_45_is_never_checked(tmp_path, capsys, digits):
    """45 (or 75) digits of agreement at 100 digits is a residual that persists, far above the ~95
    digits rounding leaves: never `checked`. `failed` is allowed only with a witness."""
    run = _prove(tmp_path, capsys, EXP_SIN % digits)
    cert = run["cert"]
    assert cert["verdict"] in ("inconclusive", "failed"), (cert["verdict"], cert["method"], run["out"])
    if cert["verdict"] == "failed":
        assert cert["evidence"].get("witness"), cert["evidence"]
    seen = [s for s in cert["evidence"]["strategies"] if s.get("strategy", "").startswith("witness")]
    assert all(s["status"] != "zero" for s in seen), seen


@pytest.mark.parametrize("digits", [45, 75])
def test_with_the_exact_rungs_out_of_reach_1e_45_is_never_checked(monkeypatch, digits):
    """The same claim where only digits are left: the exact ring runs out (here: it raises) and the
    randomised exact test decides nothing (every point a pole). 45 (75) digits at 100 is then still no
    `checked`: the ladder ends `inconclusive`."""
    from vjpcert.symbolic.fixed import prover
    from vjpcert.symbolic.fixed import strategies

    def out_of_reach(*_, **__):
        raise TimeoutError("the exact ring did not finish")
    monkeypatch.setattr(strategies, "ring", out_of_reach)
    monkeypatch.setattr(strategies, "modp", lambda *_, **__: {"status": "unknown", "reason": "every point a pole"})
    traced = _traced(digits)
    cert = prover.prove_claim(traced.op, "vjp[x]", {"n": 2})
    assert cert.verdict == "inconclusive", (cert.verdict, cert.evidence)
    # the randomised exact test runs before the digits when the ring did not finish
    assert [s["strategy"] for s in cert.evidence["strategies"]][:3] == ["ring", "modp", "witness"]


def test_with_the_exact_rungs_out_of_reach_1e_10_off_is_failed_by_the_witness(monkeypatch):
    """Where only digits are left, a backward off by a relative 1e-10 -- far below what a loose
    'failed' threshold would see, far above rounding at 50 digits -- is `failed`, with the witness."""
    from vjpcert.symbolic.fixed import prover
    from vjpcert.symbolic.fixed import strategies

    def out_of_reach(*_, **__):
        raise TimeoutError("the exact ring did not finish")
    monkeypatch.setattr(strategies, "ring", out_of_reach)
    monkeypatch.setattr(strategies, "modp", lambda *_, **__: {"status": "unknown", "reason": "every point a pole"})
    cert = prover.prove_claim(_traced(10).op, "vjp[x]", {"n": 2})
    assert cert.verdict == "failed" and cert.evidence.get("witness"), (cert.verdict, cert.evidence)


def test_the_correct_twin_of_the_numeric_only_claim_is_proved(tmp_path, capsys):
    body = (EXP_SIN % 45).replace(" * (1 + B.c(1, 10**45))", "")
    run = _prove(tmp_path, capsys, body)
    assert run["code"] == 0 and run["cert"]["verdict"] == "proved", (run["cert"]["verdict"], run["out"])


# ------------------------------------------------------------------------------------- products mod p
@functools.cache
def _primes():
    rng = random.Random(23)
    return [modular_check.draw_prime(rng) for _ in range(2)] + [int(sympy.prevprime(2 ** 60)),
                                                                int(sympy.nextprime(2 ** 59))]


PRIMES = ("drawn_1", "drawn_2", "prevprime_2_60", "nextprime_2_59")     # the tier's own draws, and the extremes


@pytest.fixture
def p(request):
    """The prime named by the test's parameter, drawn at the test (the draw imports the modular tier)."""
    return _primes()[PRIMES.index(request.param)]
SIDES = {"below": -1, "above": 1}       # the value is k p - c or k p + c, 1 <= c <= 64


def _near(p: int, y: list[int], side: int, rng: random.Random) -> list[int]:
    """x with x y = k p + side * c (c in [1, 64]) for each y: x = side c / y mod p."""
    return [side * rng.randint(1, 64) * pow(v, -1, p) % p for v in y]


def _exact(a, b, p) -> np.ndarray:
    return np.asarray(a, dtype=object) * np.asarray(b, dtype=object) % p


def _estimate_off(x: np.ndarray, y: np.ndarray, p: int) -> np.ndarray:
    """float64 quotient estimate of x y / p minus the true quotient (what _mulmod_small computes)."""
    est = (x.astype(np.float64) * y.astype(np.float64) * (1.0 / p)).astype(np.int64).astype(object)
    return est - x.astype(object) * y.astype(object) // p


def _both_halves_below(p: int, n: int, rng: random.Random):
    """Products whose two partial products are both just below a multiple of p, far enough below that
    the high half's remainder times 2^30 is nearly a multiple of p again: y = 2^30 y_h + 2 y_h and
    x = -c / y_h with c 2^30 = p - (p mod 2^30). Then x y_h = k p - c and x y_l = k' p - 2c, both
    estimates are often one too high, and a correction that lets either partial result stay negative
    leaves their sum below -p, which the final reduction cannot repair."""
    c = (p - p % (1 << 30)) >> 30
    y_h = [rng.randrange(1 << 27, 1 << 29) for _ in range(n)]
    x = [-c * pow(h, -1, p) % p for h in y_h]
    return x, [(h << 30) | (2 * h) for h in y_h]


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("p", PRIMES, indirect=True)
def test_products_just_below_a_multiple_of_p_are_exact(p, side):
    """Elementwise products (both 30-bit halves of the second factor, and the product by a scalar)
    whose value lies within 64 of a multiple of p: the float64 quotient estimate is then off by one
    for many entries, and only the remainder's correction makes the result exact."""
    rng = random.Random(p + SIDES[side])
    s = SIDES[side]
    F = ma.ModP(p)
    n = 400
    y_low = [rng.randrange(1, 1 << 30) for _ in range(n)]                      # the low half only
    x_low = _near(p, y_low, s, rng)
    y_high = [rng.randrange(1, p >> 30) for _ in range(n)]                     # x y_h near k p: the high half
    x_high = _near(p, y_high, s, rng)
    y_high = [(h << 30) | rng.randrange(0, 1 << 30) for h in y_high]
    y_full = [rng.randrange(1, p) for _ in range(n)]                           # the whole product
    x_full = _near(p, y_full, s, rng)
    x_both, y_both = _both_halves_below(p, n, rng)
    x = np.array(x_low + x_high + x_full + x_both, dtype=np.int64)
    y = np.array(y_low + y_high + y_full + y_both, dtype=np.int64)
    if side == "below":          # the construction reaches the estimate's wrong side: one too high
        off = _estimate_off(x[:n], y[:n], p)
        assert any(v == 1 for v in off), "no estimate one too high: the test would not test the correction"
        xb, yb = np.array(x_both, dtype=np.int64), np.array(y_both, dtype=np.int64)
        both = (_estimate_off(xb, yb & ((1 << 30) - 1), p) == 1) & (_estimate_off(xb, yb >> 30, p) == 1)
        assert both.any(), "no product with both halves' estimates one too high"
    want = _exact(x, y, p)
    assert (F.mul(x, y).astype(object) == want).all()
    assert (F.mul(y, x).astype(object) == want).all()
    big = np.tile(x, 1 + ma.mk.PARALLEL_MIN // x.size)                         # the parallel loop too
    assert (F.mul(big, np.tile(y, big.size // y.size)).astype(object) == np.tile(want, big.size // y.size)).all()
    for k in (0, n, 2 * n):
        scalar = int(y[k])
        got = F.mul_scalar(x[k:k + n], scalar).astype(object)
        assert all(int(g) == int(v) * scalar % p for g, v in zip(got, x[k:k + n]))
    assert {int(v) for v in want[:n]} <= set(range(1, 65)) | set(range(p - 64, p))


@pytest.mark.parametrize("method", ["preshift", "karatsuba"])
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("p", PRIMES, indirect=True)
def test_matmul_entries_just_below_a_multiple_of_p_are_exact(p, side, method, monkeypatch):
    """Batched 1 x 1 products a_k b_k ≡ k p ± c: the recombination D_0 + 2^20 D_1 + 2^40 D_2 (and,
    Karatsuba, c_0 + 2^20 c_1 + 2^40 c_2 for a second factor below 2^20) is then within 64 of a
    multiple of p, where its float64 quotient estimate is off by one for many entries."""
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.KARATSUBA_MIN_CONTRACTION", 1 if method == "karatsuba" else 10 ** 9)
    rng = random.Random(p * 3 + SIDES[side])
    n = 600
    y = [rng.randrange(1, 1 << 20) for _ in range(n // 2)] + [rng.randrange(1, p) for _ in range(n // 2)]
    x = _near(p, y, SIDES[side], rng)
    a = np.array(x, dtype=np.int64).reshape(n, 1, 1)
    b = np.array(y, dtype=np.int64).reshape(n, 1, 1)
    want = _exact(a, b, p)
    assert (ma.ModP(p).matmul(a, b).astype(object) == want).all()
    assert (ma.ModP(p).matmul(b, a).astype(object) == want).all()


def _limbs(v: int) -> tuple[int, int, int]:
    return v & ma.mk.MASK, (v >> 20) & ma.mk.MASK, v >> 40


def _karatsuba_high(a: list[int], b: list[int]) -> tuple[int, int]:
    """(c_3, c_4) of sum_k a_k b_k: the diagonals of the limb product above 2^60."""
    c3 = c4 = 0
    for x, y in zip(a, b):
        (_, x1, x2), (_, y1, y2) = _limbs(x), _limbs(y)
        c3 += x1 * y2 + x2 * y1
        c4 += x2 * y2
    return c3, c4


def _high_near_multiple(p: int, side: int, rng: random.Random, K: int):
    """Rows a, b (length K) whose Karatsuba high part c_3 + 2^20 c_4 is k p + side c, 1 <= c <= 64: K - 1
    random pairs, then a last pair (z 2^20, b_2 2^40) that adds b_2 z to it, with b_2 a divisor found by
    search."""
    zmax, bmax = (p - 1) >> 20, (p - 1) >> 40
    while True:
        a = [rng.randrange(0, p) for _ in range(K - 1)]
        b = [rng.randrange(0, p) for _ in range(K - 1)]
        c3, c4 = _karatsuba_high(a, b)
        S = c3 + (c4 << 20)
        M = (S // p + 1) * p - S               # what the last pair must add, up to side * c
        if not (1 << 40) < M < p // 4:
            continue
        for b2 in range(max(1, -(-M // zmax)), bmax + 1):
            r = M % b2
            c = r if side < 0 else (b2 - r) % b2
            if 1 <= c <= 64 and (M + side * c) // b2 <= zmax:
                z = (M + side * c) // b2
                return a + [z << 20], b + [b2 << 40]


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("p", PRIMES, indirect=True)
def test_karatsuba_high_diagonals_just_below_a_multiple_of_p_are_exact(p, side, monkeypatch):
    """A contraction whose high diagonals c_3 + 2^20 c_4 sum to within 64 of a multiple of p, where the
    float64 estimate of its quotient (computed as the kernel does) is off by one for some rows."""
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.KARATSUBA_MIN_CONTRACTION", 1)
    rng = random.Random(p * 5 + SIDES[side])
    K, rows = 16, 12
    pairs = [_high_near_multiple(p, SIDES[side], rng, K) for _ in range(rows)]
    a = np.array([r[0] for r in pairs], dtype=np.int64).reshape(rows, 1, K)
    b = np.array([r[1] for r in pairs], dtype=np.int64).reshape(rows, K, 1)
    off = []
    for ra, rb in pairs:
        c3, c4 = _karatsuba_high(ra, rb)
        est = int((np.float64(c3) + np.float64(c4) * float(1 << 20)) * (1.0 / p))
        off.append(est - (c3 + (c4 << 20)) // p)
    if side == "below":
        assert 1 in off, "no estimate one too high: the test would not test the correction"
    want = np.matmul(a.astype(object), b.astype(object)) % p
    assert (ma.ModP(p).matmul(a, b).astype(object) == want).all()


def _traced(digits: int | None):
    """The exp * sin claim traced directly (no file): its backward off by a relative 10^-digits."""
    from vjpcert.core.registry import op as declare
    from vjpcert.symbolic.fixed.claims import trace_claim

    @declare(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}], name=f"exp_sin_off_{digits}")
    def f(B, x):
        return B.exp(x) * B.sin(x)

    @f.defvjp
    def _(B, x, dy):
        g = dy * (B.exp(x) * B.sin(x) + B.exp(x) * B.cos(x))
        return (g if digits is None else g * (1 + B.c(1, 10 ** digits)),)
    return trace_claim(f, "vjp[x]", {"n": 2})


@pytest.mark.parametrize("digits", [45, 75])
def test_the_witness_does_not_call_a_1e_45_residual_numerically_zero(digits):
    """The rung beneath `checked`: at 100 digits a relative residual of 10^-45 (10^-75) is measured as
    such, and 'numerically zero' needs agreement near the precision (ZERO_DIGITS), not half of it."""
    from vjpcert.symbolic import settings
    from vjpcert.symbolic.fixed import strategies
    out = strategies.witness(_traced(digits))
    assert out["status"] == "unknown", out
    assert abs(out["digits"] - digits) < 2 and out["digits"] < settings.ZERO_DIGITS, out


def test_the_witness_calls_the_correct_twin_numerically_zero():
    from vjpcert.symbolic import settings
    from vjpcert.symbolic.fixed import strategies
    out = strategies.witness(_traced(None))
    assert out["status"] == "zero" and out["digits"] >= settings.ZERO_DIGITS, out


# ------------------------------------------------------------------------------------- stated bounds
def test_false_pass_bounds_are_at_least_their_schwartz_zippel_term():
    """A false-pass probability is an upper bound: never below deg / p per trial (a nonzero polynomial
    of degree deg vanishes at that fraction of the points for some polynomials), to the power of the
    independent trials, and never above 1."""
    from vjpcert.symbolic.fixed import false_pass
    from vjpcert.symbolic.modular import check as modular
    deg = 10 ** 6
    for trials in (1, 3):
        got = false_pass.false_pass_bound((deg, 0, 40.0, 0.0), false_pass.BoundField(), trials)
        assert (deg / 2.0 ** false_pass.PRIME_BITS) ** trials <= got <= 1.0, (trials, got)
        out = modular.false_pass_bound((deg, 0, 40.0, 0.0), [], trials, 0)
        per = out["per_trial"]
        assert modular.HASH_BIAS * deg / 2.0 ** (ma.PRIME_LO_BITS + 1) <= per <= 1.0, out
        assert out["total"] == pytest.approx(per ** trials, rel=1e-12), out
    assert false_pass.false_pass_bound((2 ** 70, 0, 1.0, 0.0), false_pass.BoundField(), 3) == 1.0   # vacuous, capped


def test_the_bound_field_bounds_degrees_and_coefficients():
    """(deg N, deg D, log2 |N|_1, log2 |D|_1) against the true values of small expressions."""
    import math
    from vjpcert.symbolic.fixed.false_pass import BoundField
    B = BoundField()
    x = B.leaf(None)
    sq = B.mul(x, x)                                        # x^2
    assert sq[0] == 2
    s = B.add(sq, B.const(3))                               # x^2 + 3: |N|_1 = 4
    assert s[0] == 2 and s[2] >= math.log2(4) - 1e-12
    t = B.add(B.const(3), B.const(5))                       # 8
    assert t[2] >= 3 - 1e-12
    q = B.mul(B.add(x, B.const(3)), B.inv(B.add(x, B.const(5))))   # (x + 3) / (x + 5)
    assert q[0] >= 1 and q[1] >= 1 and q[2] >= 2 - 1e-12 and q[3] >= math.log2(6) - 1e-12


def test_the_modular_bound_bounds_coefficients_of_sums():
    """log2 |N|_1 of array sums (symbolic.modular.bound) against the true values: 3 + 5 = 8, x + 1, and a
    row sum of K entries x_i + 1 (|N|_1 = 2K)."""
    import math
    from vjpcert.symbolic.modular import bound as mb
    assert mb.add(mb.const(3), mb.const(5), 0).h >= 3 - 1e-12
    x_plus_1 = mb.add(mb.LEAF, mb.const(1), 0)
    assert x_plus_1.n == 1 and x_plus_1.h >= 1 - 1e-12
    K = 6
    row = mb.sum_axes(x_plus_1, (2, K), (1,))
    assert row.n == 1 and row.h >= math.log2(2 * K) - 1e-12


def test_inverses_of_large_arrays_are_exact():
    """Above 4096 entries ModP.inv takes a^(p - 2) by squaring instead of Python's pow."""
    p = _primes()[0]
    F = ma.ModP(p)
    rng = np.random.default_rng(7)
    a = rng.integers(1, p, size=5000, dtype=np.int64)
    inv = F.inv(a)
    assert (F.mul(inv, a) == 1).all()
    assert [int(v) for v in inv[:50]] == [pow(int(v), -1, p) for v in a[:50]]


# ------------------------------------------------------------------------------------- the numeric tier
@pytest.mark.parametrize("error", [30, None])
def test_a_backward_off_by_1e_30_fails_the_numeric_tier(error):
    """30 correct digits out of the 41.5 mpmath.diff must deliver at 50 digits (0.95 x 50 - 6), and
    still 30 at 100 digits: `failed`, with a witness. The correct twin is `checked`."""
    from vjpcert.core.registry import op as declare
    from vjpcert.numeric.check import check_claim

    @declare(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], name=f"numeric_exp_sin_{error}")
    def f(B, x):
        return B.exp(x) * B.sin(x)

    @f.defvjp
    def _(B, x, dy):
        g = dy * (B.exp(x) * B.sin(x) + B.exp(x) * B.cos(x))
        return (g if error is None else g * (1 + B.c(1, 10 ** error)),)

    cert = check_claim(f, "vjp[x]", {"n": 3})
    if error is None:
        assert cert.verdict == "checked", cert.evidence
        return
    assert cert.verdict == "failed", cert.evidence
    assert cert.evidence["witness"] and abs(cert.evidence["digits"] - error) < 2, cert.evidence


# ------------------------------------------------------------------------------------- ATen rules
def _aten_cases():
    torch = pytest.importorskip("torch", reason="the PyTorch frontend needs PyTorch")
    return {
        "rsub_alpha": (lambda x, y: torch.rsub(x, y, alpha=2), [(2, 3), (2, 3)]),
        "one_minus": (lambda x: 1 - x * x, [(2, 3)]),
        "addmm_beta_alpha": (lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2), [(2, 4), (2, 3), (3, 4)]),
        "var_unbiased": (lambda x: torch.var(x, -1) * x.sum(), [(2, 5)]),
        "var_biased": (lambda x: torch.var(x, -1, correction=0) * x.sum(), [(2, 5)]),
        "add_alpha": (lambda x, y: torch.add(x, y, alpha=3) * y, [(2, 3), (2, 3)]),
        "sub_alpha": (lambda x, y: torch.sub(x, y, alpha=0.5) * x, [(2, 3), (2, 3)]),
        "sigmoid": (lambda x: torch.sigmoid(x) * x, [(2, 3)]),
        "expm1": (lambda x: torch.expm1(x) * x, [(2, 3)]),
        "log1p": (lambda x: torch.log1p(x * x) * x, [(2, 3)]),
        "log_softmax_dim0": (lambda x: torch.log_softmax(x, 0) * x, [(3, 2)]),
    }


@pytest.mark.parametrize("name", ["rsub_alpha", "one_minus", "addmm_beta_alpha", "var_unbiased", "var_biased",
                                  "add_alpha", "sub_alpha", "sigmoid", "expm1", "log1p", "log_softmax_dim0"])
def test_aten_rules_evaluate_to_what_pytorch_computes(name):
    """Rules for ATen ops (and their arguments: alpha, beta, a variance's correction) that misread
    PyTorch would make a proof about another function: forward and backward of each graph, evaluated
    in float64 and in mpmath, equal eager PyTorch."""
    import torch
    from vjpcert.core.backends import F64, MpmathBackend
    from vjpcert.frontends.pytorch import from_torch
    fn, shapes = _aten_cases()[name]
    inputs = {f"a{i}": tuple(f"d{i}_{j}" for j in range(len(s))) for i, s in enumerate(shapes)}
    dims = {f"d{i}_{j}": n for i, s in enumerate(shapes) for j, n in enumerate(s)}
    op = from_torch(fn, name=f"aten_{name}", inputs=inputs, dims=[dims])
    rng = np.random.default_rng(3)
    arrays = {k: rng.standard_normal(s) for k, s in zip(inputs, shapes)}
    xs = [torch.tensor(a, requires_grad=True) for a in arrays.values()]
    y = fn(*xs)
    dy = rng.standard_normal(tuple(y.shape))
    grads = torch.autograd.grad(y, xs, torch.tensor(dy), allow_unused=True)
    want = [y.detach().numpy()] + [np.zeros(a.shape) if g is None else g.numpy() for a, g in zip(arrays.values(), grads)]
    for B in (F64, MpmathBackend(30)):
        conv = B.convert if hasattr(B, "convert") else (lambda v: v)
        got = [op.forward(B, **{k: conv(v) for k, v in arrays.items()})]
        got += list(op.vjp(B, **{k: conv(v) for k, v in arrays.items()}, dy=conv(dy)))
        for g, w in zip(got, want):
            g = np.asarray(g, dtype=object).astype(np.float64)
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------------- the modular verdict
def test_a_vanishing_residual_whose_bound_is_not_below_the_limit_is_inconclusive(monkeypatch):
    """checked-probabilistic states a false-pass probability below MODULAR_MAX_FALSE_PASS; a bound at or
    above it (here a vacuous 0.999 per trial) leaves the claim `inconclusive` however often the residual
    vanished. The correct twin with its real bound is checked-probabilistic."""
    from vjpcert.specs import builtin_ops
    from vjpcert.symbolic.modular import check as modular
    lin, dims = builtin_ops()["linear"], {"rows": 2, "n_in": 3, "n_out": 2}
    assert modular.check_modular(lin, "vjp[x]", dims, trials=2, seed=11).verdict == "checked-probabilistic"
    real = modular.false_pass_bound

    def vacuous(bound, fields, trials, roots):
        out = real(bound, fields, trials, roots)
        return {**out, "per_trial": 0.999, "total": 0.999 ** trials}
    monkeypatch.setattr(modular, "false_pass_bound", vacuous)
    cert = modular.check_modular(lin, "vjp[x]", dims, trials=2, seed=12)
    assert cert.verdict == "inconclusive" and "false-pass bound" in cert.evidence["reason"], cert.evidence


@pytest.mark.parametrize("n", [3, 20])            # the full Jacobian, and random directions
def test_the_conditioning_allowance_is_capped_and_a_small_derivative_is_not_zero(n):
    """y = 1 + 10^-30 sin(x): the forward's own conditioning costs 30 digits, of which at most the 20
    guard digits are allowed, and a derivative 10^-30 of |y| / |x| is far above the zero-gradient
    threshold (10^-40), so it is judged against itself. A backward 15 digits off is then `failed`;
    the correct one `checked`."""
    from vjpcert.core.registry import op as declare
    from vjpcert.numeric.check import check_claim
    def flat_sin(off):
        @declare(inputs={"x": ("n",)}, output=("n",), dims=[{"n": n}], name=f"flat_sin_{n}_{off}")
        def f(B, x):
            return 1 + B.c(1, 10 ** 30) * B.sin(x)

        @f.defvjp
        def _(B, x, dy):
            g = dy * B.c(1, 10 ** 30) * B.cos(x)
            return (g if off is None else g * (1 + B.c(1, 10 ** off)),)
        return f
    certs = {off: check_claim(flat_sin(off), "vjp[x]", {"n": n}) for off in (15, None)}
    assert certs[None].verdict == "checked", certs[None].evidence
    bad = certs[15]
    assert bad.verdict == "failed", bad.evidence
    worst = bad.evidence["cases"][bad.evidence["decided_by"]]
    assert not worst.get("zero_gradient") and worst["conditioning_loss"] <= 20, worst


# ------------------------------------------------------------------------------------- the tolerance rule
def test_the_tolerance_rule_holds_an_implementation_to_k_times_the_dtype_spec_plus_a_floor():
    """Backward: at most 3 x the float32 spec's error (4 x fails, 2.9 x passes); an output the float32
    spec gets exactly right is still allowed its own rounding (1 u |y| passes, 8 u |y| fails)."""
    from vjpcert.core import tolerance
    truth = np.linspace(1.0, 2.0, 7)
    u = tolerance.unit_roundoff(np.float32)
    base_err = 1e-5
    baseline = truth + base_err

    def ok(err, baseline=baseline):
        return tolerance.compare(truth + err, truth, baseline, backward=True, dtype=np.float32)["ok"]
    assert ok(2.9 * base_err) and not ok(4 * base_err)
    assert ok(1 * u * 2.0, baseline=truth) and not ok(8 * u * 2.0, baseline=truth)
    assert tolerance.compare(truth + 2.5 * base_err, truth, baseline, backward=False, dtype=np.float32)["ok"] is False


# ------------------------------------------------------------------------------------- the wiring
def _tripled(factor):
    """A composite whose forward sums three copies of its node's output through structural maps
    (concatenate, reshape, sum: the matrix 3 I); its backward passes ``factor`` dy to the node."""
    from vjpcert.core.registry import op as declare
    from vjpcert.specs.gelu import gelu_erf

    @declare(inputs={"X": ("rows", "n")}, output=("rows", "n"), nodes={"act": gelu_erf},
             proofs=("compositional",), dims=[{"rows": 2, "n": 3}], name=f"tripled_{factor}")
    def tripled(B, X, nodes):
        H = nodes.act(X)
        rows, n = H.shape
        return np.concatenate([H, H, H], axis=-1).reshape(rows, 3, n).sum(1)

    @tripled.defvjp
    def _(B, X, dy, nodes):
        return nodes.act.vjp(X, dy * factor)
    return tripled


@pytest.mark.parametrize("factor", [3, 1, 2])
def test_a_structural_factor_dropped_by_the_backward_fails_the_wiring(factor):
    """The factor 3 lives in a structural matrix of the forward (3 I after multiplying out): a backward
    that passes dy (or 2 dy) to the node is failed, naming both words; 3 dy is proved."""
    from vjpcert.symbolic.composition.wiring import prove_wiring
    out = prove_wiring(_tripled(factor), "vjp[X]", {"rows": 2, "n": 3})
    if factor == 3:
        assert out["status"] == "proved", out
    else:
        assert out["status"] == "failed", out
        assert out["J^T dy_words_not_in_backward"] == ["3 * J[act/x]^T dy"], out
