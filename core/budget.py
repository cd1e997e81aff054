"""Run a function in a forked child under a wall-clock budget (and a memory cap), killing it at the
deadline. A hung SymPy ``simplify`` or an exploding expansion then costs its budget, never the run:
the claim becomes `inconclusive`, never `proved`.

Fork (not spawn) so the child inherits the traced claim without pickling it. Only the result crosses
the pipe, pickled. What the child writes to its standard error (a C library's message as it runs out of
memory under the cap, a warning) is kept in a file, not printed: it is told only where the child died
without a result, as the end of that error.
"""
from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass

DEFAULT_MEMORY_MB = 8192   # a strategy that needs more than this on a 24 GiB machine is a runaway

# Set by a signal handler (vjpcert.cli): a KeyboardInterrupt raised inside os.fork's after-fork
# hooks is swallowed ("Exception ignored in _releaseLock"), so waits also poll this flag.
_STOP = {"requested": False}


def request_stop() -> None:
    _STOP["requested"] = True


def stop_requested() -> bool:
    return _STOP["requested"]


@dataclass
class Outcome:
    status: str                # "ok" | "timeout" | "error"
    value: object = None
    error: str = ""
    seconds: float = 0.0


def run_with_budget(fn, seconds: float, memory_mb: int | None = DEFAULT_MEMORY_MB) -> Outcome:
    start = time.perf_counter()
    if seconds <= 0:
        return Outcome("timeout", seconds=0.0)
    if not hasattr(os, "fork"):                       # no fork: run inline, budget not enforced
        try:
            return Outcome("ok", fn(), seconds=time.perf_counter() - start)
        except Exception as exc:
            return Outcome("error", error=f"{type(exc).__name__}: {exc}",
                           seconds=time.perf_counter() - start)
    said = tempfile.TemporaryFile()     # the child's standard error: a file, so it never blocks the child
    try:
        return _fork_and_wait(fn, seconds, memory_mb, start, said)
    finally:
        said.close()


def _last_words(said) -> str:
    """The start of what a child that died wrote to its standard error: the cause comes first (a
    crash dump, where one is on, after it)."""
    said.seek(0)
    text = " ".join(said.read(4096).decode("utf-8", "replace").split())
    return f"; it said: {text[:400]}{'...' if len(text) > 400 else ''}" if text else ""


def _fork_and_wait(fn, seconds: float, memory_mb: int | None, start: float, said) -> Outcome:
    read_fd, write_fd = os.pipe()
    # The parent's objects are frozen across the fork: the child's garbage collections then skip them,
    # instead of touching (and so copying) every page of a process that may hold SymPy, torch and JAX.
    # Forked strategies ran 15-20% faster for it (more in a process with frameworks loaded).
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid == 0:                                      # child
        code = 0
        try:
            os.close(read_fd)
            os.dup2(said.fileno(), 2)
            import faulthandler
            if faulthandler.is_enabled():             # a crash dump goes where the rest of its words go
                faulthandler.enable(file=2)
            signal.signal(signal.SIGINT, signal.SIG_DFL)      # the parent decides what an interrupt means
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if memory_mb:
                try:
                    import resource
                    limit = memory_mb * 2**20
                    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                except (ImportError, ValueError, OSError):
                    pass
            try:
                payload = ("ok", fn(), "")
            except MemoryError:
                payload = ("error", None, f"MemoryError: over {memory_mb} MiB")
            except BaseException as exc:  # report any failure of the strategy to the parent
                tb = traceback.format_exc(limit=4)
                payload = ("error", None, f"{type(exc).__name__}: {exc}\n{tb}")
            try:
                data = pickle.dumps(payload)
            except Exception as exc:
                data = pickle.dumps(("error", None, f"result not picklable: {exc}"))
            view = memoryview(data)
            while view:
                n = os.write(write_fd, view)
                view = view[n:]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    gc.unfreeze()
    chunks = []
    timed_out = finished = False
    try:                                              # at once: an interrupt from here on kills the child
        os.close(write_fd)
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if _STOP["requested"]:
                raise KeyboardInterrupt("stop requested")
            ready, _, _ = select.select([read_fd], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    finished = True
                    break
                chunks.append(chunk)
    finally:                                          # timeout, Ctrl-C or error: never leave a child
        os.close(read_fd)
        if not finished:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    if timed_out:
        return Outcome("timeout", seconds=elapsed)
    if not chunks:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return Outcome("error", error=f"the worker died{f' (signal {sig})' if sig else ''} "
                                      f"without a result{_last_words(said)}", seconds=elapsed)
    status_, value, error = pickle.loads(b"".join(chunks))
    return Outcome(status_, value, error, elapsed)
