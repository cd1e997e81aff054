"""Run one strategy of a tiny claim in the prover's own process, under a timer, instead of a fork.

A fork costs some 20-60 ms (its page tables, the copy-on-write faults of the collector and the
allocator, the result's pickle), more than a small claim's whole ring: the mutation suite's cheap
mutants spent a third of their time forking. What it gives up is the fork's other guard, its memory
cap, which is there for the runaway expansions of large claims: no claim of this size has come near it
(every committed certificate's claims, the kill matrix's mutants and the suite ran this way).

What it keeps of the fork's contract (``core.budget.run_with_budget``):
- the budget: a SIGALRM timer raises ``_OverBudget`` at the deadline. It derives from BaseException,
  so a strategy's ``except Exception`` cannot swallow it, and the outcome is a timeout, never a result;
- errors: any exception of the strategy (SystemExit included) is an ``error`` outcome, with the same
  words as a child's; an interrupt (KeyboardInterrupt) stops the run, as it stops a forked one;
- the result crosses a pickle both ways, so what the ladder reads is a copy, and a result the fork
  could not send is an error here too;
- warnings a strategy raises are not printed (a child's standard error is kept out of the output);
- the collector skips the process's own objects while the strategy runs (``gc.freeze``), as a forked
  child's did: without it, a strategy's collections walk the whole heap of a worker holding SymPy,
  torch and JAX.

Where no timer can be had -- off the main thread, or when a caller already holds SIGALRM (a timer
set, or a handler of its own, e.g. pytest-timeout) -- it forks as before.
"""
from __future__ import annotations

import gc
import pickle
import signal
import threading
import time
import traceback
import warnings

from vjpcert.core.budget import Outcome, run_with_budget


class _OverBudget(BaseException):
    """Raised by the timer in the strategy's frame; not an Exception, so nothing inside catches it."""


def _over_budget(signum, frame):
    raise _OverBudget()


def timer_is_free() -> bool:
    """Whether this process may arm SIGALRM without taking it from someone."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        return False
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)


def run_in_process(fn, seconds: float) -> Outcome:
    """``fn()`` under a wall-clock budget of ``seconds``, in this process where a timer is free."""
    if seconds <= 0:
        return Outcome("timeout", seconds=0.0)
    if not timer_is_free():
        return run_with_budget(fn, seconds)
    start = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, _over_budget)
    gc.freeze()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                value = fn()
            finally:                     # the timer may fire in here too: the handler below takes it
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _OverBudget:
        return Outcome("timeout", seconds=time.perf_counter() - start)
    except KeyboardInterrupt:
        raise
    except MemoryError:
        return Outcome("error", error="MemoryError", seconds=time.perf_counter() - start)
    except BaseException as exc:         # the strategy's own failure, as a forked child reports it
        tb = traceback.format_exc(limit=4)
        return Outcome("error", error=f"{type(exc).__name__}: {exc}\n{tb}", seconds=time.perf_counter() - start)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gc.unfreeze()
    try:
        value = pickle.loads(pickle.dumps(value))
    except Exception as exc:
        return Outcome("error", error=f"result not picklable: {exc}", seconds=time.perf_counter() - start)
    return Outcome("ok", value, seconds=time.perf_counter() - start)
