"""A backend ``B`` whose arrays are numpy integer arrays mod a prime p, with forward-mode tangents.

The spec's own numpy code runs on ``ModArray``s at production dims (a ViT-Tiny or GPT-2-small block),
so the randomised exact test of ``symbolic.modular`` needs no traced DAG. The semantics are those of
``symbolic.fixed.fields.ModPField`` (the mod-p image of the exact tier's ring):

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
- the tangent of every value is carried with it (dual numbers): d exp a = exp(a) da,
  d sqrt a = da / (2 sqrt a), d erf a = 2/sqrt(pi) exp(-a^2) da, d tanh a = (1 - tanh^2 a) da,
  d log a = da / a, d sin a = cos(a) da, d cos a = -sin(a) da -- the rules of
  ``symbolic.fixed.evaluate.Tangent``, so J t is derived from the forward, never from the backward.

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

from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.modular import bound as bnd
from vjpcert.symbolic.modular import constructs  # noqa: F401  (registers the numpy functions)
from vjpcert.symbolic.modular.array import (HOOKS, ModArray, _desc, _new, _used, cpow, derive, exact_const, lift,  # noqa: F401
                                            qarray)
from vjpcert.symbolic.modular.arith import Pole  # noqa: F401
from vjpcert.symbolic.modular.bound import ATOM, LEAF  # noqa: F401
from vjpcert.symbolic.modular.constructs import stack
from vjpcert.symbolic.modular.exact import exact_bound as _exact_bound, exact_sqrt as _exact_sqrt
from vjpcert.symbolic.modular.field import CIRCLE_H, CIRCLE_N, Field, NeedAnotherPrime  # noqa: F401


# ------------------------------------------------------------------------------ transcendental
def _unary(kind: str, a: ModArray) -> ModArray:
    a = a if isinstance(a, ModArray) else None
    if a is None:
        refuse(f"B.{kind} got a value that is not an array of the backend")
    F = a.F
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
    circle = lambda: (F.__setattr__("pole_degree", F.pole_degree + 2 * np.size(u)),   # noqa: E731
                      bnd.fresh_per_entry(CIRCLE_N, CIRCLE_H, 2, 1.0, np.shape(u)))[1]
    out_b = circle() if kind in ("sin", "cos") else ATOM
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
    # forward-mode rules of symbolic.fixed.evaluate.Tangent
    if kind == "exp":
        factor, fb = u, ATOM
    elif kind == "log":
        factor, fb = F.inv(a.v), bnd.inv(a.b, a.shape)
        F.pole_degree += a.b.n * a.v.size
    elif kind == "sqrt":
        # 1 / (2 s) = w / 2 in the variable w = 1 / s (see ModArray.inverse)
        factor, fb = F.inv(F.mul_scalar(u, 2)), bnd.mul(bnd.const(Fraction(1, 2)), bnd.Bound(1, 0), 0)
        F.pole_degree += a.v.size
        if src is not None:
            F.inverted_atoms.add(src)
        else:
            fb = bnd.inv(bnd.mul(bnd.const(2), ATOM, 0), a.shape)
    elif kind == "erf":
        k = F.mul_scalar(np.int64(pow(F.sqrt_pi, -1, F.p)), 2)
        e = F.atom("exp", F.neg(F.mul(a.v, a.v)), bnd.mul(a.b, a.b, nd), derive("erf'", None, a))
        factor, fb = F.mul(e, k), bnd.mul(ATOM, _exact_bound((Fraction(2), (("pi", -1),))), 0)   # 2 e / sqrt(pi)
    elif kind == "tanh":
        factor, fb = F.sub(np.ones_like(u), F.mul(u, u)), bnd.add(bnd.ONE, bnd.mul(ATOM, ATOM, 0), 0)
    elif kind == "sin":
        factor, fb = F.atom("cos", a.v, a.b, derive("cos", None, a)), circle()
    elif kind == "cos":
        factor, fb = F.neg(F.atom("sin", a.v, a.b, derive("sin", None, a))), circle()
    else:
        raise SpecError(None, f"no derivative rule for {kind}")
    return tagged(ModArray(F, u, F.mul(factor, a.t), out_b, bnd.mul(fb, a.tb, nd), None))


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
        flat = np.asarray(values, dtype=object)
        if all(isinstance(v, (numbers.Integral, Fraction)) and not isinstance(v, bool) for v in flat.ravel()):
            out = qarray(self.F, np.vectorize(Fraction, otypes=[object])(flat) if flat.size else flat)
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
