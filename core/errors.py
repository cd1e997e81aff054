"""Bad input, as opposed to a wrong backward: ``SpecError``, and ``refuse``, which raises one and
records it, so a spec that catches a refusal cannot take another path unnoticed. The lowest module of
``core``: everything that runs spec code raises through it."""
from __future__ import annotations

import traceback


class SpecError(Exception):
    """A problem with a spec itself (bad input), as opposed to a wrong backward (a `failed` verdict)."""

    def __init__(self, op: str | None, problem: str):
        self.op, self.problem = op, problem
        super().__init__(f"op '{op}': {problem}" if op else problem)


# Constructs a checker cannot follow faithfully (a comparison of traced values, a read of backend
# identity, ...) are refused. Every refusal is also *recorded*: a spec that catches the SpecError
# (try/except around a comparison) must not get to take another path unnoticed, so whoever runs spec
# code checks the record afterwards (``core.validate``).
_REFUSALS: list[tuple[str, list]] = []


def refuse(problem: str):
    """Raise SpecError(problem), and remember that it was raised (with the stack that raised it)."""
    _REFUSALS.append((problem, traceback.extract_stack()[:-1]))
    raise SpecError(None, problem)


def take_refusals() -> list[tuple[str, list]]:
    """The refusals recorded since the last call, as (problem, stack), and forget them."""
    out = list(_REFUSALS)
    _REFUSALS.clear()
    return out
