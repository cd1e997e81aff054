"""The proof ladder for one claim, under a wall-clock budget, ending in a certificate.

    ring (flint atoms) -- 0 --> proved
      | nonzero                         | timed out / error
      v                                 |
    exact witness (rationals) -> failed |
      | no rational disagreement        v
      v                                 modp (Schwartz-Zippel) -> checked-probabilistic ...
    witness (mpmath 50/100) -> failed   witness -> failed
      | numerically zero
      v
    ring + relations -> proved;  sympy diff + simplify -> proved;
    else inconclusive (exact nonzero) or checked (mpmath 100 digits)

The ring itself applies the atoms' cheap relations (its normal form); the complete elimination
comes after the witness, because a wrong claim makes it expensive.

Every strategy is stopped at its share of the budget: in a forked child, killed at the deadline, or,
for a claim whose ring bound is at most ``INLINE_MAX_TERMS`` terms, in this process under a timer
(``in_process``), which saves the fork's cost where it would exceed the proof's. A claim that no
strategy decides is `inconclusive`, never `proved`.
"""
from __future__ import annotations

import importlib
import time

from vjpcert.core.budget import run_with_budget
from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.registry import KINK_CLAIM, Op
from vjpcert.core.tolerance import rounding_words
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.fixed import strategies
from vjpcert.symbolic.fixed.claims import assumptions_of, trace_claim
from vjpcert.symbolic.fixed.formulas import formulas
from vjpcert.symbolic.fixed.in_process import run_in_process
from vjpcert.core.trace import dag_size

CHECKER_SHA256 = checker_code_sha256(__name__)
KINK_CHECKER = "vjpcert.symbolic.fixed.kinks"


# A claim whose ring bound (``strategies.ring_size``) is at most this many terms runs its strategies
# in this process (``in_process``): its ring takes milliseconds, less than a fork. Not a setting of
# the ladder (``symbolic.settings``): where a strategy runs changes no verdict, only its cost.
INLINE_MAX_TERMS = 20_000

# what a claim over a kink says (the ring's B.step is a free Boolean per argument)
REGIONS = ("on each region: every B.step (relu, ...) is a free Boolean, so the claim holds on every open "
           "region of the kinks' signs; the value on a kink itself is the claim at_the_kink")


