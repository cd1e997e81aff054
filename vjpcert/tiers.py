"""The tier table: what each tier is, the code its certificates depend on, where it works for an op,
and how it runs one task. Planning, the runner, verify, mutate, the reports and `--impl` read this
table; nothing else dispatches on a tier's name.

    symbolic        exact proofs (``vjpcert.symbolic``)
    numeric         mpmath checks with digits, and the float references (``vjpcert.numeric``)
    kernel          CUDA kernels against the specs (``vjpcert.cuda_kernels``)
    implementation  a user's own implementation against a spec (``vjpcert.impl``, `check --impl`)

A tier's checker hash (``checker_sha256``) is its package's ``CHECKER_SHA256``: its own source and
``core/`` (``core.certificate.checker_code_sha256``). A certificate whose hash differs is stale.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Tier:
    name: str
    title: str                  # a column of the summary table
    checker: str                # the module whose CHECKER_SHA256 is this tier's checker hash
    runs: Callable              # (op, task) -> Certificate
    requires: str = ""          # what to install when the checker does not import

    def checker_sha256(self) -> str:
        return importlib.import_module(self.checker).CHECKER_SHA256

    def available(self) -> bool:
        try:
            importlib.import_module(self.checker)
            return True
        except Exception:        # numba-cuda missing, or a kernel module that does not import
            return False


def _run_symbolic(op, task):
    opts = dict(task.options)
    method = opts.pop("method", "monolithic")
    if method == "compositional":
        from vjpcert.symbolic.composition import prove_compositional
        return prove_compositional(op, task.claim, task.dims_dict, **opts)
    if method == "general":
        from vjpcert.symbolic.general import prove_general
        return prove_general(op, task.claim, **opts)
    from vjpcert.symbolic.prover import prove_claim
    return prove_claim(op, task.claim, task.dims_dict, **opts)


def _run_numeric(op, task):
    from vjpcert.numeric.check import check_claim
    opts = dict(task.options)
    if "point" in opts:
        opts["point"] = dict(opts["point"])
    return check_claim(op, task.claim, task.dims_dict, **opts)


def _run_kernel(op, task):
    from vjpcert.cuda_kernels.check import check_kernel_claim
    return check_kernel_claim(op, task.claim, task.dims_dict, **dict(task.options))


def _run_implementation(op, task):
    raise ValueError("implementation certificates are made by `vjpcert check --impl`, not replayed "
                     "from a plan (the implementation is not part of the report)")


TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("symbolic", "symbolic", "vjpcert.symbolic.prover", _run_symbolic),
    Tier("numeric", "numeric", "vjpcert.numeric.check", _run_numeric),
    Tier("kernel", "kernel", "vjpcert.cuda_kernels.check", _run_kernel, requires="pip install -e '.[cuda]'"),
    Tier("implementation", "implementation", "vjpcert.impl", _run_implementation),
)}
PLANNED = ("symbolic", "numeric", "kernel")        # the tiers `vjpcert all` plans


def tier(name: str) -> Tier:
    try:
        return TIERS[name]
    except KeyError:
        raise ValueError(f"unknown tier {name!r}; tiers: {', '.join(TIERS)}") from None


def checker_sha256(name: str) -> str:
    return tier(name).checker_sha256()
