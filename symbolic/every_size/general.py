"""Proofs for every size: claims stated with symbolic dimensions (``IndexedBase``, ``Sum``,
``KroneckerDelta``), verdict ``proved-general``.

A proof at n = 2..32 says nothing certain about n = 4096. Here the dimensions are symbols n >= 1 and
the claim is proved once for all of them:

    for every size and every input index (s, j):   sum_out dy[out] * d y[out] / d x[s, j]  ==  dx[s, j]

Both sides come from the spec itself: ``symbolic.every_size.shape_trace`` runs the op's forward, backward (or
law) with symbolic dimensions and hands over y[out] and dx[s, j] as expressions in the indices. The
left side is then *derived* (``sympy.diff`` of the indexed forward gives KroneckerDelta terms) and
the difference is reduced to 0 by the exact normal form of ``symbolic.every_size.normal`` (sums
expanded by linearity, deltas and mask indicators evaluated under proven index bounds, each
remaining sum and transcendental subterm an atom, then a rational-function zero test). Nothing else
may say ``proved-general``.

A layout written as pieces (RoPE's x[r, 2p + c] or x[r, p + h], a concatenation) is also proved to
tile its array for every size (indices in range, maps injective, pieces disjoint, sizes adding up).

What guards the derivation:
  * refusal: Python control flow on a size (``if n % 4``, ``range(n)``), a slice or an index that
    does not fit every size (``x[..., :2048]``), a layout that cannot be aligned, constraints on a
    dim other than "every size" or "every multiple of k": the derivation stops, and the claim is
    ``inconclusive`` with the reason and the spec's file:line -- never proved;
  * cross-check (the tracer's self-check): the derived statement is *instantiated* at several
    concrete sizes (n = 1, 2, 3, 5, and the op's own dims) and compared, entry by entry and exactly,
    with ``op.forward`` / ``op.vjp`` / the law run on the SymPy backend; the fixed-dims prover
    (``prove_claim``) proves the spec at the ladder's sizes. A mismatch means the tracer derived
    another formula, and a refutation there contradicts the general proof: either way never
    ``proved-general``. (A size where the spec is undefined for every input -- a variance at n = 1
    with eps = 0 -- is not compared; at least three sizes must be.)
  * negative controls (``specs/mutants/general.py`` and every spec mutant): wrong specs must be
    refused or fail with a witness; hand-written statements about another formula must be refused
    by the cross-check.

``prove_general(op, claim, form=builder)`` proves a hand-written statement instead (``form``
describes the builder ``G``); the tests use it for negative controls, and its certificate says it
was not derived from the spec.

Public API: ``prove_general(op, claim, *, budget=GENERAL_BUDGET_S, seed=0, form=None) -> Certificate``,
``general_claims(op) -> list[str]`` and ``general_dims(op, claim) -> dict`` (the certificate's dims,
hence its file name, without proving anything).
"""
from __future__ import annotations

import inspect
import itertools
import time
from pathlib import Path
from typing import Callable

import sympy as sp

from vjpcert.core.budget import run_with_budget
from vjpcert.core.certificate import Certificate
from vjpcert.core.registry import KINK_CLAIM, Op, SpecError
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.every_size.form import (GeneralBuilder, Statement, _cot_name, _entry, assumptions_of,  # noqa: F401
                                   build_statement, general_claims, general_dims, render)
from vjpcert.symbolic.every_size.cases import by_cases
from vjpcert.symbolic.every_size.induction import prove_by_induction, prove_chunked
from vjpcert.symbolic.every_size.concrete import cross_check, default_check_dims, find_witness, own_dims
from vjpcert.symbolic.every_size.normal import NormalFormError, Normaliser
from vjpcert.symbolic.every_size.shape_trace import DerivationRefused, derive, source_of, spec_line
# The symbolic tier's checker hash (it covers every file of symbolic/, these two included), so the
# report planner tells a current general certificate from a stale one as for every other symbolic claim.
from vjpcert.core.certificate import checker_code_sha256

CHECKER_SHA256 = checker_code_sha256(__name__)


