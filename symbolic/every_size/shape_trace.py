"""The every-size statement of a claim, derived from the spec's own numpy code: a shape-polymorphic trace.

The spec's forward, backward and laws run once with arrays whose dimensions are *symbols* (n >= 1,
rows >= 1, d = 2h where the op's constraints only allow even d). Such an array (``SymArray``) holds
no entries: it is a function from symbolic indices to a SymPy expression -- ``IndexedBase`` entries
for the inputs, ``Sum`` for reductions, index arithmetic for slices -- evaluated lazily when the
statement is built. What the spec computes *is* the statement: nothing is transcribed by hand.

What the trace follows: elementwise arithmetic with broadcasting, the backend ``B`` (exp, log, sqrt,
erf, tanh, sin, cos, pi, c, zeros, array, max_shift -- 0 in exact arithmetic), ``.sum/.mean/.any/.all``
over an axis (keepdims), ``@``, ``.T``, basic indexing (``x[0]``, ``x[:, h:]``, ``x[:, 0::2]``,
``x[..., :1]``, ``None``), ``np.concatenate``, ``np.stack``, ``reshape`` merging a constant-size axis
(RoPE's interleave) or cutting an axis into a constant number of runs and back (a grouped
convolution's channel groups: read as slices and a stack, then a concatenation), ``np.where`` with
a mask built from shapes (``np.ones``, ``np.tril``, ``np.triu``), ``np.arange`` of a dim (an index-valued array, usable as a number only) and ``x.shape``.
A layout that splits an axis (a concatenation, an interleave) makes the array *pieces*: each piece
is a box of local indices p with an affine map  j = a p + b  per axis (``form`` proves that
the pieces of the final arrays tile them).

What cannot pass: a dim (``x.shape[-1]``) is a ``Dim`` that refuses ``==``, ``<``, ``%``, ``bool()``,
``int()``, ``__index__`` (so ``range(n)``, ``if n % 4 == 0``, ``if n > 2048`` and iteration over a
symbolic axis all refuse), hashing and ``str()``; a ``SymArray`` refuses comparisons, ``bool()``,
iteration over a symbolic axis, conversion to a numpy array and in-place writes; a slice or an index
with a bound not provably inside every size (``x[..., :2048]``) refuses, as does a layout that cannot
be aligned for every size. Every refusal goes through ``core.registry.refuse``, so a spec that catches
it is still refused. A refused derivation makes the every-size claim ``inconclusive`` with the reason
and the spec's file:line (``DerivationRefused``). Identity and type tests (``n is 16``,
``isinstance(n, int)``) cannot be intercepted by any Python object; the cross-check of
``symbolic.every_size.general`` at concrete sizes is what stands behind them.

The trace is made of ``sizes`` (``Dim``, size arithmetic, where a refusal happened), ``symarray``
(``SymArray``, its pieces and elementwise algebra; every entry point checked against
``core.language``), ``constructs`` (reductions, indexing, concatenation, reshape, masks),
``layouts`` (moveaxis, swapaxes, outer, diff, pad, einsum, strided cuts of padded arrays),
``backend`` (numpy's protocols, shape-taking constructors, ``B``) and this module (the dims of the
statement and the driver).

Public API: ``derive(op, claim) -> builder`` (a ``GeneralBuilder -> G.vjp(...) | G.law(...)``),
``dim_forms(op) -> {dim: (k, sub, least)}``, ``DerivationRefused``.
"""
from __future__ import annotations

import inspect
import traceback
from fractions import Fraction
from typing import Callable

import sympy as sp

from vjpcert.core.registry import Op, SpecError, refuse, take_refusals
from vjpcert.symbolic.every_size.backend import SHAPE_BACKEND, symbolic_numpy
from vjpcert.symbolic.every_size.dims import DerivationRefused, dim_forms
from vjpcert.symbolic.every_size.sizes import _LOCAL, _Context, same, source_of, spec_line  # noqa: F401
from vjpcert.symbolic.every_size.grid import _same_maps
from vjpcert.symbolic.every_size.symarray import SymArray, _identity_maps, lift

__all__ = ["DerivationRefused", "derive", "dim_forms", "source_of", "spec_line"]


# ============================================================================ dims of the statement
def declare_dims(G, op: Op) -> None:
    for name, (k, sub, least) in dim_forms(op).items():
        if k == 1 and least == 1:
            G.dim(name)
        else:
            G.multiple_dim(name, k, sub, least)


# ============================================================================ the derivation
def _input(G, name: str, shape) -> SymArray:
    if not shape:
        refuse(f"0-d input {name!r}: the every-size trace indexes every input")
    X = G.array(name)
    out = SymArray.full(shape, lambda idx: X[tuple(idx)])
    out.input = True
    return out


def _values(G, op: Op, overrides=None) -> dict:
    values = {}
    for name in [*op.inputs, *op.nondiff]:
        values[name] = _input(G, name, G.shape(name))
    for name, p in op.params.items():
        values[name] = SymArray.scalar(G.param(name)) if p.symbolic else p.default
    for name, v in (overrides or {}).items():
        if name not in op.params:
            raise SpecError(op.name, f"law overrides unknown param {name!r}")
        values[name] = SymArray.scalar(sp.Rational(Fraction(v).numerator, Fraction(v).denominator)) \
            if op.params[name].symbolic else v
    return values


