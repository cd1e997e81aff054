"""Recurrences over a length: a cell op applied along a sequence, its output carried to the next step.

``scan(B, step, init, xs)`` is written once over ``B`` from numpy's indexing and stacking, as
``B.relu`` is from ``B.step``: every interpreter runs it at a concrete length with constructs it
already follows (the exact fields, mpmath, floats, mod p), so it needs no cell of its own in the
language. What no run at one length says -- every length at once -- comes from the structure:
``recurrence(cell, ...)`` builds the op whose forward scans the cell and whose backward is
backpropagation through time over the cell's own hand-written backward (``bptt``), and the every-size
tier proves its VJP claims for every length by induction from the cell's
(``symbolic.composition.induction``). At fixed lengths the op is an ordinary op: the ring proves it
unrolled, mod p runs it at production length, the numeric tier at long ones.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vjpcert.core.registry import BoundNode, Op, SpecError, op


def scan(B, step, init, xs, reverse: bool = False):
    """``jax.lax.scan``'s meaning: ``carry, y_t = step(carry, x_t)`` along axis 0 of ``xs`` (an array,
    or a tuple of arrays of one length, handed to ``step`` as a tuple); the last carry and the ys
    stacked along a new axis 0 (``reverse``: t from the last to the first, y_t still at index t)."""
    seqs = xs if isinstance(xs, tuple) else (xs,)
    T = len(seqs[0])                    # a length the trace knows: a symbolic one refuses here
    if any(len(s) != T for s in seqs):
        raise SpecError(None, "scan over sequences of different lengths")
    ys = [None] * T
    carry = init
    for t in (reversed(range(T)) if reverse else range(T)):
        carry, ys[t] = step(carry, tuple(s[t] for s in seqs) if isinstance(xs, tuple) else seqs[0][t])
    return carry, np.stack(ys)


@dataclass(frozen=True)
class Recurrence:
    """What ``recurrence`` built: the cell, which of its inputs is the carry, which are sequences (a
    leading axis of length ``length``) and which are shared by every step (their gradients summed)."""
    cell: Op
    carry: str
    over: tuple[str, ...]
    shared: tuple[str, ...]
    length: str
    forward: object
    backward: object

    def intact(self, o: Op) -> bool:
        """Whether ``o`` still computes this recurrence (a mutant twin that replaced its backward or
        forward does not: no induction holds for it)."""
        return o.forward is self.forward and o.vjp is self.backward


class RecurrenceOp(Op):
    """An op built by ``recurrence``: its forward and backward are this module's code, so this file is
    part of its identity (an edit of ``bptt`` stales its certificates in every tier), though it is
    vjpcert's machinery, which an op's identity otherwise leaves to the checkers' hashes."""

    @property
    def source_files(self) -> list[Path]:
        return sorted({*super().source_files, Path(__file__).resolve()})


