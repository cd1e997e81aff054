"""What a command will run: tasks per (tier, op, claim, dims, options), validated before anything is
written, and which of them already have a *current* certificate (so a rerun resumes)."""
from __future__ import annotations

import json
from pathlib import Path

from vjpcert.core.certificate import SCHEMA_VERSION, cert_relpath, record_digest
from vjpcert.core.registry import Op, SpecError
from vjpcert.ops import OpRef
from vjpcert.runner import Task
from vjpcert.tiers import checker_sha256   # once per process and checker module


def variant_of(task: Task) -> str:
    """The certificate's variant (its file name's first part): see ``Certificate.variant``."""
    opts = dict(task.options)
    method = opts.get("method")
    if task.tier == "symbolic" and method in ("compositional", "general"):
        return f"{task.tier}-{method}"
    if task.tier == "symbolic" and method == "modular":
        return f"{task.tier}-modular"
    return f"{task.tier}-point" if "point" in opts else task.tier


def task_relpath(task: Task, op_name: str) -> Path:
    return cert_relpath(op_name, variant_of(task), task.claim, task.dims_dict)


def kernel_unavailable() -> str | None:
    """Why the kernel tier cannot run here (what to install), or None."""
    from vjpcert.tiers import TIERS
    if not TIERS["kernel"].available():
        return f"the kernel tier needs numba-cuda: {TIERS['kernel'].requires}"
    from vjpcert.cuda_kernels.check import unavailable_reason
    reason = unavailable_reason(installing=False)    # a run installs the simulator's patches itself
    return f"the kernel tier cannot run: {reason}" if reason else None


def tier_tasks(tier: str, ref: OpRef, op: Op, *, overrides: dict, large: bool, seed: int,
               budget: float | None = None, dps: int = 50, method: str = "mpmath-diff",
               point=None, fixed_dims=None, general: bool = False, modular: bool = False,
               check=None) -> list[Task]:
    """Every task of one tier for one op, validating the spec at each dims (or calling ``check(op,
    dims)`` instead: see ``tiers.Planning.check``). Each task carries the code hashes it was planned
    with (``Task.expect``)."""
    import dataclasses

    from vjpcert.tiers import Planning
    from vjpcert.tiers import tier as tier_of
    from vjpcert.unhashed import unhashed, watch
    with watch(op) as seen:         # planning runs the spec's code (validation, features)
        tasks = tier_of(tier).plans(ref, op, Planning(overrides=overrides, large=large, seed=seed, budget=budget,
                                                      dps=dps, method=method, point=point, fixed_dims=fixed_dims,
                                                      general=general, modular=modular,
                                                      **({"check": check} if check is not None else {})))
    why = unhashed(op, seen)
    if why:
        raise SpecError(op.name, why)
    # after planning, which ran the spec (validation): the data its code read is known here too
    from vjpcert.core.sources import planned_reads
    code, reads = (op.identity_sha256, planned_reads(op)) if tasks else (None, None)
    return [dataclasses.replace(t, expect=(code, checker_sha256(tier, dict(t.options).get("method"), t.claim), reads))
            for t in tasks]


def read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def task_identity(task: Task, op: Op) -> dict:
    """Everything that makes a certificate the certificate of this task."""
    from vjpcert.runner import certificate_options
    dims = task.dims_dict
    if dict(task.options).get("method") == "general":
        from vjpcert.symbolic.every_size.dims import general_dims
        dims = general_dims(op, task.claim)
    return json.loads(json.dumps({"op": op.base_name, "claim": task.claim, "tier": task.tier,
                                  "variant": variant_of(task), "dims": dims,
                                  "options": certificate_options(task)}, default=str))


def record_identity(record: dict) -> dict:
    from vjpcert.core.certificate import Certificate
    try:
        variant = Certificate.from_dict(record).variant
    except (TypeError, ValueError):
        return {}
    # a record is JSON as loaded: its fields need no round trip through the encoder (a task's do)
    return {k: record.get(k) for k in ("op", "claim", "tier", "dims", "options")} | {"variant": variant}


def is_current(record: dict | None, task: Task, op: Op, *, hashed: dict | None = None) -> bool:
    """A certificate is current when it is intact, is the certificate of this very task (op, claim,
    tier, variant, dims, every option -- a file name could be shared, its content cannot), was issued
    for the spec and checker code there is now and for the data files that code read as they are on
    disk now (each one it lists is hashed again), and is not the record of a checker crash.
    ``hashed``: the spec hashes already computed in this pass (an op's claims list the same sources)."""
    if not record or record.get("digest") != record_digest(record):
        return False
    # the hashes the task was planned with (``Task.expect``, computed from the code this process loaded
    # moments ago), else computed now: hashing an op's files costs ~0.1 s, once per op, not per claim
    code, checker = task.expect[:2] if task.expect else (op.identity_sha256, checker_sha256(
        task.tier, dict(task.options).get("method"), task.claim))
    from vjpcert.core.sources import current_sha256
    sources = record.get("sources")
    key = (code, id(op), tuple(map(str, sources)) if isinstance(sources, list) else repr(sources))
    spec = hashed.get(key) if hashed is not None else None
    if spec is None:
        spec, _ = current_sha256(code, op, sources)
        if hashed is not None:
            hashed[key] = spec
    return (record.get("schema") == SCHEMA_VERSION and record_identity(record) == task_identity(task, op)
            and record.get("spec_sha256") == spec
            and record.get("checker_sha256") == checker
            and "error" not in record.get("evidence", {}))


def split_current(tasks: list[Task], ops: dict[str, Op], root: Path,
                  records: dict | None = None) -> tuple[list[Task], list[Task]]:
    """(tasks to run, tasks whose certificate is already current); ``records`` (a dict), if given,
    gets each current task's record, as read for the decision (no second read of the file)."""
    todo, done = [], []
    hashed: dict = {}        # within one pass: the data files an op's claims list are hashed once
    for t in tasks:
        op = ops[t.op.name]
        record = read_record(Path(root) / task_relpath(t, op.base_name))
        if is_current(record, t, op, hashed=hashed):
            done.append(t)
            if records is not None:
                records[t] = record
        else:
            todo.append(t)
    return todo, done


def require(cond: bool, msg: str):
    if not cond:
        raise SpecError(None, msg)


def plan_op(op, tiers=("symbolic", "numeric", "kernel"), *, dims: dict | None = None, claims=None,
            seed: int = 0, budget: float | None = None, dps: int = 50, method: str = "mpmath-diff",
            general: bool = True, large: bool = False, modular: bool = False) -> list[Task]:
    """The one planner: the tasks of one op (an Op, a built-in name, or "file.py::name") in these
    tiers -- what `vjpcert all/prove/check`, the pytest fixture, the session API and Dask runs run.
    ``dims`` overrides dims as `--dims` does; ``claims`` keeps only those claims."""
    from vjpcert.ops import ref_for
    from vjpcert.specs import resolve_op
    op = resolve_op(op)
    ref = ref_for(op)
    tasks = []
    for tier in tiers:
        if tier == "kernel" and kernel_unavailable():
            continue
        tasks += tier_tasks(tier, ref, op, overrides=dict(dims or {}), large=large, seed=seed, budget=budget,
                            dps=dps, method=method, general=general, modular=modular)
    if claims is not None:
        unknown = set(claims) - {t.claim for t in tasks}
        if unknown:
            raise SpecError(op.name, f"has no claims {sorted(unknown)} in the tiers {list(tiers)}")
        tasks = [t for t in tasks if t.claim in set(claims)]
    return tasks
