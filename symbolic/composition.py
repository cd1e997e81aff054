"""Compositional certificates for ops built from nodes (MLP, MHSA, a ViT block).

A monolithic proof of a ViT block did not finish in 5 minutes (DESIGN); a compositional one is
    1. every node's VJP claims proved, at the dims the composite calls it with (recursively: a node
       that is itself a composite is certified the same way), and
    2. the *assembly* proved: the composite's forward and hand-written backward with every node
       replaced by an opaque function F whose values and Jacobian entries are independent atoms at
       each point (its VJP is that Jacobian's transpose at the point given). An identity in free atoms
       holds for *every* differentiable F, the real nodes included, so it checks the wiring alone:
       fan-out sums, residuals, head layouts, and that each node's backward is evaluated at the very
       point its forward was.
Verdict `proved-compositional` when both hold; `failed` (with the node's or the wiring's witness)
when either fails.
"""
from __future__ import annotations

import time
import numpy as np

from vjpcert.core.certificate import Certificate, versions
from vjpcert.core.reference import infer_dims
from vjpcert.core.registry import Op, Param, SpecError
from vjpcert.core.trace import opaque, opaque_jacobian
from vjpcert.symbolic import tolerances as tol


class OpaqueMap:
    """Stands in for a node op under the trace backend (same arguments, same shapes): its outputs
    and its Jacobian entries are opaque atoms at each point, and its VJP is that Jacobian's
    transpose at the point the backward passes."""

    def __init__(self, instance: str, op: Op):
        self.instance, self.op = instance, op
        self.inputs, self.nondiff, self.params = op.inputs, op.nondiff, op.params

    def bind(self, fn, B, values):
        return fn(B, values)

    def _flat(self, values):
        xs, shapes = [], []
        for name in self.op.inputs:
            a = np.asarray(values[name], dtype=object)
            xs.extend(a.ravel().tolist())
            shapes.append(a.shape)
        return xs, shapes

    def _out_shape(self, values):
        dims = infer_dims(self.op, {k: np.empty(np.shape(values[k])) for k in [*self.op.inputs, *self.op.nondiff]})
        return self.op.shape(self.op.output, dims)

    def forward(self, B, values):
        xs, _ = self._flat(values)
        shape = self._out_shape(values)
        key = (self.instance, int(np.prod(shape)), len(xs))
        return np.array([opaque(key, k, xs) for k in range(key[1])], dtype=object).reshape(shape)

    def vjp(self, B, values):
        xs, shapes = self._flat(values)
        dy = np.asarray(values["dy"], dtype=object).ravel()
        key = (self.instance, dy.size, len(xs))
        flat = [sum((dy[k] * opaque_jacobian(key, k, j, xs) for k in range(dy.size)), B.c(0))
                for j in range(len(xs))]
        out, at = [], 0
        for shape in shapes:
            size = int(np.prod(shape))
            out.append(np.array(flat[at:at + size], dtype=object).reshape(shape))
            at += size
        return tuple(out)


class _Recorder:
    """A node that records the dims (and static params) it is called with, then runs the real op."""

    def __init__(self, op: Op, log: set):
        self.op, self.log = op, log
        self.inputs, self.nondiff, self.params = op.inputs, op.nondiff, op.params

    def bind(self, fn, B, values):
        arrays = {k: values[k] for k in [*self.op.inputs, *self.op.nondiff]}
        dims = infer_dims(self.op, arrays)
        static = tuple(sorted((k, values[k]) for k, p in self.op.params.items() if not p.symbolic))
        self.log.add((tuple(sorted(dims.items())), static))
        return self.op.bind(fn, B, values)

    @property
    def forward(self):
        return self.op.forward

    @property
    def vjp(self):
        return self.op.vjp


def node_calls(op: Op, dims: dict, seed: int = 0) -> dict[str, set]:
    """{node instance: {(dims, static params)}} from one float64 run of the forward and backward."""
    from vjpcert.core.backends import F64
    logs = {name: set() for name in op.nodes}
    twin = op.with_nodes({n: _Recorder(o, logs[n]) for n, o in op.nodes.items()}, "recorded")
    rng = np.random.default_rng(seed)
    values = {k: rng.standard_normal(op.shape(s, dims)) for k, s in [*op.inputs.items(), *op.nondiff.items()]}
    values.update({k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()})
    y = np.asarray(op.bind(twin.forward, F64, values))
    twin.bind(twin.vjp, F64, {**values, "dy": rng.standard_normal(y.shape)})
    return logs


def _with_static(op: Op, static: tuple) -> Op:
    """The op with other defaults for its static params (as a composite called it)."""
    if all(op.params[k].default == v for k, v in static):
        return op
    twin = op.with_nodes(op.nodes, "params:" + ",".join(f"{k}={v}" for k, v in static))
    twin.params = {**op.params, **{k: Param(v, symbolic=False) for k, v in static}}
    twin.base_name = op.base_name
    return twin