def _run(op: Op, fn, role: str, values: dict):
    """Run spec code under the symbolic-size backend; any refusal (also one the spec caught) or error
    is a DerivationRefused naming the spec's file and line."""
    take_refusals()
    try:
        out = op.bind(fn, SHAPE_BACKEND, values)
    except DerivationRefused:
        take_refusals()
        raise
    except SpecError as exc:
        take_refusals()
        raise DerivationRefused(f"{role}: {exc.problem}",
                                spec_line(traceback.extract_tb(exc.__traceback__))) from None
    except Exception as exc:  # the spec's code did something the trace cannot follow
        take_refusals()
        raise DerivationRefused(f"{role}: raised {type(exc).__name__}: {exc}"[:300],
                                spec_line(traceback.extract_tb(exc.__traceback__))) from None
    swallowed = take_refusals()
    if swallowed:
        problem, stack = swallowed[0]
        raise DerivationRefused(f"{role}: {problem} (the spec caught this and carried on; the trace cannot "
                                f"follow that path)", spec_line(stack))
    return out


def _array(value, what: str) -> SymArray:
    if isinstance(value, SymArray):
        return value
    try:
        return lift(value)
    except SpecError as exc:
        raise DerivationRefused(f"{what}: {exc.problem}") from None


def _check_shape(A: SymArray, want, what: str):
    if len(A._shape) != len(want) or not all(same(a, b) for a, b in zip(A._shape, want)):
        raise DerivationRefused(f"{what} has shape {tuple(map(str, A._shape))}, the op declares "
                                f"{tuple(map(str, want))}")


def _signature(f, names):
    f.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return f


def pieces_of(G, A: SymArray, names: list[str]):
    """The array as G.piece(...)s (or one function of the index when it is one piece with the
    identity layout), index names as given."""
    names = list(names[:A.ndim]) + [f"i{k}" for k in range(len(names), A.ndim)]
    if len(A.pieces) == 1 and _same_maps(A.pieces[0].maps, _identity_maps(A._shape)):
        P = A.pieces[0]
        return _signature(lambda *idx: P.value(idx), names)
    out = []
    for P in A.pieces:
        maps = P.maps
        out.append(G.piece(_signature(lambda *p, maps=maps: tuple(a * q + b for (a, b, _), q in zip(maps, p)), names),
                           [z for _, _, z in maps],
                           _signature(lambda *p, P=P: P.value(p), names)))
    return out


FORWARD_NAMES = ["i", "j", "k", "l", "m2"]
INPUT_NAMES = ["s", "t", "u", "v", "w"]


def derive(op: Op, claim: str) -> Callable:
    """The builder of ``claim``'s every-size statement, from the spec's own code. Raises
    DerivationRefused (reason, spec file:line) when the code cannot be followed for every size."""
    if claim != "max_shift_free" and claim not in op.claims():
        raise SpecError(op.name, f"has no claim {claim!r}; it has {op.claims()}")

    def builder(G):
        token = getattr(_LOCAL, "ctx", None)
        declare_dims(G, op)
        _LOCAL.ctx = _Context(G)
        try:
            with symbolic_numpy():
                return _statement(G, op, claim)
        finally:
            _LOCAL.ctx = token
    builder.__qualname__ = f"derived from the spec ({claim})"
    builder.derived_from = op
    return builder


def _statement(G, op: Op, claim: str):
    if claim.startswith("vjp["):
        wrt = claim[4:-1]
        values = _values(G, op)
        y = _array(_run(op, op.forward, "forward", values), "the forward")
        _check_shape(y, G.output_shape(), "the forward's output")
        dy = _input(G, "dy", G.shape("dy"))
        cots = _run(op, op.vjp, "backward", {**values, "dy": dy})
        if not isinstance(cots, (tuple, list)) or len(cots) != len(op.inputs):
            raise DerivationRefused(f"the backward must return one cotangent per input {list(op.inputs)}")
        dx = _array(cots[list(op.inputs).index(wrt)], f"the cotangent of {wrt}")
        _check_shape(dx, G.shape(wrt), f"the cotangent of {wrt}")
        return G.vjp(wrt, forward=pieces_of(G, y, FORWARD_NAMES), backward=pieces_of(G, dx, INPUT_NAMES))
    law = op.get_law(claim)
    if law.fn is None:
        raise DerivationRefused(f"{claim} has no every-size form")
    values = _values(G, op, law.params)
    if law.needs_dy:
        values["dy"] = _input(G, "dy", G.shape("dy"))
    out = _run(op, law.fn, f"law {claim}", values)
    if isinstance(out, tuple):
        if len(out) != 2:
            raise DerivationRefused(f"law {claim} returned a tuple of {len(out)}")
        lhs, rhs = (_array(v, f"law {claim}") for v in out)
    else:
        lhs, rhs = _array(out, f"law {claim}"), lift(0)
    diff = _run_plain(lambda: lhs - rhs, f"law {claim}: its two sides")
    if any(z.is_Integer and z == 0 for z in diff._shape):
        raise DerivationRefused(f"law {claim} returned an empty array")
    return G.law(pieces_of(G, diff, INPUT_NAMES), over=diff._shape)


def _run_plain(fn, role):
    take_refusals()
    try:
        return fn()
    except SpecError as exc:
        take_refusals()
        raise DerivationRefused(f"{role}: {exc.problem}") from None
