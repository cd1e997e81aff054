"""One call each from a SymPy or Jupyter session: the Jacobian of an op, its VJP, a proof.

    >>> from vjpcert.symbolic import jacobian, vjp, prove
    >>> jacobian("softmax", n=3, rows=1)          # a sympy.Matrix, derived with Matrix.jacobian
    >>> vjp("layernorm", n=2, rows=1)["gamma"]     # the hand-written backward, as SymPy expressions
    >>> prove("rmsnorm", n=8, rows=1)              # certificates (they render in Jupyter)
"""
from __future__ import annotations

from vjpcert.specs import resolve_op as _op
from vjpcert.symbolic.fixed.sympy_forms import _dims, forward, jacobian, symbols, vjp  # noqa: F401  (the interactive calls)


def prove(op, claims: list[str] | None = None, budget: float = 60.0, **dims):
    """Prove the named claims (all by default) at the given dims; returns certificates."""
    # the ladder loads python-flint and every strategy: imported when a proof is asked for, since
    # importing any module of vjpcert.symbolic runs this one
    from vjpcert.symbolic.fixed.prover import prove_claim
    op = _op(op)
    d = _dims(op, dims)
    return [prove_claim(op, c, d, budget=budget) for c in (claims or op.claims())]
