"""A running error bound that holds for every summation order: the backend ``AnyOrderBackend``.

``core/rounding.py`` bounds the error of one evaluation of a spec, in the spec's own order: a
sequential sum, each partial sum rounded. A kernel sums in an order of its own (blocks, trees, atomic
adds in whatever order a GPU runs them), so that bound says nothing about it. This backend bounds
every evaluation of the spec's expression that differs from the spec's own only in how its sums are
associated, or in a product fused into a sum (an FMA only removes a rounding). A sum of n terms
t_1..t_n, evaluated by any binary tree in a precision with unit roundoff u, is within

    gamma_{n-1} sum_i |t_i|,        gamma_k = k u / (1 - k u)

of the exact sum of the terms it was given (Higham, *Accuracy and Stability of Numerical Algorithms*,
2nd ed., section 4.2: the bound of recursive summation holds for every ordering), whatever the tree.
So a number here carries its pending sum: the terms' own error bounds (``terms_e``), a bound on the sum
of the terms' magnitudes in any evaluation (``mag``: |v_i| + 2 e_i, since any evaluation's term lies
within e_i of the exact term, which lies within e_i of ours) and the count ``n`` (an exact 0 is not a
term: adding it is exact). Its error is e = terms_e + gamma_{n-1} mag at any moment, and that settled
e is what every other operation reads: a product, a quotient, a function, a cast, an output. Those
follow ``core/rounding.py``'s rules unchanged (first order, as there), and their results start a sum
of one term. A comparison (``step``) is decided only where the value is further than 2e from 0: two
evaluations within e of the exact value may lie on the two sides of the kink.

Precisions: ``dtype`` is the arithmetic's (a bfloat16 kernel's float32 accumulation), ``storage`` a
lower precision values are stored in: ``stored(x)`` rounds to it (an output written to a bfloat16
tensor, a cast a kernel documents), e' = e + u_s (|v| + 2 e) + eta_s. With
``intermediates_stored``, every intermediate result may be rounded to the storage dtype as well (what
a low-precision kernel that documents no casting may do: a product of two bfloat16 values computed in
bfloat16, a forward output saved in bfloat16 and read by the backward), while its sums accumulate in
``dtype``: each operation's result (a sum's included) may be rounded once more, e' = e + u_s (|v| + 2e).

The bound is derived from the spec (or a kernel's documented casting) alone: nothing of an
implementation under test enters it. What it does not cover: an evaluation that rewrites the formula
beyond reassociating its sums (an online softmax's rescaled partial sums, a log-sum-exp saved and
reused); for those it is the yardstick of what a reassociation could do, not a proof.
"""
from __future__ import annotations

import math

import numpy as np

from vjpcert.core.rounding import Rounded, RoundingBackend


class Pending(Rounded):
    """A Rounded number with its pending sum (see the module); ``e`` is the settled error bound."""

    __slots__ = ("terms_e", "mag", "n")

    def __init__(self, v, terms_e, mag, n, B):
        self.v, self.B = v, B
        self.terms_e, self.mag, self.n = terms_e, mag, n
        e = terms_e + B.gamma(n - 1) * mag if mag else terms_e
        if n > 1 and B.intermediates_stored:     # the sum's result may be stored in the storage dtype
            e += B.u_storage * (abs(v) + 2 * e) + B.eta_storage
        self.e = e if e == e and v == v else math.inf

    @classmethod
    def term(cls, r: Rounded) -> "Pending":
        """A number as a sum of one term (exact zero: of none)."""
        if isinstance(r, Pending):
            return r
        if r.v == 0 and r.e == 0:
            return cls(r.v, 0.0, 0.0, 0, r.B)
        return cls(r.v, r.e, abs(r.v) + 2 * r.e, 1, r.B)

    @classmethod
    def result(cls, r: Rounded) -> "Pending":
        """An operation's result as a sum of one term: with ``intermediates_stored``, possibly rounded to
        the storage dtype too."""
        B = r.B
        if B.intermediates_stored and not isinstance(r, Pending):
            r = Rounded(r.v, r.e + B.u_storage * (abs(r.v) + 2 * r.e) + B.eta_storage, B)
        return cls.term(r)

    def _lift(self, o) -> "Pending":
        return o if isinstance(o, Pending) else Pending.term(o if isinstance(o, Rounded) else self.B.c(o))

    def __add__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        o = self._lift(o)
        v = self.B.rnd(self.v + o.v)
        return Pending(v, self.terms_e + o.terms_e, self.mag + o.mag, self.n + o.n, self.B)

    __radd__ = __add__

    def __neg__(self):
        return Pending(-self.v, self.terms_e, self.mag, self.n, self.B)

    def __sub__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        return self + (-self._lift(o))

    def __rsub__(self, o):
        return self._lift(o) + (-self)


