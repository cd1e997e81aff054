"""The numeric tier as the planner runs it: mpmath digits (``numeric.check``), then what exact
normalisation knows of the same claim (``symbolic.fixed.prover.exact_look``).

Digits cannot see an error below them: a backward off by dy exp(-10^6) agrees with J^T dy to every
digit mpmath has. So a numeric `checked` stands only where the exact tier, asked at the same dims
within a small budget, found no evidence of a nonzero residual. Where it found one, the certificate
says what: `failed` with the exact witness where the residual is certainly nonzero at real values,
else `inconclusive` naming the nonzero the ring and its relations leave. The look runs at the op's
check dims (the long rows are past the ring's reach) and its result is in the evidence either way.

The tier's checker hash covers both checkers: a change to the exact tier stales these certificates too.
"""
from __future__ import annotations

import dataclasses

from vjpcert.core.certificate import checker_code_sha256
from vjpcert.core.code_hash import covers
from vjpcert.numeric.check import REFERENCE_CLAIM, check_claim
from vjpcert.symbolic.fixed import prover

CHECKER_SHA256 = checker_code_sha256(__name__)
EXACT_LOOK_BUDGET_S = 10.0       # measured: ring + relations finish in < 2 s at every built-in op's check dims


def check(op, claim: str, dims: dict, **opts):
    cert = check_claim(op, claim, dims, **opts)
    cert = dataclasses.replace(cert, checker_sha256=CHECKER_SHA256,
                               evidence={**cert.evidence, "checker_covers": covers(CHECKER_SHA256)})
    if cert.verdict != "checked" or claim == REFERENCE_CLAIM or "point" in opts:
        return cert
    if op.resolve_dims(dims) != op.resolve_dims(op.check_dims):
        return dataclasses.replace(cert, evidence={**cert.evidence, "exact_look": "not run: these dims are "
                                                   "past the exact tier's reach (long rows)"})
    look = prover.exact_look(op, claim, dims, budget=EXACT_LOOK_BUDGET_S, seed=opts.get("seed", 0))
    evidence = {**cert.evidence, "exact_look": {k: v for k, v in look.items() if k != "witness"}}
    if look["status"] == "failed":
        return dataclasses.replace(cert, verdict="failed", method=look["method"],
                                   evidence={**evidence, "witness": look["witness"],
                                             "digits_saw_nothing": True})
    if look["status"] == "nonzero":
        return dataclasses.replace(cert, verdict="inconclusive", method="none", evidence={
            **evidence, "reason": "the digits agree, but exact normalisation (the ring with independent atoms, "
                                  "then the atoms' relations) leaves a nonzero residual: either an identity "
                                  "between atoms it does not know, or an error below the digits"})
    return dataclasses.replace(cert, evidence=evidence)
