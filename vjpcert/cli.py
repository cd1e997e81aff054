# PYTHON_ARGCOMPLETE_OK   (shell completion: pip install -e '.[completion]', see README "The commands")
"""The ``vjpcert`` command.

    vjpcert all     [OP|FILE ...]   every tier for every op (the README's main job)
    vjpcert prove   [OP|FILE ...]   the symbolic tier: exact proofs
    vjpcert check   [OP|FILE ...]   the numeric tier: mpmath checks with digits
    vjpcert kernels [OP ...]        the kernel tier: CUDA kernels against the specs
    vjpcert triton  [FILE ...|--liger]  the Triton tier: your TRITON_KERNELS, or Liger-Kernel's (reports/liger/)
    vjpcert verify  [REPORTS]       are the committed certificates (and the pages) still current?
    vjpcert render  [REPORTS]       re-render the pages from the certificates (runs no checks)
    vjpcert mutate  [OP ...]        the mutation suite: which checker kills which wrong backward
    vjpcert frameworks              PyTorch's (and JAX's) own backwards, proved: reports/frameworks/

Exit codes: 0 every claim passed (for ``prove``: every claim proved); 1 a claim failed (a wrong
backward: the certificate holds a witness) or, for ``verify``, a certificate is stale, edited,
malformed or missing; 2 usage error or bad input (nothing is written); 3 nothing failed but
something was left undecided; 130 interrupted (finished certificates are kept, reruns resume).
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

from vjpcert.core.registry import SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNDECIDED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


# ------------------------------------------------------------------------------ arguments
def _version() -> str:
    """The installed distribution's version (pyproject.toml), without importing the package's tiers."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("vjpcert")
    except PackageNotFoundError:          # run from a source tree that was never installed
        return "unknown (not installed)"


def _targets(p):
    p.add_argument("targets", nargs="*", metavar="OP|FILE",
                   help="built-in op names, paths of spec files, FILE::op (one op of a file), or "
                        "torch:module:function / jax:module:function (default: every built-in op)")


