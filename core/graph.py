"""A tape-graph engine: a DAG of nodes, each a function with its VJP, evaluated into a tape that
records every saved value, and differentiated by reverse accumulation (fan-out cotangents summed).

The seed theorem (TorchLean ``backprop_eq_adjoint_fderiv``) says: for any seed over the inputs *and
every saved value*, backprop equals the adjoint of the derivative of the whole evaluation. As a spec
that is a plain VJP claim: ``graph_op`` registers an op whose forward is the flattened tape and whose
backward is backprop, and the prover checks backward = J^T dy for it like for any other op.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from vjpcert.core.registry import Op, SpecError, op


@dataclass(frozen=True)
class Prim:
    """A node kind: forward(B, *args) and vjp(B, *args, dy) -> one cotangent per argument."""

    name: str
    forward: Callable
    vjp: Callable
    arity: int


TRANSPOSE = Prim("transpose", lambda B, a: a.T, lambda B, a, dy: (dy.T,), 1)
MATMUL = Prim("matmul", lambda B, a, b: a @ b, lambda B, a, b, dy: (dy @ b.T, a.T @ dy), 2)
ADD = Prim("add", lambda B, a, b: a + b, lambda B, a, b, dy: (dy, dy), 2)
MUL = Prim("mul", lambda B, a, b: a * b, lambda B, a, b, dy: (dy * b, dy * a), 2)


def split_heads(heads: int) -> Prim:
    """(m, D) -> (heads, m, D/heads); its VJP is merge_heads."""
    def split(a):
        m, D = a.shape
        return a.reshape(m, heads, D // heads).transpose(1, 0, 2)

    def merge(a):
        h, m, dh = a.shape
        return a.transpose(1, 0, 2).reshape(m, h * dh)
    return Prim(f"split_heads_{heads}", lambda B, a: split(a), lambda B, a, dy: (merge(dy),), 1)


def merge_heads() -> Prim:
    """(heads, m, dh) -> (m, heads * dh); its VJP is the split."""
    def merge(a):
        h, m, dh = a.shape
        return a.transpose(1, 0, 2).reshape(m, h * dh)
    return Prim("merge_heads", lambda B, a: merge(a),
                lambda B, a, dy: (dy.reshape(a.shape[1], a.shape[0], a.shape[2]).transpose(1, 0, 2),), 1)


def scale(factor: Callable, name: str = "scale") -> Prim:
    """Multiply by a constant; ``factor(B, a)`` builds it from the backend (exact in every field)."""
    return Prim(name, lambda B, a: factor(B, a) * a, lambda B, a, dy: (factor(B, a) * dy,), 1)


def from_op(o: Op, name: str | None = None, **params) -> Prim:
    """A registered op as a node (its differentiable inputs are the node's arguments)."""
    if o.nondiff:
        raise SpecError(o.name, "an op with non-differentiable inputs cannot be a graph node")
    names = list(o.inputs)

    def values(B, args):
        vals = {k: (B.c(p.default) if p.symbolic else p.default) for k, p in o.params.items()}
        vals.update(params)
        vals.update(zip(names, args))
        return vals

    return Prim(name or o.name, lambda B, *a: o.bind(o.forward, B, values(B, a)),
                lambda B, *a: tuple(o.bind(o.vjp, B, {**values(B, a[:-1]), "dy": a[-1]})), len(names))


class Graph:
    def __init__(self, name: str, inputs: dict[str, tuple]):
        self.name = name
        self.inputs = dict(inputs)
        self.nodes: list[tuple[str, Prim, tuple[str, ...]]] = []

    def node(self, name: str, prim: Prim, *args: str) -> str:
        known = set(self.inputs) | {n for n, _, _ in self.nodes}
        if name in known:
            raise SpecError(self.name, f"graph value {name!r} defined twice")
        missing = [a for a in args if a not in known]
        if missing:
            raise SpecError(self.name, f"node {name!r} reads {missing}, not defined before it")
        if len(args) != prim.arity:
            raise SpecError(self.name, f"node {name!r}: {prim.name} takes {prim.arity} arguments")
        self.nodes.append((name, prim, tuple(args)))
        return name

    @property
    def order(self) -> list[str]:
        return [*self.inputs, *(n for n, _, _ in self.nodes)]

    def eval(self, B, values: dict) -> dict:
        """The tape: every input and every node's value, in evaluation order."""
        tape = {k: values[k] for k in self.inputs}
        for name, prim, args in self.nodes:
            tape[name] = np.asarray(prim.forward(B, *(tape[a] for a in args)))
        return tape

    def backprop(self, B, tape: dict, seeds: dict) -> dict:
        """Reverse accumulation from cotangent seeds on any values; returns every value's cotangent
        (None where nothing reached it). A value read by several nodes sums their contributions."""
        cot = {k: seeds.get(k) for k in self.order}
        for name, prim, args in reversed(self.nodes):
            g = cot[name]
            if g is None:
                continue
            for a, c in zip(args, prim.vjp(B, *(tape[x] for x in args), g)):
                cot[a] = c if cot[a] is None else cot[a] + c
        return cot


def _shapes(graph: Graph, shapes: dict) -> dict:
    """Shapes of every tape value, by evaluating on float64 zeros-plus-noise inputs."""
    from vjpcert.core.backends import F64
    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(s) for k, s in shapes.items()}
    return {k: np.shape(v) for k, v in graph.eval(F64, values).items()}


def graph_op(graph: Graph, *, dims: list, check_dims=None, name: str | None = None, doc: str = "",
             module=None, register: bool = True) -> Op:
    """Register the op 'x -> flattened tape of graph(x)' with backprop as its backward. The op belongs
    to the calling module (its spec file), whose source is what its certificates hash."""
    module = module or inspect.getmodule(sys._getframe(1))
    names = list(graph.inputs)
    params = [inspect.Parameter("B", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]

    def input_shapes(dims):
        return {k: tuple(int(dims[e]) if isinstance(e, str) else e for e in decl)
                for k, decl in graph.inputs.items()}

    def tape_length(dims):
        return sum(int(np.prod(s)) for s in _shapes(graph, input_shapes(dims)).values())

    def forward(B, **values):
        tape = graph.eval(B, values)
        return np.concatenate([np.ravel(tape[k])
                               for k in graph.order])

    def backward(B, dy, **values):
        tape = graph.eval(B, values)
        seeds, at = {}, 0
        for k in graph.order:
            size = int(np.prod(np.shape(tape[k])))
            seeds[k] = np.reshape(dy[at:at + size], np.shape(tape[k]))
            at += size
        cot = graph.backprop(B, tape, seeds)
        return tuple(cot[k] for k in names)

    forward.__signature__ = inspect.Signature(params)
    forward.__name__ = name or graph.name
    forward.__doc__ = doc or f"The tape of graph {graph.name}: {' -> '.join(graph.order)}."
    backward.__signature__ = inspect.Signature(params + [inspect.Parameter("dy", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    if register:
        o = op(inputs=graph.inputs, output=(tape_length,), dims=dims, check_dims=check_dims,
               name=name or graph.name)(forward)
    else:
        o = Op(forward, name=name or graph.name, inputs=graph.inputs, output=(tape_length,), nondiff=None,
               params=None, dims=dims, large_dims=None, check_dims=check_dims, assumptions=(), constraints=None)
    o.defvjp(backward)
    o.graph = graph
    o.module = module
    o.doc = doc or (inspect.getdoc(module) if module else "") or forward.__doc__
    return o
