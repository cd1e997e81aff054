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


def _complains_then_succeeds():
    import os
    os.write(2, b"a C library's complaint\n")
    return 7


def _complains_then_dies():
    import os
    os.write(2, b"Exception (FLINT memory_manager). Unable to allocate memory.\n")
    os.abort()


def test_what_a_child_writes_to_standard_error_is_not_printed(capfd):
    assert run_with_budget(_complains_then_succeeds, 10).value == 7
    assert "complaint" not in capfd.readouterr().err


def test_a_child_that_dies_without_a_result_is_told_with_its_last_words(capfd):
    out = run_with_budget(_complains_then_dies, 10)
    assert out.status == "error" and "signal 6" in out.error and "Unable to allocate memory" in out.error
    assert "Unable" not in capfd.readouterr().err
