"""A recurrence computed chunk by chunk: the form fast kernels take (chunked linear attention, chunked
delta rules), held to the recurrence it computes.

``chunked(recurrent, state=F, out=G, ...)`` builds the op that cuts the sequence into chunks of C steps
(the last one partial) and, chunk after chunk, reads the chunk's outputs Y_c = G(h, X_c) off the state h
before it and moves the state on, h <- F(h, X_c); its backward runs the chunks in reverse, each chunk
the backwards of G (on the chunk's output cotangent) and of F (on the cotangent the later chunks sent
back to the state after it), the state's cotangent carried between chunks. F and G are ops over one
chunk of any length n (a dim of theirs), each with its hand-written backward -- the masked quadratic
form inside a chunk, say.

What makes the chunked op the recurrence, for every length and every chunk size, is written on F and
G here, as laws generated from the recurrence's own cell and readout (so what is proved is what the
theorem needs, not what a spec chose to say), each for every chunk length n and width by the
every-size tier:

  * ``one_step_is_the_cell`` / ``one_step_is_the_readout``: F over one step is the cell, G over one
    step the readout of the cell's state;
  * ``one_more_step_is_the_cell`` / ``one_more_step_is_the_readout``: F over n steps is the cell
    applied after F over the first n - 1, and G over n steps is G over the first n - 1 followed by the
    readout of F's state after all n.

By induction on n, F is n steps of the cell and G their n readouts; by induction on the number of
chunks the chunked forward is the recurrence's (``symbolic.every_size.induction``). The backward's
claims follow from F's and G's VJP claims for every n by the chain rule over the chunks, the same
induction as backpropagation through time with a chunk as its step. The chunk size is a structural
parameter ``C``: every certificate at fixed dims names it, and the induction holds for every C >= 1.
"""
from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vjpcert.core.recurrence import _inserted, _joined, _positional, _with_signature, at, dim_sizes
from vjpcert.core.registry import BoundNode, Op, Param, SpecError, op

# the laws generated on the chunk ops: their names are the theorem's premises
STATE_LAWS = ("one_step_is_the_cell", "one_more_step_is_the_cell")
OUT_LAWS = ("one_step_is_the_readout", "one_more_step_is_the_readout")
EQUALS_RECURRENT = "equals_the_recurrent_form"


@dataclass(frozen=True)
class Chunked:
    """What ``chunked`` built: the recurrence it computes, the chunk ops, the chunk length's dim in them
    and the chunk size's param in the chunked op."""
    recurrent: Op
    state: Op
    out: Op
    chunk_length: str
    chunk: str
    forward: object
    backward: object

    # the names of the laws the induction takes as its premises, and of the claim it proves; read off
    # this object by the prover, which imports nothing of this module (its code is the ops' identity)
    state_laws = STATE_LAWS
    out_laws = OUT_LAWS
    equals_recurrent = EQUALS_RECURRENT

    @property
    def steps(self) -> list[Op]:
        return [self.state, self.out]

    def intact(self, o: Op) -> bool:
        """Whether ``o`` still computes chunk by chunk with these ops (a mutant twin does not)."""
        return o.forward is self.forward and o.vjp is self.backward

    def is_premise(self, o: Op, name: str) -> bool:
        """Whether ``o``'s law ``name`` is one this construct generated from its recurrence (``is_premise``)."""
        return is_premise(o, name, self.recurrent.recurrence)


# This module and ``core.recurrence`` are the code of the ops built with them: the chunked op's forward
# and backward, and the laws generated on its chunk ops. So they are in those ops' identity, and in no
# checker's hash: an edit here stales the certificates of chunked recurrences and their chunk ops, and
# of nothing else.
_CONSTRUCT_FILES = (Path(__file__).resolve(), (Path(__file__).parent / "recurrence.py").resolve())


