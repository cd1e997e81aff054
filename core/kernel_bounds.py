"""What rounding can do to a kernel's outputs, whatever order it sums in: per-element bounds from the
spec (``core/any_order.py``), a kernel's documented casting, and how the kernel tiers read them.

The tolerance rule of ``core/tolerance.py`` compares a kernel with one float evaluation of the spec;
these bounds say what *any* evaluation of the formula at the kernel's precision can be off by. The
kernel tiers use them in three ways:
  * a kernel outside the rule but within K_REFORMULATION x the bound of every element: the inputs are
    ill-conditioned at that precision (the bound, in units of the output's own rounding, is the
    condition number reported); the verdict is ``inconclusive``, never ``failed``;
  * a kernel outside that: ``failed``, with the element, both values and the bound;
  * a kernel that documents where it rounds (``Casting``: Liger's RMSNorm casting modes) is held to
    the bound of that casting, element by element, in every case: a kernel that rounds where its
    documentation says it does not is outside it (this is what tells the casting modes apart).
A law evaluated on a kernel's outputs gets the same treatment: its residual is compared with the
law evaluated on outputs each within its element's bound (``bounded``; ``core.kernel_checks.check_law``).
Which precision: the kernel's accumulation dtype (float32 unless it says otherwise); a low-precision
kernel may also round any intermediate to its dtype (``undocumented_casting``), unless it documents
a ``Casting``. The bounds are first order, as core/rounding.py's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from vjpcert.core import tolerance as _rule
from vjpcert.core.backends import F64
from vjpcert.core.low_precision import storage_dtype
from vjpcert.core.registry import Op, SpecError

# A kernel may evaluate a formula the spec writes differently (a log-sum-exp saved and reused, exp
# through exp2, a product distributed over a sum): the same factors as the tolerance rule's k allow it
# over the bound of the spec's own formula. A documented casting restates the kernel's formula and is
# held to its bound itself (factor 1).
K_REFORMULATION = {"forward": _rule.K_FORWARD, "backward": _rule.K_BACKWARD}
# The any-order analysis evaluates the spec on arrays of Python numbers (core/rounding.py): softmax at
# 32 x 2048 takes 0.7 s, ~1600 x numpy's float32 evaluation (benchmarks/any_order_bench.py), so it runs
# up to this many input elements; above it (a GPU's 2048 x 4097) no bound is computed, and a check says so.
ANALYSIS_MAX_ELEMENTS = 1 << 16

# a casting evaluated in float64 without its roundings agrees with the float64 spec within this many
# times their float64 rounding bounds (a formula the spec writes differently rounds differently)
CASTING_AGREEMENT = 2.0


@dataclass(frozen=True)
class Casting:
    """Where a kernel rounds, as its documentation states it. ``arithmetic``: the precision its
    arithmetic runs in; ``fn``: its formula over ``B`` with the spec function's arguments, where
    ``stored(v)`` (its last argument) marks a value rounded to the kernel's storage dtype (None: the
    spec's own formula); outputs are rounded to the storage dtype after it. ``fn`` must compute the
    spec's function (checked in float64 on every case: a casting cannot change the claim)."""
    doc: str
    arithmetic: str = "float32"
    fn: Callable | None = None
    intermediates_stored: bool = False     # any intermediate may be rounded to the storage dtype


def undocumented_casting(storage: str, accumulate: str = "float32") -> Casting | None:
    """What a kernel in ``storage`` that documents no casting is held to: its arithmetic in ``accumulate``
    (float32 unless it says otherwise); a low-precision one may also round any intermediate to its
    storage dtype (a forward output saved in bfloat16 and reused by the backward, a product of two
    bfloat16 values), but its sums accumulate in ``accumulate`` (a sum accumulated in bfloat16 by a
    kernel that declares float32 accumulation is outside this bound)."""
    if str(storage) == str(accumulate) == "float32":
        return None
    if str(storage) == str(accumulate):
        return Casting(f"undocumented: everything in {storage}", str(accumulate), None)
    return Casting(f"undocumented: intermediates may be rounded to {storage}, sums accumulate in {accumulate}",
                   str(accumulate), None, intermediates_stored=True)


