"""``ModPField``: the exact ring's atoms at random points of GF(p) -- the cheap identity test that
scales, and a count of the atoms (to size the flint ring, whose cost grows with its variable count).
Its false-pass bound (``BoundField``, the random primes) is in ``false_pass``.
"""
from __future__ import annotations

import random
from fractions import Fraction

from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.symbolic.fixed.false_pass import random_prime


class ModPField:
    """GF(p) with the same atom semantics as ``RingField`` (atoms keyed by the value of their
    argument): evaluating a claim at a random point is a Schwartz-Zippel identity test. Without a
    prime it draws one (``random_prime``)."""

    def __init__(self, rng: random.Random, p: int | None = None):
        p = random_prime(rng) if p is None else p
        self.p, self.rng = p, rng
        self.values: dict = {}
        self.atoms: dict = {}
        self.inverses: set = set()

    def _atom(self, key):
        v = self.atoms.get(key)
        if v is None:
            v = self.atoms[key] = self.rng.randrange(1, self.p)
        return v

    def const(self, q):
        q = Fraction(q)
        return int(q.numerator) * pow(int(q.denominator), -1, self.p) % self.p

    def leaf(self, leaf):
        v = self.values.get(leaf)
        if v is None:
            v = self.values[leaf] = self.rng.randrange(1, self.p)
        return v

    def add(self, a, b):
        return (a + b) % self.p

    def mul(self, a, b):
        return a * b % self.p

    def neg(self, a):
        return -a % self.p

    def inv(self, a):
        if a == 0:
            raise ZeroDivisionError("hit a pole: resample")
        self.inverses.add(a)
        return pow(a, -1, self.p)

    def pow(self, a, k):
        return pow(a, k, self.p) if k >= 0 else pow(self.inv(a), -k, self.p)

    def _odd_even(self, kind, a, odd):
        if a == 0:
            return 1 if kind == "cos" else 0
        if a > self.p // 2:
            v = self._atom((kind, self.p - a))
            return (self.p - v) % self.p if odd else v
        return self._atom((kind, a))

    def exp(self, a):
        return 1 if a == 0 else self._atom(("exp", a))

    def log(self, a):
        return self._atom(("log", a))

    def sqrt(self, a):
        return self._atom(("sqrt", a))

    def erf(self, a):
        return self._odd_even("erf", a, True)

    def tanh(self, a):
        return self._odd_even("tanh", a, True)

    def sin(self, a):
        return self._odd_even("sin", a, True)

    def cos(self, a):
        return self._odd_even("cos", a, False)

    def step(self, a):
        """A free Boolean as a random residue, S(-a) = 1 - S(a) (as ``RingField.step``): the identity
        is tested as a polynomial in it, which covers both of its values."""
        if a == 0:
            return self.const(STEP_AT_KINK)
        if a > self.p // 2:
            return (1 - self._atom(("step", self.p - a))) % self.p
        return self._atom(("step", a))

    def pi(self):
        return self._atom(("pi",))

    def cpow(self, base, k):
        return self._atom(("cpow", base, k))
