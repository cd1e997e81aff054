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
    """What ``recurrence`` built: the cell, which input is the carry, which are sequences (a leading
    axis of length ``length``) and which are shared by every step (their gradients summed); the readout
    (None: each step's output is its state)."""
    cell: Op
    carry: str
    over: tuple[str, ...]
    shared: tuple[str, ...]
    length: str
    forward: object
    backward: object
    readout: Op | None = None

    @property
    def steps(self) -> list[Op]:
        """The ops each step runs: the cell, then the readout where there is one."""
        return [self.cell] + ([self.readout] if self.readout is not None else [])

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


def _check_step_op(o: Op, role: str):
    if o.vjp is None:
        raise SpecError(o.name, f"a recurrence needs the {role}'s hand-written backward (defvjp)")
    if o.nondiff or o.params:
        raise SpecError(o.name, f"a recurrence's {role} takes differentiable inputs only (no nondiff, no params)")


def recurrence(cell: Op, *, carry: str, over, name: str, dims, length: str = "T", readout: Op | None = None,
               large_dims=None, check_dims=None, modular_dims=None, constraints=None, doc: str | None = None) -> Op:
    """The op h_t = cell(h_(t-1), x_t, shared...) for t = 1..T, its output (y_1, ..., y_T) stacked:
    y_t = h_t, or y_t = readout(h_t, x_t, shared...) where a ``readout`` op is given (its input named
    ``carry`` is the state; its other inputs are the cell's, with the same shapes, or its own). Inputs:
    the initial carry, each ``over`` input with a leading axis ``length``, and the other inputs shared
    by every step; an input's sampler (its domain) is the step op's. Its backward is ``bptt``: the readout's and the cell's backwards from the last step
    to the first, each state's cotangent what its output sends back plus what the later steps return.
    ``dims`` must give ``length``."""
    over = (over,) if isinstance(over, str) else tuple(over)
    _check_step_op(cell, "cell")
    steps = [cell]
    if readout is not None:
        _check_step_op(readout, "readout")
        if carry not in readout.inputs:
            raise SpecError(readout.name, f"recurrence: the readout reads the state: it needs the input {carry!r}")
        steps.append(readout)
    names = list(dict.fromkeys(n for o in steps for n in o.inputs))
    if carry not in cell.inputs or any(n not in names for n in over) or carry in over:
        raise SpecError(cell.name, f"recurrence: carry {carry!r} and sequences {list(over)} must be distinct "
                                   f"inputs of the cell (or the readout), which have {names}")
    if tuple(cell.output) != tuple(cell.inputs[carry]):
        raise SpecError(cell.name, f"recurrence: the cell's output {cell.output} is not the shape of its carry "
                                   f"{carry!r} {cell.inputs[carry]}")
    shape = {}
    for o in steps:
        for n, s in o.inputs.items():
            if shape.setdefault(n, tuple(s)) != tuple(s):
                raise SpecError(name, f"recurrence: input {n!r} is {shape[n]} in the cell and {tuple(s)} in the "
                                      f"readout {o.name}: one input has one shape")
    output = tuple(steps[-1].output)
    if any(length in d for d in (*shape.values(), output)) or any(length not in d for d in dims):
        raise SpecError(name, f"recurrence: the length {length!r} must be a dim of every entry of dims and "
                              f"not one of the cell's")
    shared = tuple(n for n in names if n != carry and n not in over)
    inputs = {n: ((length, *shape[n]) if n in over else shape[n]) for n in names}
    # a step op's sampler states its input's domain (a gate in (0, 1)); a sampler takes the whole
    # shape, so it draws a sequence of them as well: over many steps a value outside the domain (a
    # gate of 1.5) makes the state grow geometrically, past what any working precision resolves
    sample = {}
    for o in steps:
        for n, draw in o.sample.items():
            if sample.setdefault(n, draw) is not draw:
                raise SpecError(name, f"recurrence: input {n!r} has a sampler in {cell.name} and another in "
                                      f"{o.name}: one input has one domain")

    def run_forward(B, values):
        hs = states(B, cell, carry, over, shared, values)
        if readout is None:
            return hs
        read = BoundNode(readout, B)
        return np.stack([read(**_step_values(readout, carry, hs[t], over, values, t)) for t in range(len(hs))])

    def forward(B, *args, **values):
        values.update(zip(names, args))
        return run_forward(B, values)

    def backward(B, *args, **values):
        values.update(zip([*names, "dy"], args))
        dy = values.pop("dy")
        hs = states(B, cell, carry, over, shared, values)
        if readout is None:
            return bptt(B, cell, carry, over, shared, values, hs, dy)
        return bptt(B, cell, carry, over, shared, values, hs, dy, readout=readout)

    forward, backward = _with_signature(forward, names), _with_signature(backward, [*names, "dy"])
    caller = inspect.getmodule(inspect.stack()[1].frame)
    forward.__module__ = backward.__module__ = getattr(caller, "__name__", __name__)
    read = f"{readout.name}(h_t, ...)" if readout is not None else "h_t"
    forward.__doc__ = doc or (f"{cell.name} scanned along {length}: h_t = {cell.name}(h_(t-1), "
                              f"{', '.join(f'{n}_t' for n in over)}{', ' if shared else ''}{', '.join(shared)}); "
                              f"the output stacks {read} for t = 1 .. {length}")
    o = op(inputs=inputs, output=(length, *output), dims=dims, large_dims=large_dims, check_dims=check_dims,
           modular_dims=modular_dims, constraints=_joined(cell.constraints, constraints), name=name,
           sample=sample)(forward)
    o.__class__ = RecurrenceOp
    o.defvjp(backward)
    o.module = caller
    o.recurrence = Recurrence(cell, carry, over, shared, length, forward, backward, readout)
    # the cell's (and readout's) code is this op's code too: an edit of its file stales the recurrence's proofs
    o._extra_functions = tuple(f for step in steps for f in (step.forward, step.vjp))
    return o