_CACHE: dict = {}


def certify_node(op: Op, claim: str, dims: dict, budget: float, seed: int) -> Certificate:
    """A node's claim: monolithic when the op allows it, else compositional (recursively). Cached per
    process: a composite's claims share their nodes' proofs."""
    key = (op.name, op.spec_sha256, claim, tuple(sorted(dims.items())), tuple(sorted(
        (k, p.default) for k, p in op.params.items() if not p.symbolic)), budget, seed)
    if key not in _CACHE:
        if "monolithic" in op.proofs:
            from vjpcert.symbolic.prover import prove_claim
            _CACHE[key] = prove_claim(op, claim, dims, budget=budget, seed=seed)
        else:
            _CACHE[key] = prove_compositional(op, claim, dims, budget=budget, seed=seed)
    return _CACHE[key]


def prove_compositional(op: Op, claim: str, dims: dict, *, budget: float = tol.DEFAULT_CLAIM_BUDGET_S,
                        seed: int = 0) -> Certificate:
    from vjpcert.symbolic.prover import CHECKER_SHA256, assumptions_of, prove_claim
    start = time.perf_counter()
    if not op.nodes:
        raise SpecError(op.name, "has no nodes: a compositional proof needs nodes=...")
    if not claim.startswith("vjp["):
        raise SpecError(op.name, f"only VJP claims are proved compositionally, not {claim!r}")
    dims = op.resolve_dims(dims)
    nodes = []
    failed_node = None
    for inst, calls in node_calls(op, dims, seed).items():
        node_op = op.nodes[inst]
        for d, static in sorted(calls):
            variant = _with_static(node_op, static)
            for c in node_op.claims():
                if not c.startswith("vjp["):
                    continue
                cert = certify_node(variant, c, dict(d), budget, seed)
                nodes.append({"node": inst, "op": node_op.name, "claim": c, "dims": dict(d),
                              "params": dict(static), "verdict": cert.verdict, "method": cert.method,
                              "seconds": cert.seconds})
                if cert.verdict == "failed" and failed_node is None:
                    failed_node = (inst, cert)
    opaque_twin = op.with_nodes({n: OpaqueMap(n, o) for n, o in op.nodes.items()}, "opaque-nodes")
    opaque_twin.base_name = op.base_name
    assembly = prove_claim(opaque_twin, claim, dims, budget=budget, seed=seed)
    asm = {"verdict": assembly.verdict, "method": assembly.method, "seconds": assembly.seconds,
           **{k: v for k, v in assembly.evidence.items() if k in ("atoms", "variables", "lhs_terms",
                                                                  "residual_terms", "dag_nodes")}}
    evidence = {"nodes": nodes, "assembly": asm}
    proved = {"proved", "proved-general", "proved-compositional"}
    if failed_node is not None or assembly.verdict == "failed":
        # A wrong node or wrong wiring fails for *some* functions; the composite's own claim fails
        # only if the real composite disagrees somewhere: look for a real witness before saying so.
        from vjpcert.core.budget import run_with_budget
        from vjpcert.symbolic import strategies
        from vjpcert.symbolic.claims import trace_claim
        real = run_with_budget(lambda: strategies.witness(trace_claim(op, claim, dims), seed=seed), budget)
        found = real.value if real.status == "ok" else {"status": real.status}
        if failed_node is not None:
            inst, cert = failed_node
            evidence["node_failure"] = {"node": inst, "node_claim": cert.claim, **cert.evidence["witness"]}
        if assembly.verdict == "failed":
            evidence["wiring_failure"] = {"in": "assembly (wiring, with opaque nodes)",
                                          **assembly.evidence["witness"]}
        if found.get("status") == "failed":
            verdict = "failed"
            evidence["witness"] = {"in": "assembly (wiring)" if assembly.verdict == "failed" else
                                   f"node {failed_node[0]}", **found["witness"]}
        else:
            verdict = "inconclusive"
            evidence["reason"] = ("the wiring (or a node) is wrong for generic nodes, yet the real composite "
                                  "agrees at the sampled points: this claim is not proved either way")
    elif assembly.verdict == "proved" and all(n["verdict"] in proved for n in nodes):
        verdict = "proved-compositional"
    else:
        verdict = "inconclusive"
        evidence["reason"] = "a node or the assembly was not proved within the budget"
    return Certificate(op=op.base_name, claim=claim, tier="symbolic", verdict=verdict, method="compositional",
                       dims=dims, assumptions=assumptions_of(op, {}) + [
                           "each node is certified at the dims this composite calls it with (listed)"],
                       evidence=evidence, seconds=time.perf_counter() - start, spec_sha256=op.spec_sha256,
                       checker_sha256=CHECKER_SHA256, versions=versions())
