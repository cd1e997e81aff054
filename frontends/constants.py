"""Float constants of a framework graph, read as exact numbers.

Float constants in a graph are read, by default (``constants="named"``), as the real number they are
the rounding of (1/sqrt(2), sqrt(2/pi), (1/3)^(1/4), ...) when one of a small family lies within
``CONSTANT_ROUNDING_ULPS`` units in the last place of the constant at its dtype (a constant a framework
computes, ``sqrt(1/sqrt(d))``, is a few roundings from its real); else as the exact decimal they print
as at their dtype (``repr`` in float64; ``frontends.precision.decimal_at``), which is all that
``constants="decimal"`` does. Every reading is recorded for the assumptions; a decimal reading of a
full-precision constant (the rounding of a real no family names) is recorded as *rounded*: a claim
that fails only by such a constant's rounding is found so by ``Op.constants_shifted``, which moves a
constant by whole units in its last place.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Mapping

from vjpcert.core.registry import SpecError
from vjpcert.core.tolerance import CONSTANT_ROUNDING_ULPS
from vjpcert.frontends.precision import decimal_at, significant_digits, ulp

CONSTANT_MODES = ("named", "decimal")
DEFAULT_CONSTANTS = "named"
# units in the last place each rounded constant is moved by while it is read (repr -> ulps)
_SHIFTED: ContextVar[Mapping[str, int]] = ContextVar("shifted_constants", default={})

# Irrationals a float constant may be the rounding of: (how it is written, value of r for a float v,
# exact value as a function of (r, mpmath), the same over a backend B).
_FAMILIES = (
    ("{r}", lambda v, mp: v, lambda r, mp: r, lambda B, c: c),
    ("sqrt({r})", lambda v, mp: v * v, lambda r, mp: mp.sqrt(r), lambda B, c: B.sqrt(c)),
    ("({r})^(1/4)", lambda v, mp: v ** 4, lambda r, mp: mp.sqrt(mp.sqrt(r)), lambda B, c: B.sqrt(B.sqrt(c))),
    ("{r}*pi", lambda v, mp: v / mp.pi, lambda r, mp: r * mp.pi, lambda B, c: c * B.pi),
    ("{r}/pi", lambda v, mp: v * mp.pi, lambda r, mp: r / mp.pi, lambda B, c: c / B.pi),
    ("sqrt({r}*pi)", lambda v, mp: v * v / mp.pi, lambda r, mp: mp.sqrt(r * mp.pi), lambda B, c: B.sqrt(c * B.pi)),
    ("sqrt({r}/pi)", lambda v, mp: v * v * mp.pi, lambda r, mp: mp.sqrt(r / mp.pi), lambda B, c: B.sqrt(c / B.pi)),
)
_MAX_DENOMINATOR = 1000
_MAX_NUMERATOR = 10_000


def decimal_of(v: float) -> Fraction:
    """The exact decimal a float prints as: 0.1 is 1/10 (not the binary64 number 0.1000000000000000055...)."""
    return Fraction(repr(float(v)))


def _small(r: Fraction) -> bool:
    return 0 < r.numerator <= _MAX_NUMERATOR and r.denominator <= _MAX_DENOMINATOR


def _format(text: str, r: Fraction) -> str:
    if r == 1 and text != "{r}":
        return text.replace("{r}*", "").replace("({r})^", "1^").replace("{r}", "1")
    wrap = r.denominator != 1 and text not in ("{r}", "sqrt({r})")
    return text.format(r=f"({r})" if wrap else r)


def recognise(v: float, dtype: str | None = None):
    """(text, builder, rational or None) when ``v`` is, within ``CONSTANT_ROUNDING_ULPS`` units in the
    last place at ``dtype`` (float64 by default), sign * family(r) for a small rational r (numerator
    <= 10000, denominator <= 1000); else None. The text says how far, when it is not the nearest
    float. A plain decimal with a small denominator is not an irrational in disguise and is left alone."""
    import mpmath
    if v == 0 or not math.isfinite(v) or _small(abs(decimal_of(v))):
        return None
    sign = -1 if v < 0 else 1
    av = abs(v)
    unit = ulp(av, dtype)
    hits = []
    with mpmath.workdps(40):
        for order, (text, guess, exact, build) in enumerate(_FAMILIES):
            r = Fraction(str(mpmath.nstr(guess(mpmath.mpf(av), mpmath), 30))).limit_denominator(_MAX_DENOMINATOR)
            if not _small(r):
                continue
            value = exact(mpmath.mpf(r.numerator) / r.denominator, mpmath)
            off = abs(value - mpmath.mpf(av)) * unit.denominator / unit.numerator
            if off <= CONSTANT_ROUNDING_ULPS:
                hits.append((max(r.numerator, r.denominator), order, r, float(off), text, build))
    if not hits:
        return None
    # the simplest reading: at a low precision, sqrt(226/355) is as close to a float32 sqrt(2/pi) as
    # sqrt(2/pi) itself (355/113 is pi to 7 digits), and only one of them is what the code meant
    _, _, r, off, text, build = min(hits, key=lambda h: h[:2])
    words = ("-" if sign < 0 else "") + _format(text, r)
    if off > 0.5:
        words += f" ({math.ceil(off)} ulp from it: a computed rounding)"

    def builder(B, r=r, build=build, sign=sign):
        out = build(B, B.c(r))
        return -out if sign < 0 else out
    return words, builder, (sign * r if text == "{r}" else None)


class Constants:
    """How the float constants of one graph are read, and the record of every reading: ``readings``
    (repr -> words) and ``rounded`` (the reprs read as decimals that are full-precision roundings)."""

    def __init__(self, mode: str = DEFAULT_CONSTANTS, dtype: str | None = None):
        if mode not in CONSTANT_MODES:
            raise SpecError(None, f"constants must be one of {CONSTANT_MODES}, not {mode!r}")
        self.mode = mode
        self.dtype = dtype                      # the graph's dtype: a constant prints at its own precision
        self.readings: dict[str, str] = {}      # repr(v) -> how it was read
        self.rounded: set[str] = set()

    def read(self, v: float, dtype: str | None = None):
        """A static Fraction, or (named mode) a builder over B for a recognised irrational. ``dtype``:
        the constant's own (a JAX literal has one), else the graph's."""
        at = dtype or self.dtype
        key = repr(float(v))
        if self.mode == "named":
            hit = recognise(v, at)
            if hit is not None:
                self.readings[key] = hit[0]
                return hit[2] if hit[2] is not None else hit[1]
        d = decimal_at(v, at)
        if d.denominator != 1 or abs(d) >= 10 ** 6:
            self.readings.setdefault(key, str(d) if len(str(d)) <= 16 else "its decimal")
        if significant_digits(d) >= _FULL_DIGITS[at or "float64"]:
            self.rounded.add(key)
            shift = _SHIFTED.get().get(key, 0)
            if shift:
                d += shift * ulp(float(v), at)
        return d


# a decimal this long is the rounding of a real, not a number someone wrote (float64 prints at most
# 17 significant digits, float32 9, float16 5, bfloat16 4)
_FULL_DIGITS = {"float64": 15, "float32": 7, "float16": 4, "bfloat16": 3}


@contextmanager
def constants_shifted(shifts: Mapping[str, int]):
    """While inside, each rounded constant named (by repr) is read moved by that many units in its last
    place: how sensitive a claim is to the rounding of its constants."""
    token = _SHIFTED.set(dict(shifts))
    try:
        yield
    finally:
        _SHIFTED.reset(token)


def describe_readings(mode: str, readings: Mapping[str, str]) -> list[str]:
    """One line of assumptions for the float constants of a graph (or several)."""
    if not readings:
        return []
    items = ", ".join(f"{k} as {v}" for k, v in sorted(readings.items(), key=lambda kv: float(kv[0])))
    return [f"float constants read as exact numbers ({mode}): {items}"]
