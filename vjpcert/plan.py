"""What a command will run: tasks per (tier, op, claim, dims, options), validated before anything is
written, and which of them already have a *current* certificate (so a rerun resumes)."""
from __future__ import annotations

import json
from pathlib import Path

from vjpcert.core.certificate import SCHEMA_VERSION, cert_relpath, record_digest
from vjpcert.core.registry import Op, SpecError
from vjpcert.core.validate import validate
from vjpcert.ops import OpRef, dims_ladder
from vjpcert.runner import Task, make_task

TIERS = ("symbolic", "numeric", "kernel")


def checker_sha256(tier: str) -> str:
    """The hash of the code that issues a tier's certificates (a change makes them stale)."""
    if tier == "symbolic":
        from vjpcert.symbolic.prover import CHECKER_SHA256
    elif tier == "numeric":
        from vjpcert.numeric.check import CHECKER_SHA256
    else:
        from vjpcert.cuda_kernels.check import CHECKER_SHA256
    return CHECKER_SHA256


def variant_of(task: Task) -> str:
    method = dict(task.options).get("method")
    return f"{task.tier}-{method}" if task.tier == "symbolic" and method in ("compositional", "general") \
        else task.tier


def task_relpath(task: Task, op_name: str) -> Path:
    return cert_relpath(op_name, variant_of(task), task.claim, task.dims_dict)


def kernel_available() -> bool:
    try:
        import vjpcert.cuda_kernels.check  # noqa: F401
        return True
    except Exception:        # numba-cuda missing, or a kernel module that does not import
        return False


def tier_tasks(tier: str, ref: OpRef, op: Op, *, overrides: dict, large: bool, seed: int,
               budget: float | None = None, dps: int = 50, method: str = "mpmath-diff",
               point=None, fixed_dims=None, general: bool = False) -> list[Task]:
    """Every task of one tier for one op, validating the spec at each dims."""
    opts = {"seed": seed}
    if tier == "kernel":
        from vjpcert.cuda_kernels.check import detect_mode, kernel_claims, kernel_dims
        claims = kernel_claims(op)
        if not claims:
            return []
        ladder = [fixed_dims] if fixed_dims else kernel_dims(op, detect_mode())
        return [make_task("kernel", ref, c, d, **opts) for d in ladder for c in claims]
    if fixed_dims is not None:
        ladder = [fixed_dims]
    elif tier == "numeric" and not overrides and not large:
        from vjpcert.numeric.check import numeric_dims
        ladder = numeric_dims(op)
    else:
        ladder = dims_ladder(op, overrides, large)
    tasks = []
    for dims in ladder:
        validate(op, dims)
        if tier == "symbolic":
            if budget is not None:
                opts["budget"] = budget
            for claim in op.claims():
                if "monolithic" in op.proofs or not claim.startswith("vjp["):
                    tasks.append(make_task(tier, ref, claim, dims, **opts))
                if "compositional" in op.proofs and claim.startswith("vjp["):
                    tasks.append(make_task(tier, ref, claim, dims, method="compositional", **opts))
        else:
            nopts = {**opts, "dps": dps, "method": method}
            if point is not None:
                nopts["point"] = point
            from vjpcert.numeric.check import numeric_claims
            tasks += [make_task(tier, ref, claim, dims, **nopts) for claim in numeric_claims(op)]
    if tier == "symbolic" and general and op.general:
        from vjpcert.symbolic.general import general_dims
        gopts = {**opts, **({"budget": budget} if budget is not None else {})}
        tasks += [make_task(tier, ref, claim, general_dims(op, claim), method="general", **gopts)
                  for claim in op.general]
    return tasks


def read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def is_current(record: dict | None, task: Task, op: Op) -> bool:
    """A certificate is current when it is intact, was issued for this spec and checker code and
    these options, and is not the record of a checker crash."""
    if not record or record.get("digest") != record_digest(record):
        return False
    options = {k: v for k, v in task.options if k != "point"}
    return (record.get("schema") == SCHEMA_VERSION and record.get("spec_sha256") == op.spec_sha256
            and record.get("checker_sha256") == checker_sha256(task.tier)
            and json.loads(json.dumps(record.get("options"))) == json.loads(json.dumps(options))
            and "error" not in record.get("evidence", {}))


def split_current(tasks: list[Task], ops: dict[str, Op], root: Path) -> tuple[list[Task], list[Task]]:
    """(tasks to run, tasks whose certificate is already current)."""
    todo, done = [], []
    for t in tasks:
        op = ops[t.op.name]
        (done if is_current(read_record(Path(root) / task_relpath(t, op.base_name)), t, op) else todo).append(t)
    return todo, done


def require(cond: bool, msg: str):
    if not cond:
        raise SpecError(None, msg)