class ChunkedOp(Op):
    """An op built by ``chunked``: its forward and backward are this module's code and the recurrence's
    (``core.recurrence``), so both files are part of its identity."""

    @property
    def source_files(self) -> list[Path]:
        return sorted({*super().source_files, *_CONSTRUCT_FILES, *self.chunked.recurrent.source_files})

    @property
    def recurrence(self):
        """The recurrence this op computes chunk by chunk: its length is this op's, where the numeric tier
        checks at a long length too (the last chunk partial there). ``chunked`` refuses to chunk this op
        again, and the every-size tier proves it by induction over the chunks, not as the recurrence."""
        return self.chunked.recurrent.recurrence


_STEP_CLASSES: dict[type, type] = {}


def _as_chunk_step(o: Op) -> None:
    """Make ``o`` (a chunk op) count this module among its code: the laws generated on it are."""
    base = type(o)
    if getattr(base, "_chunk_step", False):
        return
    if base not in _STEP_CLASSES:
        def source_files(self) -> list[Path]:
            return sorted({*base.source_files.fget(self), *_CONSTRUCT_FILES})
        _STEP_CLASSES[base] = type(f"ChunkStep{base.__name__}", (base,), {
            "_chunk_step": True, "__module__": __name__,
            "source_files": property(source_files, doc="The op's files, and the construct's that made its laws."),
            "__doc__": f"A chunk op of ``chunked`` ({base.__name__}): the laws generated on it are this module's code."})
    o.__class__ = _STEP_CLASSES[base]


def _chunk_shapes(o: Op, rec, length: str, n: str, role: str) -> None:
    """The chunk op reads the recurrence's inputs, each sequence with the chunk length ``n`` in place of
    the recurrence's length, and its params are the recurrence's."""
    for name, shape in o.inputs.items():
        if name == rec.carry:
            want = tuple(rec.cell.inputs[rec.carry])
        elif name in rec.over:
            want = tuple(n if d == length else d for d in rec_input_shape(rec, name, length))
        elif name in rec.shared:
            want = tuple(rec_step_shape(rec, name))
        else:
            raise SpecError(o.name, f"chunked: the {role} op's input {name!r} is not one of the recurrence's "
                                    f"({[rec.carry, *rec.over, *rec.shared]})")
        if tuple(shape) != want:
            raise SpecError(o.name, f"chunked: the {role} op's input {name!r} is {tuple(shape)}; the recurrence "
                                    f"gives it {want}")
    if rec.carry not in o.inputs:
        raise SpecError(o.name, f"chunked: the {role} op reads the state before the chunk: it needs {rec.carry!r}")


def rec_step_shape(rec, name: str) -> tuple:
    for o in rec.steps:
        if name in o.inputs:
            return tuple(o.inputs[name])
    raise KeyError(name)


def rec_input_shape(rec, name: str, length: str) -> tuple:
    return _inserted(rec_step_shape(rec, name), length, rec.axis)