def _with_signature(fn, names):
    fn.__signature__ = inspect.Signature([inspect.Parameter("B", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
                                         + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                            for n in names])
    return fn


def recurrence(cell: Op, *, carry: str, over, name: str, dims, length: str = "T", large_dims=None,
               check_dims=None, modular_dims=None, constraints=None, doc: str | None = None) -> Op:
    """The op h_t = cell(h_{t-1}, x_t, shared...) for t = 1..T, with output (h_1, ..., h_T) stacked:
    inputs the initial carry (the cell's ``carry`` input, its shape), each ``over`` input with a
    leading axis ``length``, and the cell's other inputs shared by every step. Its backward is
    ``bptt``: the cell's backward from the last step to the first, each step's carry cotangent the
    output's plus what the later steps return. ``dims`` must give ``length``."""
    over = (over,) if isinstance(over, str) else tuple(over)
    if cell.vjp is None:
        raise SpecError(cell.name, "a recurrence needs the cell's hand-written backward (defvjp)")
    if cell.nondiff or cell.params:
        raise SpecError(cell.name, "a recurrence's cell takes differentiable inputs only (no nondiff, no params)")
    if carry not in cell.inputs or any(n not in cell.inputs for n in over) or carry in over:
        raise SpecError(cell.name, f"recurrence: carry {carry!r} and sequences {list(over)} must be distinct "
                                   f"inputs of the cell, which has {list(cell.inputs)}")
    if tuple(cell.output) != tuple(cell.inputs[carry]):
        raise SpecError(cell.name, f"recurrence: the cell's output {cell.output} is not the shape of its carry "
                                   f"{carry!r} {cell.inputs[carry]}")
    if any(length in d for d in (cell.inputs[n] for n in cell.inputs)) or any(length not in d for d in dims):
        raise SpecError(name, f"recurrence: the length {length!r} must be a dim of every entry of dims and "
                              f"not one of the cell's")
    shared = tuple(n for n in cell.inputs if n != carry and n not in over)
    names = list(cell.inputs)
    inputs = {n: ((length, *cell.inputs[n]) if n in over else tuple(cell.inputs[n])) for n in names}

    def run_forward(B, values):
        step_cell = BoundNode(cell, B)

        def step(h, x_t):
            h = step_cell(**{carry: h, **dict(zip(over, x_t)), **{n: values[n] for n in shared}})
            return h, h
        return scan(B, step, values[carry], tuple(values[n] for n in over))[1]

    def forward(B, *args, **values):
        values.update(zip(names, args))
        return run_forward(B, values)

    def backward(B, *args, **values):
        values.update(zip([*names, "dy"], args))
        dy = values.pop("dy")
        return bptt(B, cell, carry, over, shared, values, run_forward(B, values), dy)

    forward, backward = _with_signature(forward, names), _with_signature(backward, [*names, "dy"])
    caller = inspect.getmodule(inspect.stack()[1].frame)
    forward.__module__ = backward.__module__ = getattr(caller, "__name__", __name__)
    forward.__doc__ = doc or (f"{cell.name} scanned along {length}: h_t = {cell.name}(h_(t-1), "
                              f"{', '.join(f'{n}_t' for n in over)}{', ' if shared else ''}{', '.join(shared)}); "
                              f"the output stacks h_1 .. h_{length}")
    o = op(inputs=inputs, output=(length, *cell.output), dims=dims, large_dims=large_dims, check_dims=check_dims,
           modular_dims=modular_dims, constraints=_joined(cell.constraints, constraints), name=name)(forward)
    o.__class__ = RecurrenceOp
    o.defvjp(backward)
    o.module = caller
    o.recurrence = Recurrence(cell, carry, over, shared, length, forward, backward)
    # the cell's code is this op's code too: an edit of the cell's file stales the recurrence's proofs
    o._extra_functions = (cell.forward, cell.vjp)
    return o


def _joined(*constraints):
    """The cell's constraints on its dims and the recurrence's own (on the length): both must hold."""
    given = [c for c in constraints if c is not None]
    if not given:
        return None
    return lambda dims: next((p for p in (c(dims) for c in given) if p), None)


def bptt(B, cell: Op, carry: str, over, shared, values: dict, hs, dy):
    """Backpropagation through time: from t = T down to 1, the cell's backward at (h_(t-1), x_t,
    shared) with cotangent dy_t plus the carry cotangent the later steps returned; the sequences'
    cotangents stacked, the shared inputs' summed. Returns one cotangent per input, in the cell's
    input order (the initial carry's is the first step's carry cotangent)."""
    step_vjp = BoundNode(cell, B).vjp
    names = list(cell.inputs)
    T = len(hs)
    dh = None
    per_step = {n: [None] * T for n in over}
    summed = {n: None for n in shared}
    for t in reversed(range(T)):
        h_prev = values[carry] if t == 0 else hs[t - 1]
        g = dy[t] if dh is None else dy[t] + dh
        grads = step_vjp(**{carry: h_prev, **{n: values[n][t] for n in over},
                            **{n: values[n] for n in shared}}, dy=g)
        grads = dict(zip(names, grads if isinstance(grads, (tuple, list)) else (grads,)))
        dh = grads[carry]
        for n in over:
            per_step[n][t] = grads[n]
        for n in shared:
            summed[n] = grads[n] if summed[n] is None else summed[n] + grads[n]
    out = {carry: dh, **{n: np.stack(per_step[n]) for n in over}, **summed}
    return tuple(out[n] for n in names)