def _run_options(p, *, budget=True):
    p.add_argument("--dims", help="override dims, e.g. n=128,rows=1 (applied to ops that have them)")
    p.add_argument("--large", action="store_true", help="use each op's large dims ladder")
    if budget:
        p.add_argument("--timeout", type=float, default=None, help="budget per claim in seconds (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="parallel worker processes (default 1)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on a Dask cluster (e.g. tcp://10.0.0.5:8786) instead of local processes")
    p.add_argument("--seed", type=int, default=0, help="seed for every random point (replayable)")
    p.add_argument("--reports", default="reports", help="report directory (default: reports)")
    p.add_argument("--force", action="store_true", help="rerun claims whose certificates are current")
    p.add_argument("--quiet", action="store_true", help="no per-claim lines")


def _frontend_options(p):
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter value (repeatable): passed to a torch:/jax: function, or the spec's "
                        "value for --impl (e.g. eps=1e-6)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=DIM,DIM",
                   help="a torch:/jax: target's differentiable input and its dims, in call order "
                        "(repeatable), e.g. --input x=rows,n --input gamma=n")
    p.add_argument("--nondiff", action="append", default=[], metavar="NAME=DIM,DIM",
                   help="a torch:/jax: target's non-differentiable input (after the differentiable ones)")
    p.add_argument("--init", action="append", default=[], metavar="NAME=VALUE",
                   help="a torch: nn.Module class's constructor argument (repeatable): a Python literal, or a "
                        "dim's name for its size at each dims, e.g. --init dim=D --init heads=4")
    p.add_argument("--train", action="store_true",
                   help="trace a torch: nn.Module in training mode (default: eval mode, dropout off)")
    p.add_argument("--modular-dims", action="append", default=[], metavar="DIM=N,...",
                   help="a torch:/jax: target's production dims (repeatable), where the randomised exact "
                        "test runs (implies --modular), e.g. --modular-dims rows=512,D=4096,F=11008")
    p.add_argument("--spec", dest="like", metavar="OP|FILE::NAME",
                   help="a torch:/jax: target's forward must equal this spec's (and takes its inputs and dims)")
    p.add_argument("--constants", choices=["named", "decimal"], default="named",
                   help="read a torch:/jax: graph's float constants as the reals they round (1/sqrt(2), "
                        "sqrt(2/pi), ...) where one matches within a few ulps, else as the decimals they print "
                        "as (named, the default), or always as the decimals (decimal)")


def _numeric_options(p):
    p.add_argument("--dps", type=int, default=50, help="mpmath digits (default 50, at least 20)")
    p.add_argument("--method", default="mpmath-diff",
                   choices=["mpmath-diff", "complex-step", "richardson", "central"])
    p.add_argument("--no-plots", action="store_true", help="skip the finite-difference plots")


def _modular_option(p):
    p.add_argument("--modular", action="store_true",
                   help="also the randomised exact test at each op's production dims (modular_dims: a "
                        "ViT-Tiny, GPT-2-small, Llama-style block); seconds to minutes per op")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vjpcert", description="Certificates for backward passes.")
    parser.add_argument("--version", action="version", version=f"vjpcert {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("all", help="every tier for every op: proofs, numeric checks, kernel checks")
    _targets(p)
    _run_options(p)
    _frontend_options(p)
    _numeric_options(p)
    p.add_argument("--no-general", dest="general", action="store_false",
                   help="skip the general (every-size) proofs")
    _modular_option(p)
    p = sub.add_parser("prove", help="prove backward = J^T dy and every law exactly (symbolic tier)")
    _targets(p)
    _run_options(p)
    _frontend_options(p)
    p.add_argument("--dtype", dest="trace_dtype", choices=["float64", "float32", "bfloat16", "float16"],
                   help="trace a torch:/jax: target at this dtype and prove that graph (default: float64, "
                        "refused if the graph at float32, bfloat16 or float16 differs)")
    p.add_argument("--no-general", dest="general", action="store_false",
                   help="skip the general (every-size) proofs")
    _modular_option(p)
    p = sub.add_parser("check", help="check backward against derivatives of the forward in mpmath "
                                     "(numeric tier), with digits of agreement")
    _targets(p)
    _run_options(p, budget=False)
    _numeric_options(p)
    _frontend_options(p)
    p.add_argument("--shape", dest="dims_alias", help="alias of --dims")
    p.add_argument("--point", help="JSON file {input: nested list}: check at this point only (written to "
                                   "reports/adhoc/ unless --reports is given: not part of the planned reports)")
    p.add_argument("--impl", metavar="MODULE:FUNCTION",
                   help="check your own backward (a callable or torch.autograd.Function) against the spec "
                        "(written to reports/adhoc/ unless --reports is given)")
    p.add_argument("--dtype", default=None, metavar="float64|float32",
                   help="with --impl: the precision the implementation runs in (default float64)")
    p.set_defaults(reports=None)     # resolved in cmd_check: --point/--impl results go to reports/adhoc
    p = sub.add_parser("kernels", help="check the CUDA kernels against the specs (simulator or GPU)")
    _targets(p)
    _run_options(p, budget=False)
    p = sub.add_parser("triton", help="check Triton kernels (a file's TRITON_KERNELS, or --liger) against the specs")
    p.add_argument("files", nargs="*", help="Python files defining TRITON_KERNELS")
    p.add_argument("--liger", action="store_true", help="Liger-Kernel's kernels: the report of reports/liger/")
    p.add_argument("--out", default=None, help="report folder (default reports/liger with --liger, else reports/triton)")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("verify", help="fail, naming each, on stale, edited, malformed or missing certificates")
    p.add_argument("reports", nargs="?", default="reports")
    p.add_argument("--spec", action="append", default=[], metavar="FILE",
                   help="a user spec file whose ops the reports hold (repeatable)")
    p.add_argument("--no-missing", action="store_true", help="do not require the certificates of `vjpcert all`")
    p.add_argument("--no-pages", action="store_true",
                   help="do not check that the rendered pages (README.md, index.html, OP.md) are current")
    p.add_argument("--replay", action="store_true",
                   help="re-derive each certificate's verdict by running its claim again (the digest only "
                        "detects accidental edits; replay detects forged verdicts)")
    p.add_argument("--sample", type=int, metavar="K", help="with --replay: replay K certificates drawn at random")
    p.add_argument("--replay-seed", type=int, help="with --sample: the draw (default: a fresh one, printed)")
    p = sub.add_parser("render", help="re-render the pages from the certificates on disk (runs no checks)")
    p.add_argument("reports", nargs="?", default="reports")
    p.add_argument("--spec", action="append", default=[], metavar="FILE",
                   help="a user spec file whose ops the reports hold (their docstrings; repeatable)")
    p = sub.add_parser("frameworks", help="the Framework backwards report: PyTorch's (and JAX's) own backwards, "
                                          "proved and checked, in REPORTS/frameworks/")
    p.add_argument("--reports", default="reports")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--force", action="store_true")
    p.add_argument("--only", action="append", default=[], metavar="OP")
    p.add_argument("--quiet", action="store_true")
    p = sub.add_parser("mutate", help="run every tier on every mutant and write the kill matrix")
    _targets(p)
    p.add_argument("--reports", default="reports")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    return parser


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
        print(f"vjpcert: {kernel_missing}; the other tiers run without it", file=sys.stderr)
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
def _run(args, tasks, ops, command: str, proof_only: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from vjpcert.core.certificate import Certificate, remove_orphaned_temporaries
    from vjpcert.plan import read_record, split_current
    from vjpcert.reports import TIERS, TIMINGS, record_timings, summary, write_certificate, write_reports
    from vjpcert.runner import exit_code, run_tasks
    from vjpcert.stamps import Stamps, plot_inputs, resources_inputs
    from vjpcert.witness import witness_lines
    from rich.markup import escape

    root = Path(args.reports)
    resources_ok = True
    fresh_clone = not (root / TIMINGS).exists()      # no run has recorded its times here yet
    if root.exists() and not root.is_dir():
        raise SpecError(None, f"--reports {root} exists and is not a directory")
    if root.is_dir():
        remove_orphaned_temporaries(root)          # left by a run killed with SIGKILL mid-write
    console = Console(stderr=True, soft_wrap=True)     # paths and witness lines are never broken
    todo, current = (tasks, []) if args.force else split_current(tasks, ops, root)
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
        console.print(f"{len(current)} of {len(tasks)} certificates are current: skipped, the other "
                      f"{len(todo)} run (resuming; --force would rerun all {len(tasks)} from zero)")
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
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
                        resources_ok = _kernel_resources(root, console)
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
                            console.print(f"[yellow]warning[/yellow]: no plot for {escape(op.name)}: "
                                          f"{escape(type(exc).__name__ + ': ' + str(exc))}")
            except KeyboardInterrupt:
                record_timings(root, done)
                write_reports(root, ops, command)
                console.print(f"interrupted: {len(done)} of {len(todo)} certificates written to {root}/; "
                              f"run the same command again to resume")
                return EXIT_INTERRUPTED
    finally:
        if client is not None:
            client.close()
    if not tasks:
        console.print("nothing to do: no claims for the selected ops and tiers")
        return EXIT_OK
    record_timings(root, done)
    write_reports(root, ops, command, reuse=not done)
    # the verdicts of this plan: the fresh results, and the current certificates that were skipped
    final = done + [Certificate.from_dict(read_record(root / _rel(t, ops))) for t in current]
    table = Table(title=f"{command}: {len(final)} claims ({len(done)} run, {len(final) - len(done)} current)")
    table.add_column("op")
    tiers = [t for t in TIERS if any(c.tier == t for c in final)]
    for t in tiers:
        table.add_column(t)
    for name in sorted({c.op for c in final}):
        table.add_row(escape(name), *[summary([c for c in final if c.op == name and c.tier == t]).replace("**", "")
                                      for t in tiers])
    old_failures = [c for c in final[len(done):] if c.verdict == "failed"]
    if old_failures:                      # skipped as current, still failed: say why, as for fresh ones
        console.print(f"[red]{len(old_failures)} current certificate(s) hold a failure[/red] (fix the backward, "
                      f"then rerun):")
        for c in old_failures:
            console.print(f"[red]failed[/red]  {c.tier} {escape(c.op)} {escape(c.claim)}")
            for line in witness_lines(c, root):
                console.print(escape(line), highlight=False, soft_wrap=True)
    console.print(table)
    console.print(f"reports: {root}/README.md and {root}/index.html")
    code = exit_code(final, proof_tier_only=proof_only)
    if refused:                            # bad input, after the others' certificates: exit 2 unless one failed
        for problem in refused.values():
            print(f"vjpcert: error: {problem}", file=sys.stderr)
        print(f"vjpcert: {len(refused)} op(s) refused ({', '.join(sorted(refused))}); the others' certificates "
              f"are written", file=sys.stderr)
        code = code if code == EXIT_FAILED else EXIT_BAD_INPUT
    if _shows_the_checkers(command, args, done, current, fresh_clone):
        if not _rederive_sample(root, ops, console, args.seed):
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
    paths = sample_paths(root, TOUR_SAMPLE, seed, keep=quick_to_derive(ops))
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


# ------------------------------------------------------------------------------ commands
def cmd_all(args) -> int:
    tasks, ops = _plan(args, ("symbolic", "numeric", "kernel"))
    return _run(args, tasks, ops, "vjpcert all", proof_only=False)


def cmd_prove(args) -> int:
    tasks, ops = _plan(args, ("symbolic",))
    return _run(args, tasks, ops, "vjpcert prove", proof_only=True)


ADHOC = "adhoc"       # under the report directory: results at a given point or of a user's implementation


def cmd_check(args) -> int:
    if args.reports is None:
        # a --point or --impl result is not part of the plan of `vjpcert all`: kept apart by default, so
        # it can neither change the pages of the planned certificates nor make `verify` see an extra
        args.reports = str(Path("reports") / ADHOC) if (args.point or args.impl) else "reports"
    check_writable_dir(Path(args.reports))
    if args.impl:
        from vjpcert.impl import check_impl_command
        return check_impl_command(args)
    tasks, ops = _plan(args, ("numeric",))
    return _run(args, tasks, ops, "vjpcert check", proof_only=False)


def cmd_kernels(args) -> int:
    tasks, ops = _plan(args, ("kernel",))
    if not tasks:
        # a file whose ops have no kernels asked for a check that cannot happen: not a pass
        raise SpecError(None, f"no CUDA kernels for {', '.join(sorted(ops))}: the kernel tier checks the kernels "
                              f"registered in cuda_kernels/<op>.py (KERNELS = fwd_bwd(...)); a spec file cannot "
                              f"register kernels")
    return _run(args, tasks, ops, "vjpcert kernels", proof_only=False)


def cmd_verify(args) -> int:
    import json
    import os

    from vjpcert.specs import builtin_ops
    from vjpcert.core.registry import load_file
    from vjpcert.plan import task_relpath
    from vjpcert.verify import NotAReportDir, Problem, verify

    root = Path(args.reports)
    if not (root / "certificates").is_dir():          # before any planning: says so at once
        return _fail_bad_input(f"{root} is not a report directory (it has no certificates/ folder)")
    if args.sample is not None and (args.sample < 1 or not args.replay):
        return _fail_bad_input("--sample K needs --replay and K >= 1")
    gone, declared = [], {}
    if not args.spec:
        # a user project's report folder names its ops' spec files (ops.json): check those by default
        from vjpcert.report_data import recorded_declarations, recorded_spec_files
        files, gone = recorded_spec_files(root)
        declared = recorded_declarations(root)
        args.spec = [str(f) for f in files]
        if files:
            print("vjpcert verify: the spec files recorded in " + str(root / "ops.json") + ": "
                  + ", ".join(os.path.relpath(f) for f in files))
        if declared:
            print("vjpcert verify: the torch:/jax: targets recorded in " + str(root / "ops.json") + ": "
                  + ", ".join(json.loads(d)["target"] for d in declared.values()))
    builtins = builtin_ops()
    ops = dict(builtins)
    for f in args.spec:
        ops.update({o.name: o for o in load_file(f)})
    from vjpcert.ops import OpRef
    declared_refs = {name: OpRef(name, frontend=d) for name, d in declared.items()}
    ops.update({name: ref.resolve() for name, ref in declared_refs.items()})
    expected = None
    if not args.no_missing:
        # the plan of `vjpcert all` over the user's spec files, and over the built-in ops unless the
        # directory holds none of theirs (a user's own report directory)
        present = {p.parent.name for p in Path(args.reports).glob("certificates/*/*.json")}
        mine = args.spec or declared
        targets = [*args.spec] + ([] if mine and not (present & set(builtins)) else list(builtins))
        expected = []
        if targets:
            plan_args = build_parser().parse_args(["all", *targets, "--reports", args.reports])
            plan_args.read_only = True            # verify plans what `all` would write, and writes nothing
            tasks, _ = _plan(plan_args, ("symbolic", "numeric", "kernel"))
            expected = [task_relpath(t, ops[t.op.name].base_name) for t in tasks]
        # a target declared on the command line was run with the tiers and dims that command chose:
        # its certificates on disk are the ones expected (each still checked for being current)
        expected += [p.relative_to(root) for name in declared
                     for p in (root / "certificates" / ops[name].base_name).glob("*.json")]
    try:
        problems = verify(root, ops, expected)
    except NotAReportDir as exc:
        return _fail_bad_input(str(exc))
    problems += [Problem("orphan", f"ops.json: {name}", "its recorded spec file is gone (its certificates "
                                                         "cannot be checked)") for name in gone]
    if not args.no_pages:
        from vjpcert.reports import stale_pages
        spec_ops = {o.name: o for f in args.spec for o in load_file(f)}
        problems += [Problem("page", str(rel), f"{why} (re-render: vjpcert render {args.reports}"
                             + "".join(f" --spec {f}" for f in args.spec) + ")")
                     for rel, why in stale_pages(Path(args.reports), spec_ops)]
    if (Path(args.reports) / "frameworks" / "certificates").is_dir():
        from vjpcert.frameworks import verify_report
        more, notes = verify_report(Path(args.reports) / "frameworks", no_missing=args.no_missing)
        problems += more
        for n in notes:
            print(n)
    if args.replay:
        import random

        from vjpcert.verify import replay, sample_paths
        refs = {n: OpRef(n) for n in builtin_ops()}
        refs.update(declared_refs)
        for f in args.spec:
            refs.update({o.name: OpRef(o.name, str(Path(f).resolve())) for o in load_file(f)})
        seed = args.replay_seed if args.replay_seed is not None else random.SystemRandom().randrange(10**6)
        paths = sample_paths(Path(args.reports), args.sample, seed)
        print(f"vjpcert verify: replaying {len(paths)} certificate(s)"
              + (f" (sample of {args.sample}, --replay-seed {seed})" if args.sample else ""))

        def shown(rel, record, fresh):
            mark = "same" if fresh.verdict == record["verdict"] and fresh.method == record["method"] else "DIFFERS"
            print(f"  replayed {rel}: {record['verdict']} -> {fresh.verdict} ({mark})")
        problems += replay(Path(args.reports), refs, paths, on_result=shown)
    for p in problems:
        print(p)
    if problems:
        print(f"vjpcert verify: {len(problems)} problem(s) in {args.reports}/", file=sys.stderr)
        return EXIT_FAILED
    print(f"vjpcert verify: every certificate in {args.reports}/ is current")
    return EXIT_OK


def cmd_render(args) -> int:
    from vjpcert.core.registry import load_file
    from vjpcert.reports import write_reports
    root = Path(args.reports)
    if not (root / "certificates").is_dir():
        return _fail_bad_input(f"{root} is not a report directory (it has no certificates/ folder)")
    write_reports(root, {o.name: o for f in args.spec for o in load_file(f)})
    print(f"vjpcert render: pages in {root}/ rendered from its certificates")
    return EXIT_OK


def cmd_frameworks(args) -> int:
    from vjpcert.frameworks import SUBDIR, run
    check_writable_dir(Path(args.reports))
    return run(Path(args.reports) / SUBDIR, jobs=args.jobs, force=args.force, only=args.only, quiet=args.quiet)


def cmd_mutate(args) -> int:
    from vjpcert.mutate import run_mutate
    check_writable_dir(Path(args.reports))
    return run_mutate(args)


def _fail_bad_input(msg: str) -> int:
    print(f"vjpcert: error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


_STOP_SIGNALS = None
_IN_FORK = [False]


def _interruptible():
    """Ctrl-C and `kill` both stop a run cleanly (finished certificates stay, reports are rendered),
    even when the shell started us with SIGINT ignored, as it does for background jobs.

    Forks are made signal-safe. Exceptions raised inside os.fork()'s at-fork hooks are printed and
    ignored ("Exception ignored in _after_fork"), so: the stop signals are blocked across every fork;
    the child resets them to their defaults before unblocking (a pending stop then ends it silently);
    the parent unblocks, and a stop that arrives while it is still inside the hook only sets the stop
    flag, which every wait and the runner poll (``core.budget.stop_requested``)."""
    import os
    import signal

    from vjpcert.core.budget import request_stop

    global _STOP_SIGNALS

    def stop(signum, frame):
        request_stop()                    # remembered even where the exception below is swallowed
        if not _IN_FORK[0]:
            raise KeyboardInterrupt(f"signal {signum}")
    try:
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
    except ValueError:          # not the main thread (e.g. called from a notebook worker)
        return
    if _STOP_SIGNALS is None and hasattr(os, "register_at_fork"):
        _STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}

        def before():
            _IN_FORK[0] = True
            signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)

        def parent():
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            _poll()                       # a call: pending Python handlers run here, flag-only
            _IN_FORK[0] = False

        def child():
            for s in _STOP_SIGNALS:
                signal.signal(s, signal.SIG_DFL)
            _IN_FORK[0] = False
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        os.register_at_fork(before=before, after_in_parent=parent, after_in_child=child)


def cmd_triton(args) -> int:
    """The Triton tier (vjpcert/triton_report.py): exit 0 all kernel-match, 1 a failure, 2 bad input."""
    from vjpcert.triton_report import main as triton_main
    argv = [*args.files, *(["--liger"] if args.liger else []), *(["--out", args.out] if args.out else []),
            "--seed", str(args.seed)]
    return triton_main(argv)


def _poll():
    """Nothing: calling a Python function is a point where pending signal handlers run."""


def _complete(parser) -> None:
    """Shell completion by argcomplete, where it is installed (the ``completion`` extra): when the
    shell asks for completions it answers and exits here; otherwise this does nothing."""
    import os
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv=None) -> int:
    if argv is None:                      # first: an interrupt during parsing or planning is clean too
        _interruptible()
    parser = build_parser()
    if argv is None:
        _complete(parser)
    args = parser.parse_args(argv)
    commands = {"all": cmd_all, "prove": cmd_prove, "check": cmd_check, "kernels": cmd_kernels,
                "verify": cmd_verify, "render": cmd_render, "mutate": cmd_mutate, "frameworks": cmd_frameworks,
                "triton": cmd_triton}
    try:
        return commands[args.command](args)
    except SpecError as exc:
        return _fail_bad_input(str(exc))
    except OutOfBudget as exc:
        print(f"vjpcert: undecided: {exc}", file=sys.stderr)
        return EXIT_UNDECIDED


if __name__ == "__main__":
    sys.exit(main())
