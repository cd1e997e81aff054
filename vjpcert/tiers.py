"""The tier table: what each tier is, the code its certificates depend on, where it works for an op,
and how it runs one task. Planning, the runner, verify, mutate, the reports and `--impl` read this
table; nothing else dispatches on a tier's name.

    symbolic        exact proofs (``vjpcert.symbolic``): at fixed dims (the ring's ladder; outside the
                    op's own dims, a claim proved for every size tries that proof first), by
                    composition, for every size, and the randomised exact test at production dims
    numeric         mpmath checks with digits, and the float references (``vjpcert.numeric``), each
                    `checked` held against what exact normalisation knows (``vjpcert.numeric_tier``)
    kernel          CUDA kernels against the specs (``vjpcert.cuda_kernels``)
    triton          Triton kernels against the specs (``vjpcert.triton_kernels``): ours, Liger-Kernel's,
                    a user's; run by ``python -m vjpcert.triton_report`` (reports/liger/), not planned by
                    `vjpcert all` (whose reports would then depend on Liger-Kernel being installed)
    implementation  a user's own implementation against a spec (``vjpcert.impl``, `check --impl`)

A tier's checker hash (``checker_sha256``) is its checker module's ``CHECKER_SHA256``, and for the
symbolic tier the module of the method that issued the certificate (monolithic, compositional,
every size, modular): the normalised code of that module and everything it imports
(``core.code_hash``). A certificate whose hash differs is stale.
"""
from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from vjpcert.core.registry import KINK_CLAIM
from vjpcert.core.validate import validate
from vjpcert.ops import dims_ladder
from vjpcert.task import make_task

# Each checker is imported by the function that runs or plans its tier, never here: the checkers load
# SymPy, python-flint, Numba or Triton (optional extras among them), and reading the table needs none.


@dataclass(frozen=True)
class Planning:
    """What a command asked for, as every tier's planner reads it."""
    overrides: dict             # --dims
    large: bool                 # --large
    seed: int
    budget: float | None        # --timeout
    dps: int
    method: str                 # the numeric derivative method
    point: tuple | None         # --point (frozen)
    fixed_dims: dict | None     # the dims a --point fixes
    general: bool               # every-size proofs too
    modular: bool = False       # the randomised exact test at the ops' production dims (--modular)
    # what a planner does with each (op, dims) its claims run at: validate the spec there (bad input
    # before anything is written), or hand the pair to the command, which validates only the ops it
    # will run (a current certificate was issued by the same spec and checker code, which the same
    # validation passed), or nothing (`verify` lists what `all` would write and runs none)
    check: Callable = validate


@dataclass(frozen=True)
class Tier:
    name: str
    title: str                  # a column of the summary table
    checker: str                # the module whose CHECKER_SHA256 is this tier's checker hash
    runs: Callable              # (op, task) -> Certificate
    plans: Callable             # (ref, op, Planning) -> [Task], validating the spec at every dims
    requires: str = ""          # what to install when the checker does not import
    methods: tuple = ()         # (method option, checker module): methods with a checker of their own
    claims: tuple = ()          # (claim, checker module): claims the default method hands to a checker of
                                # their own (so an edit of one stales that claim's certificates only)
    discovered: str | None = None   # the package whose every file the checker finds at run time

    def checker_module(self, method: str | None = None, claim: str | None = None) -> str:
        """The module that issues this tier's certificates of ``claim`` by ``method``."""
        if method is None and claim in dict(self.claims):
            return dict(self.claims)[claim]
        return dict(self.methods).get(method, self.checker)

    def checker_sha256(self, method: str | None = None, claim: str | None = None) -> str:
        """The checker module's ``CHECKER_SHA256``, computed from its code without importing it (a
        checker loads SymPy, python-flint, Numba or Triton; listing certificates needs none of them)."""
        return _checker_code_sha256(self.checker_module(method, claim), self.discovered)

    def available(self) -> bool:
        try:
            importlib.import_module(self.checker)
            return True
        except Exception:        # numba-cuda missing, or a kernel module that does not import
            return False


@functools.lru_cache(maxsize=None)
def _checker_code_sha256(module: str, discovered: str | None) -> str:
    """Once per process and checker module (planning asks once per task, and most claims share their
    tier's module): it stands for vjpcert's own code, which a process loads once (an edit while it
    runs is not the code it runs)."""
    from vjpcert.core.code_hash import checker_code_sha256
    return checker_code_sha256(module, discovered=discovered)


