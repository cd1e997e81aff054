"""Exact scalar constants of the modular backend: q * prod base^(e/2) over primes and pi, so
sqrt(2)^2 = 2, 1/sqrt(2) = sqrt(2)/2 and sqrt(2 pi) = sqrt(2) sqrt(pi), as in the ring
(``RingField._sqrt_const``). Pure algebra on (q, bases) pairs; their residues are ``array.exact_const``."""
from __future__ import annotations

from fractions import Fraction

import flint

from vjpcert.core.registry import SpecError
from vjpcert.symbolic.modular import bound as bnd


def exact_mul(a, b):
    q = a[0] * b[0]
    bases = dict(a[1])
    for base, e in b[1]:
        bases[base] = bases.get(base, 0) + e
    return _canon(q, bases)


def _canon(q: Fraction, bases: dict):
    """Fold base^(2k/2) of a prime base into q; keep pi and odd half-powers."""
    out = {}
    for base, e in bases.items():
        if base != "pi" and e % 2 == 0:
            q = q * Fraction(base) ** (e // 2)
        elif base != "pi":
            q = q * Fraction(base) ** ((e - 1) // 2)
            out[base] = 1
        elif e:
            out[base] = e
    return (q, tuple(sorted(out.items(), key=lambda kv: str(kv[0]))))


def exact_pow(a, k: int):
    if k < 0:
        return exact_pow(exact_inv(a), -k)
    out = (Fraction(1), ())
    for _ in range(k):
        out = exact_mul(out, a)
    return out


def exact_inv(a):
    if a[0] == 0:
        raise SpecError(None, "division by an exact zero")
    return _canon(1 / a[0], {base: -e for base, e in a[1]})


def exact_sqrt(a):
    """sqrt(q * prod base^(e/2)) = sqrt(num * den) / den * prod base^(e/4): exact where every half-
    exponent of a base is even and q >= 0; None otherwise (then the root is an atom)."""
    q, bases = a
    if q < 0 or any(e % 2 for _, e in bases):
        return None
    if q == 0:
        return (Fraction(0), ())
    out = {base: e // 2 for base, e in bases}
    n = q.numerator * q.denominator
    coeff = Fraction(1, q.denominator)
    for prime, e in flint.fmpz(n).factor():
        prime = int(prime)
        coeff *= Fraction(prime) ** (int(e) // 2)
        if int(e) % 2:
            out[prime] = out.get(prime, 0) + 1
    return _canon(coeff, out)


def exact_bound(a):
    """q * prod base^(e/2): sqrt(prime) and sqrt(pi) count as variables (degree 1 each), a negative
    power of sqrt(pi) as a constant denominator class."""
    q, bases = a
    b = bnd.const(q)
    if b is None:
        return None
    pos = sum(e for _, e in bases if e > 0)
    neg = -sum(e for _, e in bases if e < 0)
    out = bnd.Bound(b.n + pos, b.h, dict(b.cls))
    return bnd.mul(out, bnd.constant_class(("pi", neg), neg, 0.0), 0) if neg else out

