"""The formulas a report shows next to a proof: the forward and the backward of a VJP claim, written
out by SymPy at the op's smallest dims, as text and as presentation MathML (which browsers draw
natively). They are made here, when the claim is proved, and stored in its certificate: the report
renderers render, they never run SymPy on a spec.
"""
from __future__ import annotations

import re

from vjpcert.core.registry import Op
from vjpcert.core.trace import dag_size
from vjpcert.symbolic.fixed.sympy_forms import forward, vjp

MAX_DAG_SHOWN = 400       # traced nodes beyond which a formula is too long to read
MAX_SYMPY_OPS = 400


def mathml(expr) -> str:
    """A block of presentation MathML (SymPy prints the inside of the <math> element)."""
    from sympy.printing.mathml import mathml as printed
    inner = re.sub(r"<mi>\{([^<]*)\}</mi>", r"<mi>\1</mi>", printed(expr, printer="presentation"))
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">{inner}</math>'


def formulas(op: Op, claim: str, dims: dict, traced) -> dict | None:
    """{"dims", "forward", "forward_mathml", "backward", "backward_mathml"} for a VJP claim at the op's
    smallest dims when both sides are short enough to read; else None."""
    if not claim.startswith("vjp[") or dims != op.resolve_dims(op.dims[0]) or \
            dag_size(traced.roots()) > MAX_DAG_SHOWN:
        return None
    if len(op.output) > 2 or any(len(shape) > 2 for shape in op.inputs.values()):
        return None           # a SymPy Matrix shows two axes; a head axis (GQA) would not fit one
    import sympy              # slow to import: loaded for the claims a formula is shown for
    try:
        y = forward(op, **dims)
        dx = vjp(op, **dims)[claim[4:-1]]
    except Exception:         # a formula that cannot be written out is not a reason to lose a proof
        return None
    if sympy.count_ops(y) > MAX_SYMPY_OPS or sympy.count_ops(dx) > MAX_SYMPY_OPS:
        return None
    y = sympy.Matrix(y.tolist()) if y.rank() > 1 else y
    return {"dims": dict(dims), "forward": sympy.sstr(y), "forward_mathml": mathml(y),
            "backward": sympy.sstr(dx), "backward_mathml": mathml(dx)}