def _run_symbolic(op, task):
    opts = dict(task.options)
    method = opts.pop("method", "monolithic")
    if method == "compositional":
        from vjpcert.symbolic.composition.compose import prove_compositional
        return prove_compositional(op, task.claim, task.dims_dict, **opts)
    if method == "general":
        from vjpcert.symbolic.every_size.general import prove_general
        return prove_general(op, task.claim, **opts)
    if method == "instance":
        from vjpcert.symbolic.every_size.instance import prove_instance
        return prove_instance(op, task.claim, task.dims_dict, **opts)
    if method == "modular":
        from vjpcert.symbolic.modular.check import check_modular
        opts.pop("budget", None)
        return check_modular(op, task.claim, task.dims_dict, **opts)
    from vjpcert.symbolic.fixed.prover import prove_claim
    return prove_claim(op, task.claim, task.dims_dict, **opts)


def _run_numeric(op, task):
    from vjpcert.numeric_tier import check
    opts = dict(task.options)
    if "point" in opts:
        opts["point"] = dict(opts["point"])
    return check(op, task.claim, task.dims_dict, **opts)


def _run_kernel(op, task):
    from vjpcert.cuda_kernels.check import check_kernel_claim
    return check_kernel_claim(op, task.claim, task.dims_dict, **dict(task.options))


def _run_triton(op, task):
    from vjpcert.triton_kernels.check import check_triton_claim
    return check_triton_claim(op, task.claim, task.dims_dict, **dict(task.options))


def _plan_triton(ref, op, p: Planning):
    """Every registered Triton kernel of the op at its own sizes for this mode (interpreter or GPU);
    `--dims` runs each at exactly those dims."""
    from vjpcert.triton_kernels.check import triton_claims, triton_dims
    from vjpcert.triton_kernels.registry import discover
    kernels = discover()[0]
    tasks = []
    for claim in triton_claims(op):
        k = kernels[claim.removeprefix("triton:")]
        ladder = [p.fixed_dims] if p.fixed_dims else triton_dims(k)
        tasks += [make_task("triton", ref, claim, dims, seed=p.seed) for dims in ladder]
    return tasks


def _budget(p: Planning) -> dict:
    return {"budget": p.budget} if p.budget is not None else {}


def _plan_symbolic(ref, op, p: Planning):
    """Each claim at each dims of the ladder (monolithic and/or compositional as the op says), the
    compositional VJP claims at the op's realistic dims, and the every-size claims."""
    opts = {"seed": p.seed, **_budget(p)}
    tasks = []
    if p.fixed_dims is None and not p.overrides and not p.large:
        for dims in getattr(op, "compositional_dims", ()):     # realistic sizes: composition only
            dims = op.resolve_dims(dims)
            tasks += [make_task("symbolic", ref, claim, dims, method="compositional", **opts)
                      for claim in op.claims() if claim.startswith("vjp[")]
    ladder = [p.fixed_dims] if p.fixed_dims is not None else dims_ladder(op, p.overrides, p.large)
    own = [op.resolve_dims(d) for d in op.dims]
    for dims in ladder:
        p.check(op, dims)
        for claim in op.claims():
            if claim == KINK_CLAIM and op.proofs == ("compositional",):
                # a composite's value on its kinks rests on its nodes' (symbolic.composition.compose)
                tasks.append(make_task("symbolic", ref, claim, dims, method="compositional", **opts))
                continue
            if "monolithic" in op.proofs or not claim.startswith("vjp["):
                # outside the op's own dims, a claim proved for every size may be an instance of that
                # proof (symbolic.every_size.instance); at its own dims the ring proves it independently
                instance = claim in op.general and op.resolve_dims(dims) not in own
                tasks.append(make_task("symbolic", ref, claim, dims, **({"method": "instance"} if instance else {}),
                                       **opts))
            if "compositional" in op.proofs and claim.startswith("vjp["):
                tasks.append(make_task("symbolic", ref, claim, dims, method="compositional", **opts))
    # --modular runs at the op's production dims when the command asks for its own dims (a torch:/jax:
    # target's --dims declare them: they are no override)
    own_dims_only = not p.overrides or [op.resolve_dims(d) for d in ladder] == own
    if p.modular and p.fixed_dims is None and own_dims_only and not p.large:
        from vjpcert.symbolic.modular.check import modular_claims, split_dims
        from vjpcert.symbolic.settings import MODULAR_TRIALS
        for entry in getattr(op, "modular_dims", ()):      # production sizes: the modular test only
            split_dims(op, entry)                           # dims the op rejects are bad input now
            tasks += [make_task("symbolic", ref, claim, entry, method="modular", seed=p.seed,
                                trials=MODULAR_TRIALS) for claim in modular_claims(op)]
    if p.general and op.general:
        from vjpcert.symbolic.every_size.dims import general_dims
        tasks += [make_task("symbolic", ref, claim, general_dims(op, claim), method="general", **opts)
                  for claim in op.general]
    return tasks


