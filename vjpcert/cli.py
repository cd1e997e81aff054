"""The ``vjpcert`` command.

Exit codes: 0 every claim passed (for ``prove``: every claim proved); 1 a claim failed (a wrong
backward: the certificate holds a witness); 2 usage error or bad input (nothing is written);
3 nothing failed but something was left undecided (inconclusive, or only checked where a proof
was asked for); 130 interrupted (finished certificates are kept).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specs.registry import SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNDECIDED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _common(p: argparse.ArgumentParser, timeout_help: str):
    p.add_argument("targets", nargs="*", metavar="OP|FILE",
                   help="built-in op names or paths of spec files (default: every built-in op)")
    p.add_argument("--dims", help="override dims, e.g. n=128,rows=1 (applied to ops that have them)")
    p.add_argument("--large", action="store_true", help="use each op's large dims ladder")
    p.add_argument("--timeout", type=float, default=None, help=timeout_help)
    p.add_argument("--jobs", type=int, default=1, help="parallel worker processes (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random point (replayable)")
    p.add_argument("--reports", default="reports", help="report directory (default: reports)")
    p.add_argument("--quiet", action="store_true", help="no per-claim lines")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vjpcert", description="Certificates for backward passes.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prove", help="prove backward = J^T dy and every law exactly (symbolic tier)")
    _common(p, "budget per claim in seconds (default 60)")
    p = sub.add_parser("check", help="check backward against derivatives of the forward in mpmath "
                                     "(numeric tier), with digits of agreement")
    _common(p, "unused by check (kept for symmetry)")
    p.add_argument("--shape", dest="dims_alias", help="alias of --dims")
    p.add_argument("--dps", type=int, default=50, help="mpmath digits (default 50, at least 20)")
    p.add_argument("--method", default="mpmath-diff",
                   choices=["mpmath-diff", "complex-step", "richardson", "central"])
    p.add_argument("--point", help="JSON file {input: nested list}: check at this point only")
    p.add_argument("--no-plots", action="store_true", help="skip the finite-difference plots")
    return parser


def _fail_bad_input(msg: str) -> int:
    print(f"vjpcert: error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _load_point(path: str, op) -> dict:
    import json

    import numpy as np

    from specs.reference import infer_dims
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


def _plan(args, tier: str):
    """Select ops, expand dims and claims, and validate every spec before anything is written."""
    from specs.validate import validate
    from vjpcert.ops import dims_ladder, parse_dims, select_ops
    from vjpcert.runner import make_task

    if getattr(args, "dims_alias", None):
        args.dims = args.dims_alias
    if tier == "numeric":
        from numeric.tolerances import MIN_DPS
        if args.dps < MIN_DPS:
            raise SpecError(None, f"--dps {args.dps} is below {MIN_DPS}: too few digits to check anything")
    if args.jobs < 1:
        raise SpecError(None, "--jobs must be >= 1")
    if args.timeout is not None and args.timeout <= 0:
        raise SpecError(None, "--timeout must be > 0")
    selected = select_ops(args.targets)
    overrides = parse_dims(args.dims)
    if overrides:
        known = set().union(*(op.dim_names() for _, op in selected))
        unknown = set(overrides) - known
        if unknown:
            raise SpecError(None, f"--dims names {sorted(unknown)}, which no selected op has "
                                  f"(they have {sorted(known)})")
    point = None
    if getattr(args, "point", None):
        if len(selected) != 1:
            raise SpecError(None, "--point needs exactly one op")
        fixed, point = _load_point(args.point, selected[0][1])
    tasks, ops = [], {}
    for ref, op in selected:
        ops[op.name] = op
        if point is not None:
            ladder = [fixed]
        elif tier == "numeric" and not overrides and not args.large:
            from numeric.check import numeric_dims
            ladder = numeric_dims(op)
        else:
            ladder = dims_ladder(op, overrides, args.large)
        for dims in ladder:
            validate(op, dims)
            opts = {"seed": args.seed}
            if tier == "symbolic" and args.timeout is not None:
                opts["budget"] = args.timeout
            if tier == "numeric":
                opts.update(dps=args.dps, method=args.method)
                if point is not None:
                    opts["point"] = tuple(sorted((k, _freeze(v)) for k, v in point.items()))
            for claim in op.claims():
                if tier != "symbolic" or "monolithic" in op.proofs or not claim.startswith("vjp["):
                    tasks.append(make_task(tier, ref, claim, dims, **opts))
                if tier == "symbolic" and "compositional" in op.proofs and claim.startswith("vjp["):
                    tasks.append(make_task(tier, ref, claim, dims, method="compositional", **opts))
    return tasks, ops


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _run(args, tasks, ops, command: str, proof_only: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from vjpcert.reports import TIERS, _summary, write_certificate, write_reports
    from vjpcert.runner import exit_code, run_tasks

    root = Path(args.reports)
    console = Console(stderr=True)
    done = []
    colour = {"failed": "red", "inconclusive": "yellow", "checked": "cyan"}

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        bar = progress.add_task(command, total=len(tasks))

        def on_result(task, cert):
            write_certificate(cert, root)
            done.append(cert)
            progress.advance(bar)
            if not args.quiet:
                c = colour.get(cert.verdict, "green")
                progress.console.print(f"[{c}]{cert.verdict:>22}[/{c}]  {task.label()}  "
                                       f"({cert.method}, {cert.seconds:.2f}s)")
        try:
            run_tasks(tasks, jobs=args.jobs, on_result=on_result)
            if getattr(args, "no_plots", True) is False:
                from numeric.plots import write_fd_plot
                for op in ops.values():
                    progress.update(bar, description=f"{command}: plot {op.name}")
                    try:
                        write_fd_plot(op, root, seed=args.seed)
                    except Exception as exc:   # a picture must never cost the certificates
                        console.print(f"[yellow]warning[/yellow]: no plot for {op.name}: "
                                      f"{type(exc).__name__}: {exc}")
        except KeyboardInterrupt:
            write_reports(root, ops, command)
            console.print(f"interrupted: {len(done)} of {len(tasks)} certificates written to {root}/")
            return EXIT_INTERRUPTED
    write_reports(root, ops, command)
    table = Table(title=f"{command}: {len(done)} claims")
    table.add_column("op")
    tiers = [t for t in TIERS if any(c.tier == t for c in done)]
    for t in tiers:
        table.add_column(t)
    for name in sorted({c.op for c in done}):
        table.add_row(name, *[_summary([c for c in done if c.op == name and c.tier == t]) for t in tiers])
    console.print(table)
    console.print(f"reports: {root}/README.md")
    return exit_code(done, proof_tier_only=proof_only)


def cmd_prove(args) -> int:
    tasks, ops = _plan(args, "symbolic")
    return _run(args, tasks, ops, "vjpcert prove", proof_only=True)


def cmd_check(args) -> int:
    tasks, ops = _plan(args, "numeric")
    return _run(args, tasks, ops, "vjpcert check", proof_only=False)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return {"prove": cmd_prove, "check": cmd_check}[args.command](args)
    except SpecError as exc:
        return _fail_bad_input(str(exc))


if __name__ == "__main__":
    sys.exit(main())