def chunked(recurrent: Op, *, state: Op, out: Op, name: str, dims, chunk: int = 2, chunk_length: str = "n",
            large_dims=None, check_dims=None, modular_dims=None, doc: str | None = None) -> Op:
    """The op that computes ``recurrent`` (built by ``core.recurrence.recurrence``) chunk by chunk: the
    chunks of ``C`` steps (param, default ``chunk``; the last chunk partial), the outputs of each
    ``out(h, X_c, shared)``, the state after it ``state(h, X_c, shared)``. ``state`` and ``out`` take the
    recurrence's inputs with the chunk's length ``chunk_length`` in place of its length, and its params.
    The laws that make them the recurrence's steps are added to them (module docstring)."""
    if getattr(recurrent, "chunked", None) is not None:
        raise SpecError(name, f"chunked: {recurrent.name} is already computed in chunks; chunk the recurrence it "
                              f"computes, {recurrent.chunked.recurrent.name}")
    rec = getattr(recurrent, "recurrence", None)
    if rec is None:
        raise SpecError(name, f"chunked: {recurrent.name} is not built by core.recurrence.recurrence")
    length = rec.length
    for o, role in ((state, "state"), (out, "out")):
        if o.vjp is None:
            raise SpecError(o.name, f"chunked: the {role} op needs its hand-written backward (defvjp)")
        if o.nondiff:
            raise SpecError(o.name, f"chunked: the {role} op takes differentiable inputs and params only")
        if any(recurrent.params.get(p) != q for p, q in o.params.items()):
            raise SpecError(o.name, f"chunked: the {role} op's params {o.params} are not the recurrence's "
                                    f"{recurrent.params}")
        if any(chunk_length not in d for d in o.dims):
            raise SpecError(o.name, f"chunked: the chunk's length {chunk_length!r} must be a dim of every "
                                    f"entry of the {role} op's dims")
        _chunk_shapes(o, rec, length, chunk_length, role)
    if tuple(state.output) != tuple(rec.cell.inputs[rec.carry]):
        raise SpecError(state.name, f"chunked: the state op's output {state.output} is not the state's shape "
                                    f"{rec.cell.inputs[rec.carry]}")
    want = tuple(chunk_length if d == length else d for d in recurrent.output)
    if tuple(out.output) != want:
        raise SpecError(out.name, f"chunked: the out op's output {out.output} is not one chunk of the "
                                  f"recurrence's output, {want}")
    if not isinstance(chunk, int) or chunk < 1:
        raise SpecError(name, f"chunked: the chunk size is an int >= 1, not {chunk!r}")
    _add_laws(rec, state, out, chunk_length)
    for o in (state, out):
        _as_chunk_step(o)

    inputs = dict(recurrent.inputs)
    params = {**recurrent.params, "C": Param(chunk, symbolic=False, doc="the chunk's length")}
    seq_shapes = {n: rec_step_shape(rec, n) for r in rec.steps for n in r.inputs}

    def start(B, values):
        if rec.zero_carry:
            sizes = dim_sizes(seq_shapes, values, rec.axis, rec.over)
            values[rec.carry] = B.zeros(tuple(sizes[d] for d in rec.cell.inputs[rec.carry]))
        return values

    def forward(B, *args, **values):
        values.update(_positional(list(inputs) + list(params), args))
        ys, _ = run_chunks(B, cells, start(B, values))
        return np.concatenate(ys, axis=rec.axis)

    def backward(B, *args, **values):
        values.update(_positional([*inputs, "dy", *params], args))
        dy = values.pop("dy")
        grads = backprop_chunks(B, cells, start(B, values), dy)
        return grads[1:] if rec.zero_carry else grads

    arg_names = [*inputs, *params]
    forward, backward = _with_signature(forward, arg_names), _with_signature(backward, [*inputs, "dy", *params])
    caller = inspect.getmodule(inspect.stack()[1].frame)
    forward.__module__ = backward.__module__ = getattr(caller, "__name__", __name__)
    forward.__doc__ = doc or (f"{recurrent.name} computed in chunks of C steps (the last one partial): each "
                              f"chunk's outputs {out.name}(h, chunk), the state after it {state.name}(h, chunk)")
    o = op(inputs=inputs, output=recurrent.output, dims=dims, large_dims=large_dims, check_dims=check_dims,
           params=params, modular_dims=modular_dims, name=name, sample=dict(recurrent.sample),
           constraints=_joined(recurrent.constraints))(forward)
    o.__class__ = ChunkedOp
    o.defvjp(backward)
    o.module = caller
    cells = Chunked(recurrent, state, out, chunk_length, "C", forward, backward)
    o.chunked = cells
    o._extra_functions = (*getattr(recurrent, "_extra_functions", ()), recurrent.forward, recurrent.vjp,
                          *(f for s in cells.steps for f in (s.forward, s.vjp)))

    def equals_the_recurrent_form(B, *args, **values):
        own = values.pop("forward")          # the forward under test (a mutant's too), params bound
        values.update(_positional(list(inputs) + list(params), args))
        run = {n: values[n] for n in [*inputs, *recurrent.params]}
        return own(**{n: values[n] for n in inputs}), BoundNode(recurrent, B)(**run)
    law = _with_signature(equals_the_recurrent_form, [*inputs, *params, "forward"])
    law.__doc__ = (f"Cut into chunks of C steps (the last one partial), the forward is {recurrent.name}'s: for "
                   f"every length and chunk size by induction (F and G are the recurrence's steps, by their laws)")
    o.law(law, name=EQUALS_RECURRENT)
    return o


