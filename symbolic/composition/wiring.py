"""The wiring of a composite, proved at any concrete size: linear maps with opaque node Jacobians.

A composite (``nodes=...``) reaches its sub-ops only through ``nodes.<name>(...)`` and
``nodes.<name>.vjp(...)``. Its VJP claim then splits into (1) each node's own VJP claim and (2) the
*wiring*: the composite's backward equals the transpose of its forward's derivative when every node is
an arbitrary differentiable function. This module proves (2) without ever writing a node's Jacobian
out entry by entry, so it costs about the same at m = 16, D = 64 as at m = 2, D = 2:

* The composite's forward and backward run once on a backend whose arrays hold *tags*: hash-consed
  names of values (an input entry, a parameter, entry k of a node call's output, a sum of two tags, a
  constant multiple). Every node call is recorded with its *point*: the tags of all its array arguments
  and the values of all its parameters -- differentiable or not. Two calls are the same opaque
  function at the same point only if every argument matches; a backward that calls a node's VJP with
  another `pos`, another `eps`, or the default where the forward passed a value calls it somewhere the
  forward never was.
* Tangents and cotangents are *linear expressions*: sums of words ``c * S0 J1 S1 ... Jk Sk`` applied to
  an input tangent t_x or to the output cotangent dy, where each J is one node call's Jacobian block
  (call, argument) or its transpose -- opaque, never expanded -- and each S an exact integer sparse
  matrix (slicing, concatenation, reshapes, broadcasts, residual fan-out: whatever the composite's own
  numpy code did, recorded by running it on object arrays).
* The forward's derivative is read off the tags (the chain rule through each call, over *every*
  argument whose tangent is nonzero), transposed word by word, and compared with the backward's
  expression after a canonical form: adjacent S multiplied out, identities dropped, integer content
  moved into the coefficient, like words collected. Equal canonical forms are equal linear maps for
  every value of every J, so the wiring is `proved`. Anything else is not a proof.

Only linear wiring is treated here: the composite's own code may add, scale by constants, slice,
concatenate, reshape, transpose and broadcast; a product of two values or a transcendental in the
composite's own code raises ``Unsupported`` (the caller falls back to entry-level opaque atoms at small
dims).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from vjpcert.core.backends import exact
from vjpcert.core.registry import Op, SpecError
from vjpcert.symbolic.composition.algebra import (Call, J, Tag, Tape, Term, Unsupported, canonical, collect,
                                             transpose_word)

__all__ = ["Cover", "Unsupported", "node_points", "node_signatures", "prove_wiring", "prove_wiring_claims"]


# ============================================================================ the backend and nodes
class WiringBackend:
    """The ``B`` a composite's own code sees while its wiring is traced: exact constants, zeros and
    arrays of tags; anything else is not linear wiring."""

    name = "wiring"

    def __init__(self, tape: Tape):
        self.tape = tape

    @property
    def node_backend(self):
        return self

    def c(self, p, q=1):
        return self.tape.const(exact(p, q))

    def zeros(self, shape):
        out = np.empty(shape, dtype=object)
        out.fill(self.tape.const(0))
        return out

    def array(self, values):
        return np.array(values, dtype=object)

    def _unsupported(self, *a, **k):
        raise Unsupported("the composite's own code calls a function of B (a transcendental or "
                          "max_shift): not linear wiring; put it inside a node")

    exp = log = sqrt = erf = tanh = sin = cos = max_shift = _unsupported

    @property
    def pi(self):
        raise Unsupported("the composite's own code uses B.pi")


class OpaqueCalls:
    """Stands in for a node: records every call with its full point, returns tags for the forward and
    transposed Jacobian blocks for the VJP."""

    def __init__(self, instance: str, op: Op, tape: Tape):
        self.instance, self.op, self.tape = instance, op, tape
        self.inputs, self.nondiff, self.params = op.inputs, op.nondiff, op.params

    def _point(self, values):
        from vjpcert.core.reference import infer_dims
        arrays = {}
        for name in [*self.op.inputs, *self.op.nondiff]:
            arr = np.asarray(values[name], dtype=object)
            if any(not isinstance(v, Tag) for v in arr.ravel()):
                raise Unsupported(f"node {self.instance}: argument {name} is not a primal value")
            arrays[name] = arr
        params = {}
        for name, p in self.op.params.items():
            v = values[name]
            params[name] = v if isinstance(v, Tag) else (self.tape.lift(v) if p.symbolic else v)
        key = (self.instance,
               tuple((n, a.shape, tuple(t.id for t in a.ravel())) for n, a in arrays.items()),
               tuple((n, ("tag", v.id) if isinstance(v, Tag) else ("value", _structural(self.instance, n, v)))
                     for n, v in params.items()))
        dims = infer_dims(self.op, {k: np.empty(a.shape) for k, a in arrays.items()})
        return key, arrays, params, dims

    def _call(self, values, from_backward: bool) -> Call:
        key, arrays, params, dims = self._point(values)
        call = self.tape._calls_by_key.get(key)
        if call is None:
            call = Call(len(self.tape.calls), self.instance, self.op, key, arrays, params, dims,
                        self.op.shape(self.op.output, dims), from_backward)
            self.tape.calls.append(call)
            self.tape._calls_by_key[key] = call
            if from_backward:
                self.tape.mismatches.append(self._mismatch(call))
        return call

    def _mismatch(self, call: Call) -> dict:
        """Where a VJP was called at a point no forward call of this node used: the argument that
        differs, and how, compared with the nearest forward call of the same node."""
        forwards = [c for c in self.tape.calls if c.instance == self.instance and not c.from_backward]
        out = {"node": self.instance, "op": self.op.name}
        if not forwards:
            out["problem"] = "its VJP is called, but its forward never is"
            return out

        def differing(c):
            diffs = []
            for name in call.args:
                a, b = call.args[name], c.args[name]
                if a.shape != b.shape:
                    diffs.append((name, f"shape {b.shape}", f"shape {a.shape}"))
                    continue
                for idx in np.ndindex(*a.shape):
                    if a[idx] is not b[idx]:
                        diffs.append((f"{name}{list(idx)}", repr(b[idx]), repr(a[idx])))
                        break
            for name in call.params:
                a, b = call.params[name], c.params[name]
                if (a is not b) if isinstance(a, Tag) else (a != b):
                    diffs.append((name, repr(b), repr(a)))
            return diffs
        best = min(forwards, key=lambda c: len(differing(c)))
        diffs = differing(best)
        out["argument"], out["forward_used"], out["backward_used"] = diffs[0]
        out["arguments_that_differ"] = [d[0] for d in diffs][:8]
        return out

    def bind(self, fn, B, values):
        if fn is self.op.forward:
            call = self._call(values, False)
            out = np.empty(call.out_shape, dtype=object)
            for k, idx in enumerate(np.ndindex(*call.out_shape)):
                out[idx] = self.tape.tag("out", call.id, k)
            return out
        if fn is self.op.vjp:
            call = self._call(values, True)
            e = self.tape.expr_from_array(values["dy"])
            cots = []
            for name in self.op.inputs:
                terms = []
                for t in self.tape.exprs[e].terms:
                    got = canonical(t.coef, (J(call.id, name, True), *t.word))
                    if got is not None:
                        terms.append(Term(got[0], got[1], t.base))
                size = int(np.prod(call.args[name].shape))
                cots.append(self.tape.lin_array(self.tape.new_expr(size, terms), call.args[name].shape))
            return tuple(cots)
        raise Unsupported(f"node {self.instance}: called with an unknown function")

    @property
    def forward(self):
        return self.op.forward

    @property
    def vjp(self):
        return self.op.vjp


# Values a structural (non-symbolic) param may take at a node call, by exact type (a subclass may
# redefine equality): each is equal to another only when it is the same value, and cannot change
# between the forward's call and the backward's.
_VALUES = frozenset({bool, int, float, complex, str, bytes, Fraction, type(None)}
                    | {t for t in np.sctypeDict.values() if np.dtype(t).kind in "biufc"})


def _structural(instance: str, name: str, v):
    """A structural param's value as part of a call's point: the value with its type (1, 1.0 and True
    are three points; a float by its bits, so -0.0 and 0.0 are two), element by element in a tuple. Any other object is refused, a subclass of int
    included: its equality, or its repr, need not be its value (two tables with the same repr, an int
    that equals every other, an object changed between the calls), and a VJP call paired with a
    forward call at another value would prove a wrong backward."""
    if type(v) in _VALUES:
        # a float is its bits: -0.0 == 0.0 though a node can tell them apart (copysign, 1/t), nan != nan
        return type(v), (np.asarray(v).tobytes() if isinstance(v, (float, complex, np.inexact)) else v)
    if type(v) is tuple:
        return tuple, tuple(_structural(instance, name, e) for e in v)
    raise Unsupported(f"node {instance}: its param {name} is a {type(v).__name__}: a structural param is a "
                      f"number, a string, a bool, None or a tuple of them, so that calls at different values "
                      f"are told apart")


# ============================================================================ the proof
def _run(op: Op, dims: dict):
    """The composite's forward and backward on tags: (tape, y, cotangents, why it stopped or None)."""
    tape = Tape()
    B = WiringBackend(tape)
    twin = op.with_nodes({n: OpaqueCalls(n, o, tape) for n, o in op.nodes.items()}, "wiring")
    values, tape._inputs = {}, {}
    for name, decl in op.inputs.items():
        shape = op.shape(decl, dims)
        values[name] = tape.tag_array("in", name, shape)
        tape._inputs[name] = (tape.base(("t", name), int(np.prod(shape))), shape)
    for name, decl in op.nondiff.items():
        values[name] = tape.tag_array("nondiff", name, op.shape(decl, dims))
    for name, p in op.params.items():
        values[name] = tape.tag("param", name) if p.symbolic else p.default
    y = cots = None
    try:
        y = np.asarray(twin.bind(twin.forward, B, values), dtype=object)
        dy = tape.lin_array(tape.base("dy", int(np.prod(y.shape))), y.shape)
        cots = twin.bind(twin.vjp, B, {**values, "dy": dy})
    except Unsupported as exc:
        return tape, y, cots, str(exc)
    return tape, y, cots, None