def analysable(inputs: dict, dy) -> bool:
    """Whether the any-order analysis runs at these inputs (ANALYSIS_MAX_ELEMENTS)."""
    return sum(np.size(v) for v in inputs.values()) + (np.size(dy) if dy is not None else 0) <= ANALYSIS_MAX_ELEMENTS


def _bind(op: Op, kind: str, fn, B, inputs: dict, dy, params: dict | None, wrap, stored=None) -> tuple:
    values = {k: wrap(v) for k, v in inputs.items()}
    if stored is not None:
        values["stored"] = stored
    for name, p in op.params.items():
        v = (params or {}).get(name, p.default)
        values[name] = B.c(v) if p.symbolic else v
    if kind == "backward":
        values["dy"] = wrap(dy)
    with np.errstate(all="ignore"):
        out = op.bind(fn, B, values)
    return out if isinstance(out, tuple) else (out,)


def _function(op: Op, kind: str, casting: Casting | None):
    if casting is not None and casting.fn is not None:
        return casting.fn
    return op.forward if kind == "forward" else op.vjp


def any_order_bounds(op: Op, kind: str, inputs: dict, dy, params: dict | None = None, *,
                     storage="float32", casting: Casting | None = None, rounded_inputs: bool = False) -> tuple:
    """Per output, per element: a bound on |evaluation - exact| for every evaluation of the formula
    (the spec's, or ``casting``'s) that sums in any order, its arithmetic in float32 (or the casting's)
    and its outputs stored in ``storage``. ``rounded_inputs``: the inputs are float64 values a kernel
    gets rounded to ``storage`` (a law's x - x0), each off by up to one rounding."""
    from vjpcert.core.any_order import AnyOrderBackend, Pending
    from vjpcert.core.rounding import Rounded, values_and_bounds
    arithmetic = np.dtype(casting.arithmetic if casting is not None else "float32")
    B = AnyOrderBackend(arithmetic, storage_dtype(storage), bool(casting and casting.intermediates_stored))

    def wrap(a):
        a = np.asarray(a, np.float64)
        if not rounded_inputs:
            return B.input(a)
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(*a.shape):
            v = float(a[idx])
            out[idx] = Pending.term(Rounded(v, B.u_storage * abs(v) + B.eta_storage, B))
        return out
    outs = _bind(op, kind, _function(op, kind, casting), B, inputs, dy, params, wrap, stored=B.stored)
    if B.storage != B.dtype:
        outs = tuple(B.stored(np.asarray(o, dtype=object)) for o in outs)
    return tuple(values_and_bounds(o)[1] for o in outs)


def check_casting(op: Op, kind: str, casting: Casting, inputs: dict, dy, params: dict | None) -> None:
    """SpecError unless ``casting`` without its roundings is the spec's function at these inputs: both
    evaluated in float64 agree within CASTING_AGREEMENT x their float64 rounding bounds (a cancellation
    to nearly 0, RMSNorm's dx on a row of one element, agrees to that and not to a relative 1e-12)."""
    if casting.fn is None:
        return
    from vjpcert.core.any_order import AnyOrderBackend
    from vjpcert.core.rounding import values_and_bounds
    B = AnyOrderBackend(np.float64)
    found = [_bind(op, kind, fn, B, inputs, dy, params, lambda a: B.input(np.asarray(a, np.float64)),
                   stored=(lambda v: v) if fn is casting.fn else None)
             for fn in (casting.fn, _function(op, kind, None))]
    for o, t in zip(*found):
        (vo, eo), (vt, et) = values_and_bounds(o), values_and_bounds(t)
        if vo.shape != vt.shape or not np.all(np.abs(vo - vt) <= CASTING_AGREEMENT * (eo + et) + _rule.ABSOLUTE_FLOOR):
            raise SpecError(op.name, f"the documented casting ({casting.doc}) does not compute the spec's "
                                     f"{kind}: a casting says where a kernel rounds, not what it computes")


