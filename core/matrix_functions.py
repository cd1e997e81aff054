"""Matrix functions of the spec language: each defined once, in the language itself, with its
derivative rule beside it.

A spec calls one as ``unit_lower_inverse(B, A)``. Its definition is spec code (numpy on ``B``'s
arrays), so every interpreter that runs spec code at concrete sizes -- the exact fields, mpmath, floats,
the arrays mod p, the kernels' error model -- computes this one definition, and differentiates it
through its own arithmetic. An interpreter that cannot run the definition -- the every-size trace, where
the number of steps depends on a symbolic n -- has its own reading (a method of the same name on its
backend) and differentiates that by the rule here, ``RULES``; ``symbolic.every_size.heads`` holds the
rule to the definition's own derivative, and ``tests/test_language_matrix.py`` the reading to the
definition at concrete sizes. (``core.derivatives`` holds the rows of the elementwise primitives.)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from vjpcert.core.backends import unwrap


def _own_reading(B, name: str):
    """The backend's own reading of a matrix function, or None (then the definition runs; a reading that
    returns NotImplemented for an argument leaves that argument to the definition too)."""
    impl = unwrap(B)
    return getattr(impl, name) if getattr(type(impl), name, None) is not None else None


def unit_lower_inverse(B, A):
    """(I + L)^-1 over the last two axes, L = np.tril(A, -1): only A's strictly lower triangle is read, so
    the function is total. L^n = 0, so the inverse is the finite series sum_(k < n) (-L)^k, which
    (I - L)(I + L^2)(I + L^4)... multiplies out in ceil(log2 n) squarings with no division: each entry
    is a polynomial in A's, and every field reads it alike. (The triangular solve of chunked delta-rule
    kernels, their UT / WY form.)"""
    own = _own_reading(B, "unit_lower_inverse")
    out = own(A) if own is not None else NotImplemented
    if out is not NotImplemented:
        return out
    n = A.shape[-1]
    L = np.tril(A, -1)
    T = np.where(np.eye(n, dtype=bool), B.c(1), B.c(0)) - L
    P, span = -L, 2
    while span < n:
        P = P @ P
        T = T + T @ P
        span *= 2
    return T


class MatrixOps:
    """What a rule asks of an interpreter: its own matrices (stacks of them over leading axes) and
    ``matmul(X, Y)``, ``neg(X)``, ``strict_lower(X)`` (np.tril(X, -1)) on them."""


# ``rule(M, T, dA) -> dT``: the change of the value T for a change dA of the argument, in the
# operations of ``M`` (``MatrixOps``).
RULES: dict[str, Callable] = {
    # T = (I + L)^-1 with L = tril(A, -1): dT = -T dL T (from T (I + L) = I)
    "unit_lower_inverse": lambda M, T, dA: M.neg(M.matmul(M.matmul(T, M.strict_lower(dA)), T)),
}

DEFINITIONS: dict[str, Callable] = {"unit_lower_inverse": unit_lower_inverse}
