"""The ``vjpcert`` command's arguments: every subcommand and its options (``build_parser``).

Apart from the commands (``vjpcert.cli``) because the grammar is read on its own -- ``verify`` parses
the arguments of the ``all`` it expects, shell completion walks it -- and it imports none of the tiers.
"""
from __future__ import annotations

import argparse


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
        p.add_argument("--timeout", type=float, default=None,
                       help="budget per claim in seconds (default 60; 900 for a claim proved for every size)")
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
    p.add_argument("--dtype", default=None, metavar="float64|float32|bfloat16|float16",
                   help="with --impl: the precision the implementation runs in (default float64); in bfloat16 "
                        "and float16 its inputs are drawn in that dtype and its outputs must be in it")
    p.set_defaults(reports=None)     # resolved in cmd_check: --point/--impl results go to reports/adhoc
    p = sub.add_parser("kernels", help="check the CUDA kernels against the specs (simulator or GPU)")
    _targets(p)
    _run_options(p, budget=False)
    p = sub.add_parser("triton", help="check Triton kernels (a file's TRITON_KERNELS, or --liger) against the specs")
    p.add_argument("files", nargs="*", help="Python files defining TRITON_KERNELS")
    p.add_argument("--liger", action="store_true", help="Liger-Kernel's kernels: the report of reports/liger/")
    p.add_argument("--out", default=None, help="report folder (default reports/liger with --liger, else reports/triton)")
    p.add_argument("--seed", default="0", help="seed of the inputs and the drawn sizes (default 0, replayable); "
                                              "'fresh': a new one, printed and recorded")
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
    p = sub.add_parser("mutate", help="run every tier on every mutant and write the kill matrix",
                       description="Run every tier on every mutant of the ops named (default: every built-in "
                                   "op) and write REPORTS/mutation/kill_matrix.{json,md,png}. Naming ops "
                                   "updates their rows and keeps every other op's.")
    _targets(p)
    p.add_argument("--reports", default="reports")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    return parser
