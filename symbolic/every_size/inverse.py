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

The normal form uses no relation between the atoms -- not even that T is unit lower triangular: an
identity proved with every entry free holds for the real T. (The rule needs none either: with the
triangle written as masks, a VJP's two sides differ by products of masks that other masks imply.) An
entry does not depend on n (T's leading block is the inverse of L's), so the atom carries no size.
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

    def matrix_entry(self, batch, r, c):
        return self.body.xreplace(dict(zip(self.gens, (*batch, r, c))))

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


def head(gens: tuple, key: sp.Expr, body: sp.Expr, size: sp.Expr) -> type:
    """The atom's class for the matrix whose entry at ``gens`` has the normal form ``key`` (one class per
    matrix: the forward and the backward build A apart, with other names for its sums' indices). It keeps
    the first ``body`` built, which SymPy differentiates: every body with that normal form is equal."""
    cls = _HEADS.get((gens, key, size))
    if cls is None:
        cls = _HEADS[(gens, key, size)] = type(f"Inv{len(_HEADS)}", (LowerInverse,),
                                              {"gens": gens, "body": body, "size": size})
    return cls