NORMALISATION = ("sums expanded by linearity (independent factors pulled out, nested sums flattened "
                 "into one multi-index sum, independent index groups split into products); "
                 "KroneckerDelta sums evaluated only when index bounds prove the pinned value lies in "
                 "range, deltas with provably different sides set to 0; each remaining sum an atom "
                 "with canonically named indices; exp/erf/tanh/sin/cos and radicals opaque atoms "
                 "(radicals reduced by u^q = b); zero test: numerator of the rational function in "
                 "the atoms expands to 0; a residual whose deltas pin a free index or a size near the "
                 "end of its range is split into cases (those values one by one, the rest of the range "
                 "as a fresh index or a larger size), each normalised and tested again; a summation range "
                 "cut to the bound a mask (or a unit lower triangular inverse's zero triangle) puts on its "
                 "index; an inverse entry whose row and column lie in a leading block read as that block's "
                 "inverse; a residual holding sums over both n - 1 and n - 2 steps normalised again with n's "
                 "last step taken out of every sum, and an inverse's last row written by forward substitution")
SCOPE = ("the statement was derived from the spec's own code (the functions named in derived_from) by a "
         "shape-polymorphic trace with symbolic dimensions, and proved for every size allowed by the "
         "assumptions; the cross-check instantiates it at concrete sizes and compares it exactly with the "
         "spec run there (a self-check of the tracer), where the fixed-dims prover also proves the spec")
SCOPE_FORM = ("a hand-written general form (not derived from the spec): its identity is proved for every size; "
              "that it is the spec's formula is shown exactly at the cross-check sizes only")

def normalise_statement(stmt: Statement) -> dict:
    """Exact normal form of every identity's residual (and, for a layout written as pieces, the
    proof that the pieces tile the array); runs in a forked child."""
    G = stmt.G
    N = Normaliser(G.dim_symbols, G.ranges)
    results, proved = [], True
    try:
        layouts = {}
        groups = ((("output", stmt.forward, G.output_shape()),
                   (stmt.form.wrt, stmt.backward, G.shape(stmt.form.wrt)))
                  if stmt.kind == "vjp" else (("law", stmt.law, stmt.law_shape),))
        for label, pieces, shape in groups:
            lay = layout_proof(N, pieces, shape)
            if lay is not None:
                layouts[label] = lay
        for ident in stmt.identities:
            t = time.perf_counter()
            # a free index over a range of constant length (rope_pair's 2 components) takes each value
            const = [s for s in ident.free if sp.expand(G.ranges[s][1] - G.ranges[s][0]).is_Integer
                     and int(G.ranges[s][1] - G.ranges[s][0]) < tol.GENERAL_MAX_ENUMERATED]
            cases = [dict(zip(const, vals)) for vals in
                     itertools.product(*[range(int(G.ranges[s][0]), int(G.ranges[s][1]) + 1) for s in const])]
            zero, info, vacuous, shown = True, {}, True, None
            for case in cases:
                diff = (ident.lhs - ident.rhs).xreplace(case)
                z, info = by_cases(N, diff, [s for s in ident.free if s not in case])
                vacuous &= z and stmt.kind == "vjp" and N(ident.rhs.xreplace(case)) == 0
                if not z and shown is None:
                    shown = sp.sstr(N(diff))[:400]
                zero &= z
            info["free"] = [str(s) for s in ident.free]
            if const:
                info["enumerated"] = {str(s): f"{G.ranges[s][0]}..{G.ranges[s][1]}" for s in const}
            if zero and vacuous:
                info["vacuous"] = "the backward and J^T dy are both identically 0"
            info["seconds"] = round(time.perf_counter() - t, 4)
            if not zero:
                info["normal_form"] = shown
            results.append(info)
            proved &= zero
    except NormalFormError as exc:
        return {"status": "error", "error": f"normal form: {exc}"}
    out = {"status": "proved" if proved else "nonzero", "identities": results, **N.stats.as_dict()}
    if layouts:
        out["layout"] = layouts
        if proved and any(v["status"] != "proved" for v in layouts.values()):
            out["status"] = "layout"
    return out


