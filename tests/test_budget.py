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


# ---------------------------------------------------------------- a tiny claim's strategies, in process
def _spin():
    while True:
        pass


def _swallow_everything():
    import time as t
    while True:
        try:
            t.sleep(10)
        except Exception:       # an over-eager handler inside a strategy must not outlive the budget
            pass


def test_an_in_process_strategy_is_stopped_at_its_budget_even_by_a_handler_that_catches_exception():
    from vjpcert.symbolic.fixed.in_process import run_in_process
    for fn in (_spin, _swallow_everything):
        t = time.perf_counter()
        out = run_in_process(fn, 0.2)
        assert out.status == "timeout", fn
        assert time.perf_counter() - t < 5


def test_an_in_process_strategy_reports_as_a_forked_one_does():
    import signal

    from vjpcert.symbolic.fixed.in_process import run_in_process
    ok = run_in_process(lambda: {"a": [1, 2]}, 10)
    assert ok.status == "ok" and ok.value == {"a": [1, 2]}
    err = run_in_process(lambda: 1 / 0, 10)
    assert err.status == "error" and "ZeroDivisionError" in err.error
    import sys
    quit_ = run_in_process(lambda: sys.exit(3), 10)
    assert quit_.status == "error" and "SystemExit" in quit_.error
    unsendable = run_in_process(lambda: (lambda: 0), 10)           # the fork could not send it either
    assert unsendable.status == "error" and "not picklable" in unsendable.error
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)     # nothing left armed
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


def test_a_caller_s_timer_is_left_alone_and_the_strategy_forks():
    import os
    import signal

    from vjpcert.symbolic.fixed.in_process import run_in_process
    fired = []

    def theirs(*_):
        fired.append(1)
    previous = signal.signal(signal.SIGALRM, theirs)
    try:
        out = run_in_process(os.getpid, 10)
        assert out.status == "ok" and out.value != os.getpid()       # it ran in a child
        assert signal.getsignal(signal.SIGALRM) is theirs and not fired
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupt_stops_an_in_process_strategy():
    import pytest

    from vjpcert.symbolic.fixed.in_process import run_in_process

    def interrupted():
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_in_process(interrupted, 10)


def test_a_tiny_claim_is_decided_in_process_and_its_mutant_failed(ops, monkeypatch):
    import os

    from vjpcert.symbolic.fixed import prover
    pid, seen = os.getpid(), []
    real = prover.run_in_process
    monkeypatch.setattr(prover, "run_in_process", lambda fn, s: seen.append(os.getpid()) or real(fn, s))
    cert = prove_claim(ops["softmax"], "vjp[x]", {"rows": 1, "n": 4})
    assert cert.verdict == "proved" and seen and set(seen) == {pid}
    seen.clear()
    op = ops["softmax"]
    wrong = op.with_mutant(next(m for m in op.mutants if "vjp[x]" in m.kills))
    assert prove_claim(wrong, "vjp[x]", {"rows": 1, "n": 4}).verdict == "failed" and set(seen) == {pid}


def test_a_tiny_claim_with_no_budget_left_is_inconclusive_in_process_too(ops, monkeypatch):
    """The in-process path's timeout, through the ladder: every strategy stopped, nothing proved."""
    import os

    from vjpcert.symbolic.fixed import prover
    pid, seen = os.getpid(), []
    real = prover.run_in_process
    monkeypatch.setattr(prover, "run_in_process", lambda fn, s: seen.append(os.getpid()) or real(fn, s))
    cert = prove_claim(ops["softmax"], "vjp[x]", {"rows": 1, "n": 4}, budget=1e-6)
    assert cert.verdict == "inconclusive" and set(seen) == {pid}
    assert all(s["status"] == "timeout" for s in cert.evidence["strategies"])
