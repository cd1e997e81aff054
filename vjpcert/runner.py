"""Running claims: one task per (tier, op, claim, dims), in this process, in a pool of forked
processes (``--jobs``), or on any ``concurrent.futures``-style executor (a Dask client). Each
certificate is written the moment it arrives, so an interrupted run loses only the claims in flight.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import time
import traceback
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from typing import Callable, Iterable

from vjpcert.core.budget import stop_requested
from vjpcert.core.certificate import Certificate, sources_sha256, versions
from vjpcert.core.registry import KINK_CLAIM
from vjpcert.core.sources import covered, stale_reads
from vjpcert.unhashed import unhashed, watch
from vjpcert.task import Task, make_task  # noqa: F401  (make_task: re-exported, where callers have it)
from vjpcert.tiers import checker_sha256, tier


def point_sha256(point) -> str:
    """The identity of a ``--point``: the sha256 of its values (the values go into the evidence)."""
    import hashlib
    import json
    return hashlib.sha256(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()


def certificate_options(task: Task) -> dict:
    """What a certificate records of its task's options (its identity): a point by its hash."""
    opts = dict(task.options)
    if "point" in opts:
        opts["point"] = point_sha256(opts["point"])
    return opts


class CodeChanged(Exception):
    """The code this process would run is not the code the run was planned with."""


class Unhashed(Exception):
    """The op's code used, while it ran, what its certificates would not hash (``vjpcert.unhashed``)."""


def execute(task: Task) -> Certificate:
    """Run one task (in whatever process it lands); the certificate records the task's options."""
    cert = _execute(task)
    cert.options = certificate_options(task)
    if "point" in dict(task.options):
        cert.evidence["given_point"] = {k: v for k, v in dict(task.options)["point"]}
    return cert


def _check_code(task: Task, op) -> None:
    if not task.expect:
        return
    spec, checker = task.expect[:2]
    if op.identity_sha256 != spec:
        raise CodeChanged(f"the code of {op.name} this worker loaded ({', '.join(p.name for p in op.source_files)}) "
                          f"is not the code the run was planned with: it changed on disk, or this is a "
                          f"long-lived worker that imported it before; rerun (restart the workers)")
    if checker_sha256(task.tier, dict(task.options).get("method"), task.claim) != checker:
        raise CodeChanged(f"this worker runs other {task.tier} checker code than the run was planned with "
                          f"(another vjpcert version?)")
    why = stale_reads(op, dict(task.expect[2]) if len(task.expect) > 2 else {})
    if why:
        raise CodeChanged(f"a data file the code of {op.name} read: {why}; rerun (restart the workers)")


# One run's ops, by their reference: the tasks of one op (its claims, tiers and dims) share the op
# that the run's first task of it resolved, with what that op has cached (a framework's traced graphs,
# a spec's traces), instead of loading its file and tracing it again per task. The op's code and its
# identity are then those of one moment, checked against the plan once (``_check_code``). Only within
# ``run_tasks`` (a pool's workers live for one run): a long-lived worker resolves each task afresh.
_RUN_OPS: dict | None = None


def _resolve(ref):
    if _RUN_OPS is None:
        return ref.resolve()
    op = _RUN_OPS.get(ref)
    if op is None:
        op = _RUN_OPS[ref] = ref.resolve()
    return op


@contextlib.contextmanager
def _one_op_per_ref():
    global _RUN_OPS
    before, _RUN_OPS = _RUN_OPS, {}
    try:
        yield
    finally:
        _RUN_OPS = before


def _execute(task: Task) -> Certificate:
    """A crash of the checker itself becomes an `inconclusive` certificate that carries the error:
    never a pass, never a lost run."""
    start = time.perf_counter()
    op = None
    try:
        op = _resolve(task.op)
        _check_code(task, op)
        with watch(op) as seen:
            cert = tier(task.tier).runs(op, task)
        why = unhashed(op, seen)
        if why:
            raise Unhashed(why)
        if cert.op == op.base_name:
            # what the whole run read, forked strategies included: also data read after the checker
            # issued its certificate
            cert.spec_sha256, cert.sources = covered(op)
        return cert
    except Exception as exc:
        return Certificate(op=task.op.name, claim=task.claim, tier=task.tier, verdict="inconclusive",
                           method=dict(task.options).get("method", "error"), dims=task.dims_dict, assumptions=[],
                           evidence={"error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc(limit=6)},
                           seconds=time.perf_counter() - start,
                           spec_sha256=op.spec_sha256 if op is not None else "",
                           checker_sha256=sources_sha256([]), versions=versions())  # never current


def run_tasks(tasks: Iterable[Task], *, jobs: int = 1, executor: Executor | None = None,
              on_result: Callable[[Task, Certificate], None] = lambda t, c: None) -> list[Certificate]:
    tasks = list(tasks)
    out: list[Certificate] = []
    if executor is None and jobs <= 1:
        with _one_op_per_ref():
            for task in tasks:
                cert = execute(task)
                if stop_requested():            # an interrupt may have been swallowed inside the task
                    raise KeyboardInterrupt("stop requested")
                on_result(task, cert)
                out.append(cert)
        return out
    own = executor is None
    if own:
        ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() \
            else multiprocessing.get_context()
        executor = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_start)
    futures = {}
    try:
        futures = {executor.submit(execute, t): t for t in tasks}
        for fut in as_completed(futures):
            if stop_requested():
                raise KeyboardInterrupt("stop requested")
            cert = fut.result()
            on_result(futures[fut], cert)
            out.append(cert)
    except BaseException:
        for fut in futures:
            fut.cancel()
        if own:     # stop the claims in flight too: their results would have nowhere to go
            for proc in list(getattr(executor, "_processes", {}).values()):
                proc.terminate()
        raise
    finally:
        if own:
            executor.shutdown(wait=False, cancel_futures=True)
    return out


def _worker_start():
    """A pool worker of one run: the run's ops shared by its tasks (``_resolve``), and its signals."""
    global _RUN_OPS
    _RUN_OPS = {}
    _worker_signals()


def _worker_signals():
    """Workers leave Ctrl-C to the main process (which cancels and terminates them) and die on
    SIGTERM without a traceback."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def exit_code(certs: list[Certificate], proof_tier_only: bool = False) -> int:
    """0 every claim passed (proved, for `prove`), 1 any failed, 3 anything left undecided."""
    if any(c.verdict == "failed" for c in certs):
        return 1
    if proof_tier_only:      # `prove`: proved; `prove --modular` asked for the randomised exact test too;
        # the value on a kink is a convention checked at exact points (never proved): checked passes
        return 0 if all(c.verdict.startswith("proved") or (c.verdict == "checked-probabilistic" and
                                                             (c.options or {}).get("method") == "modular")
                        or (c.claim == KINK_CLAIM and c.verdict == "checked")
                        for c in certs) else 3
    return 0 if all(c.passed for c in certs) else 3