def layout_proof(N: Normaliser, pieces: list, shape: tuple) -> dict | None:
    """Pieces given by index maps (RoPE's x[r, 2p + c]) must tile the array: every entry covered
    exactly once, for every size. Proved as (1) every index lies in the array (interval bounds),
    (2) the maps are injective and the pieces disjoint -- prod_axis delta(idx(p), idx'(p')) normalises
    to prod delta(p, p') for a piece against itself and to 0 for two pieces -- and (3) the piece
    sizes add up to the array size. Injective into a set of the same finite size is bijective.
    None when the array is one piece with the identity index (nothing to prove)."""
    if len(pieces) == 1 and tuple(pieces[0].idx) == tuple(pieces[0].syms) \
            and all(sp.expand(a - b) == 0 for a, b in zip(pieces[0].sizes, shape)):
        return None
    total = sp.Add(*[sp.Mul(*p.sizes) for p in pieces])
    if sp.expand(total - sp.Mul(*shape)) != 0:
        return {"status": "unproved", "why": f"piece sizes add up to {total}, the array has {sp.Mul(*shape)}"}
    for p in pieces:
        for e, size in zip(p.idx, shape):
            aff = N._affine(e)
            bounds = N._bounds(*aff) if aff else None
            if bounds is None or not (N._nonneg(bounds[0]) and N._nonneg(size - 1 - bounds[1])):
                return {"status": "unproved", "why": f"index {e} not shown to lie in [0, {size - 1}]"}
    for a, b in itertools.combinations_with_replacement(range(len(pieces)), 2):
        pa, pb = pieces[a], pieces[b]
        copy = {s: N.fresh(*N.ranges[s]) for s in pb.syms}
        idx_b = [sp.sympify(e).xreplace(copy) for e in pb.idx]
        overlap = sp.Mul(*[sp.KroneckerDelta(x, y) for x, y in zip(pa.idx, idx_b)])
        expected = sp.Mul(*[sp.KroneckerDelta(s, copy[s]) for s in pa.syms]) if a == b else sp.Integer(0)
        if not N.is_zero(overlap - expected)[0]:
            return {"status": "unproved", "why": f"pieces {a} and {b} not shown {'injective' if a == b else 'disjoint'}"}
    return {"status": "proved", "pieces": len(pieces)}


# ============================================================================ 2. instantiation
# The budget of an every-size claim when none is given (``vjpcert all`` without --timeout). Its
# statement holds for every size at once and its normal form is larger than a fixed-dims claim's: the
# 7 x 7 depthwise convolution's dx, whose edge rows and columns are proved case by case, derives in
# ~40 s and normalises in ~260-280 s on one of two busy cores here, and the normalisation gets
# half of what the derivation leaves (``GENERAL_SHARE``); a busier machine takes up to 1.5 times that.
GENERAL_BUDGET_S = 900.0