def _plan_numeric(ref, op, p: Planning):
    """Every claim and the float references, at the check dims and long rows (or as asked)."""
    from vjpcert.numeric.check import numeric_claims, numeric_dims
    if p.fixed_dims is not None:
        ladder = [p.fixed_dims]
    elif not p.overrides and not p.large:
        ladder = numeric_dims(op)
    else:
        ladder = dims_ladder(op, p.overrides, p.large)
    opts = {"seed": p.seed, "dps": p.dps, "method": p.method, **({"point": p.point} if p.point is not None else {})}
    tasks = []
    for dims in ladder:
        p.check(op, dims)
        tasks += [make_task("numeric", ref, claim, dims, **opts) for claim in numeric_claims(op)]
    return tasks


def _plan_kernel(ref, op, p: Planning):
    """Every kernel claim of the op at its own ladder of sizes and launches for this mode (simulator or
    GPU); `--dims` runs each claim at exactly those dims with the kernel's default launch."""
    tasks = []
    for claim, launches in kernel_plan(op).items():
        ladder = [(p.fixed_dims, None)] if p.fixed_dims else launches
        tasks += [make_task("kernel", ref, claim, dims, seed=p.seed, **({"launch": launch} if launch else {}))
                  for dims, launch in ladder]
    return tasks


def kernel_plan(op) -> dict[str, list[tuple[dict, str | None]]]:
    """claim -> [(dims, launch)] of every kernel of ``op`` in this process's mode. Listing the kernels
    imports them, and with them numba-cuda (1.4 s, most of a run with nothing to do), so the answer is
    kept on disk, keyed by the mode and the bytes of every file of the kernel package (the registry
    finds its kernels among exactly those files): any edit there lists them again."""
    import json

    from vjpcert.cuda_kernels import check
    name = check._base_name(op)
    path = kernel_plan_file(Path(check.__file__).parent, check.detect_mode())
    try:
        plans = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        plans = {}
    if name not in plans:
        mode = check.detect_mode()
        plans[name] = [[claim, [[dims, launch] for dims, launch in check.kernel_launches(op, mode, claim)]]
                       for claim in check.kernel_claims(op)]
        try:                                     # best effort: an unwritable cache costs the import next time
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(plans), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass
    return {claim: [(dict(dims), launch) for dims, launch in ladder] for claim, ladder in plans[name]}


def kernel_plan_file(folder: Path, mode: str) -> Path:
    """The cache file of the kernel plans of the package in ``folder`` (every ``*.py`` file's name and
    bytes) in ``mode``."""
    import hashlib

    from vjpcert.core.code_hash import cache_dir
    h = hashlib.sha256(f"{KERNEL_PLAN_VERSION} {mode}".encode())
    for f in sorted(folder.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return cache_dir() / "kernel-plans" / f"{h.hexdigest()[:32]}.json"


KERNEL_PLAN_VERSION = 1         # bump when kernel_plan's record changes


def _plan_nothing(ref, op, p: Planning):
    return []


def _run_implementation(op, task):
    raise ValueError("implementation certificates are made by `vjpcert check --impl`, not replayed "
                     "from a plan (the implementation is not part of the report)")


TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("symbolic", "symbolic", "vjpcert.symbolic.fixed.prover", _run_symbolic, _plan_symbolic,
         methods=(("compositional", "vjpcert.symbolic.composition.compose"), ("general", "vjpcert.symbolic.every_size.general"),
                  ("modular", "vjpcert.symbolic.modular.check"), ("instance", "vjpcert.symbolic.every_size.instance")),
         claims=((KINK_CLAIM, "vjpcert.symbolic.fixed.kinks"),)),     # prover.KINK_CHECKER
    Tier("numeric", "numeric", "vjpcert.numeric_tier", _run_numeric, _plan_numeric),
    Tier("kernel", "kernel", "vjpcert.cuda_kernels.check", _run_kernel, _plan_kernel,
         requires="pip install -e '.[cuda]'", discovered="vjpcert.cuda_kernels"),
    Tier("triton", "triton", "vjpcert.triton_kernels.check", _run_triton, _plan_triton,
         requires="pip install -e '.[triton]'", discovered="vjpcert.triton_kernels"),
    Tier("implementation", "implementation", "vjpcert.impl", _run_implementation, _plan_nothing),
)}
PLANNED = ("symbolic", "numeric", "kernel")        # the tiers `vjpcert all` plans


def tier(name: str) -> Tier:
    try:
        return TIERS[name]
    except KeyError:
        raise ValueError(f"unknown tier {name!r}; tiers: {', '.join(TIERS)}") from None


def checker_sha256(name: str, method: str | None = None, claim: str | None = None) -> str:
    """The checker hash of a tier's certificates of ``claim`` issued by ``method`` (the task's
    ``method`` option)."""
    return tier(name).checker_sha256(method, claim)
