"""The language's ``unit_lower_inverse(B, A)`` at a symbolic size: an atom per entry, differentiated by
its rule and written out by forward substitution at concrete sizes.

Its definition (``core.matrix_functions.unit_lower_inverse``) multiplies out a series whose number of terms
depends on n, which no trace at a symbolic n can follow. So the every-size tier reads
each entry of T = (I + L)^-1, L = tril(A, -1), as an opaque atom ``Inv_A(.., i, j)``. It knows three
things:

* which matrix it inverts: A's entry as an expression of generic indices (in its normal form, so the
  forward and the backward, which build A separately, meet the same atom), and the input arrays A
  reads (its arguments, so SymPy sees that it depends on them);
* its derivative: ``core.matrix_functions.RULES["unit_lower_inverse"]``, dT = -T tril(dA, -1) T, over
  entries: a double sum over a fresh pair of indices;
* its value at concrete indices (``written_out``): 1 on the diagonal, 0 above it, and below it forward
  substitution, T[i, j] = -sum_(j <= k < i) L[i, k] T[k, j], which is what the cross-check compares
  with the definition run on the SymPy backend.

The normal form uses three facts of T (``normal.Normaliser.inverse_entry``): it is unit lower triangular;
its leading (m + 1) block is the inverse of L's leading block (``leading_block``), so a chunk of n steps
meets its first n - 1 there; and, where a chunk's last step is taken out (``Normaliser(peel=...)``), its
last row is forward substitution against the rows above it. Each is exact. A VJP's two sides need none of
them: with the triangle written as masks, they differ by products of masks that other masks imply.
The reading that builds the atoms from a traced array is the trace backend's method
(``symbolic.every_size.backend.ShapeBackend.unit_lower_inverse``); this module holds the atom alone,
below the normaliser that treats it.
"""
from __future__ import annotations

import functools

import sympy as sp
from sympy import Sum

from vjpcert.core.matrix_functions import RULES
from vjpcert.symbolic.every_size.atoms import Ind

PREFIX = "τ"          # the generic indices of a definition (no spec index or normaliser index uses it)


class LowerInverse(sp.Function):
    """Inv_A(bases, *batch, i, j): the entry (i, j) of (I + tril(A, -1))^-1. A subclass
    per matrix A (``head``) holds its definition; instances are compared by class and indices."""

    gens: tuple = ()
    body = None           # A[gens] as the trace built it (any of the equal bodies: see ``head``)
    size = None           # n, the range of the sums its derivative writes

    def _eval_derivative(self, x):
        batch, (i, j) = self.args[1:-2], self.args[-2:]
        M = _EntryOps(self, batch)
        dA = _Entries(lambda r, c: sp.diff(self.matrix_entry(batch, r, c), x))
        dT = RULES["unit_lower_inverse"](M, M.value(), dA)
        return dT(i, j)

    @classmethod
    def matrix_entry(cls, batch, r, c):
        """A's entry (batch, r, c)."""
        return cls.body.xreplace(dict(zip(cls.gens, (*batch, r, c))))

    def _sympystr(self, printer):
        return f"inv(I+L_{type(self).__name__[3:]})[{', '.join(printer.doprint(a) for a in self.args[1:])}]"

    @classmethod
    def written_out(cls, batch, i: int, j: int, entry) -> sp.Expr:
        """T[batch, i, j] at concrete indices, by forward substitution; ``entry(batch, r, c)`` gives A's
        entry there (the caller writes out A's sums)."""
        T: dict = {}
        for r in range(j, i + 1):
            T[r] = sp.Integer(1) if r == j else -sp.Add(*[entry(batch, r, k) * T[k] for k in range(j, r)])
        return sp.expand(T[i]) if i >= j else sp.Integer(0)


class _Entries:
    """A matrix as a function of its two last indices."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, r, c):
        return self.fn(r, c)


class _EntryOps:
    """``core.matrix_functions.MatrixOps`` over entries: a product is a sum over a fresh index of 0..n-1."""

    def __init__(self, atom: LowerInverse, batch):
        self.atom, self.batch, self.n = atom, batch, atom.size

    def value(self) -> _Entries:
        a = self.atom
        return _Entries(lambda r, c: a.func(a.args[0], *self.batch, r, c))

    def matmul(self, X, Y):
        k = sp.Dummy("k", integer=True)
        return _Entries(lambda r, c: Sum(X(r, k) * Y(k, c), (k, 0, self.n - 1)))

    def neg(self, X):
        return _Entries(lambda r, c: -X(r, c))

    def strict_lower(self, X):
        return _Entries(lambda r, c: Ind(r - c - 1) * X(r, c))


_HEADS: dict = {}


def head(gens: tuple, key: sp.Expr, body: sp.Expr, size: sp.Expr, ranges: dict) -> type:
    """The atom's class for the matrix whose entry at ``gens`` has the normal form ``key`` (one class per
    matrix: the forward and the backward build A apart, with other names for its sums' indices). It keeps
    the first ``body`` built, which SymPy differentiates: every body with that normal form is equal.
    ``ranges`` are the generic indices' (and the spec's indices') ranges ``key`` was normalised over:
    what ``leading_block`` narrows. The ranges of the indices ``key`` reads (the generic ones, and any other)
    are part of the class's identity: two bodies whose normal forms agree over a batch of h matrices and
    over one of h - 1 are the same matrix on the smaller batch only, and the class keeps one body."""
    read = sorted(set(gens) | {s for s in key.free_symbols if s in ranges}, key=str)
    ident = (gens, key, size, tuple((s, ranges.get(s)) for s in read))
    cls = _HEADS.get(ident)
    if cls is None:
        cls = _HEADS[ident] = type(f"Inv{len(_HEADS)}", (LowerInverse,),
                                   {"gens": gens, "body": body, "size": size, "ranges": ranges})
    return cls


def leading_block(cls: type, m: sp.Expr, normal_form) -> type:
    """The atom's class for the leading (m + 1) x (m + 1) block of ``cls``'s inverse, m < its size - 1.

    T = (I + L)^-1 with L strictly lower triangular: the leading block of T is the inverse of L's leading
    block (forward substitution for the rows up to m reads no row of L below m). So an entry of T whose row
    and column are at most m is that entry of the size m + 1 inverse of the matrix whose entries are A's
    there: its class is the one whose body has the normal form of A's entry with the generic row and
    column bounded by m (``normal_form(body, ranges)``), where the sums over the chunk (a decay's product
    up to the row) stop at m -- the key a trace of the same spec over m + 1 steps gives its own inverse."""
    gens = cls.gens
    ranges = {**cls.ranges, gens[-2]: (sp.Integer(0), m), gens[-1]: (sp.Integer(0), m)}
    return head(gens, normal_form(cls.body, ranges), cls.body, m + 1, ranges)
