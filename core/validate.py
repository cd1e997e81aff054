"""Spec hygiene, checked by tracing: every checker validates an op this way before it runs, so a
bad spec (wrong output shape, wrong number or shape of cotangents, a Python float, ``math.*``,
``np.exp`` on backend values, a data-dependent branch) is one clear error, never a silent pass.
"""
from __future__ import annotations

from vjpcert.core.certificate import claim_slug
from vjpcert.core.registry import RESERVED_CLAIMS, Op, SpecError
from vjpcert.core.trace import leaf_array
from vjpcert.core.tracing import primal_values, trace_forward, trace_law, trace_vjp


def check_claim_files(op: Op) -> None:
    """Two claims of an op must never share a certificate file (a law named ``vjp-x`` beside the
    claim ``vjp[x]`` would overwrite it, and a rerun would read the law's verdict as the VJP's)."""
    seen: dict[str, str] = {}
    for claim in dict.fromkeys([*op.claims(), *RESERVED_CLAIMS]):
        slug = claim_slug(claim)
        if slug in seen:
            raise SpecError(op.name, f"claims {seen[slug]!r} and {claim!r} would share one certificate "
                                     f"file ({slug}): rename one")
        seen[slug] = claim


def validate(op: Op, dims: dict | None = None) -> None:
    """Trace the forward, the backward and every law once; raises SpecError on any problem."""
    check_claim_files(op)
    for d in ([dims] if dims else op.dims[:1]):
        d = op.resolve_dims(d)
        values = primal_values(op, d)
        y = trace_forward(op, values, d)
        trace_vjp(op, values, leaf_array(y.shape, "dy", "dy"), d)
        for law in op.laws:
            trace_law(op, law.name, primal_values(op, d, law.params), y)
