# PYTHON_ARGCOMPLETE_OK   (shell completion: pip install -e '.[completion]', see README "The commands")
"""The ``vjpcert`` command.

    vjpcert all     [OP|FILE ...]   every tier for every op (the README's main job)
    vjpcert prove   [OP|FILE ...]   the symbolic tier: exact proofs
    vjpcert check   [OP|FILE ...]   the numeric tier: mpmath checks with digits
    vjpcert kernels [OP ...|FILE]   the kernel tier: CUDA kernels (ours, or your file's KERNELS) against the specs
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

import gc
import sys
from pathlib import Path

from vjpcert.cli_parser import build_parser
from vjpcert.cli_run import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNDECIDED,
    OutOfBudget,
    _deadline,  # noqa: F401  (the tests import it from here)
    _plan,  # noqa: F401  (the tests import it from here)
    _rederive_sample,  # noqa: F401  (the tests import it from here)
    _run,  # noqa: F401  (the tests import it from here)
    _shows_the_checkers,  # noqa: F401  (the tests import it from here)
    check_writable_dir,
    plan_and_run,
)
from vjpcert.core.registry import SpecError


# ------------------------------------------------------------------------------ commands
def cmd_all(args) -> int:
    return plan_and_run(args, ("symbolic", "numeric", "kernel"), "vjpcert all", proof_only=False)


def cmd_prove(args) -> int:
    return plan_and_run(args, ("symbolic",), "vjpcert prove", proof_only=True)


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
    return plan_and_run(args, ("numeric",), "vjpcert check", proof_only=False)


def cmd_kernels(args) -> int:
    from vjpcert.cuda_report import is_kernel_file
    files = [t for t in args.targets if is_kernel_file(t)]
    if files:
        # your own kernel files (they assign KERNELS): the whole kernel tier, its report in <reports>/cuda
        if len(files) != len(args.targets):
            raise SpecError(None, "give kernel files (assigning KERNELS) or ops and spec files, not both")
        from vjpcert.cuda_report import main as cuda_main
        return cuda_main(files, out=Path(args.reports) / "cuda", seed=args.seed)
    def require(tasks, ops):
        if not tasks:
            # a file whose ops have no kernels asked for a check that cannot happen: not a pass
            raise SpecError(None, f"no CUDA kernels for {', '.join(sorted(ops))}: the kernel tier checks the "
                                  f"kernels registered in cuda_kernels/<op>.py (KERNELS = fwd_bwd(...)); a spec "
                                  f"file cannot register kernels")
    return plan_and_run(args, ("kernel",), "vjpcert kernels", proof_only=False, require=require)


def cmd_verify(args) -> int:
    import json
    import os

    from vjpcert.specs import builtin_ops
    from vjpcert.ops import load_file
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
    from vjpcert.ops import load_file
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


# A command's process holds SymPy and NumPy, often torch and JAX: millions of objects that live as long
# as it does, while a proof makes and drops SymPy expressions by the million. Python's default
# thresholds (700, 10, 10) run a young collection every 700 allocations; with the young generation
# 20,000 long, `vjpcert verify` took some 7% less CPU, and the test suite's proofs 4% less. The
# collector still runs, on fewer and larger batches; a Python caller of ``main`` keeps its own settings.
GC_THRESHOLDS = (20_000, 20, 10)


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


def main(argv=None, *, replay: bool | None = None) -> int:
    """The command line. ``replay``: whether a tier command may print its last run again instead of
    planning, where that run had nothing to do and no file it was decided from changed
    (``vjpcert.up_to_date``); by default only when run as a command (``argv`` None), since a Python
    caller may hold code that differs from its files."""
    if argv is None:                      # first: an interrupt during parsing or planning is clean too
        _interruptible()
        gc.set_threshold(*GC_THRESHOLDS)
    parser = build_parser()
    if argv is None:
        _complete(parser)
    args = parser.parse_args(argv)
    args._replay = argv is None if replay is None else replay
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
