"""An op as SymPy expressions at concrete dims: symbols for its arrays and parameters, its forward, the
Jacobian of that forward (``sympy.Matrix.jacobian``) and its hand-written backward. The interactive
calls of ``vjpcert.symbolic`` (``symbolic.api``), the formulas a proof's certificate shows
(``fixed.formulas``) and the every-size prover's cross-check at concrete sizes use them.

SymPy (and ``core.backends``, which loads SciPy and mpmath) are imported by the calls that need them:
importing ``vjpcert.symbolic`` runs this module, and most of its users never write out a formula.
"""
from __future__ import annotations

import numpy as np

from vjpcert.specs import resolve_op as _op
from vjpcert.core.registry import Op


def _dims(op: Op, dims: dict) -> dict:
    return op.resolve_dims({**op.dims[0], **dims})


def symbols(op, **dims) -> dict:
    """SymPy symbols for every input (object arrays), non-differentiable input and parameter."""
    import sympy
    op = _op(op)
    dims = _dims(op, dims)
    values = {}
    for name, shape in [*op.inputs.items(), *op.nondiff.items()]:
        arr = np.empty(op.shape(shape, dims), dtype=object)
        for idx in np.ndindex(*arr.shape):
            arr[idx] = sympy.Symbol(f"{name}_{{{','.join(map(str, idx))}}}" if idx else name, real=True)
        values[name] = arr
    for name, p in op.params.items():
        values[name] = sympy.Symbol(name, positive=True) if p.positive else (
            sympy.Symbol(name, real=True) if p.symbolic else p.default)
    return values


def forward(op, **dims):
    """The forward as a SymPy array."""
    from vjpcert.core.backends import SYMPY
    import sympy
    op = _op(op)
    values = symbols(op, **dims)
    return sympy.Array(np.asarray(op.bind(op.forward, SYMPY, values), dtype=object).tolist())


def jacobian(op, wrt: str | None = None, **dims):
    """d vec(y) / d vec(wrt), derived from the forward with ``sympy.Matrix.jacobian``."""
    import sympy

    from vjpcert.core.backends import SYMPY
    op = _op(op)
    wrt = wrt or next(iter(op.inputs))
    values = symbols(op, **dims)
    y = np.asarray(op.bind(op.forward, SYMPY, values), dtype=object).ravel()
    return sympy.Matrix(list(y)).jacobian(list(values[wrt].ravel()))


def vjp(op, **dims) -> dict:
    """The hand-written backward, one SymPy matrix per differentiable input (rows flattened as in
    the input), for a symbolic cotangent dy."""
    import sympy

    from vjpcert.core.backends import SYMPY
    op = _op(op)
    values = symbols(op, **dims)
    y = np.asarray(op.bind(op.forward, SYMPY, values), dtype=object)
    dy = np.empty(y.shape, dtype=object)
    for idx in np.ndindex(*y.shape):
        dy[idx] = sympy.Symbol(f"dy_{{{','.join(map(str, idx))}}}" if idx else "dy", real=True)
    cots = op.bind(op.vjp, SYMPY, {**values, "dy": dy})
    return {name: sympy.Matrix(np.atleast_2d(np.asarray(c, dtype=object)).tolist())
            for name, c in zip(op.inputs, cots)}