def prove_claim(op: Op, claim: str, dims: dict, *, budget: float = tol.DEFAULT_CLAIM_BUDGET_S,
                seed: int = 0) -> Certificate:
    start = time.perf_counter()
    if claim == KINK_CLAIM:
        # a check of its own, with a checker hash of its own (``vjpcert.tiers``: the symbolic tier's
        # ``claims``): imported by name, so that its code is not in the ladder's hash, and an edit of
        # it stales the value-on-the-kink certificates only
        return importlib.import_module(KINK_CHECKER).prove_at_the_kink(op, dims, budget=budget, seed=seed)
    traced = trace_claim(op, claim, dims)
    deadline = time.monotonic() + budget
    log: list[dict] = []
    size = strategies.ring_size(traced)
    here = size <= INLINE_MAX_TERMS

    def attempt(name: str, fn, share: float | None = None, *, fork: bool = False):
        left = deadline - time.monotonic()
        seconds = left * (share if share is not None else tol.SHARE.get(name, 1.0))
        out = run_in_process(fn, seconds) if here and not fork else run_with_budget(fn, seconds)
        entry = {"strategy": name, "seconds": round(out.seconds, 4)}
        if out.status == "ok":
            entry.update(out.value)
        else:
            entry["status"] = out.status
            if out.error:
                entry["error"] = out.error.splitlines()[0][:300]
        log.append(entry)
        return entry

    def certificate(verdict: str, method: str, evidence: dict) -> Certificate:
        if verdict == "failed":
            rounding = _constant_rounding(op, claim, traced, evidence, attempt, seed)
            if rounding is not None:
                verdict, method, evidence = "inconclusive", "constant-rounding", rounding
        evidence = {**evidence, "strategies": log, "dag_nodes": dag_size(traced.roots())}
        if op.uses_kinks():
            evidence["regions"] = REGIONS
        shown = formulas(op, claim, traced.dims, traced)
        if shown:
            evidence["formulas"] = shown
        return Certificate.issue(op, claim=claim, tier="symbolic", verdict=verdict, method=method,
                           dims=traced.dims, assumptions=assumptions_of(op, traced.overrides),
                           evidence=evidence, seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256)

    def decided(entry):
        keep = {k: v for k, v in entry.items() if k not in ("status", "strategy", "seconds", "method")}
        return keep

    if size > tol.RING_MAX_TERMS:        # past the ring's reach: not worth its share of the budget
        r = {"strategy": "ring", "seconds": 0.0, "status": "skipped", "estimated_terms": size}
        log.append(r)
    else:
        r = attempt("ring", lambda: strategies.ring(traced, seed=seed))
    if r["status"] == "proved":
        return certificate("proved", r["method"], decided(r))
    rational = False
    if r["status"] == "nonzero":         # exact arithmetic says nonzero: for a rational claim, show it
        e = attempt("exact-witness", lambda: strategies.exact_witness(traced, seed=seed))
        if e["status"] == "failed":
            return certificate("failed", e["method"], decided(e))
        rational = e["status"] == "zero"
    wide = None
    if rational and "certain" not in r:
        # + - * / only, and nonzero in the ring: a residual nonzero only on a small region (a kink's
        # branch, B.step in the ring) is found by more exact points before digits and the relations,
        # which cannot fail a rational claim the exact points pass (each point costs one forward and
        # one reverse walk)
        wide = attempt("exact-witness-wide", lambda: strategies.exact_witness(
            traced, seed=seed + 1, points=tol.EXACT_WITNESS_POINTS_WIDE), share=tol.SHARE["exact-witness"])
        if wide["status"] == "failed":
            return certificate("failed", wide["method"], decided(wide))
    if "certain" in r:                   # nonzero at the real atom values, whatever relates them
        return certificate("failed", r["certain"]["method"],
                           {**{k: v for k, v in decided(r).items() if k != "certain"},
                            "witness": r["certain"]["witness"]})

    m = None
    if r["status"] != "nonzero":         # the exact ring did not finish (or was not tried): the
        # randomised exact test first, which decides a correct claim in seconds where digits take long
        salt = f"{op.name}|{claim}|{sorted(traced.dims.items())}|{op.spec_sha256}|{CHECKER_SHA256}"
        m = attempt("modp", lambda: strategies.modp(traced, seed=seed, salt=salt))
        if m["status"] == "proved-probabilistic":
            return certificate("checked-probabilistic", m["method"], decided(m))
        if m["status"] == "failed":
            return certificate("failed", m["method"], decided(m))

    # the digits before the complete elimination of atoms, which a wrong claim makes expensive (the
    # ring's own normal form has already applied the cheap relations)
    w = attempt("witness", lambda: strategies.witness(traced, seed=seed))
    if w["status"] == "failed":
        return certificate("failed", w["method"], decided(w))
    rr = None
    if r["status"] == "nonzero":         # related atoms? try the stronger normalisations
        rr = attempt("relations", lambda: strategies.relations(traced, seed=seed))
        if rr["status"] == "proved":
            return certificate("proved", rr["method"], decided(rr))
        if dag_size(traced.roots()) <= tol.SYMPY_MAX_NODES:
            s = attempt("sympy", lambda: strategies.sympy_simplify(traced))
            if s["status"] == "proved":
                return certificate("proved", s["method"], decided(s))
        if rational and rr["status"] == "nonzero":
            # + - * / only, and the relations step (complete for rational functions) left a nonzero
            # residual: the claim is exactly false. Numeric agreement must not turn that into `checked`.
            if wide is None or wide["status"] != "zero":     # the wide search did not finish: again
                e2 = attempt("exact-witness-wide", lambda: strategies.exact_witness(
                    traced, seed=seed + 1, points=tol.EXACT_WITNESS_POINTS_WIDE), share=1.0)
                if e2["status"] == "failed":
                    return certificate("failed", e2["method"], decided(e2))
            return certificate("inconclusive", "none", {"reason": "exact arithmetic shows the residual is a "
                               "nonzero rational function, but no rational point where it differs was found"})
    else:
        if m["status"] == "nonzero":     # with atoms: an identity between them, or an error -- not `checked`
            return certificate("inconclusive", "none", {
                "reason": f"the residual is nonzero mod p (prime {m['prime']}) with {m['atoms']} atoms "
                          "independent, and the exact ring did not finish to apply their relations: either "
                          "an identity between atoms or an error; digits alone do not decide it"})

    if r["status"] == "nonzero" and rr["status"] == "nonzero":
        # exact evidence of a nonzero residual (the relations leave one) outranks digits: an error
        # below 10^-100, or an identity between atoms the relations do not know -- not `checked`
        return certificate("inconclusive", "none", {
            "reason": "exact normalisation leaves a nonzero residual (the ring with independent atoms, "
                      "then the atoms' relations, " + ("then SymPy, " if any(e["strategy"] == "sympy" for e in log)
                                                       else "") + "found it nonzero) while mpmath at "
                      f"{tol.HIGH_DPS} digits " + ("sees none" if w["status"] == "zero" else "decides nothing")
                      + ": either an identity between atoms the normalisations do not know, or an error "
                        "too small for the digits",
            "relations_residual_terms": rr.get("reduced_terms"),
            **({"digits": w["digits"]} if "digits" in w else {})})
    if w["status"] == "zero":
        return certificate("checked", f"mpmath-{tol.HIGH_DPS}", decided(w))
    if w["status"] in ("timeout", "error", "unknown"):   # one more look with what is left
        w2 = attempt("witness-final", lambda: strategies.witness(traced, seed=seed + 1), share=1.0)
        if w2["status"] == "failed":
            return certificate("failed", w2["method"], decided(w2))
        if w2["status"] == "zero":
            return certificate("checked", f"mpmath-{tol.HIGH_DPS}", decided(w2))
    return certificate("inconclusive", "none", {"reason": "no strategy decided within the budget"})


