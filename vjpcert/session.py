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

from vjpcert.numeric.check import check_claim
from vjpcert.specs import builtin_ops
from vjpcert.reference import forward as reference_forward
from vjpcert.reference import vjp as reference_vjp
from vjpcert.symbolic.api import forward, jacobian, symbols, vjp
from vjpcert.symbolic.api import prove as _prove

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
    return Certificates(_prove(op, claims=claims, budget=budget, **dims))


def check(op, claims=None, dps: int = 50, **dims) -> Certificates:
    from vjpcert.specs import resolve_op
    op = resolve_op(op)
    d = op.resolve_dims({**op.check_dims, **dims})
    return Certificates(check_claim(op, c, d, dps=dps) for c in (claims or op.claims()))


__all__ = ["OPS", "Certificates", "check", "forward", "jacobian", "prove", "reference_forward",
           "reference_vjp", "symbols", "vjp", "sympy", *OPS]

if __name__ == "__main__":   # python -m vjpcert.session
    from IPython import start_ipython
    start_ipython(argv=["-c", "from vjpcert.session import *", "-i"])
