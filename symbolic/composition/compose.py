"""Compositional certificates for ops built from nodes (MLP, MHSA, a ViT block), at any size.

A monolithic proof of a ViT block did not finish in 5 minutes; a compositional one is
    1. the *wiring* proved (``symbolic.composition.wiring``): the composite's backward equals the transpose of its
       forward's derivative when every node is an arbitrary differentiable function, each node call
       keyed by its whole point -- every array argument, differentiable or not, and every parameter;
    2. every node's VJP claims certified at the dims and static parameters the composite calls it
       with, resting on the strongest proof available, node by node:
         proved-general          the node's every-size proof (it covers these dims whatever they are),
         proved-compositional    the node is itself a composite: the same, recursively,
         proved                  a fixed-dims proof of the node at exactly these dims;
       and at the parameter values the composite calls it with: a node's proof holds only inside its
       params' declared domains (a symbolic param for every real value, or every value > 0 with
       ``positive=True``; a structural one at exactly its value). A call outside them -- s = -3, s = 0,
       or the composite's own param declared without ``positive=True`` -- rests on a proof of the node
       at exactly that value, or for every real value, never on the one for s > 0
       (``symbolic.composition.wiring.node_points`` says which); a traced value reaching a structural param has no
       certificate at all, and the composite is `inconclusive`, naming the node, param, value and domain.
Verdict `proved-compositional` when both hold; the certificate lists, node by node, which proof it
rests on (method, dims, digest). `failed` needs a witness on the *real* composite (found at the small
dims of the op's own ladder); a wiring fault with no real witness is `inconclusive` (a wrong wiring the
real nodes happen to forgive: a key bias's cotangent is 0 for any upstream cotangent).
"""
from __future__ import annotations

import dataclasses
import time

from vjpcert.core.budget import run_with_budget
from vjpcert.core.certificate import Certificate, checker_code_sha256
from vjpcert.core.derivatives import CONVENTION
from vjpcert.core.registry import KINK_CLAIM, Op, Param, SpecError
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.composition.wiring import Cover, node_points, prove_wiring_claims

CHECKER_SHA256 = checker_code_sha256(__name__)

PROVED = ("proved", "proved-general", "proved-compositional")


def _with_static(op: Op, static: tuple) -> Op:
    """The op with other values for its static params (as a composite called it): a structural param,
    or a symbolic one called outside its declared domain, at exactly the value used; a symbolic one
    under ``Cover("real")`` still a symbol, with its domain widened to every real value. A symbolic
    param is never "at its default": its certificate is for the domain, so any entry makes a twin."""
    if all(not op.params[k].symbolic and op.params[k].default == v for k, v in static):
        return op
    if any(isinstance(v, Cover) and v.kind != "real" for _, v in static):
        raise SpecError(op.name, f"no certificate covers the parameters {dict(static)}")
    twin = op.with_nodes(op.nodes, "params:" + ",".join(f"{k}={v}" for k, v in static))
    twin.params = {**op.params, **{k: dataclasses.replace(op.params[k], positive=False)
                                   if isinstance(v, Cover) else Param(v, symbolic=False) for k, v in static}}
    twin.base_name = op.base_name
    return twin


_CACHE: dict = {}


def cover_node(op: Op, claim: str, dims: dict, *, static: tuple, budget: float, seed: int) -> Certificate:
    """The strongest certificate of a node's claim that covers these dims (see the module docstring).
    Cached per process: the claims of a composite share their nodes' proofs."""
    key = (op.name, op.spec_sha256, claim, tuple(sorted(dims.items())), static, budget, seed)
    if key in _CACHE:
        return _CACHE[key]
    variant = _with_static(op, static)
    cert = None
    if variant is op and claim in op.general:           # structural params at their defaults
        from vjpcert.symbolic.every_size.general import prove_general
        gkey = (op.name, op.spec_sha256, claim, "general", budget, seed)
        if gkey not in _CACHE:
            _CACHE[gkey] = prove_general(op, claim, budget=budget, seed=seed)
        if _CACHE[gkey].verdict == "proved-general":
            cert = _CACHE[gkey]
    if cert is None and "compositional" in op.proofs:
        cert = prove_compositional(variant, claim, dims, budget=budget, seed=seed)
    if cert is None or (cert.verdict not in PROVED and "monolithic" in op.proofs):
        from vjpcert.symbolic.fixed.prover import prove_claim
        cert = prove_claim(variant, claim, dims, budget=budget, seed=seed)
    _CACHE[key] = cert
    return cert


def _digest(cert: Certificate) -> str:
    cert.to_json()                      # computes the digest of the record as it would be written
    return cert.digest