def _settled(method):
    """A Rounded operation whose result starts a sum of one term."""
    def op(self, *args):
        out = method(self, *args)
        return out if out is NotImplemented else Pending.result(out)
    op.__name__ = method.__name__
    return op


for _name in ("__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__pow__", "_inv"):
    setattr(Pending, _name, _settled(getattr(Rounded, _name)))


class AnyOrderBackend(RoundingBackend):
    """``RoundingBackend`` whose bound holds for every summation order (see the module): arithmetic in
    ``dtype``, values stored in ``storage`` (default: ``dtype``)."""

    def __init__(self, dtype, storage=None, intermediates_stored: bool = False):
        self.storage = np.dtype(storage if storage is not None else dtype)
        self.u_storage = float(np.finfo(self.storage).eps) / 2
        self.eta_storage = float(np.finfo(self.storage).smallest_subnormal)
        self.intermediates_stored = bool(intermediates_stored) and self.storage != np.dtype(dtype)
        super().__init__(dtype)
        self.name = f"any-order-{self.dtype.name}"
        self._stored = RoundingBackend._elementwise(lambda a: Pending.term(self.stored1(a)))   # rounded once

    def gamma(self, k: int) -> float:
        """gamma_k = k u / (1 - k u): k roundings in a row, in any order; infinite from k u >= 1."""
        if k <= 0:
            return 0.0
        ku = k * self.u
        return ku / (1 - ku) if ku < 1 else math.inf

    def c(self, p, q=1) -> Pending:
        return Pending.term(super().c(p, q))

    def _pi(self) -> Pending:
        return Pending.term(super()._pi())

    def input(self, a) -> np.ndarray:
        return _terms(super().input(a))

    def zeros(self, shape):
        out = np.empty(shape, dtype=object)
        out.fill(Pending(0.0, 0.0, 0.0, 0, self))
        return out

    def max_shift(self, x, mask=None):
        return _terms(super().max_shift(x, mask))

    def step1(self, a: Rounded) -> Rounded:
        v = 1.0 if a.v > 0 else super().step1(a).v
        return Rounded(v, 0.0 if abs(a.v) > 2 * a.e or (a.v == 0 and a.e == 0) else 1.0, self)

    def stored(self, a):
        """Values rounded to the storage precision (an array of them, or one)."""
        return self._stored(np.array(a, dtype=object, subok=False) if isinstance(a, np.ndarray) else a)

    def stored1(self, a: Rounded) -> Rounded:
        """``a`` rounded to the storage precision."""
        v = float(np.asarray(a.v, np.float64).astype(self.storage).astype(np.float64))
        return Rounded(v, a.e + self.u_storage * (abs(a.v) + 2 * a.e) + self.eta_storage, self)

    def _elementwise(self, fn):
        def one(a):
            return Pending.result(fn(a))
        return RoundingBackend._elementwise(one)


def _terms(arr):
    out = np.empty(np.shape(arr), dtype=object)
    for idx in np.ndindex(*out.shape):
        out[idx] = Pending.term(arr[idx])
    return out
