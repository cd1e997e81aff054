"""A task: one (tier, op, claim, dims, options) to run, with the code hashes it was planned with. The
tier table plans tasks (``vjpcert.tiers``), the runner runs them (``vjpcert.runner``), the planner
compares them with the certificates on disk (``vjpcert.plan``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vjpcert.ops import OpRef


@dataclass(frozen=True)
class Task:
    tier: str                        # "symbolic" | "numeric" | "kernel"
    op: OpRef
    claim: str
    dims: tuple                      # sorted (name, size) pairs: hashable and picklable
    options: tuple = field(default=())
    # (code sha256, checker_sha256, data its code read) the run was planned with: a worker whose loaded
    # code or data differs (a long-lived Dask worker that imported an older helper, or read an older
    # JSON) refuses instead of certifying old code
    expect: tuple = field(default=(), compare=False)

    @property
    def dims_dict(self) -> dict:
        return dict(self.dims)

    def label(self) -> str:
        d = ",".join(f"{k}={v}" for k, v in self.dims)
        return f"{self.op} {self.claim} [{d}]"


def make_task(tier: str, ref: OpRef, claim: str, dims: dict, *, expect: tuple = (), **options) -> Task:
    return Task(tier, ref, claim, tuple(sorted(dims.items())), tuple(sorted(options.items())), expect)