def _chunks(T: int, C: int):
    return [(s, min(s + C, T)) for s in range(0, T, C)]


def _cut(x, s: int, e: int, axis: int):
    return x[(slice(None),) * axis + (slice(s, e),)]


def _chunk_values(o: Op, cells: Chunked, h, values: dict, s: int, e: int) -> dict:
    rec = cells.recurrent.recurrence
    return {rec.carry: h, **{n: _cut(values[n], s, e, rec.axis) if n in rec.over else values[n]
                             for n in [*o.inputs, *o.params] if n != rec.carry}}


def run_chunks(B, cells: Chunked, values: dict):
    """The chunked forward: each chunk's outputs, and the state before each chunk (the last entry the
    state after the last one)."""
    rec = cells.recurrent.recurrence
    F, G = BoundNode(cells.state, B), BoundNode(cells.out, B)
    T = values[rec.over[0]].shape[rec.axis]
    hs, ys = [values[rec.carry]], []
    for s, e in _chunks(T, values["C"]):
        ys.append(G(**_chunk_values(cells.out, cells, hs[-1], values, s, e)))
        hs.append(F(**_chunk_values(cells.state, cells, hs[-1], values, s, e)))
    return ys, hs


def backprop_chunks(B, cells: Chunked, values: dict, dy):
    """The chunks in reverse: the out op's backward on the chunk's output cotangent, the state op's on
    the cotangent of the state after the chunk (none after the last one), their state cotangents summed
    and carried to the chunk before. One cotangent per input of the recurrence, in its order."""
    rec = cells.recurrent.recurrence
    names = rec.names
    T = values[rec.over[0]].shape[rec.axis]
    _, hs = run_chunks(B, cells, values)
    spans = _chunks(T, values["C"])
    per_chunk = {n: [None] * len(spans) for n in rec.over}
    summed = {n: None for n in rec.shared}
    dh = None

    def add(n, g, c):
        if n in rec.over:
            per_chunk[n][c] = g if per_chunk[n][c] is None else per_chunk[n][c] + g
        elif n != rec.carry:
            summed[n] = g if summed[n] is None else summed[n] + g

    def vjp_of(o, c, cotangent):
        s, e = spans[c]
        grads = BoundNode(o, B).vjp(**_chunk_values(o, cells, hs[c], values, s, e), dy=cotangent)
        return dict(zip(o.inputs, grads if isinstance(grads, (tuple, list)) else (grads,)))

    for c in reversed(range(len(spans))):
        s, e = spans[c]
        grads = vjp_of(cells.out, c, _cut(dy, s, e, rec.axis))
        dh_before = grads[rec.carry]
        for n in cells.out.inputs:
            add(n, grads[n], c)
        if dh is not None:                   # the state after the last chunk is no output
            grads = vjp_of(cells.state, c, dh)
            dh_before = dh_before + grads[rec.carry]
            for n in cells.state.inputs:
                add(n, grads[n], c)
        dh = dh_before
    for n in rec.over:                       # a sequence the out op does not read: zero where no op did
        per_chunk[n] = [g if g is not None else B.zeros(_cut(values[n], *spans[c], rec.axis).shape)
                        for c, g in enumerate(per_chunk[n])]
    out = {rec.carry: dh, **{n: np.concatenate(per_chunk[n], axis=rec.axis) for n in rec.over},
           **{n: summed[n] if summed[n] is not None else B.zeros(values[n].shape) for n in rec.shared}}
    return tuple(out[n] for n in names)


