"""A claim, traced: the scalar residual whose vanishing *is* the claim.

VJP claim for input X:  R = <backward_X(dy), t> - <dy, J_X t>
    with dy and t free symbols, and J_X t derived from the forward by ``evaluate.Tangent``. R is linear
    in t, so R == 0 identically iff every component of backward_X(dy) equals (J_X^T dy). One scalar
    identity instead of a full Jacobian: the proof costs about two forward passes.
Law:  R = <lhs - rhs, s>  with s a free probe, so R == 0 iff every component of the law holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from vjpcert.core.registry import SHIFT_CLAIM, Op, SpecError
from vjpcert.core.evaluate import postorder
from vjpcert.core.replay import replayed
from vjpcert.core.trace import Leaf, Node, leaf_array, leaves_of, shared_nodes
from vjpcert.core.tracing import primal_values, trace_forward, trace_law, trace_shift_free, trace_vjp
from vjpcert.symbolic.fixed.evaluate import Adjoint, Evaluator, Tangent, inner


@dataclass
class TracedClaim:
    op: Op
    claim: str
    dims: dict
    kind: str                                   # "vjp" | "law"
    wrt: str = ""                               # the input of a vjp claim
    inputs: np.ndarray | None = None            # leaves of that input
    cot: np.ndarray | None = None
    y: np.ndarray | None = None
    dy: np.ndarray | None = None
    t: np.ndarray | None = None
    lhs: np.ndarray | None = None
    rhs: np.ndarray | None = None
    probe: np.ndarray | None = None
    overrides: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ structure
    def roots(self) -> list[np.ndarray]:
        if self.kind == "vjp":
            return [self.cot, self.y, self.dy, self.t, self.inputs]
        return [self.lhs, self.rhs, self.probe]

    def leaves(self) -> list[Leaf]:
        return leaves_of(self.roots())

    # ------------------------------------------------------------------ evaluation
    def residual(self, F, shared: bool = False):
        """(R, lhs, rhs) in field F, where R = lhs - rhs must vanish identically. With ``shared`` the
        field may keep shared intermediates as atoms (``RingField.share``)."""
        E = Evaluator(F, shared=shared_nodes(self.roots()) if shared else None)
        if self.kind == "vjp":
            lhs = inner(F, E.array(self.cot), E.array(self.t))
            seeds = {x.value: E(t) for x, t in zip(self.inputs.ravel(), self.t.ravel())}
            jt = Tangent(E, seeds).array(self.y)
            rhs = inner(F, E.array(self.dy), jt)
        else:
            lhs = inner(F, E.array(self.lhs), E.array(self.probe))
            rhs = inner(F, E.array(self.rhs), E.array(self.probe))
        return F.add(lhs, F.neg(rhs)), lhs, rhs

    def components(self, F, max_entries: int = 256):
        """Per-component (lhs, rhs) values in F: backward_X(dy)_j against (J_X^T dy)_j, or the law's
        two sides. Used for witnesses, so it never calls the hand-written backward's tangent."""
        E = Evaluator(F)
        if self.kind == "law":
            return [(E(a), E(b)) for a, b in zip(self.lhs.ravel(), self.rhs.ravel())][:max_entries]
        cot = E.array(self.cot).ravel()
        dy = E.array(self.dy)
        leaves = self.inputs.ravel()
        idx = range(len(leaves))
        if len(leaves) > max_entries:
            idx = np.random.default_rng(0).choice(len(leaves), max_entries, replace=False)
        # every (J^T dy)_j in one reverse walk of the forward (one forward walk per j before)
        jt_dy = Adjoint(E).leaves(self.y, dy, [leaves[j].value for j in idx])
        zero = F.const(Fraction(0))
        return [(cot[j], zero if jt_dy[leaves[j].value] is None else jt_dy[leaves[j].value]) for j in idx]

    def component_labels(self, max_entries: int = 256) -> list[str]:
        arr = self.lhs if self.kind == "law" else self.inputs
        labels = []
        for idx in np.ndindex(*arr.shape):
            labels.append(f"{self.wrt or 'law'}[{','.join(map(str, idx))}]" if idx else (self.wrt or "law"))
        if self.kind == "vjp" and len(labels) > max_entries:
            pick = np.random.default_rng(0).choice(len(labels), max_entries, replace=False)
            labels = [labels[j] for j in pick]
        return labels[:max_entries]


