"""The false-pass bound of the mod-p identity test (the ``modp`` rung of the ladder).

``ModPField`` (symbolic/fixed/fields.py) evaluates a claim at a random point of GF(p) for a prime drawn
fresh per trial (a fixed prime can be targeted); a vanishing evaluation is evidence, not proof, and
the probability that a nonzero residual vanishes in every trial is bounded here: ``BoundField``
evaluates the same claim into degree and coefficient-size bounds of the residual, ``random_prime``
draws the primes, ``false_pass_bound`` turns both into the stated probability.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import flint


class BoundField:
    """Upper bounds of a rational function N/D in leaves and atoms (atoms count as variables), as
    built by the evaluation, unreduced: (deg N, deg D, log2 |N|_1, log2 |D|_1), where |P|_1 is the
    sum of the absolute values of P's integer coefficients. |.|_1 is submultiplicative, so the bounds
    compose exactly like the arithmetic. Every nonzero coefficient c of N has |c| <= |N|_1, so a prime
    p divides N's coefficients only if it divides such a c: at most log2 |N|_1 / log2 p primes can.

    It also records the largest bounds of any atom's argument: two atoms with different arguments
    collide in a ModP evaluation only where the difference of their arguments vanishes mod p."""

    def __init__(self):
        self.atoms = 0
        self.arg_degree = 0
        self.arg_bits = 0.0

    @staticmethod
    def const(q):
        q = Fraction(q)
        if q == 0:
            return None                      # exact zero: no polynomial
        return (0, 0, math.log2(abs(q.numerator)), math.log2(q.denominator))

    @staticmethod
    def leaf(leaf):
        return (1, 0, 0.0, 0.0)

    @staticmethod
    def add(a, b):
        if a is None:
            return b
        if b is None:
            return a
        n1, d1, h1, k1 = a
        n2, d2, h2, k2 = b
        hi, lo = max(h1 + k2, h2 + k1), min(h1 + k2, h2 + k1)
        return (max(n1 + d2, n2 + d1), d1 + d2, hi + math.log2(1 + 2.0 ** (lo - hi)), k1 + k2)

    @staticmethod
    def mul(a, b):
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])

    @staticmethod
    def neg(a):
        return a

    @staticmethod
    def inv(a):
        if a is None:
            raise ZeroDivisionError("division by an exact zero")
        return (a[1], a[0], a[3], a[2])

    def pow(self, a, k):
        if k < 0:
            a, k = self.inv(a), -k
        if a is None:
            return None if k else self.const(1)
        return (k * a[0], k * a[1], k * a[2], k * a[3])

    def _atom(self, arg=None, *_):
        self.atoms += 1
        if isinstance(arg, tuple):
            self.arg_degree = max(self.arg_degree, arg[0] + arg[1])
            self.arg_bits = max(self.arg_bits, arg[2] + arg[3])
        return (1, 0, 0.0, 0.0)

    exp = log = sqrt = erf = tanh = sin = cos = _atom

    def cpow(self, base, k):
        return self._atom()

    def pi(self):
        return self._atom()


# ------------------------------------------------------------------------------ random primes
PRIME_BITS = 63                    # primes drawn uniformly from [2^62, 2^63): Python ints, exact
# pi(2^63) - pi(2^62) > 1.0e17 (Dusart's bounds on pi(x)): each of them is drawn with probability
# below 1e-17, so a fixed integer with B bits (at most B / 62 prime factors in the range) is
# divisible by the drawn prime with probability below B / 62 * 1e-17.
PRIMES_IN_RANGE = 10**17


def random_prime(rng: random.Random) -> int:
    """A prime drawn uniformly from [2^(PRIME_BITS - 1), 2^PRIME_BITS) (rejection sampling; BPSW is
    a proof of primality below 2^64)."""
    while True:
        n = rng.randrange(2 ** (PRIME_BITS - 1), 2 ** PRIME_BITS) | 1
        if flint.fmpz(n).is_prime():
            return n


def false_pass_bound(bounds: tuple, field: BoundField, trials: int) -> float:
    """An upper bound on the probability that ``trials`` ModP evaluations, each at a fresh random
    prime and a fresh random point (that avoids the poles), all vanish although the residual N/D is
    not identically zero. Per trial: Schwartz-Zippel (deg N / p) + the prime dividing N's
    coefficients (log2 |N|_1 / 62 / #primes) + any two atoms colliding (their arguments' difference
    vanishing mod p: same two terms for every pair)."""
    if bounds is None:
        return 0.0
    p_min = 2.0 ** (PRIME_BITS - 1)
    per_prime = 1.0 / PRIMES_IN_RANGE
    log2p = PRIME_BITS - 1
    deg, bits = bounds[0], bounds[2]
    eps = deg / p_min + max(bits, 1.0) / log2p * per_prime
    pairs = field.atoms * (field.atoms - 1) / 2
    eps += pairs * (field.arg_degree / p_min + (2 * field.arg_bits + 1) / log2p * per_prime)
    return min(1.0, eps) ** trials
