"""An interactive session in one line: ``from vjpcert.session import *`` (or ``python -m
vjpcert.session`` for an IPython shell). SymPy pretty printing is switched on, every built-in op is
a name (``softmax``, ``layernorm``, ...), and the one-call API is at hand:

    jacobian(softmax, rows=1, n=3)     # sympy.Matrix, derived from the forward
    vjp(layernorm, rows=1, n=2)        # the hand-written backward, as SymPy
    prove(rmsnorm, rows=1, n=8)        # certificates, rendered as a table in Jupyter
    check(softmax, rows=3, n=7)        # numeric certificates with digits
"""
from __future__ import annotations

import sympy

from vjpcert.specs import builtin_ops
from vjpcert.reference import forward as reference_forward
from vjpcert.reference import vjp as reference_vjp
from vjpcert.symbolic.api import forward, jacobian, symbols, vjp

sympy.init_printing()
OPS = builtin_ops()
globals().update(OPS)


class Certificates(list):
    """A list of certificates that renders as one table in Jupyter."""

    def _repr_markdown_(self) -> str:
        rows = ["| op | claim | tier | dims | verdict | trust | method |", "|---|---|---|---|---|---|---|"]
        for c in self:
            rows.append(f"| {c.op} | `{c.claim}` | {c.tier} | {c.dims} | **{c.verdict}** | {c.trust} | {c.method} |")
        return "\n".join(rows)

    @property
    def all_passed(self) -> bool:
        return all(c.passed for c in self)


def prove(op, claims=None, budget: float = 60.0, **dims) -> Certificates:
    """Certificates of the symbolic tier, planned as `vjpcert prove` plans them (dims as --dims)."""
    from vjpcert.plan import plan_op
    from vjpcert.runner import execute
    return Certificates(execute(t) for t in plan_op(op, ("symbolic",), dims=dims, claims=claims, budget=budget))


def check(op, claims=None, dps: int = 50, **dims) -> Certificates:
    """Certificates of the numeric tier, planned as `vjpcert check` plans them (dims as --shape)."""
    from vjpcert.plan import plan_op
    from vjpcert.runner import execute
    return Certificates(execute(t) for t in plan_op(op, ("numeric",), dims=dims, claims=claims, dps=dps))


__all__ = ["OPS", "Certificates", "check", "forward", "jacobian", "prove", "reference_forward",
           "reference_vjp", "symbols", "vjp", "sympy", *OPS]

if __name__ == "__main__":   # python -m vjpcert.session
    try:
        from IPython import start_ipython
    except ImportError:
        import sys
        print("vjpcert: error: python -m vjpcert.session needs IPython: pip install -e '.[session]' "
              "(or use `from vjpcert.session import *` in any Python)", file=sys.stderr)
        sys.exit(2)
    start_ipython(argv=["-c", "from vjpcert.session import *", "-i"])
