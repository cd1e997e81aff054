"""Budgets are enforced by killing the strategy; a claim nobody decides is inconclusive."""
import time

from vjpcert.core.budget import run_with_budget
from vjpcert.symbolic.fixed.prover import prove_claim


def test_a_hung_function_is_killed_at_its_budget():
    t = time.perf_counter()
    out = run_with_budget(lambda: time.sleep(30), 0.2)
    assert out.status == "timeout"
    assert time.perf_counter() - t < 5


def test_results_and_errors_cross_the_fork():
    assert run_with_budget(lambda: {"a": 1}, 10).value == {"a": 1}
    out = run_with_budget(lambda: 1 / 0, 10)
    assert out.status == "error" and "ZeroDivisionError" in out.error


def test_memory_runaway_is_an_error_not_a_crash():
    out = run_with_budget(lambda: bytearray(2 * 2**30), 20, memory_mb=512)
    assert out.status == "error"


def test_claim_with_a_tiny_budget_is_inconclusive_never_proved(ops):
    cert = prove_claim(ops["layernorm"], "vjp[x]", {"rows": 1, "n": 32}, budget=0.005)
    assert cert.verdict == "inconclusive"
    assert all(s["status"] == "timeout" for s in cert.evidence["strategies"])
