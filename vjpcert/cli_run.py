"""Planning and running a tier command (``all``, ``prove``, ``check``, ``kernels``): from the parsed
arguments to the claims to run (``_plan``: every spec validated before anything is written), then to
certificates, pages and the summary table (``_run``), with the exit codes they end in.

Apart from the commands (``vjpcert.cli``) because each command differs only in the tiers it asks for
and what it does around this; ``verify`` plans as ``all`` would, without running.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from vjpcert.core.registry import SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNDECIDED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


# ------------------------------------------------------------------------------ planning
def _load_point(path: str, op) -> tuple[dict, dict]:
    import json

    import numpy as np

    from vjpcert.core.reference import infer_dims
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(None, f"--point: file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(None, f"--point: {path} is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise SpecError(None, f"--point: {path} must hold an object {{input name: nested list}}")
    point = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
    for k, v in point.items():
        if not np.all(np.isfinite(v)):
            raise SpecError(op.name, f"--point: {k!r} contains NaN or Inf")
    return infer_dims(op, point), {k: v.tolist() for k, v in point.items()}


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def check_writable_dir(path: Path, option: str = "--reports") -> None:
    """Refuse, before any work, a report folder that cannot be written: a file, a folder under a file,
    a folder (or the nearest existing parent of one to be made) that refuses a new file. Nothing is
    left behind: the probe file is removed, and a missing folder is not made here."""
    import errno
    import tempfile
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SpecError(None, f"{option} {path} exists and is not a directory")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise SpecError(None, f"{option} {path} cannot be made: {probe} is a file")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".vjpcert-probe-"):
            pass
    except OSError as exc:
        reason = errno.errorcode.get(exc.errno, "") + (f" ({exc.strerror})" if exc.strerror else "")
        where = path if probe == path else f"{path} (its parent {probe})"
        raise SpecError(None, f"{option} {where} is not writable: {reason.strip() or exc}") from None


def _plan(args, tiers: tuple[str, ...]):
    """Select ops, expand dims and claims per tier, and validate every spec before anything is
    written. Returns (tasks, ops by name)."""
    from vjpcert.core.validate import check_claim_files
    from vjpcert.ops import frontend_declaration, parse_dims, select_ops
    from vjpcert.plan import kernel_unavailable, tier_tasks

    if getattr(args, "reports", None) is not None and not getattr(args, "read_only", False):
        check_writable_dir(Path(args.reports))
    if getattr(args, "dims_alias", None):
        args.dims = args.dims_alias
    if getattr(args, "modular_dims", None):
        args.modular = True
    if "numeric" in tiers:
        from vjpcert.numeric.settings import MIN_DPS
        if args.dps < MIN_DPS:
            raise SpecError(None, f"--dps {args.dps} is below {MIN_DPS}: too few digits to check anything")
    if args.jobs < 1:
        raise SpecError(None, "--jobs must be >= 1")
    if getattr(args, "timeout", None) is not None and args.timeout <= 0:
        raise SpecError(None, "--timeout must be > 0")
    kernel_missing = kernel_unavailable() if "kernel" in tiers else None
    if kernel_missing:
        if tiers == ("kernel",):
            raise SpecError(None, kernel_missing)
        args.notes = [f"vjpcert: {kernel_missing}; the other tiers run without it"]
        print(args.notes[0], file=sys.stderr)
        tiers = tuple(t for t in tiers if t != "kernel")
    with _deadline(getattr(args, "timeout", None), "loading the spec files"):
        selected = select_ops(args.targets, frontend_declaration(args))
    overrides = parse_dims(args.dims)
    if overrides:
        known = set().union(*(op.dim_names() for _, op in selected))
        unknown = set(overrides) - known
        if unknown:
            raise SpecError(None, f"--dims names {sorted(unknown)}, which no selected op has "
                                  f"(they have {sorted(known)})")
    point = fixed = None
    if getattr(args, "point", None):
        if len(selected) != 1:
            raise SpecError(None, "--point needs exactly one op")
        fixed, raw = _load_point(args.point, selected[0][1])
        point = tuple(sorted((k, _freeze(v)) for k, v in raw.items()))
    tasks, ops, deferred = [], {}, []
    args.refused, args.selected = {}, len(selected)
    budget = getattr(args, "timeout", None)
    for ref, op in selected:
        mine, later = [], []
        try:
            with _deadline(budget, f"planning {op.name} (tracing its spec at its dims)"):
                for tier in tiers:
                    mine += tier_tasks(tier, ref, op, overrides=overrides, large=args.large, seed=args.seed,
                                       budget=budget, dps=getattr(args, "dps", 50),
                                       method=getattr(args, "method", "mpmath-diff"), point=point,
                                       fixed_dims=fixed, general=getattr(args, "general", False),
                                       modular=getattr(args, "modular", False) and tier == "symbolic",
                                       check=(lambda op, dims: None) if getattr(args, "read_only", False)
                                       else (lambda op, dims, later=later: (check_claim_files(op),
                                                                            later.append((op, dims)))))
        except SpecError as exc:
            if len(selected) == 1:
                raise
            args.refused[op.name] = str(exc)      # a refused op refuses itself, not its neighbours
            continue
        ops[op.name] = op
        tasks += mine
        deferred += later
    if selected and len(args.refused) == len(selected):
        raise SpecError(None, "every op was refused:\n  " + "\n  ".join(args.refused.values()))
    args.validate_later = deferred
    return tasks, ops


def _validate_todo(args, todo) -> list:
    """Validate, before anything is written, the specs of the ops that have claims to run, at every
    dims planning named (``tiers.Planning.check``). An op whose every certificate is current is not
    traced again: its certificates were issued by this very spec and checker code, which passed the
    same validation then. Returns the tasks left to run: an op refused here is dropped (and named in
    ``args.refused``) when other ops were selected with it."""
    from vjpcert.core.validate import validate
    running = {t.op.name for t in todo}
    seen = set()
    refused = getattr(args, "refused", None)
    for op, dims in getattr(args, "validate_later", ()):
        key = (op.name, tuple(sorted(dims.items())))
        if op.name in running and key not in seen and op.name not in (refused or {}):
            seen.add(key)
            try:
                with _deadline(getattr(args, "timeout", None), f"planning {op.name} (tracing its spec at its dims)"):
                    validate(op, dims)
            except SpecError as exc:
                if refused is None or getattr(args, "selected", 1) == 1:
                    raise
                refused[op.name] = str(exc)
    return [t for t in todo if t.op.name not in (refused or {})]


class OutOfBudget(BaseException):
    """Work before the claims (loading a spec file, planning, tracing a spec) took longer than
    --timeout: undecided. A BaseException, so a spec's or a loader's ``except Exception`` cannot turn
    it into an ordinary error (or swallow it)."""


@contextmanager
def _deadline(seconds: float | None, what: str):
    """Bound the work inside by a wall-clock alarm: a spec whose forward loops forever, or dims too
    large to trace, costs --timeout (exit 3, nothing written), as a claim would. No bound without
    --timeout, or off the main thread (signals are delivered there only)."""
    import signal
    import threading
    if seconds is None or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise OutOfBudget(f"{what} took longer than --timeout {seconds:g} s: nothing was run or written")
    previous = signal.signal(signal.SIGALRM, expired)
    # and again every 0.2 s until disarmed: a handler that raises while Python collects garbage (a
    # __del__ of the arrays a trace drops) is "ignored" there, and one alarm would be lost for good
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.2)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _unreachable(address: str) -> str | None:
    """Why nothing listens at a ``tcp://host:port`` address (connection refused, no such host), or
    None: reachable, slow to answer, or an address of another kind (Dask tries those itself)."""
    import socket
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme != "tcp" or not host or not port:
        return None
    try:
        socket.create_connection((host, port), timeout=3).close()
    except (ConnectionRefusedError, socket.gaierror) as exc:
        return exc.strerror or type(exc).__name__
    except OSError:
        return None
    return None


def _executor(args):
    """A Dask cluster's executor for --scheduler (any concurrent.futures executor works)."""
    if not getattr(args, "scheduler", None):
        return None, None
    try:
        from distributed import Client
    except ImportError:
        raise SpecError(None, "--scheduler needs Dask: pip install -e '.[dask]'") from None
    refused = _unreachable(args.scheduler)
    if refused:           # at once: the client would retry for its whole timeout before saying so
        raise SpecError(None, f"cannot reach the scheduler at {args.scheduler!r}: {refused}")
    try:
        client = Client(args.scheduler, timeout="10s")
    except Exception as exc:      # OSError, TimeoutError, ValueError for an address Dask cannot parse
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise SpecError(None, f"cannot reach the scheduler at {args.scheduler!r} (expected an address such as "
                              f"tcp://10.0.0.5:8786): {reason}") from None
    return client.get_executor(pure=False), client


