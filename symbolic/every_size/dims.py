"""The dims an every-size claim is stated over, read off the op's declarations alone: which claims an
op proves for every size, what each dim is (any size, or every multiple of one: RoPE's even d = 2h),
and the dims its certificate carries. Plain Python, no SymPy: planning a run (``vjpcert all`` with
nothing to do) names every certificate from here without loading the prover.
"""
from __future__ import annotations

from vjpcert.core.registry import Op

PROBE = range(1, 25)        # sizes at which an op's constraints are probed


class DerivationRefused(Exception):
    """The spec could not be traced with symbolic dimensions: ``reason``, at ``where`` (file:line)."""

    def __init__(self, reason: str, where: str = ""):
        self.reason, self.where = reason, where
        super().__init__(f"{where}: {reason}" if where else reason)


def general_claims(op: Op) -> list[str]:
    """The claims of ``op`` to be proved for every size (``op.every_size(...)``), in the op's claim order."""
    return [c for c in op.claims() if c in op.general]


def dim_forms(op: Op) -> dict:
    """For every dim of the op, (k, sub, least): the dim is k * sub + least - k with sub >= 1, every
    multiple of k from ``least`` on (k = 1, least = 1: any size; k = 2: RoPE's even d = 2h; least = 2:
    a 3 x 3 convolution's H >= 2, whose window cuts at 1 and at H - 1 are in one order only from
    there). Read off the op's constraints by probing sizes 1..24 with the other dims at the op's first
    dims; a constraint of another form (an upper bound, a relation between dims) cannot be stated for
    every size and is refused."""
    base = {**op.dims[0]}
    out = {}
    for name in sorted(op.dim_names()):
        if op.constraints is None:
            out[name] = (1, name, 1)
            continue
        ok = []
        for v in PROBE:
            try:
                ok.append(not op.constraints({**base, name: v}))
            except Exception:  # a constraint that raises rejects the size
                ok.append(False)
        allowed = [v for v, good in zip(PROBE, ok) if good]
        least = allowed[0] if allowed else 0
        # the step: the least size itself when it divides every allowed size (even d: 2), else 1
        k = least if least and all(v % least == 0 for v in allowed) else 1
        if least and allowed == [v for v in PROBE if v >= least and v % k == 0]:
            out[name] = (k, _symbol(name, k, least), least)
        else:
            raise DerivationRefused(f"the op's constraints allow {name} in {allowed[:8]}... (sizes 1..24): "
                                    f"not every size, nor every multiple of one size, from a least size on, "
                                    f"so no every-size statement covers exactly the allowed sizes")
    return out


def _symbol(name: str, k: int, least: int) -> str:
    """The name of the size symbol sub >= 1 of a dim k * sub + least - k: the dim's own for any size,
    RoPE's h for d = 2h, d_k for another multiple, and name0 for a dim from a least size on (H = H0 + 1:
    every H >= 2)."""
    if least != k:
        return f"{name}0"
    return name if k == 1 else "h" if name == "d" else f"{name}_{k}"


def general_dims(op: Op, claim: str) -> dict:
    """The ``dims`` a general certificate of ``claim`` carries (spec dim -> its symbol, e.g.
    {"n": "n", "rows": "rows"}, RoPE {"d": "2h", ...}): where its file goes (``Certificate.relpath``).
    Cheap: read off the op's declared shapes and constraints, nothing is traced or derived (so a
    spec the trace refuses still has a certificate, saying why)."""
    try:
        forms = dim_forms(op)
    except DerivationRefused:
        forms = {name: (1, name, 1) for name in op.dim_names()}
    return {name: dim_text(k, sub, least) for name, (k, sub, least) in sorted(forms.items())}


def dim_text(k: int, sub: str, least: int) -> str:
    """How a certificate writes the dim k * sub + least - k (as the statement's ``dims`` does): H,
    2h, H0+1."""
    text = sub if k == 1 else f"{k}{sub}"
    return text if least == k else f"{text}+{least - k}"
