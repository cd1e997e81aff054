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


def scan(B, step, init, xs, reverse: bool = False, axis: int = 0):
    """``jax.lax.scan``'s meaning: ``carry, y_t = step(carry, x_t)`` along axis ``axis`` (0 in JAX) of
    ``xs`` (an array, or a tuple of arrays of one length, handed to ``step`` as a tuple); the last carry
    and the ys stacked along a new axis ``axis`` (``reverse``: t from the last to the first, y_t still at
    index t)."""
    seqs = xs if isinstance(xs, tuple) else (xs,)
    T = seqs[0].shape[axis] if axis else len(seqs[0])     # a symbolic length refuses here or in range()
    if any(s.shape[axis] != T for s in seqs):
        raise SpecError(None, "scan over sequences of different lengths")
    ys = [None] * T
    carry = init
    for t in (reversed(range(T)) if reverse else range(T)):
        x_t = tuple(at(s, t, axis) for s in seqs)
        carry, ys[t] = step(carry, x_t if isinstance(xs, tuple) else x_t[0])
    return carry, np.stack(ys, axis=axis)


def at(x, t: int, axis: int = 0):
    """x[..., t, ...]: entry t along ``axis``, by numpy's basic indexing (every interpreter follows it)."""
    return x[(slice(None),) * axis + (t,)]


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
    axis: int = 0
    zero_carry: bool = False
    names: tuple = ()               # the inputs in the op's order, the initial carry among them

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


def _positional(names: list, args: tuple) -> dict:
    """A generated forward's or backward's positional arguments by name, params included (a param left
    out would silently take its default in the step ops)."""
    if len(args) > len(names):
        raise SpecError(None, f"{len(args)} positional arguments for {names}")
    return dict(zip(names, args))


def _check_step_op(o: Op, role: str):
    if o.vjp is None:
        raise SpecError(o.name, f"a recurrence needs the {role}'s hand-written backward (defvjp)")
    if o.nondiff:
        raise SpecError(o.name, f"a recurrence's {role} takes differentiable inputs and params only (no nondiff)")


def step_params(steps: list[Op], name: str) -> dict:
    """The step ops' params, which become the recurrence's own: every step is called with the op's
    values of them. One name is one parameter (the same ``Param``) wherever it appears."""
    params = {}
    for o in steps:
        for n, p in o.params.items():
            if params.setdefault(n, p) != p:
                raise SpecError(name, f"param {n!r} is {params[n]} in one step op and {p} in {o.name}: one "
                                      f"name, one parameter")
    return params


def dim_sizes(shapes: dict, values: dict, axis: int, over) -> dict:
    """Dim name -> size, read off the values of the inputs whose declared (per-step) shapes name it."""
    sizes = {}
    for n, shape in shapes.items():
        if n in values:
            got = list(values[n].shape)
            if n in over:
                del got[axis]
            sizes.update((d, g) for d, g in zip(shape, got) if isinstance(d, str))
    return sizes


