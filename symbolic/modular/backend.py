"""A backend ``B`` whose arrays are numpy integer arrays mod a prime p, with forward-mode tangents.

The spec's own numpy code runs on ``ModArray``s at production dims (a ViT-Tiny or GPT-2-small block),
so the randomised exact test of ``symbolic.modular`` needs no traced DAG. The semantics are those of
``symbolic.fixed.modp_field.ModPField`` (the mod-p image of the exact tier's ring):

- leaves (inputs, cotangents, tangents, symbolic parameters) are random elements of GF(p);
- + - * / are exact mod p; a division by a value that is 0 mod p raises ``Pole`` (the caller resamples;
  never a silently wrong value);
- every transcendental (exp, log, sqrt, erf, tanh, sin, cos) of an array is an *atom keyed by the value
  of its argument*: a keyed hash of the argument's residue, so equal arguments give equal atoms, with
  the same folds as the ring (exp(0) = 1, sqrt(0) = 0, log(1) = 0, f(0) = 0 for the odd ones, cos(0) = 1)
  and parities (erf, tanh, sin odd; cos even);
- exact scalar constants (``B.c``, ``B.pi`` and products, quotients and square roots of them) keep an
  exact form: q * prod base^(e/2) over primes and pi, so sqrt(2)^2 = 2, 1/sqrt(2) = sqrt(2)/2 and
  sqrt(2 pi) = sqrt(2) sqrt(pi), as in the ring (``RingField._sqrt_const``). sqrt(prime) is a true
  square root mod p (a prime where it has none is redrawn: ``NeedAnotherPrime``); pi = s^2 for a random
  s, so sqrt(pi) = s.
- the tangent of every value is carried with it (dual numbers): d f(a) = f'(a) da with f' the row of
  the one derivative table, ``core.derivatives``, evaluated in this field by ``_Ops`` (residues and
  their bounds; a constant stays exact, 1 / (c sqrt(...)) is taken in the variable w = 1 / s), so
  J t is derived from the forward, never from the backward.

Arithmetic mod p (p in [2^59, 2^60)) is exact and vectorised: ``symbolic.modular.arith``.

Each array carries upper bounds (deg N, deg D, log2 |N|_1, log2 |D|_1) of its value and of its tangent
as rational functions in the leaves and atoms, as ``BoundField`` does, for the false-pass bound.
Anything the backend cannot follow exactly (a float, a comparison, a numpy function it does not know)
is refused (``core.registry.refuse``): bad input, never a number.

The pieces: ``field`` (the trial's field and atom hashes), ``exact`` (the exact scalar constants),
``array`` (``ModArray``; numpy's aliasing of views and in-place updates in ``views``), ``constructs``
(the numpy functions of the spec language). This module is ``B`` itself and the transcendentals.
"""
from __future__ import annotations

import numbers
from fractions import Fraction

import numpy as np

from vjpcert.core.derivatives import STEP_AT_KINK, MissingRule, derivative
from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.modular import bound as bnd
from vjpcert.symbolic.modular import constructs  # noqa: F401  (registers the numpy functions)
from vjpcert.symbolic.modular.array import HOOKS, ModArray, _new, _used, cpow, exact_const, lift, qarray  # noqa: F401
from vjpcert.symbolic.modular.arith import Pole  # noqa: F401
from vjpcert.symbolic.modular.bound import ATOM, LEAF  # noqa: F401
from vjpcert.symbolic.modular.computation_ids import _desc, derive
from vjpcert.symbolic.modular.constructs import stack
from vjpcert.symbolic.modular.exact import (exact_bound as _exact_bound, exact_inv as _exact_inv,
                                            exact_mul as _exact_mul, exact_pow as _exact_pow,
                                            exact_sqrt as _exact_sqrt)
from vjpcert.symbolic.modular.field import CIRCLE_H, CIRCLE_N, Field, NeedAnotherPrime  # noqa: F401


# ------------------------------------------------------------------------------ the table's field
class _E:
    """One value of a derivative row (``core.derivatives``) in the modular field: residues ``v``, their
    bound ``b``, the exact form ``q`` of an exact scalar constant (``exact``), and for ``root``
    scale * s with s the atoms of one ``B.sqrt`` call (``root`` its source), whose inverse is taken as
    the variable w = 1 / s (``ModArray.inverse``). ``deep``: the bound has the argument's index arrays."""

    __slots__ = ("v", "b", "q", "root", "scale", "deep")

    def __init__(self, v, b, q=None, root=None, scale=None, deep=False):
        self.v, self.b, self.q, self.root, self.scale, self.deep = v, b, q, root, scale, deep