def _joined(*constraints):
    """The cell's constraints on its dims and the recurrence's own (on the length): both must hold."""
    given = [c for c in constraints if c is not None]
    if not given:
        return None
    return lambda dims: next((p for p in (c(dims) for c in given) if p), None)


def _step_values(o: Op, carry: str, h, over, values: dict, t: int) -> dict:
    """The inputs of step op ``o`` (the cell or the readout) at step t: the state h, the sequences' t-th
    entries and the shared inputs, those of them ``o`` takes."""
    return {carry: h, **{n: values[n][t] if n in over else values[n] for n in o.inputs if n != carry}}


def states(B, cell: Op, carry: str, over, shared, values: dict):
    """h_1 .. h_T, stacked: the cell scanned from the initial carry along the sequences (those only a
    readout reads set the length too)."""
    step_cell = BoundNode(cell, B)

    def step(h, x_t):
        h = step_cell(**{carry: h, **{n: v for n, v in zip(over, x_t) if n in cell.inputs},
                         **{n: values[n] for n in shared if n in cell.inputs}})
        return h, h
    return scan(B, step, values[carry], tuple(values[n] for n in over))[1]


def bptt(B, cell: Op, carry: str, over, shared, values: dict, hs, dy, readout: Op | None = None):
    """Backpropagation through time: from t = T down to 1, the readout's backward at (h_t, x_t, shared)
    with cotangent dy_t (none: dy_t is h_t's own), plus the carry cotangent the later steps returned,
    into the cell's backward at (h_(t-1), x_t, shared); the sequences' cotangents stacked, the shared
    inputs' summed, an input both read gets both. Returns one cotangent per input, in the order of the
    cell's inputs then the readout's others (the initial carry's is the first step's carry cotangent)."""
    steps = [cell] + ([readout] if readout is not None else [])
    names = list(dict.fromkeys(n for o in steps for n in o.inputs))
    T = len(hs)
    dh = None
    per_step = {n: [None] * T for n in over}
    summed = {n: None for n in shared}

    def add(n, g, t):
        if n in over:
            per_step[n][t] = g if per_step[n][t] is None else per_step[n][t] + g
        elif n != carry:
            summed[n] = g if summed[n] is None else summed[n] + g

    def vjp_of(o, h, t, cotangent):
        grads = BoundNode(o, B).vjp(**_step_values(o, carry, h, over, values, t), dy=cotangent)
        return dict(zip(o.inputs, grads if isinstance(grads, (tuple, list)) else (grads,)))

    for t in reversed(range(T)):
        g = dy[t]
        if readout is not None:
            grads = vjp_of(readout, hs[t], t, dy[t])
            g = grads[carry]
            for n in readout.inputs:
                add(n, grads[n], t)
        g = g if dh is None else g + dh
        grads = vjp_of(cell, values[carry] if t == 0 else hs[t - 1], t, g)
        dh = grads[carry]
        for n in cell.inputs:
            add(n, grads[n], t)
    out = {carry: dh, **{n: np.stack(per_step[n]) for n in over}, **summed}
    return tuple(out[n] for n in names)