def split_shifts(claim: TracedClaim) -> TracedClaim:
    """The claim with every exponential of an argument u + k c (c a free shift leaf of ``B.max_shift``,
    k an integer, u free of shifts) written exp(u) * exp(c)^k: exp(a + b) = exp(a) exp(b) for real a
    and b, so the claim is the same. A field whose atoms are independent (mod p) sees the shift cancel
    in the softmax's ratio, as the ring does when it splits its shifts; without the rewrite, exp(u - c)
    and exp(u) are unrelated atoms there and ``max_shift_free`` is never decided at sizes past the ring."""
    if claim.kind != "law":
        return claim
    roots = [n for a in claim.roots() for n in np.ravel(a) if isinstance(n, Node)]
    memo: dict[int, object] = {}
    affine: dict[int, tuple | None] = {}        # node -> ({shift leaf node: k}, rest) or None
    rebuilt: dict[int, Node] = {}
    for root in roots:
        for node in postorder(root, memo):
            memo[id(node)] = True
            args = node.args
            parts = [affine[id(a)] for a in args]
            if node.op == "leaf" and node.value.role == "shift":
                aff = ({node: Fraction(1)}, None)
            elif all(q is not None and not q[0] for q in parts):
                aff = ({}, node)                  # free of shifts
            elif node.op == "add" and all(q is not None for q in parts):
                coeffs = dict(parts[0][0])
                for leaf, k in parts[1][0].items():
                    coeffs[leaf] = coeffs.get(leaf, 0) + k
                rests = [q[1] for q in parts if q[1] is not None]
                aff = ({k: v for k, v in coeffs.items() if v}, Node.add(*rests) if len(rests) == 2 else
                       (rests[0] if rests else None))
            elif node.op == "neg" and parts[0] is not None:
                aff = ({k: -v for k, v in parts[0][0].items()},
                       Node.neg(parts[0][1]) if parts[0][1] is not None else None)
            elif node.op == "mul" and all(q is not None for q in parts) and any(a.op == "const" for a in args):
                c, q = (args[0].value, parts[1]) if args[0].op == "const" else (args[1].value, parts[0])
                aff = ({k: v * c for k, v in q[0].items()}, Node.mul(c, q[1]) if q[1] is not None else None)
            else:
                aff = None
            affine[id(node)] = aff
            new_args = tuple(rebuilt.get(id(a), a) for a in args)
            arg = parts[0] if node.op == "exp" else None
            if arg is not None and arg[0] and all(k.denominator == 1 for k in arg[0].values()):
                out = Node.unary("exp", arg[1] if arg[1] is not None else Node.lift(0))
                for leaf, k in sorted(arg[0].items(), key=lambda lk: lk[0].value.name):
                    out = Node.mul(out, Node.power(Node.unary("exp", leaf), int(k)))
                rebuilt[id(node)] = out
            elif any(a is not b for a, b in zip(new_args, args)):
                rebuilt[id(node)] = Node(node.op, new_args, node.value)

    def rewrite(arr):
        out = np.empty(np.shape(arr), dtype=object)
        for idx in np.ndindex(*out.shape):
            x = arr[idx]
            out[idx] = rebuilt.get(id(x), x) if isinstance(x, Node) else x
        return out
    return TracedClaim(claim.op, claim.claim, claim.dims, claim.kind, lhs=rewrite(claim.lhs),
                       rhs=rewrite(claim.rhs), probe=claim.probe, overrides=claim.overrides)


def trace_claim(op: Op, claim: str, dims: dict) -> TracedClaim:
    """The claim traced at ``dims``, each traced call replayed in mpmath and on the float paths
    (``core.replay``): what is proved is the function the spec computes, not only its trace."""
    dims = op.resolve_dims(dims)
    with replayed(op, claim, dims):
        return _trace_claim(op, claim, dims)


def _trace_claim(op: Op, claim: str, dims: dict) -> TracedClaim:
    if claim.startswith("vjp[") and claim.endswith("]"):
        wrt = claim[4:-1]
        if wrt not in op.inputs:
            raise SpecError(op.name, f"has no differentiable input {wrt!r}; it has {list(op.inputs)}")
        values = primal_values(op, dims)
        y = trace_forward(op, values, dims)
        dy = leaf_array(y.shape, "dy", "dy")
        cots = trace_vjp(op, values, dy, dims)
        cot = cots[list(op.inputs).index(wrt)]
        t = leaf_array(values[wrt].shape, f"t_{wrt}", "tangent", owner=wrt)
        return TracedClaim(op, claim, dims, "vjp", wrt=wrt, inputs=values[wrt], cot=cot, y=y, dy=dy, t=t)
    law = op.get_law(claim)
    if claim == SHIFT_CLAIM:
        lhs, rhs = trace_shift_free(op, dims)
        probe = leaf_array(lhs.shape, "s", "probe")
        return TracedClaim(op, claim, dims, "law", lhs=lhs, rhs=rhs, probe=probe)
    values = primal_values(op, dims, law.params)
    y = trace_forward(op, values, dims)
    lhs, rhs = trace_law(op, claim, values, y)
    probe = leaf_array(lhs.shape, "s", "probe")
    return TracedClaim(op, claim, dims, "law", lhs=lhs, rhs=rhs, probe=probe, overrides=dict(law.params))


def assumptions_of(op: Op, overrides: dict) -> list[str]:
    out = ["inputs are real; the spec's denominators are nonzero at the input"]
    for name, p in op.params.items():
        if name in overrides:
            out.append(f"{name} = {overrides[name]} (the law is stated there)")
        elif p.symbolic:
            out.append(f"{name} is a symbol" + (f", {name} > 0" if p.positive else "")
                       + " (the claim holds for every such value)")
        else:
            out.append(f"{name} = {p.default!r}")
    if op.nondiff:
        out.append(f"{', '.join(op.nondiff)} not differentiated (symbols, held fixed)")
    return out + list(op.assumptions)