def bounded(op: Op, kind: str, arrays: dict, dy, params: dict | None, storage, accumulate="float32") -> tuple:
    """The float64 spec's outputs at these inputs as numbers of a float64 ``AnyOrderBackend``, each
    carrying its element's any-order bound: outputs as a law sees them from any kernel within them (a
    low-precision kernel's, with any intermediate rounded to its storage dtype: a law calls the forward
    and the backward kernel, each with a casting of its own)."""
    from vjpcert.core.any_order import AnyOrderBackend, Pending
    from vjpcert.core.reference import forward, vjp
    from vjpcert.core.rounding import Rounded
    B64 = AnyOrderBackend(np.float64)
    f64 = {k: np.asarray(v, np.float64) for k, v in arrays.items()}
    with np.errstate(all="ignore"):
        if params:
            truth = _bind(op, kind, _function(op, kind, None), F64, f64, dy, params,
                          lambda a: np.asarray(a, np.float64))
        elif kind == "forward":
            truth = (np.asarray(forward(op, np.float64, **f64)),)
        else:
            truth = tuple(vjp(op, np.asarray(dy, np.float64), np.float64, **f64))
    bounds = any_order_bounds(op, kind, f64, dy, params, storage=storage, rounded_inputs=True,
                              casting=undocumented_casting(storage, accumulate))
    out = []
    for t, b in zip(truth, bounds):
        t = np.asarray(t, np.float64)
        arr = np.empty(t.shape, dtype=object)
        for idx in np.ndindex(*t.shape):
            arr[idx] = Pending.term(Rounded(float(t[idx]), float(np.asarray(b)[idx]), B64))
        out.append(arr)
    return tuple(out), B64


def outside(out, truth, bound, factor: float = 1.0) -> dict | None:
    """The worst element where |out - truth| > factor x bound (plus the rule's absolute floor), or None."""
    out, truth = np.asarray(out, np.float64), np.asarray(truth, np.float64)
    allowed = factor * np.asarray(bound, np.float64) + _rule.ABSOLUTE_FLOOR
    with np.errstate(all="ignore"):
        err = np.abs(out - truth)
        over = np.where(np.isnan(err) | (err > allowed), np.where(np.isnan(err), np.inf, err / allowed), 0.0)
    if not over.any():
        return None
    idx = np.unravel_index(int(np.argmax(over)), over.shape) if over.ndim else ()
    return {"index": [int(i) for i in idx], "kernel": _finite(out[idx]), "spec_f64": _finite(truth[idx]),
            "error": _finite(err[idx]), "bound_any_order": _finite(bound[idx] if np.ndim(bound) else bound),
            "factor": factor}


def ill_conditioned(out, truth, bound, factor: float, u: float) -> dict | None:
    """{...} with the condition number where every element is within ``factor`` x its bound, else None.
    The condition number is the bound in units of the output's own rounding, u |y|, at the element
    whose error is closest to its allowance."""
    if outside(out, truth, bound, factor) is not None:
        return None
    out, truth, bound = (np.asarray(a, np.float64) for a in (out, truth, bound))
    err = np.abs(out - truth)
    allowed = factor * bound + _rule.ABSOLUTE_FLOOR
    worst = int(np.argmax(err / allowed)) if err.size else 0
    b, y = (float(np.ravel(a)[worst]) if a.size else 0.0 for a in (bound, truth))
    kappa = b / (u * abs(y)) if y else float("inf")
    return {"bound_any_order_at_worst": _finite(b),
            "error_over_allowed": float(np.ravel(err / allowed)[worst]) if err.size else 0.0,
            "condition_number": _finite(kappa)}


def _finite(v):
    v = float(v)
    return v if np.isfinite(v) else str(v)