def recurrence(cell: Op, *, carry: str, over, name: str, dims, length: str = "T", readout: Op | None = None,
               axis: int = 0, zero_carry: bool = False, order=None, large_dims=None, check_dims=None,
               modular_dims=None, constraints=None, doc: str | None = None) -> Op:
    """The op h_t = cell(h_(t-1), x_t, shared...) for t = 1..T, its output (y_1, ..., y_T) stacked:
    y_t = h_t, or y_t = readout(h_t, x_t, shared...) where a ``readout`` op is given (its input named
    ``carry`` is the state; its other inputs are the cell's, with the same shapes, or its own). Inputs:
    the initial carry (``zero_carry``: none, h_0 = 0), each ``over`` input with the axis ``length``
    inserted at position ``axis`` of its per-step shape (the output's too), and the other inputs shared
    by every step; the step ops' params are the op's, handed to every step; an input's sampler (its
    domain) is the step op's. Its backward is ``bptt``: the readout's and the cell's backwards from the
    last step to the first, each state's cotangent what its output sends back plus what the later steps
    return. ``order``: the op's inputs in another order than the cell's then the readout's. ``dims`` must
    give ``length``."""
    over = (over,) if isinstance(over, str) else tuple(over)
    _check_step_op(cell, "cell")
    steps = [cell]
    if readout is not None:
        _check_step_op(readout, "readout")
        if carry not in readout.inputs:
            raise SpecError(readout.name, f"recurrence: the readout reads the state: it needs the input {carry!r}")
        steps.append(readout)
    names = list(dict.fromkeys(n for o in steps for n in o.inputs))
    if order is not None:
        if sorted(order) != sorted(n for n in names if not (zero_carry and n == carry)):
            raise SpecError(name, f"recurrence: order {list(order)} is not an order of the inputs {names}")
        names = ([carry] if zero_carry else []) + list(order)
    elif zero_carry:                # the carry's cotangent first, where the backward leaves it out
        names = [carry] + [n for n in names if n != carry]
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
    if not all(0 <= axis <= len(shape[n]) for n in over) or axis > len(output):
        raise SpecError(name, f"recurrence: axis {axis} is past the rank of a sequence's step or of the output")
    if zero_carry and any(not isinstance(d, str) or all(d not in shape[n] for n in names if n != carry)
                          for d in shape[carry]):
        raise SpecError(name, f"recurrence: a zero initial carry {shape[carry]} needs every dim of it in another "
                              f"input's shape (its size is read off them)")
    params = step_params(steps, name)
    shared = tuple(n for n in names if n != carry and n not in over)
    inputs = {n: (_inserted(shape[n], length, axis) if n in over else shape[n])
              for n in names if not (zero_carry and n == carry)}
    # a step op's sampler states its input's domain (a gate in (0, 1)); a sampler takes the whole
    # shape, so it draws a sequence of them as well: over many steps a value outside the domain (a
    # gate of 1.5) makes the state grow geometrically, past what any working precision resolves
    sample = {}
    for o in steps:
        for n, draw in o.sample.items():
            if sample.setdefault(n, draw) is not draw:
                raise SpecError(name, f"recurrence: input {n!r} has a sampler in {cell.name} and another in "
                                      f"{o.name}: one input has one domain")

    def initial(B, values):
        if zero_carry:
            sizes = dim_sizes(shape, values, axis, over)
            values[carry] = B.zeros(tuple(sizes[d] for d in shape[carry]))
        return values

    def forward(B, *args, **values):
        values.update(_positional(list(inputs) + list(params), args))
        return run(B, rec, initial(B, values))

    def backward(B, *args, **values):
        values.update(_positional([*inputs, "dy", *params], args))
        dy = values.pop("dy")
        values = initial(B, values)
        grads = bptt(B, rec, values, states(B, rec, values), dy)
        return grads[1:] if zero_carry else grads

    arg_names = [*inputs, *params]
    forward, backward = _with_signature(forward, arg_names), _with_signature(backward, [*inputs, "dy", *params])
    caller = inspect.getmodule(inspect.stack()[1].frame)
    forward.__module__ = backward.__module__ = getattr(caller, "__name__", __name__)
    read = f"{readout.name}(h_t, ...)" if readout is not None else "h_t"
    forward.__doc__ = doc or (f"{cell.name} scanned along {length}: h_t = {cell.name}(h_(t-1), "
                              f"{', '.join(f'{n}_t' for n in over)}{', ' if shared else ''}{', '.join(shared)}); "
                              f"the output stacks {read} for t = 1 .. {length}"
                              f"{'; h_0 = 0' if zero_carry else ''}")
    o = op(inputs=inputs, output=_inserted(output, length, axis), dims=dims, large_dims=large_dims,
           check_dims=check_dims, params=params, modular_dims=modular_dims,
           constraints=_joined(*(s.constraints for s in steps), constraints), name=name, sample=sample)(forward)
    o.__class__ = RecurrenceOp
    o.defvjp(backward)
    o.module = caller
    o.recurrence = rec = Recurrence(cell, carry, over, shared, length, forward, backward, readout, axis, zero_carry,
                                    tuple(names))
    # the cell's (and readout's) code is this op's code too: an edit of its file stales the recurrence's proofs
    o._extra_functions = tuple(f for step in steps for f in (step.forward, step.vjp))
    return o


