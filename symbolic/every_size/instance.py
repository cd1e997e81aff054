"""A claim at fixed dims past the exact ring's reach, proved as an instance of its every-size proof.

The fixed-dims ring expands both sides into one polynomial in the entries: LayerNorm's
``dx_orthogonal_to_xhat`` at n = 128 is 82k terms before its relations are eliminated (seconds), and
at n = 4096 the ring is not even tried (the ladder goes to the randomised test mod p). The every-size
proof costs the same at every size, and a claim proved for every n >= 1 holds at n = 128. So for a
claim the op proves for every size, at dims outside the op's own ladder (`--dims`, `--large`), where
the ring's traced size says it would be slow:

    prove_general  -- proved-general, and these dims are an instance of its statement --> proved
      | anything else
      v
    the fixed-dims ladder (``symbolic.fixed.prover.prove_claim``), as at any other dims

The certificate says which: method ``general-instance`` with the every-size proof's evidence, or the
ladder's own method with what the every-size proof said. Below the size where the ring is fast (and at
the op's own dims, which the planner never sends here) the ring proves the claim by itself: an
independent proof, which the every-size tier's cross-check relies on.
"""
from __future__ import annotations

import time

from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.registry import Op
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.every_size.dims import DerivationRefused, dim_forms

CHECKER_SHA256 = checker_code_sha256(__name__)

# what a proved-general certificate's evidence carries over into the instance's
_KEPT = ("statement", "formula", "law", "normalisation", "derived_from", "scope")


def instance_of(op: Op, dims: dict) -> str | None:
    """Why ``dims`` are not an instance of the op's every-size statement, or None when they are: each
    dim k * sub + least - k with sub >= 1 (``dim_forms``), so a multiple of k and at least ``least``."""
    try:
        forms = dim_forms(op)
    except DerivationRefused as exc:
        return exc.reason
    for name, value in dims.items():
        if name not in forms:             # a structural parameter, not a size
            continue
        k, _, least = forms[name]
        if not isinstance(value, int) or value < least or value % k:
            return f"{name} = {value!r} is not a size of the every-size statement (a multiple of {k}, >= {least})"
    return None


def prove_instance(op: Op, claim: str, dims: dict, *, budget: float = tol.DEFAULT_CLAIM_BUDGET_S,
                   seed: int = 0) -> Certificate:
    from vjpcert.symbolic.every_size.general import prove_general
    from vjpcert.symbolic.fixed.claims import trace_claim
    from vjpcert.symbolic.fixed.prover import prove_claim
    from vjpcert.symbolic.fixed.strategies import ring_size
    start = time.perf_counter()
    deadline = time.monotonic() + budget
    why = instance_of(op, dims) if claim in op.general else "the op does not prove this claim for every size"
    route: dict = {"tried": False, "reason": why}
    if why is None:
        terms = ring_size(trace_claim(op, claim, dims))
        route = {"tried": terms >= tol.INSTANCE_MIN_RING_TERMS, "ring_terms_bound": terms}
        if not route["tried"]:
            route["reason"] = f"the ring expands at most {terms} terms here: it decides the claim itself"
    if route["tried"]:
        general = prove_general(op, claim, budget=budget * tol.INSTANCE_SHARE, seed=seed)
        route.update(verdict=general.verdict, method=general.method, seconds=general.seconds)
        if general.verdict == "proved-general":
            evidence = {k: v for k, v in general.evidence.items() if k in _KEPT}
            evidence["instance_of"] = {
                "every_size_dims": general.dims, "at": dict(dims), "assumptions": general.assumptions,
                "cross_check_sizes": [row["dims"] for row in general.evidence.get("cross_check", {}).get("at", [])],
                "reason": "the claim is proved for every size (an exact normal form, cross-checked against the "
                          "spec at several sizes), and these dims are one of them"}
            evidence["every_size"] = route
            return Certificate.issue(op, claim=claim, tier="symbolic", verdict="proved", method="general-instance",
                                     dims=dims, assumptions=[*general.assumptions, "at " + ", ".join(
                                         f"{k} = {v}" for k, v in sorted(dims.items()))],
                                     evidence=evidence, seconds=time.perf_counter() - start,
                                     checker_sha256=CHECKER_SHA256)
        route["reason"] = general.evidence.get("reason", general.verdict)
    left = max(1.0, deadline - time.monotonic())
    cert = prove_claim(op, claim, dims, budget=left, seed=seed)
    evidence = {k: v for k, v in cert.evidence.items() if k != "checker_covers"}
    evidence["every_size"] = route
    return Certificate.issue(op, claim=claim, tier="symbolic", verdict=cert.verdict, method=cert.method,
                             dims=cert.dims, assumptions=cert.assumptions, evidence=evidence,
                             seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256)