class _Ops:
    """The field operations of ``core.derivatives`` over ``_E``, for the tangent of ``kind(a)`` with
    value u: the residues are the field's, the bounds the rules of ``bound``, the pole degrees and
    inverted roots counted in ``F`` as the false-pass bound needs them."""

    def __init__(self, kind: str, a: ModArray, u):
        self.kind, self.a, self.F, self.u = kind, a, a.F, u
        self.nd = np.ndim(u)
        self.A = _E(a.v, a.b, deep=True)   # the argument: ``derivative``'s a
        self.atoms = 0                     # atoms of values other than a: numbered, so each has its own id

    def _nd(self, *xs):
        return self.nd if any(x.deep for x in xs) else 0

    def _plain(self, *xs):
        for x in xs:                       # a root entering arithmetic as s itself (``_used``)
            if x.root is not None:
                self.F.plain_atoms.add(x.root)

    def _exact(self, q):
        m = exact_const(self.F, q)
        return _E(m.v, m.b, q=q)

    def c(self, q):
        return self._exact((Fraction(q), ()))

    def pi(self):
        return self._exact((Fraction(1), (("pi", 2),)))

    def add(self, x, z):
        if x.q is not None and z.q is not None and not x.q[1] and not z.q[1]:
            return self.c(x.q[0] + z.q[0])
        self._plain(x, z)
        return _E(self.F.add(x.v, z.v), bnd.add(x.b, z.b, self._nd(x, z)), deep=x.deep or z.deep)

    def neg(self, x):
        if x.q is not None:
            return self._exact((-x.q[0], x.q[1]))
        scale = None if x.scale is None else (-x.scale[0], x.scale[1])
        return _E(self.F.neg(x.v), x.b, root=x.root, scale=scale, deep=x.deep)

    def mul(self, x, z):
        if x.q is not None and z.q is not None:
            return self._exact(_exact_mul(x.q, z.q))
        if z.q is not None:
            x, z = z, x
        b = bnd.mul(x.b, z.b, self._nd(x, z))
        if x.q is not None and z.root is not None:           # a constant times a root: still a root
            return _E(self.F.mul(x.v, z.v), b, root=z.root, scale=_exact_mul(x.q, z.scale), deep=z.deep)
        self._plain(x, z)
        return _E(self.F.mul(x.v, z.v), b, deep=x.deep or z.deep)

    def inv(self, x):
        F = self.F
        if x.q is not None:
            return self._exact(_exact_inv(x.q))
        if x.root is not None:
            # 1 / (c s) = w / c in the variable w = 1 / s: a polynomial in w, one pole per entry of a
            F.inverted_atoms.add(x.root)
            F.pole_degree += self.a.v.size
            b = bnd.mul(_exact_bound(_exact_inv(x.scale)), bnd.Bound(1, 0), 0)
            return _E(F.inv(x.v), b, deep=x.deep)
        F.pole_degree += x.b.n * self.a.v.size
        return _E(F.inv(x.v), bnd.inv(x.b, self.a.shape), deep=True)

    def pow(self, x, n: int):
        if n < 0:
            return self.pow(self.inv(x), -n)
        if x.q is not None:
            return self._exact(_exact_pow(x.q, n))
        self._plain(x)
        return _E(self.F.pow(x.v, n), bnd.pow_(x.b, n), deep=x.deep)

    def sqrt(self, x):
        root = _exact_sqrt(x.q) if x.q is not None else None
        if root is None:
            refuse(f"the derivative of B.{self.kind} takes the square root of a value that is no exact constant")
        return self._exact(root)

    def _atom(self, name: str, x):
        """name(x), an atom keyed by x's value; the atom of the argument a itself is the one B.name(a)
        makes (the same id), any other gets its own id from the row and its place in it."""
        if x is self.A:
            sid = derive(name, None, self.a)
        else:
            sid = derive(f"{self.kind}'", None if self.atoms == 0 else self.atoms, self.a)
            self.atoms += 1
        self._plain(x)
        return self.F.atom(name, x.v, x.b, sid)

    def exp(self, x):
        return _E(self._atom("exp", x), ATOM)

    def _circle(self, name, x):
        v = self._atom(name, x)
        self.F.pole_degree += 2 * np.size(v)
        return _E(v, bnd.fresh_per_entry(CIRCLE_N, CIRCLE_H, 2, 1.0, np.shape(v)), deep=True)

    def sin(self, x):
        return self._circle("sin", x)

    def cos(self, x):
        return self._circle("cos", x)