def _inserted(shape: tuple, length: str, axis: int) -> tuple:
    return (*shape[:axis], length, *shape[axis:])


def run(B, rec: Recurrence, values: dict):
    """The recurrence's forward on ``values`` (the initial carry among them): the states, or each read out."""
    hs = states(B, rec, values)
    if rec.readout is None:
        return hs
    read = BoundNode(rec.readout, B)
    return np.stack([read(**_step_values(rec.readout, rec, at(hs, t, rec.axis), values, t))
                     for t in range(hs.shape[rec.axis])], axis=rec.axis)


def _joined(*constraints):
    """The cell's constraints on its dims and the recurrence's own (on the length): both must hold."""
    given = [c for c in constraints if c is not None]
    if not given:
        return None
    return lambda dims: next((p for p in (c(dims) for c in given) if p), None)


def _step_values(o: Op, rec: Recurrence, h, values: dict, t: int) -> dict:
    """The inputs (and params) of step op ``o`` (the cell or the readout) at step t: the state h, the
    sequences' t-th entries and the shared inputs, those of them ``o`` takes."""
    return {rec.carry: h, **{n: at(values[n], t, rec.axis) if n in rec.over else values[n]
                             for n in [*o.inputs, *o.params] if n != rec.carry}}


def states(B, rec: Recurrence, values: dict):
    """h_1 .. h_T, stacked along the recurrence's axis: the cell scanned from the initial carry along the
    sequences (those only a readout reads set the length too)."""
    step_cell = BoundNode(rec.cell, B)
    fixed = {n: values[n] for n in [*rec.shared, *rec.cell.params] if n in rec.cell.inputs or n in rec.cell.params}

    def step(h, x_t):
        h = step_cell(**{rec.carry: h, **{n: v for n, v in zip(rec.over, x_t) if n in rec.cell.inputs}, **fixed})
        return h, h
    return scan(B, step, values[rec.carry], tuple(values[n] for n in rec.over), axis=rec.axis)[1]


def bptt(B, rec: Recurrence, values: dict, hs, dy):
    """Backpropagation through time: from t = T down to 1, the readout's backward at (h_t, x_t, shared)
    with cotangent dy_t (none: dy_t is h_t's own), plus the carry cotangent the later steps returned,
    into the cell's backward at (h_(t-1), x_t, shared); the sequences' cotangents stacked, the shared
    inputs' summed, an input both read gets both. Returns one cotangent per input, in the order of the
    cell's inputs then the readout's others (the initial carry's is the first step's carry cotangent)."""
    cell, carry, over = rec.cell, rec.carry, rec.over
    names = rec.names or list(dict.fromkeys(n for o in rec.steps for n in o.inputs))
    T = hs.shape[rec.axis]
    dh = None
    per_step = {n: [None] * T for n in over}
    summed = {n: None for n in rec.shared}

    def add(n, g, t):
        if n in over:
            per_step[n][t] = g if per_step[n][t] is None else per_step[n][t] + g
        elif n != carry:
            summed[n] = g if summed[n] is None else summed[n] + g

    def vjp_of(o, h, t, cotangent):
        grads = BoundNode(o, B).vjp(**_step_values(o, rec, h, values, t), dy=cotangent)
        return dict(zip(o.inputs, grads if isinstance(grads, (tuple, list)) else (grads,)))

    for t in reversed(range(T)):
        g = at(dy, t, rec.axis)
        if rec.readout is not None:
            grads = vjp_of(rec.readout, at(hs, t, rec.axis), t, g)
            g = grads[carry]
            for n in rec.readout.inputs:
                add(n, grads[n], t)
        g = g if dh is None else g + dh
        grads = vjp_of(cell, values[carry] if t == 0 else at(hs, t - 1, rec.axis), t, g)
        dh = grads[carry]
        for n in cell.inputs:
            add(n, grads[n], t)
    out = {carry: dh, **{n: np.stack(per_step[n], axis=rec.axis) for n in over}, **summed}
    return tuple(out[n] for n in names)
