"""Negative controls of the every-size proofs (``symbolic.every_size.general``).

``SIZE_MUTANTS``: specs that are wrong only at some sizes -- through Python control flow on a size
(``if n % 4 == 0``, ``if n > 2048``) or a slice that fits only some sizes (``x[..., :2048]``). No
finite set of sizes sees all of them; the every-size trace must *refuse* each (the general claim
``inconclusive``, naming the construct and the spec's file:line), never prove it. ``fixed_dims``
says where the fixed-dims tier kills the mutant, when one of the op's own dims reaches it. They are
``core.registry.Mutant`` records like every other mutant (``op.with_mutant`` applies them), but kept
out of ``op.mutants``: the per-op suites and the kill matrix check every mutant at the op's fixed
dims, where the one wrong past n = 2048 is right by construction.

Every spec mutant of ``specs/mutants/<op>.py`` that kills a claim proved for every size is a
negative control of the every-size prover as well: the statement derived from it is false, so the
prover must return ``failed`` with a witness (``tests/test_general.py``).

``MISMATCHED``: hand-written general forms that are true identities about *another* formula. A
statement derived from the spec cannot be one; these show that the cross-check -- which compares a
statement with the spec run at concrete sizes, and is the tracer's self-check -- refuses it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vjpcert.core.registry import Mutant, Op
from vjpcert.specs.linear import linear
from vjpcert.specs.rope import rope_interleaved
from vjpcert.specs.softmax import softmax


@dataclass(frozen=True)
class SizeMutant:
    op: str
    claim: str
    mutant: Mutant
    construct: str                 # what the trace must refuse, in words
    fixed_dims: dict | None        # where the fixed-dims tier kills it (None: at none of the op's dims)


SIZE_MUTANTS: list[SizeMutant] = []


def size_mutant(op: Op, claim: str, name: str, *, construct: str, fixed_dims: dict | None = None):
    def register(f):
        if claim not in op.general:
            raise ValueError(f"{op.name}: {claim!r} is not proved for every size")
        m = Mutant(name, f, "vjp", (claim,), (f.__doc__ or name).strip())
        SIZE_MUTANTS.append(SizeMutant(op.name, claim, m, construct, fixed_dims))
        return f
    return register


def _softmax_backward(B, x, dy):
    y = softmax(B, x)
    return y * (dy - (y * dy).sum(-1, keepdims=True))


@size_mutant(softmax, "vjp[x]", "wrong_when_n_divisible_by_4", construct="%",
             fixed_dims={"rows": 1, "n": 16})
def _(B, x, dy):
    """Twice the backward when n % 4 == 0: right at n = 1, 2, 3, 5, 7 (every size the cross-check and
    the numeric tier use), wrong at n = 16 (the fixed-dims tier's largest softmax)."""
    dx = _softmax_backward(B, x, dy)
    if x.shape[-1] % 4 == 0:
        dx = 2 * dx
    return (dx,)


@size_mutant(softmax, "vjp[x]", "wrong_past_2048", construct=">")
def _(B, x, dy):
    """The backward off by one part in a thousand for n > 2048 (a "large-row kernel path"): right at
    every size any finite tier of this project runs."""
    dx = _softmax_backward(B, x, dy)
    if x.shape[-1] > 2048:
        dx = dx * B.c(1001, 1000)
    return (dx,)


@size_mutant(softmax, "vjp[x]", "row_sum_of_the_first_2048", construct="slice")
def _(B, x, dy):
    """sum_j y_j dy_j over the first 2048 entries only: no Python control flow at all, the same as
    the right backward for n <= 2048 (numpy clips the slice), wrong past it."""
    y = softmax(B, x)
    return (y * (dy - (y * dy)[..., :2048].sum(-1, keepdims=True)),)


# ------------------------------------------------------------------------------ hand-written forms
@dataclass(frozen=True)
class GeneralForm:
    op: str
    claim: str
    name: str
    builder: Callable
    doc: str


MISMATCHED: list[GeneralForm] = []


def mismatched(op: Op, claim: str, name: str):
    def register(f):
        MISMATCHED.append(GeneralForm(op.name, claim, name, f, (f.__doc__ or name).strip()))
        return f
    return register


@mismatched(softmax, "vjp[x]", "wrong_only_at_n3")
def _(G):
    """Forward and backward both scaled by k(n) = 1 + (n-1)(n-2)(n-4)(n-5): a true identity about
    another function, equal to softmax for n = 1, 2, 4, 5 and five times it at n = 3."""
    n, _ = G.dim("n"), G.dim("rows")
    x, dy = G.array("x"), G.array("dy")
    k = 1 + (n - 1) * (n - 2) * (n - 4) * (n - 5)

    def y(r, i):
        return G.exp(x[r, i]) / G.sum(lambda j: G.exp(x[r, j]), n)

    def dx(s, t):
        return y(s, t) * (dy[s, t] - G.sum(lambda l: y(s, l) * dy[s, l], n))
    return G.vjp("x", forward=lambda r, i: k * y(r, i), backward=lambda s, t: k * dx(s, t))


@mismatched(linear, "vjp[b]", "bias_doubled_consistently")
def _(G):
    """y = x W^T + 2 b with db = 2 sum_rows dy: a correct VJP of a different layer."""
    rows, n_in, _ = G.dim("rows"), G.dim("n_in"), G.dim("n_out")
    x, W, b, dy = G.array("x"), G.array("W"), G.array("b"), G.array("dy")
    return G.vjp("b", forward=lambda r, o: G.sum(lambda i: x[r, i] * W[o, i], n_in) + 2 * b[o],
                 backward=lambda p: 2 * G.sum(lambda r: dy[r, p], rows))


@mismatched(rope_interleaved, "vjp[x]", "half_split_both_ways")
def _(G):
    """A correct proof of the *half-split* layout (x[r, p], x[r, p + h]) offered for the interleaved op."""
    d, _ = G.even_dim("d", "h"), G.dim("rows")
    h = d / 2
    x, dy, pos = G.array("x"), G.array("dy"), G.array("pos")

    def theta(r, p):
        return pos[r] * 10000 ** (-2 * p / d)

    def pieces(a, sign):
        def comp(c):
            def value(r, p):
                cos, sin = G.cos(theta(r, p)), sign * G.sin(theta(r, p))
                a0, a1 = a[r, p], a[r, p + h]
                return (a0 * cos - a1 * sin, a0 * sin + a1 * cos)[c]
            return value
        return [G.piece(lambda r, p, c=c: (r, p + c * h), ("rows", h), comp(c)) for c in (0, 1)]
    return G.vjp("x", forward=pieces(x, 1), backward=pieces(dy, -1))