def _wiring(op: Op, claim: str, dims: dict, budget: float) -> tuple[dict, list]:
    """The wiring's verdict for this claim and the node calls, computed once per composite and dims for
    all its VJP claims (one run of the composite on tags, one derivative of its forward: the bulk of
    the work at realistic dims) and cached per process with the node proofs. The key holds the op's
    name, code hash, its forward's, backward's and nodes' identities (a mutant twin is another entry); the
    entry holds the op itself, so those identities cannot be reused by another object."""
    key = ("wiring", op.name, op.spec_sha256, id(op.forward), id(op.vjp),
           tuple((k, id(v)) for k, v in sorted(op.nodes.items())), tuple(sorted(dims.items())))
    if key not in _CACHE:
        claims = [c for c in op.claims() if c.startswith("vjp[")]
        out = run_with_budget(lambda: prove_wiring_claims(op, claims, dims),
                              budget * tol.SHARE["wiring"] * len(claims))
        _CACHE[key] = (op, out, node_points(op, dims))
    _, out, signatures = _CACHE[key]
    if out.status != "ok":
        return {"status": out.status, "error": (out.error or "")[:300]}, signatures
    return out.value[claim], signatures


def prove_compositional(op: Op, claim: str, dims: dict, *, budget: float = tol.DEFAULT_CLAIM_BUDGET_S,
                        seed: int = 0) -> Certificate:
    from vjpcert.symbolic.fixed.claims import assumptions_of
    start = time.perf_counter()
    if not op.nodes:
        raise SpecError(op.name, "has no nodes: a compositional proof needs nodes=...")
    if claim == KINK_CLAIM:
        return kink_by_nodes(op, dims, budget=budget, seed=seed, start=start)
    if not claim.startswith("vjp["):
        raise SpecError(op.name, f"only VJP claims are proved compositionally, not {claim!r}")
    dims = op.resolve_dims(dims)
    wiring, signatures = _wiring(op, claim, dims, budget)
    nodes, failed_node, domains = [], None, []
    # wiring that fails for generic nodes is never proved, whatever the nodes: the verdict is then the
    # real composite's (a witness, or undecided), so the nodes' every-size proofs (seconds to a minute
    # in a fresh process) are not spent on it
    wiring_wrong = wiring.get("status") in ("failed", "unsupported")
    for inst, node_op, ndims, static, outside in ([] if wiring_wrong else signatures):
        notes = [{"param": k, "value": v, "declared": d, "certificate": how} for k, v, d, how in outside]
        domains += [{"node": inst, "op": node_op.name, **n} for n in notes]
        uncovered = any(n["certificate"] == "none" for n in notes)
        for c in node_op.claims():
            if not c.startswith("vjp["):
                continue
            entry = {"node": inst, "op": node_op.name, "claim": c, "dims": dict(ndims),
                     "params": {k: str(v) if isinstance(v, Cover) else v for k, v in static}}
            if notes:
                entry["outside_domain"] = notes
            if uncovered:           # no certificate to rest on: none is issued, none is cited
                nodes.append({**entry, "verdict": "inconclusive", "rests_on": "none"})
                continue
            cert = cover_node(node_op, c, dict(ndims), static=static, budget=budget, seed=seed)
            nodes.append({**entry, "verdict": cert.verdict, "rests_on": cert.method,
                          "certificate_dims": cert.dims, "digest": _digest(cert)})
            if cert.verdict == "failed" and failed_node is None:
                failed_node = (inst, cert)
    evidence = {"wiring": wiring, "nodes": nodes}
    if wiring_wrong:
        evidence["nodes_not_examined"] = "the wiring is wrong for generic nodes: the verdict does not rest on them"
    if domains:
        evidence["domains"] = domains
    if wiring.get("status") == "proved" and all(n["verdict"] in PROVED for n in nodes):
        verdict = "proved-compositional"
    elif failed_node is not None or wiring.get("status") in ("failed", "unsupported"):
        verdict = _real_witness(op, claim, dims, budget, seed, evidence, failed_node, wiring)
    else:
        verdict = "inconclusive"
        evidence["reason"] = ("" if any(d["certificate"] == "none" for d in domains) else
                              "a node or the wiring was not proved within the budget")
    if verdict == "inconclusive" and domains:     # a failed one says so with its witness and domains
        evidence["reason"] = "; ".join([*filter(None, [evidence.get("reason")]), *map(_outside, domains)])
    return Certificate.issue(op, claim=claim, tier="symbolic", verdict=verdict, method="compositional",
                       dims=dims, assumptions=assumptions_of(op, {}) + [
                           "the wiring holds for every differentiable function at every node call "
                           "(a node call is its whole point: every argument and parameter)",
                           "each node's claim rests on the certificate listed (an every-size proof covers "
                           "these dims; a proof for a param's declared domain covers only calls inside it, "
                           "a call outside rests on a proof at exactly that value or for every real value)"],
                       evidence=evidence, seconds=time.perf_counter() - start,
                       checker_sha256=CHECKER_SHA256)