def prove_wiring(op: Op, claim: str, dims: dict) -> dict:
    """{"status": "proved" | "failed" | "unsupported", ...evidence}. ``failed`` means: for *some*
    differentiable node functions the backward is not the transpose of the forward's derivative (it
    may still be right for the real nodes); the evidence names the words that differ and every node
    whose VJP was called at a point its forward never used (node, argument, both values)."""
    return prove_wiring_claims(op, [claim], dims)[claim]


def prove_wiring_claims(op: Op, claims: list[str], dims: dict) -> dict[str, dict]:
    """``prove_wiring`` for several VJP claims of one composite at once, {claim: result}: the composite
    runs on tags once and its forward's derivative is read off once (most of the work at realistic
    dims); each claim then compares its own input's cotangent with its own words of J^T dy."""
    for claim in claims:
        if not claim.startswith("vjp["):
            raise SpecError(op.name, f"only VJP claims have a wiring, not {claim!r}")
    tape, y, cots, stopped = _run(op, dims)
    if stopped:
        return {c: {"status": "unsupported", "reason": stopped} for c in claims}
    try:
        jt = tape.expr_from_parts([tape.tangent_parts(v) for v in y.ravel()])
    except Unsupported as exc:
        return {c: {"status": "unsupported", "reason": str(exc)} for c in claims}
    calls = [{"node": c.instance, "op": c.op.name, "dims": dict(c.dims),
              "params": {k: (repr(v) if isinstance(v, Tag) else v) for k, v in c.params.items()},
              "from": "backward only" if c.from_backward else "forward"} for c in tape.calls]
    return {claim: _compare(op, tape, cots, jt, claim[4:-1], calls) for claim in claims}