def prove_general(op: Op, claim: str, *, budget: float = GENERAL_BUDGET_S, seed: int = 0,
                  form: Callable | None = None) -> Certificate:
    """Prove ``claim`` of ``op`` for every size; ``form`` overrides the registered general form (the
    negative controls use it). Verdicts:

    * ``proved-general``: the exact normal form of every identity is 0 *and* the cross-check found the
      general form equal to the spec at every concrete size tried;
    * ``failed``: a witness refutes the general statement at a concrete size where the general form
      agrees with the spec -- so the spec's backward (or law) is wrong at that size too;
    * ``inconclusive``: anything else, with the reason (timeout, a normal form that is not 0 without
      a witness, or a general form that is not the spec's formula).
    """
    start = time.perf_counter()
    if form is None and claim not in op.general:
        raise SpecError(op.name, f"{claim!r} is not proved for every size; every-size claims: "
                                 f"{general_claims(op)} (declare them with op.every_size(...))")
    if claim == KINK_CLAIM:
        raise SpecError(op.name, f"{claim!r} is checked at exact points on the kinks (the fixed-dims tier), not for "
                                 f"every size: leave it out of op.every_size(...)")
    if form is None and getattr(op, "chunked", None) is not None:
        # every length and chunk size: by induction over the chunks from the chunk ops' claims
        return prove_chunked(op, claim, budget, seed, lambda verdict, dims, assumptions, evidence: _certificate(
            op, claim, verdict, dims, assumptions, evidence, start, None), prove_general)
    if form is None and getattr(op, "recurrence", None) is not None:
        # every length: by induction from the cell's claims (a length in a loop has no one statement)
        return prove_by_induction(op, claim, budget, seed, lambda verdict, dims, assumptions, evidence: _certificate(
            op, claim, verdict, dims, assumptions, evidence, start, None), prove_general)
    builder = form or derive(op, claim)
    deadline = time.monotonic() + budget
    log: list[dict] = []
    timings: dict = {}

    def attempt(name: str, fn, share: float):
        left = deadline - time.monotonic()
        out = run_with_budget(fn, left * share)
        timings[name] = round(out.seconds, 4)
        entry = {"step": name, "seconds": round(out.seconds, 4), "status": out.status}
        if out.status == "ok":
            entry.update(out.value)
        elif out.error:
            entry["error"] = out.error.splitlines()[0][:300]
        log.append(entry)
        return entry

    t = time.perf_counter()
    origin = derived_from(op, claim) if form is None else {"general_form": _where(builder)}
    try:
        stmt = build_statement(op, claim, builder)
        shown = render(stmt, builder)
    except DerivationRefused as exc:
        # Python control flow on a size, a slice that does not fit every size, ...: never proved
        return _certificate(op, claim, "inconclusive", general_dims(op, claim), [], {
            **origin, "reason": f"refused: the every-size statement cannot be derived from the spec: "
                                f"{exc.reason}"[:500], "refused_at": exc.where,
            "refused_code": source_of(exc.where)}, start, builder)
    except Exception as exc:  # a broken general form is the form's problem, named in the certificate
        return _certificate(op, claim, "inconclusive", {}, [], {
            **origin, "reason": f"the general form could not be built: {type(exc).__name__}: {exc}"[:400]},
            start, builder)
    timings["build"] = round(time.perf_counter() - t, 4)
    dims_list = default_check_dims(stmt)
    # a derived statement is also compared at the op's own dims (where the fixed-dims tier proves the
    # spec): a path a Python identity test (`n is 16`) takes only there shows up as a mismatch
    op_dims = [d for d in (own_dims(stmt) if form is None else []) if d not in dims_list]
    evidence = {**shown, "dimension_variables": [str(s) for s in stmt.G.dim_symbols],
                "normalisation": NORMALISATION, **origin, "scope": SCOPE if form is None else SCOPE_FORM}

    def done(verdict: str, extra: dict) -> Certificate:
        steps = [{k: e[k] for k in ("step", "status", "seconds", "error") if k in e} for e in log]
        ev = {**evidence, **extra, "steps": steps, "timings": timings}
        return _certificate(op, claim, verdict, stmt.dims, assumptions_of(stmt), ev, start, builder)

    def fixed(dims: list[dict]) -> list[dict]:
        """The fixed-dims prover on the spec itself at these sizes (fast: flint atoms)."""
        from vjpcert.symbolic.fixed.prover import prove_claim
        rows = []
        for d in dims:
            left = max(0.0, deadline - time.monotonic())
            c = prove_claim(op, claim, d, budget=min(tol.GENERAL_FIXED_DIMS_BUDGET_S, left), seed=seed)
            rows.append({"dims": dict(d), "verdict": c.verdict, "method": c.method, "seconds": c.seconds})
        timings["fixed-dims"] = round(sum(r["seconds"] for r in rows), 4)
        return rows

    p = attempt("normalise", lambda: normalise_statement(stmt), tol.GENERAL_SHARE["normalise"])
    if p["status"] == "proved":
        x = attempt("cross-check", lambda: cross_check(stmt, dims_list + op_dims, seed), tol.GENERAL_SHARE["cross-check"])
        if x["status"] in ("exact", "numeric"):
            fx = fixed([r["dims"] for r in x["at"] if "undefined" not in r and r["dims"] in dims_list])
            x["fixed_dims_prover"] = fx
            refuted = [r["dims"] for r in fx if r["verdict"] == "failed"]
            if refuted:
                return done("inconclusive", {"proof": _brief(p), "cross_check": x, "reason":
                            f"contradiction: the fixed-dims prover refutes the spec at {refuted}, where the "
                            f"general form equals the spec and holds -- a fault in a prover; not proved"})
            return done("proved-general", {"proof": _brief(p), "cross_check": x})
        if x["status"] == "mismatch":
            return done("inconclusive", {"proof": _brief(p), "cross_check": x,
                                         "reason": "the general identity holds, but the general form is not "
                                                   "the spec's formula: " + _mismatch(x)})
        return done("inconclusive", {"proof": _brief(p), "cross_check": x,
                                     "reason": "the general identity holds, but the cross-check against the "
                                               "spec did not succeed: " + _mismatch(x)})
    w = attempt("witness", lambda: find_witness(stmt, dims_list, seed), tol.GENERAL_SHARE["witness"])
    if w["status"] == "failed":
        wdims = w["witness"]["dims"]
        x = attempt("cross-check", lambda: cross_check(stmt, [wdims], seed), 1.0)
        if x["status"] in ("exact", "numeric"):
            fx = x["fixed_dims_prover"] = fixed([wdims])
            if fx[0]["verdict"] in ("proved", "proved-compositional"):
                return done("inconclusive", {"general_form_witness": w["witness"], "cross_check": x,
                            "proof": _brief(p), "reason": f"contradiction: a witness at {wdims}, where the "
                            f"general form equals the spec, but the fixed-dims prover proves the spec there"})
            return done("failed", {"witness": w["witness"], "cross_check": x, "proof": _brief(p),
                                   "refutes": "the general statement, at a size where the general form "
                                              "equals the spec: the spec's claim is false there too"})
        return done("inconclusive", {"general_form_witness": w["witness"], "cross_check": x, "proof": _brief(p),
                                     "reason": "the general form is wrong (witness), and it is not the spec's "
                                               "formula either: " + _mismatch(x)})
    if p["status"] == "layout":
        reason = "the identity holds piece by piece, but the pieces were not shown to tile the array"
    elif p["status"] == "nonzero":
        reason = "the normal form is not 0 (its atoms may be related in ways it does not see)"
    elif p["status"] == "timeout":
        reason = "the normalisation did not finish within its budget"
    else:
        reason = f"the normalisation could not treat the expression: {p.get('error', '?')}"
    if w["status"] == "zero":
        reason += "; no witness at 50/100 digits either"
    else:
        reason += f"; the witness search ended with {w['status']}" + (f" ({w['error']})" if w.get("error") else "")
    bad_layout = {k: v for k, v in p.get("layout", {}).items() if v.get("status") != "proved"}
    if bad_layout:
        reason += f"; layout not proved: {bad_layout}"
    return done("inconclusive", {"proof": _brief(p), "reason": reason})