# ------------------------------------------------------------------------------ running
def plan_and_run(args, tiers: tuple[str, ...], command: str, proof_only: bool, require=None) -> int:
    """Plan and run a tier command; from the command line, replay its last run instead where that ran
    nothing and every file it was decided from is as it was (``vjpcert.up_to_date``)."""
    from rich.console import Console

    from vjpcert.up_to_date import Memo, Transcript, replayable_command
    memo = Memo(args, command) if getattr(args, "_replay", False) and replayable_command(args) else None
    if memo is not None:
        if getattr(args, "reports", None) is not None and not getattr(args, "read_only", False):
            check_writable_dir(Path(args.reports))         # as planning would first: a permission is no file
        code = memo.replay()
        if code is not None:
            return code
    tasks, ops = _plan(args, tiers)
    if require is not None:
        require(tasks, ops)            # a command's own refusal of what was planned (raises SpecError)
    out = Transcript(Console(stderr=True, soft_wrap=True))     # paths and witness lines are never broken
    code = _run(args, tasks, ops, command, proof_only, out=out)
    if memo is not None:
        memo.record(out, code, ops, args.targets, getattr(args, "notes", []), getattr(args, "refused", {}))
    return code


def _run(args, tasks, ops, command: str, proof_only: bool, out=None) -> int:
    """Run the planned tasks that have no current certificate, write the pages, print the summary
    to ``out`` (a ``Transcript``, kept for a replay) and return the exit code."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from vjpcert.core.certificate import Certificate, remove_orphaned_temporaries
    from vjpcert.plan import split_current
    from vjpcert.reports import TIERS, TIMINGS, record_timings, summary, write_certificate, write_reports
    from vjpcert.runner import exit_code, run_tasks
    from vjpcert.stamps import Stamps, plot_inputs, resources_inputs
    from vjpcert.up_to_date import Transcript
    from vjpcert.witness import witness_lines
    from rich.markup import escape

    root = Path(args.reports)
    resources_ok = True
    fresh_clone = not (root / TIMINGS).exists()      # no run has recorded its times here yet
    if root.exists() and not root.is_dir():
        raise SpecError(None, f"--reports {root} exists and is not a directory")
    if root.is_dir():
        remove_orphaned_temporaries(root)          # left by a run killed with SIGKILL mid-write
    out = out if out is not None else Transcript(Console(stderr=True, soft_wrap=True))
    records: dict = {}
    todo, current = (tasks, []) if args.force else split_current(tasks, ops, root, records)
    todo = _validate_todo(args, todo)
    refused = getattr(args, "refused", {})
    for name in refused:
        ops.pop(name, None)
    if refused and len(refused) == len({t.op.name for t in tasks} | set(refused)):
        raise SpecError(None, "every op was refused:\n  " + "\n  ".join(refused.values()))
    executor, client = _executor(args)
    done = []
    colour = {"failed": "red", "inconclusive": "yellow", "checked": "cyan"}
    if current and not args.quiet:
        # resuming is the default; --force is the opposite (every claim again, from zero): say so
        out.print(f"{len(current)} of {len(tasks)} certificates are current: skipped, the other "
                  f"{len(todo)} run (resuming; --force would rerun all {len(tasks)} from zero)")
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=out.console, transient=True) as progress:
            bar = progress.add_task(command, total=len(todo))

            def on_result(task, cert):
                write_certificate(cert, root)
                done.append(cert)
                progress.update(bar, advance=1, description=f"{command}: {escape(task.label())}")
                if not args.quiet:
                    c = colour.get(cert.verdict, "green")
                    # names and dims print literally: `vjp[x]` and `[n=3]` are not rich markup
                    progress.console.print(f"[{c}]{cert.verdict:>22}[/{c}]  {task.tier:8} {escape(task.label())}  "
                                           f"({escape(cert.method)}, {cert.seconds:.2f}s)", soft_wrap=True)
                error = cert.evidence.get("error") if cert.verdict == "inconclusive" else None
                if error:                         # even with --quiet: the spec or the checker stopped it
                    if args.quiet:
                        progress.console.print(f"[yellow]inconclusive[/yellow]  {task.tier} {escape(task.label())}",
                                               soft_wrap=True)
                    progress.console.print(escape(f"    stopped by {error}"), highlight=False, soft_wrap=True)
                if cert.verdict == "failed":      # even with --quiet: a failure is what the user acts on
                    if args.quiet:
                        progress.console.print(f"[red]failed[/red]  {task.tier} {escape(task.label())}", soft_wrap=True)
                    for line in witness_lines(cert, root):
                        progress.console.print(escape(line), highlight=False, soft_wrap=True)
            try:
                run_tasks(todo, jobs=args.jobs, executor=executor, on_result=on_result)
                # the by-products are made again only when their inputs changed (vjpcert/stamps.py)
                stamps = Stamps(root)
                if any(t.tier == "kernel" for t in tasks):
                    made_from = resources_inputs()
                    if not stamps.current("resources", made_from, [root / "kernels" / "resources.json"]):
                        progress.update(bar, description=f"{command}: kernel resources (sm_90)")
                        resources_ok = _kernel_resources(root, out)
                        stamps.record("resources", made_from if resources_ok else None)
                if any(t.tier == "numeric" for t in tasks) and not getattr(args, "no_plots", True):
                    from vjpcert.numeric.plots import write_fd_plot
                    for op in ops.values():
                        made_from = plot_inputs(op, args.seed)
                        plot = root / "plots" / f"{op.base_name}-fd"
                        if stamps.current(f"plots/{op.base_name}", made_from,
                                          [plot.with_suffix(".png"), plot.with_suffix(".json")]):
                            continue
                        progress.update(bar, description=f"{command}: plot {escape(op.name)}")
                        try:
                            write_fd_plot(op, root, seed=args.seed)
                            stamps.record(f"plots/{op.base_name}", made_from)
                        except Exception as exc:   # a picture must never cost the certificates
                            stamps.record(f"plots/{op.base_name}", None)
                            out.print(f"[yellow]warning[/yellow]: no plot for {escape(op.name)}: "
                                      f"{escape(type(exc).__name__ + ': ' + str(exc))}")
            except KeyboardInterrupt:
                record_timings(root, done)
                write_reports(root, ops, command)
                out.print(f"interrupted: {len(done)} of {len(todo)} certificates written to {root}/; "
                          f"run the same command again to resume")
                return EXIT_INTERRUPTED
    finally:
        if client is not None:
            client.close()
    if not tasks:
        out.print("nothing to do: no claims for the selected ops and tiers")
        return EXIT_OK
    record_timings(root, done)
    write_reports(root, ops, command, reuse=not done)
    # the verdicts of this plan: the fresh results, and the current certificates that were skipped
    final = done + [Certificate.from_dict(records[t]) for t in current]
    out.ran, out.records = len(done), [(ops[t.op.name], records[t]) for t in current]
    tiers = [t for t in TIERS if any(c.tier == t for c in final)]
    rows = [[escape(name), *[summary([c for c in final if c.op == name and c.tier == t]).replace("**", "")
                             for t in tiers]] for name in sorted({c.op for c in final})]
    old_failures = [c for c in final[len(done):] if c.verdict == "failed"]
    if old_failures:                      # skipped as current, still failed: say why, as for fresh ones
        out.print(f"[red]{len(old_failures)} current certificate(s) hold a failure[/red] (fix the backward, "
                  f"then rerun):")
        for c in old_failures:
            out.print(f"[red]failed[/red]  {c.tier} {escape(c.op)} {escape(c.claim)}")
            for line in witness_lines(c, root):
                out.print(escape(line), highlight=False, soft_wrap=True)
    out.table(f"{command}: {len(final)} claims ({len(done)} run, {len(final) - len(done)} current)",
              ["op", *tiers], rows)
    out.print(f"reports: {root}/README.md and {root}/index.html")
    code = exit_code(final, proof_tier_only=proof_only)
    if refused:                            # bad input, after the others' certificates: exit 2 unless one failed
        for problem in refused.values():
            print(f"vjpcert: error: {problem}", file=sys.stderr)
        print(f"vjpcert: {len(refused)} op(s) refused ({', '.join(sorted(refused))}); the others' certificates "
              f"are written", file=sys.stderr)
        code = code if code == EXIT_FAILED else EXIT_BAD_INPUT
    if _shows_the_checkers(command, args, done, current, fresh_clone):
        if not _rederive_sample(root, ops, out, args.seed):
            return EXIT_FAILED
    return EXIT_FAILED if not resources_ok and code in (EXIT_OK, EXIT_UNDECIDED) else code


def _shows_the_checkers(command: str, args, done: list, current: list, fresh_clone: bool) -> bool:
    """A fresh clone's first `vjpcert all`: every committed certificate is current, so nothing would be
    shown being made; derive a sample again instead. Once: the sample's times are recorded
    (``timings.json``, not committed), so the next run with nothing to do does nothing."""
    return (fresh_clone and not done and bool(current) and command == "vjpcert all" and not args.targets
            and not args.quiet)


TOUR_SAMPLE = 4               # certificates re-derived when a run finds all of them current (one per tier)
FULL_RUN = "about 15 minutes on 2 cores with --jobs 2"   # `vjpcert all --force`, measured on the built-in ops


def _rederive_sample(root: Path, ops: dict, console, seed: int) -> bool:
    """Derive a few current certificates again (one per tier where possible), print each verdict
    beside its certificate's, and say how to re-derive everything; record how long each took (so
    this is shown once per clone). False if one differs."""
    from rich.markup import escape

    from vjpcert.ops import OpRef
    from vjpcert.reports import record_timings
    from vjpcert.verify import quick_to_derive, replay, sample_paths
    paths = sample_paths(root, TOUR_SAMPLE, seed, keep=quick_to_derive(ops, root))
    console.print(f"every certificate is current; deriving {len(paths)} of them again to show the checkers "
                  f"at work (vjpcert verify --replay checks more):")

    def shown(rel, record, fresh):
        same = fresh.verdict == record["verdict"] and fresh.method == record["method"]
        mark = "[green]same as its certificate[/green]" if same else "[red]DIFFERS from its certificate[/red]"
        dims = ", ".join(f"{k}={v}" for k, v in sorted(record["dims"].items())) or "every size"
        console.print(f"  {fresh.tier:8} {escape(record['op'])} {escape(record['claim'])} {escape(f'[{dims}]')}: "
                      f"{fresh.verdict} ({escape(fresh.method)}, {fresh.seconds:.1f}s), {mark}", soft_wrap=True)
    refs = {name: OpRef(name) for name in ops}
    fresh_certs = []
    problems = replay(root, refs, paths, on_result=lambda rel, record, fresh: (fresh_certs.append(fresh),
                                                                               shown(rel, record, fresh)))
    record_timings(root, fresh_certs)
    for p in problems:
        console.print(f"[red]{escape(str(p))}[/red]", soft_wrap=True)
    console.print(f"to derive every certificate again from zero: vjpcert all --force ({FULL_RUN})")
    return not problems


def _kernel_resources(root: Path, console) -> bool:
    """Compile every kernel for sm_90 (no GPU needed) and record registers, spills, shared memory and
    float64 instructions in reports/kernels/resources.json; False if a kernel breaks a limit."""
    import os
    import subprocess
    out = root / "kernels" / "resources.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "vjpcert.cuda_kernels.resources", "--out", str(out)],
                          env={**os.environ, "VJPCERT_KERNEL_MODE": "compile"}, capture_output=True, text=True)
    if proc.returncode != 0:
        console.print(f"[red]kernel resources[/red]: {(proc.stdout + proc.stderr).strip()[-1500:]}")
    if out.exists():      # compile times vary run to run: keep them out, so the report diffs cleanly
        import json

        from vjpcert.core.certificate import atomic_write
        data = json.loads(out.read_text())
        for r in data.get("kernels", {}).values():
            r.pop("seconds", None)
        atomic_write(out, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return proc.returncode == 0


def _rel(task, ops):
    from vjpcert.plan import task_relpath
    return task_relpath(task, ops[task.op.name].base_name)
