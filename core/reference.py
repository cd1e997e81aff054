"""float64 and float32 references: an op's spec evaluated on the numpy backends, for any batch shape.

This is what kernels are tested against and what users can test their own code against:

    >>> from vjpcert.core.reference import forward, vjp
    >>> y = forward(softmax, x=x)                        # x of shape (..., n): leading dims are rows
    >>> dx, = vjp(softmax, dy, x=x, dtype=np.float32)    # really computed in float32

(``vjpcert.reference`` is the same with ops also given by name.)

Leading batch dims are flattened into an op's leading ``rows`` dim and restored afterwards.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from vjpcert.core.backends import F32, F64, FloatBackend
from vjpcert.core.registry import Op, SpecError


def backend(dtype) -> FloatBackend:
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return F64
    if dtype == np.float32:
        return F32
    raise SpecError(None, f"references are float64 or float32, not {dtype}")


def infer_dims(op: Op, arrays: dict) -> dict:
    """Dims from the shapes of the given arrays (each declared entry that is a plain name)."""
    dims: dict[str, int] = {}
    for name, decl in [*op.inputs.items(), *op.nondiff.items()]:
        if name not in arrays:
            raise SpecError(op.name, f"missing input {name!r}")
        shape = np.shape(arrays[name])
        if len(shape) != len(decl):
            raise SpecError(op.name, f"{name} has shape {shape}; the op declares {decl}")
        for entry, size in zip(decl, shape):
            if isinstance(entry, int):
                if entry != size:
                    raise SpecError(op.name, f"{name} has shape {shape}; the op declares {decl}")
            elif str(entry).isidentifier():
                if dims.setdefault(entry, size) != size:
                    raise SpecError(op.name, f"inconsistent sizes for dim {entry!r}: {dims[entry]} and {size}")
    _infer_products(op, arrays, dims)
    for name, decl in [*op.inputs.items(), *op.nondiff.items()]:
        if op.shape(decl, dims) != np.shape(arrays[name]):
            raise SpecError(op.name, f"{name} has shape {np.shape(arrays[name])}, expected "
                                     f"{op.shape(decl, dims)} from {decl}")
    return op.resolve_dims(dims)


def _infer_products(op: Op, arrays: dict, dims: dict) -> None:
    """Dims that appear only in products (``"2*Ho"``: a stride-2 input of an output of size Ho): each
    product with one dim not yet known gives it, when the size is a multiple of the rest; the check
    of every shape against its declaration afterwards catches any that disagree."""
    progress = True
    while progress:
        progress = False
        for name, decl in [*op.inputs.items(), *op.nondiff.items()]:
            for entry, size in zip(decl, np.shape(arrays[name])):
                if isinstance(entry, int) or callable(entry) or str(entry).isidentifier():
                    continue
                terms = [t.strip() for t in str(entry).split("*")]
                unknown = [t for t in terms if not t.isdigit() and t not in dims]
                if len(unknown) != 1 or terms.count(unknown[0]) != 1:
                    continue
                known = 1
                for t in terms:
                    if t != unknown[0]:
                        known *= int(t) if t.isdigit() else int(dims[t])
                if known <= 0 or size % known:
                    raise SpecError(op.name, f"{name} has shape {np.shape(arrays[name])}: {size} is not "
                                             f"{entry} for any size of {unknown[0]}")
                dims[unknown[0]] = size // known
                progress = True


def _flatten_batch(op: Op, arrays: dict):
    """Fold leading batch dims into 'rows' for the inputs that start with it."""
    lead = None
    out = dict(arrays)
    for name, decl in [*op.inputs.items(), *op.nondiff.items(), ("dy", op.output)]:
        if name not in arrays or not decl or decl[0] != "rows":
            continue
        a = np.asarray(arrays[name])
        extra = a.ndim - len(decl)
        if extra > 0:
            this = a.shape[:extra + 1]
            if lead is not None and lead != this:
                raise SpecError(op.name, f"batch shapes disagree: {lead} and {this}")
            lead = this
            out[name] = a.reshape((-1, *a.shape[extra + 1:]))
    return out, lead


def _params(op: Op, B: FloatBackend, params: dict | None) -> dict:
    vals = {}
    for name, p in op.params.items():
        v = (params or {}).get(name, p.default)
        if p.symbolic:
            v = B.c(v) if isinstance(v, (int, Fraction)) else B.dtype.type(v)
        vals[name] = v
    unknown = set(params or {}) - set(op.params)
    if unknown:
        raise SpecError(op.name, f"unknown params {sorted(unknown)}")
    return vals


def _prepare(op, dtype, arrays, params, dy=None):
    if not isinstance(op, Op):
        raise TypeError(f"expected an Op, got {op!r} (vjpcert.reference takes op names too)")
    B = backend(dtype)
    given = {k: np.asarray(v) for k, v in arrays.items()}
    if dy is not None:
        given["dy"] = np.asarray(dy)
    flat, lead = _flatten_batch(op, given)
    for k, v in flat.items():
        if not np.all(np.isfinite(v)):
            raise SpecError(op.name, f"{k} contains NaN or Inf")
    values = {k: v.astype(B.dtype) for k, v in flat.items()}
    infer_dims(op, values)
    values.update(_params(op, B, params))
    return op, B, values, lead


def _unflatten(a: np.ndarray, decl: tuple, lead):
    if lead is None or not decl or decl[0] != "rows":
        return a
    return a.reshape((*lead, *a.shape[1:]))


def forward(op, dtype=np.float64, params: dict | None = None, **inputs) -> np.ndarray:
    op, B, values, lead = _prepare(op, dtype, inputs, params)
    return _unflatten(np.asarray(op.bind(op.forward, B, values)), op.output, lead)


def vjp(op, dy, dtype=np.float64, params: dict | None = None, **inputs) -> tuple:
    op, B, values, lead = _prepare(op, dtype, inputs, params, dy=dy)
    cots = op.bind(op.vjp, B, values)
    return tuple(_unflatten(np.asarray(c), op.inputs[n], lead) for n, c in zip(op.inputs, cots))