def _brief(p: dict) -> dict:
    return {k: v for k, v in p.items() if k not in ("step",)}


def _mismatch(x: dict) -> str:
    for row in x.get("at", []):
        for k in ("forward", "backward", "law"):
            v = row.get(k)
            if v and v.get("status") == "mismatch":
                return f"at {row['dims']} the {k} differs ({v.get('where')})"
    for row in x.get("at", []):
        if "error" in row:
            return f"at {row['dims']} it could not be instantiated: {row['error']}"
    return f"{x.get('status', '?')}{': ' + x['error'] if x.get('error') else ''}"


def derived_from(op: Op, claim: str) -> dict:
    """Which spec functions the statement is traced from, as file:line (name)."""
    fns = [("forward", op.forward)]
    if claim.startswith("vjp["):
        fns.append(("backward", op.vjp))
    else:
        law = op.get_law(claim)
        uses = inspect.signature(law.fn).parameters
        fns = [(f"law {claim}", law.fn)] + [(r, f) for r, f in (("forward", op.forward), ("backward", op.vjp))
                                             if r in uses]
    out = []
    for role, fn in fns:
        try:
            line = inspect.getsourcelines(fn)[1]
            where = spec_line([type("F", (), {"filename": inspect.getsourcefile(fn), "lineno": line})()])
        except (TypeError, OSError):
            where = "?"
        out.append(f"{role}: {where} ({getattr(fn, '__qualname__', '?')})")
    return {"derived_from": out, "derivation": "shape-polymorphic trace of the spec's code (symbolic.every_size.shape_trace)"}


def _where(builder) -> str:
    try:
        return f"{Path(inspect.getsourcefile(builder)).name}:{inspect.getsourcelines(builder)[1]} ({builder.__qualname__})"
    except (TypeError, OSError):
        return getattr(builder, "__qualname__", "?")


def _certificate(op, claim, verdict, dims, assumptions, evidence, start, builder) -> Certificate:
    return Certificate.issue(op, claim=claim, tier="symbolic", verdict=verdict, method="general",
                       dims=dims or {d: "general" for d in sorted(op.dim_names())}, assumptions=assumptions, evidence=evidence,
                       seconds=time.perf_counter() - start,
                       checker_sha256=CHECKER_SHA256)