def _compare(op: Op, tape: Tape, cots, jt, wrt: str, calls: list) -> dict:
    """One input's cotangent against the words of J^T dy that end in that input's tangent."""
    try:
        cot = np.asarray(cots[list(op.inputs).index(wrt)], dtype=object)
        lhs = collect(tape, tape.expr_from_array(cot))
    except Unsupported as exc:
        return {"status": "unsupported", "reason": str(exc)}
    rhs: dict = {}
    base = ("t", wrt)
    for t in tape.exprs[jt].terms:
        if t.base != base:
            continue
        got = canonical(t.coef, transpose_word(t.word))
        if got is None:
            continue
        key = (got[1], "dy")
        rhs[key] = rhs.get(key, 0) + got[0]
        if rhs[key] == 0:
            del rhs[key]
    evidence = {"words": len(rhs), "node_calls": len(tape.calls), "primal_tags": len(tape.tags),
                "calls": calls}
    if lhs == rhs:
        return {"status": "proved", **evidence}
    only_b = [_show(tape, k, v) for k, v in lhs.items() if rhs.get(k) != v][:4]
    only_j = [_show(tape, k, v) for k, v in rhs.items() if lhs.get(k) != v][:4]
    evidence.update({"backward_words_not_in_J^T dy": only_b, "J^T dy_words_not_in_backward": only_j})
    if tape.mismatches:
        evidence["node_called_at_another_point"] = tape.mismatches
    return {"status": "failed", **evidence}


