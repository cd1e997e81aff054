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


_COLUMNS = ("op", "claim", "tier", "dims", "verdict", "method")


def _cells(c) -> tuple:
    dims = ", ".join(f"{k}={v}" for k, v in sorted(c.dims.items())) or "every size"
    return (c.op, c.claim, c.tier, dims, c.verdict, c.method)


class Certificates(list):
    """A list of certificates that prints as a short table (a failure followed by its witness, in the
    few lines the terminal shows) and renders as one HTML table in Jupyter."""

    def __repr__(self) -> str:
        if not self:
            return "Certificates([])"
        from vjpcert.witness import witness_lines
        rows = [_COLUMNS] + [_cells(c) for c in self]
        width = [max(len(str(r[i])) for r in rows) for i in range(len(_COLUMNS))]
        lines = []
        for r, c in zip(rows, [None, *self]):
            lines.append("  ".join(str(v).ljust(w) for v, w in zip(r, width)).rstrip())
            if c is not None and c.verdict == "failed":
                lines += witness_lines(c)
        counts = {}
        for c in self:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
        lines.append(f"{len(self)} certificate(s): " + ", ".join(f"{n} {v}" for v, n in counts.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from html import escape

        from vjpcert.witness import witness_rows
        colour = {"failed": "#b00020", "inconclusive": "#8a6d00"}
        out = ["<table><tr>" + "".join(f"<th style='text-align:left'>{h}</th>" for h in _COLUMNS) + "</tr>"]
        for c in self:
            cells = [escape(str(v)) for v in _cells(c)]
            cells[4] = f"<b style='color:{colour.get(c.verdict, '#1b5e20')}'>{cells[4]}</b>"
            out.append("<tr>" + "".join(f"<td style='text-align:left'>{v}</td>" for v in cells) + "</tr>")
            if c.verdict == "failed":
                rows = witness_rows(c.evidence.get("witness") or {})
                out.append(f"<tr><td></td><td colspan='{len(_COLUMNS) - 1}' style='text-align:left'>"
                           + "<br>".join(f"{escape(k)}: <code>{escape(v)}</code>" for k, v in rows) + "</td></tr>")
        return "".join(out) + "</table>"

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
