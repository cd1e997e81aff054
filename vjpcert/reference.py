"""float64 / float32 references of any op, named or given: the spec evaluated on the numpy backends.

    >>> from vjpcert.reference import forward, vjp
    >>> y = forward("softmax", x=x)                      # x of shape (..., n): leading dims are rows
    >>> dx, = vjp("softmax", dy, x=x, dtype=np.float32)  # really computed in float32

``op`` is an Op, a built-in op's name or ``"path/to/file.py::name"`` (see ``vjpcert.core.reference``).
"""
from __future__ import annotations

import numpy as np

from vjpcert.core import reference as _reference
from vjpcert.specs import resolve_op


def forward(op, dtype=np.float64, params: dict | None = None, **inputs) -> np.ndarray:
    return _reference.forward(resolve_op(op), dtype, params, **inputs)


def vjp(op, dy, dtype=np.float64, params: dict | None = None, **inputs) -> tuple:
    return _reference.vjp(resolve_op(op), dy, dtype, params, **inputs)


__all__ = ["forward", "vjp"]