def _constant_rounding(op: Op, claim: str, traced, evidence: dict, attempt, seed: int) -> dict | None:
    """The evidence of a failure that is only the rounding of the op's float constants (a framework
    graph's decimals no named real matches), or None when the failure stands."""
    names = op.rounded_constants(traced.dims)
    if not names:
        return None

    def retrace(shifts):
        with op.constants_shifted(shifts):
            return trace_claim(op, claim, traced.dims)
    # forked always: it traces the user's op again, with its constants shifted in place
    fit = attempt("constant-rounding", lambda: strategies.constant_rounding(traced, retrace, names, seed=seed),
                  share=1.0, fork=True)
    if fit.get("status") != "explained":
        return None
    return {"reason": rounding_words(names, fit), "witness": evidence.get("witness"),
            "constant_fit": {k: fit[k] for k in ("ulps", "left", "points", "dps")}}


def exact_look(op: Op, claim: str, dims: dict, *, budget: float, seed: int = 0) -> dict:
    """What exact normalisation alone says of a claim, for a tier that decides by digits: the ring
    (which fails a residual that is certainly nonzero at real atom values), then the atoms' relations,
    then SymPy on small claims -- the exact rungs of ``prove_claim``'s ladder, in its order.
    {"status": "proved" | "failed" (with the ring's witness) | "nonzero" | "timeout" | "error", ...}.
    Tracing is inside the budget: a claim too large for it costs the budget, never more."""
    def look():
        traced = trace_claim(op, claim, dims)
        r = strategies.ring(traced, seed=seed)
        if "certain" in r:
            certain = r.pop("certain")
            return {**r, **certain, "status": "failed"}
        if r["status"] != "nonzero":
            return r
        rr = strategies.relations(traced, seed=seed)
        if rr["status"] == "proved":
            return rr
        if dag_size(traced.roots()) <= tol.SYMPY_MAX_NODES:
            s = strategies.sympy_simplify(traced)
            if s["status"] == "proved":
                return s
        return {**r, "relations": rr}
    out = run_with_budget(look, budget)
    if out.status != "ok":
        return {"status": out.status, "seconds": round(out.seconds, 2)}
    return {**out.value, "seconds": round(out.seconds, 2)}