def kink_by_nodes(op: Op, dims: dict, *, budget: float, seed: int, start: float) -> Certificate:
    """``at_the_kink`` of a composite, resting on its nodes: the backward is the nodes' backwards
    composed (the wiring of every VJP claim, proved for generic nodes, is an identity at every point,
    kinks included), and J^T dy with step(0) = 0 is the nodes' own composed, so the composite meets
    the convention wherever each node with a kink does -- each held to it by its own check, at the
    dims and parameters the composite calls it with. `checked` when all of that holds; otherwise
    `inconclusive`, naming what did not (a node's failure is its own witness, not the composite's)."""
    from vjpcert.symbolic.fixed.claims import assumptions_of
    from vjpcert.symbolic.fixed.kinks import prove_at_the_kink
    dims = op.resolve_dims(dims)
    claims = [c for c in op.claims() if c.startswith("vjp[")]
    wiring = {c: _wiring(op, c, dims, budget)[0].get("status") for c in claims}
    nodes = []
    for inst, node_op, ndims, static, outside in _wiring(op, claims[0], dims, budget)[1]:
        if KINK_CLAIM not in node_op.claims():
            continue
        entry = {"node": inst, "op": node_op.name, "dims": dict(ndims)}
        if outside:
            nodes.append({**entry, "verdict": "inconclusive", "reason": "called outside its params' domain"})
            continue
        cert = prove_at_the_kink(_with_static(node_op, static), dict(ndims), budget=budget, seed=seed)
        nodes.append({**entry, "verdict": cert.verdict, "steps_on_kink": cert.evidence.get("steps_on_kink"),
                      "digest": _digest(cert)})
    evidence = {"wiring": wiring, "nodes": nodes, "convention": CONVENTION}
    unproved = [c for c, w in wiring.items() if w != "proved"]
    off = [n["node"] for n in nodes if n["verdict"] != "checked"]
    verdict = "checked" if nodes and not unproved and not off else "inconclusive"
    if verdict == "inconclusive":
        evidence["reason"] = ("no node has a kink" if not nodes else
                              f"the wiring of {unproved} is not proved" if unproved else
                              f"the nodes {off} are not checked on their kinks")
    return Certificate.issue(op, claim=KINK_CLAIM, tier="symbolic", verdict=verdict,
                             method="compositional" if verdict == "checked" else "none", dims=dims,
                             assumptions=assumptions_of(op, {}) + [
                                 "the backward is the nodes' backwards composed (the wiring, proved for "
                                 "every differentiable function at every node call)",
                                 "each node with a kink meets the convention at its kinks: its own "
                                 "at_the_kink check, at sampled exact points"],
                             evidence=evidence, seconds=time.perf_counter() - start, checker_sha256=CHECKER_SHA256)


def _outside(d: dict) -> str:
    rests = "no certificate" if d["certificate"] == "none" else f"a proof {d['certificate']}"
    return (f"node {d['node']} is called with {d['param']} = {d['value']}, outside its declared domain "
            f"({d['declared']}): its claim there rests on {rests}")


def _real_witness(op, claim, dims, budget, seed, evidence, failed_node, wiring) -> str:
    """A wrong node or wrong wiring fails for *some* functions; the composite's own claim fails only
    where the real composite disagrees: look for a real witness (at these dims when they are the op's
    own small dims, where the traced composite is small) before saying `failed`."""
    if failed_node is not None:
        inst, cert = failed_node
        evidence["node_failure"] = {"node": inst, "node_claim": cert.claim, **cert.evidence["witness"]}
    if wiring.get("status") == "failed":
        evidence["wiring_failure"] = {"in": "the wiring (nodes as arbitrary functions)",
                                      **{k: v for k, v in wiring.items() if k != "calls"}}
    if wiring.get("status") == "unsupported":
        evidence["wiring_not_linear"] = (f"{wiring.get('reason')}: the composite's own code must reach "
                                         f"its nodes through nodes.<name>(...) and .vjp(...) only")
    small = dict(dims) in [op.resolve_dims(d) for d in op.dims]
    if small:
        from vjpcert.symbolic.fixed import strategies
        from vjpcert.symbolic.fixed.claims import trace_claim
        real = run_with_budget(lambda: strategies.witness(trace_claim(op, claim, dims), seed=seed), budget)
        found = real.value if real.status == "ok" else {"status": real.status}
        if found.get("status") == "failed":
            evidence["witness"] = {"in": f"node {failed_node[0]}" if failed_node is not None else
                                   "the wiring", **found["witness"]}
            return "failed"
        evidence["reason"] = ("the wiring (or a node) is wrong for generic nodes, yet the real composite "
                              "agrees at the sampled points: this claim is not proved either way")
    else:
        evidence["reason"] = ("the wiring (or a node) is wrong for generic nodes; a real witness is only "
                              "searched at the op's small dims, where its certificate says whether the "
                              "real composite fails")
    return "inconclusive"