# ------------------------------------------------------------------------------ the laws on F and G
# Each law function chunked generated -> (the recurrence it was generated from, its name, the chunk op it
# was generated on: a law reads its op's inputs and its partner op, so it is no premise on another). Held here,
# not on the function (an attribute a spec could set on a law of its own): only a function this module
# made is a premise.
_GENERATED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def is_premise(o: Op, name: str, rec) -> bool:
    """Whether ``o``'s law ``name`` is the one ``chunked`` generated from ``rec``'s cell and readout: the
    only law the induction over the chunks may take as a premise (a law written under that name, or the
    laws list edited after the build, is not)."""
    law = next((l for l in o.laws if l.name == name), None)
    made = _GENERATED.get(law.fn) if law is not None else None
    return made is not None and made[0] is rec and made[1] == name and made[2] is o


def _add_laws(rec, state: Op, out: Op, n: str) -> None:
    """The four laws that make F and G the recurrence's steps, each declared for every size."""
    cell, readout, carry, axis = rec.cell, rec.readout, rec.carry, rec.axis

    def step_values(o, h, values, t):
        return {carry: h, **{m: at(values[m], t, axis) if m in rec.over else values[m]
                             for m in [*o.inputs, *o.params] if m != carry}}

    def first(values, end):
        return {m: _cut(v, 0, end, axis) if m in rec.over else v for m, v in values.items()}

    def read(B, h, values, t):
        """What the recurrence outputs at step t of the chunk from the state h after it."""
        if readout is None:
            return h
        return BoundNode(readout, B)(**step_values(readout, h, values, t))

    def law_for(o: Op, name: str, body, doc: str):
        def law(B, *args, **values):
            forward = values.pop("forward")
            values.update(_positional([*o.inputs, *o.params], args))
            return body(B, values, forward)
        law = _with_signature(law, [*o.inputs, *o.params, "forward"])
        law.__doc__ = doc
        _GENERATED[law] = (rec, name, o)   # what the induction takes as its premise (is_premise), and nothing else
        have = next((l for l in o.laws if l.name == name), None)
        if have is None:
            o.law(law, name=name)
        elif not is_premise(o, name, rec):
            whose = "generated for another recurrence" if have.fn in _GENERATED else "written by hand"
            raise SpecError(o.name, f"chunked: {name!r} is the law chunked generates on this chunk op from "
                                    f"{cell.name}, and the op already has a law of that name, {whose}: the "
                                    f"induction would take that one as its premise. Rename the law, or give "
                                    f"each recurrence its own chunk ops")
        o.every_size(name)

    def chunk_args(o, values):
        return {m: values[m] for m in o.inputs}

    def state_one(B, values, forward):
        one = first(values, 1)
        return forward(**chunk_args(state, one)), BoundNode(cell, B)(**step_values(cell, values[carry], one, 0))

    def state_more(B, values, forward):
        before = forward(**chunk_args(state, first(values, -1)))
        return forward(**chunk_args(state, values)), BoundNode(cell, B)(**step_values(cell, before, values, -1))

    def out_one(B, values, forward):
        one = first(values, 1)
        h1 = BoundNode(cell, B)(**step_values(cell, values[carry], one, 0))
        return forward(**chunk_args(out, one)), np.stack([read(B, h1, one, 0)], axis=axis)

    def out_more(B, values, forward):
        after = BoundNode(state, B)(**chunk_args(state, values), **{m: values[m] for m in state.params})
        head = forward(**chunk_args(out, first(values, -1)))
        return (forward(**chunk_args(out, values)),
                np.concatenate([head, np.stack([read(B, after, values, -1)], axis=axis)], axis=axis))

    law_for(state, STATE_LAWS[0], state_one, f"Over one step, the state is {cell.name}'s.")
    law_for(state, STATE_LAWS[1], state_more,
            f"Over {n} steps, the state is {cell.name} applied after the state over the first {n} - 1.")
    what = f"{readout.name} of the state" if readout is not None else "the state"
    law_for(out, OUT_LAWS[0], out_one, f"Over one step, the output is {what} after {cell.name}.")
    law_for(out, OUT_LAWS[1], out_more,
            f"Over {n} steps, the outputs are those over the first {n} - 1, then {what} after all {n}.")