# ------------------------------------------------------------------------------ transcendental
def _unary(kind: str, a: ModArray) -> ModArray:
    a = a if isinstance(a, ModArray) else None
    if a is None:
        refuse(f"B.{kind} got a value that is not an array of the backend")
    F = a.F
    if kind == "step" and a.exact is not None:   # an exact constant q * (positive roots): the sign of q
        return exact_const(F, (Fraction(1) if a.exact[0] > 0 else STEP_AT_KINK, ()))
    if kind == "sqrt" and a.exact is not None:
        root = _exact_sqrt(a.exact)
        if root is not None:
            return exact_const(F, root)
    _used(a)                                    # an atom's argument is arithmetic on it
    sid = derive(kind, None, a)
    u = F.atom(kind, a.v, a.b, sid)
    if a.exact is not None and kind in ("exp", "cos") and a.exact[0] == 0:
        u = np.int64(1)
    nd = np.ndim(u)
    out_b = ATOM
    if kind in ("sin", "cos"):                  # sin, cos = rational functions of one circle atom
        F.pole_degree += 2 * np.size(u)
        out_b = bnd.fresh_per_entry(CIRCLE_N, CIRCLE_H, 2, 1.0, np.shape(u))
    src = None
    if kind == "sqrt" and np.ndim(u) == a.ndim:
        # a root's inverse (LayerNorm's, RMSNorm's 1 / sqrt(var + eps)) may be taken as the variable
        src = bnd.fresh_source()
        F.sqrt_atoms[src] = np.asarray(u)

    def tagged(out):
        out.atom = src
        out.sid = sid
        return out

    if a.t is None:
        return tagged(ModArray(F, u, None, out_b, None))
    # d kind(a) = f'(a) da with f' the row of core.derivatives, in the operations of _Ops
    ops = _Ops(kind, a, u)
    Y = _E(u, ATOM, root=src, scale=None if src is None else (Fraction(1), ()))
    try:
        factor = derivative(ops, kind, ops.A, Y)
    except MissingRule:
        raise SpecError(None, f"no derivative rule for {kind}") from None
    return tagged(ModArray(F, u, F.mul(factor.v, a.t), out_b, bnd.mul(factor.b, a.tb, nd), None))


def _computed(out: ModArray) -> ModArray:
    """``_unary``'s result is computed by the backend: writable, unlike the checker's leaves."""
    out.leaf = False
    return out


def sqrt(a):
    return _computed(_unary("sqrt", a))


HOOKS["sqrt"] = sqrt


# ------------------------------------------------------------------------------ the backend
class ModularBackend:
    """The ``B`` of one trial: ``exp, log, sqrt, erf, tanh, sin, cos, pi, c, zeros, array,
    max_shift`` over GF(p). Nodes of a composite run on the same backend (``node_backend``), so a
    composite is evaluated end to end with its nodes' own forward and backward code."""

    name = "modp-vectorised"

    def __init__(self, F: Field):
        self.F = F

    @property
    def node_backend(self):
        return self

    @property
    def pi(self):
        return exact_const(self.F, (Fraction(1), (("pi", 2),)))

    def c(self, p, q=1):
        from vjpcert.core.backends import exact
        return exact_const(self.F, (exact(p, q), ()))

    def zeros(self, shape):
        out = _new(self.F, np.zeros(shape, np.int64), None, None, None)
        out.sid = derive("zeros", _desc(shape))
        out.scalar = False                   # np.zeros(()) is a 0-d array (mutable), not a scalar
        return out

    def array(self, values):
        if isinstance(values, np.ndarray) and values.dtype.kind in "biu" and values.size:
            out = qarray(self.F, values)                         # a static integer array, at once
            out.scalar = False
            return out
        if isinstance(values, (list, tuple)) and any(isinstance(v, ModArray) for v in values):
            return stack([lift(self.F, v) for v in values])        # B.c(...)s, or traced entries
        flat = np.asarray(values, dtype=object)
        if all(isinstance(v, (numbers.Integral, Fraction)) and not isinstance(v, bool) for v in flat.ravel()):
            out = qarray(self.F, flat)
            out.scalar = False               # np.asarray: an array, 0-d too
            return out
        return stack([lift(self.F, v) for v in values]) if len(values) else self.zeros((0,))

    def max_shift(self, x, mask=None):
        """0 in exact arithmetic, as in every exact backend (the claim max_shift_free covers floats)."""
        return self.zeros(np.shape(x.v if isinstance(x, ModArray) else x)[:-1] + (1,))

    def exp(self, a):
        return _computed(_unary("exp", lift(self.F, a)))

    def log(self, a):
        return _computed(_unary("log", lift(self.F, a)))

    def sqrt(self, a):
        return _computed(_unary("sqrt", lift(self.F, a)))

    def erf(self, a):
        return _computed(_unary("erf", lift(self.F, a)))

    def tanh(self, a):
        return _computed(_unary("tanh", lift(self.F, a)))

    def sin(self, a):
        return _computed(_unary("sin", lift(self.F, a)))

    def cos(self, a):
        return _computed(_unary("cos", lift(self.F, a)))

    def step(self, a):
        return _computed(_unary("step", lift(self.F, a)))