def _show(tape: Tape, key, coef) -> str:
    word, _ = key
    parts = []
    for el in word:
        if isinstance(el, J):
            c = tape.calls[el.call]
            parts.append(f"J[{c.instance}/{el.arg}]" + ("^T" if el.transposed else ""))
        else:
            parts.append(f"S{el.shape}")
    return f"{coef} * " + " ".join(parts or ["I"]) + " dy"


def node_signatures(op: Op, dims: dict) -> list[tuple]:
    """(instance, node op, node dims, static params) of every node call of the composite's forward and
    backward at these dims (those recorded before a construct outside linear wiring, if any). The
    static params are the structural values, and every symbolic one called outside the node's declared
    domain with what its certificate must cover instead (``node_points``)."""
    return [s[:4] for s in node_points(op, dims)]


@dataclass(frozen=True)
class Cover:
    """What a node's certificate must cover for a parameter no exact value can stand for: ``real``, a
    proof for every real value (a symbol or a computed value reaching a positive param); ``none``, no
    certificate at all (a traced value reaching a structural param, which takes Python values only)."""

    kind: str

    def __str__(self):
        return "every real value" if self.kind == "real" else "no certificate covers it"


def node_points(op: Op, dims: dict) -> list[tuple]:
    """``node_signatures`` plus, per signature, the calls' parameters that fall outside the node's
    declared domains: (instance, node op, node dims, static, outside), where ``outside`` is a tuple of
    (param, value as the wiring saw it, declared domain, what the certificate covers instead).

    A node's proof holds where its params are declared: a symbolic param for every real value, or for
    every value > 0 with ``positive=True``; a structural one at exactly its value. So a call inside the
    domain rests on the node's own certificate; a call outside it needs another one, recorded in
    ``static``: at exactly the value (a constant, zero, a fraction), or for every real value (a param
    of the composite not declared positive, a value computed from inputs: anything whose sign is not
    implied by the composite's own declarations), or none (``Cover("none")``)."""
    tape = _run(op, dims)[0]
    merged: dict = {}
    for c in tape.calls:
        static, outside = [], []
        for k, v in c.params.items():
            p = c.op.params[k]
            if not p.symbolic:
                if isinstance(v, Tag):
                    static.append((k, Cover("none")))
                    outside.append((k, repr(v), "structural: exactly a Python value", "none"))
                else:
                    static.append((k, v))
            elif p.positive and _sign(v, op) != ">0":
                if v.const is not None:
                    q = int(v.const) if v.const.denominator == 1 else v.const
                    static.append((k, q))
                    outside.append((k, repr(v), f"{k} > 0", f"at {k} = {q} exactly"))
                else:
                    static.append((k, Cover("real")))
                    outside.append((k, repr(v), f"{k} > 0", f"for every real {k}"))
        sig = (c.instance, c.op, tuple(sorted(c.dims.items())), tuple(sorted(static)))
        merged.setdefault(sig, set()).update(outside)
    out = [(*sig, tuple(sorted(outside))) for sig, outside in merged.items()]
    return sorted(out, key=lambda s: (s[0], s[2], tuple((k, _order(v)) for k, v in s[3])))


def _order(v):
    """A sort key for a static value: numbers by value, anything else after them by its repr."""
    return (0, v, "") if isinstance(v, (int, Fraction)) else (1, 0, repr(v))


def _sign(t: Tag, op: Op, depth: int = 0) -> str | None:
    """">0", ">=0", "<0", "<=0" where the composite's own declarations imply it for every value its
    params may take, else None: constants by value, a param by its ``positive``, sums and constant
    multiples by the signs of their parts. Node outputs, inputs and non-differentiable inputs: None,
    and so is anything nested deeper than a parameter expression plausibly is (None is never wrong:
    it only asks for a stronger certificate)."""
    if t.kind == "const":
        return ">0" if t.const > 0 else "<0" if t.const < 0 else ">=0"
    if t.kind == "param":
        p = op.params.get(t.args[0])
        return ">0" if p is not None and p.symbolic and p.positive else None
    if depth > 32:
        return None
    if t.kind == "scale":                # the tape folds a zero multiple into a constant
        inner = _sign(t.tape.tags[t.args[1]], op, depth + 1)
        flip = {">0": "<0", ">=0": "<=0", "<0": ">0", "<=0": ">=0"}
        return inner if inner is None or t.args[0] > 0 else flip[inner]
    if t.kind == "add":
        a = _sign(t.tape.tags[t.args[0]], op, depth + 1)
        b = None if a is None else _sign(t.tape.tags[t.args[1]], op, depth + 1)
        for strict, weak in ((">0", ">=0"), ("<0", "<=0")):
            if {a, b} <= {strict, weak}:
                return strict if strict in (a, b) else weak
    return None
