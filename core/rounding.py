"""Running error analysis of a spec's float evaluation: the backend ``RoundingBackend(dtype)``.

A spec run on this backend computes, entry by entry, what the float64 / float32 backend computes (every
operation rounded to the dtype, ``max_shift`` the row maximum) *and* a bound on how far that is from
the exact value of the same expression (Higham, "Accuracy and Stability of Numerical Algorithms",
section 3.3, running error analysis). Each number carries (v, e): v the rounded value, e a first-order
bound on |v - exact|. With u the unit roundoff of the dtype and inputs exact (e = 0):

    a + b   e = e_a + e_b + r(v)               a * b   e = |b| e_a + |a| e_b + e_a e_b + r(v)
    a / b   e = (e_a + |a/b| e_b) / (|b| - e_b) + r(v)         (infinite if |b| <= e_b)
    f(a)    e = |f'| e_a + C_F r(v)            (|f'| its largest on [a - e_a, a + e_a])
    B.c(q)  e = |q - v| (the constant's own rounding, exactly)
where r(v) = u |v| + eta bounds one rounding: eta, the smallest subnormal, covers underflow (an
exp(-400) that rounds to 0 in float32 is off by 1e-174, not by u times 0).

f' is the row of the derivative table (``core.derivatives``) evaluated over the interval [a - e_a,
a + e_a] in interval arithmetic (``Interval``), so its largest |f'| on the interval is bounded even
where the interval's ends miss it (tanh' and erf' peak at 0, sin' and cos' inside the interval, log'
and sqrt' are unbounded at 0).

The bound follows the spec's own evaluation order (sequential sums); numpy sums pairwise, whose error
is at most 2 log2(n) times this running bound (``numeric.reference`` allows for that). It is derived
from the spec alone: nothing of an implementation under test enters it.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from vjpcert.core.backends import exact
from vjpcert.core.derivatives import STEP_AT_KINK, derivative

# Transcendental functions of numpy / scipy are accurate to a few ulps; C_F units of u (half an ulp)
# per call: 8 u = 4 ulps, above the documented maximum error of numpy's float32 and float64 exp, log,
# tanh, sin, cos and of scipy's erf.
C_F = 8.0


def _scaled(x: float, e: float) -> float:
    """|x| e, where an exact 0 times an unbounded error is 0 (0 * anything is exactly 0)."""
    return 0.0 if x == 0 or e == 0 else abs(x) * e


class Rounded:
    """A float value v (rounded to the backend's dtype) with a bound e on its distance to the exact."""

    __slots__ = ("v", "e", "B")

    def __init__(self, v, e, B):
        # an undefined bound (inf - inf, 0 * inf in a derivative) means no bound: infinite
        self.v, self.e, self.B = v, (e if e == e and v == v else math.inf), B

    # ------------------------------------------------------------------ arithmetic
    def _lift(self, o) -> "Rounded":
        if isinstance(o, Rounded):
            return o
        return self.B.c(o)

    def __add__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        o = self._lift(o)
        v = self.B.rnd(self.v + o.v)
        return Rounded(v, self.e + o.e + self.B.r(v), self.B)

    __radd__ = __add__

    def __neg__(self):
        return Rounded(-self.v, self.e, self.B)

    def __pos__(self):
        return self

    def __sub__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        return self + (-self._lift(o))

    def __rsub__(self, o):
        return self._lift(o) + (-self)

    def __mul__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        o = self._lift(o)
        v = self.B.rnd(self.v * o.v)
        e = _scaled(o.v, self.e) + _scaled(self.v, o.e) + _scaled(self.e, o.e) + self.B.r(v)
        return Rounded(v, e, self.B)

    __rmul__ = __mul__

    def _inv(self) -> "Rounded":
        a, ea = abs(self.v), self.e
        v = self.B.rnd(1.0 / self.v) if self.v != 0 else math.inf
        e = ea / (a * (a - ea)) + self.B.r(v) if a > ea else math.inf
        return Rounded(v, e, self.B)

    def __truediv__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented
        o = self._lift(o)
        b, eb = abs(o.v), o.e
        if b <= eb:
            return Rounded(math.inf if o.v == 0 else self.v / o.v, math.inf, self.B)
        v = self.B.rnd(self.v / o.v)
        # |a/b - A/B| <= (e_a + |a/b| e_b) / (|b| - e_b), then one rounding of the quotient
        return Rounded(v, (self.e + abs(self.v / o.v) * eb) / (b - eb) + self.B.r(v), self.B)

    def __rtruediv__(self, o):
        return self._lift(o) / self

    def __pow__(self, k):
        if isinstance(k, np.ndarray):
            return NotImplemented
        if isinstance(k, Rounded):           # b ** k of two constants (RoPE's base ** (-2i/d))
            if self.v <= 0:
                raise ValueError("a power of a non-positive base")
            v = self.B.rnd(self.v ** k.v)
            e = abs(v * math.log(self.v)) * k.e + abs(k.v * self.v ** (k.v - 1)) * self.e
            return Rounded(v, e + C_F * self.B.r(v), self.B)
        k = Fraction(k)
        if k == Fraction(1, 2):
            return self.B.sqrt1(self)
        if k == Fraction(-1, 2):
            return self.B.sqrt1(self)._inv()
        if k.denominator != 1:
            raise TypeError(f"x ** {k} is not supported")
        n = int(k)
        if n < 0:
            return (self ** (-n))._inv()
        out = self.B.c(1)
        for _ in range(n):
            out = out * self
        return out

    def __float__(self):
        return float(self.v)

    def __repr__(self):
        return f"{self.v!r}±{self.e:.3g}"


# ------------------------------------------------------------------ the slope |f'| over an interval
class Interval:
    """Closed float intervals (lo, hi) as the operations of the derivative table, plus the primitives
    themselves. Each result encloses every value of the operation over its arguments' intervals
    (ends computed in round-to-nearest: a relative 1e-16 on a slope that only scales a first-order
    error term, far inside ``C_F``); an operation with no finite enclosure returns (-inf, inf)."""

    WHOLE = (-math.inf, math.inf)

    def c(self, q):
        return (float(q), float(q))

    def pi(self):
        return (math.pi, math.pi)

    def add(self, x, z):
        return self._ok((x[0] + z[0], x[1] + z[1]))

    def neg(self, x):
        return (-x[1], -x[0])

    def mul(self, x, z):
        if x is z:                          # one quantity times itself: a square, never negative
            return self.pow(x, 2)
        ends = [p * q for p in x for q in z]
        if any(t != t for t in ends):      # 0 * inf: no finite enclosure
            return self.WHOLE
        return (min(ends), max(ends))

    def inv(self, x):
        if x[0] > 0 or x[1] < 0:
            return (1.0 / x[1], 1.0 / x[0])
        return self.WHOLE                 # 1/x over an interval holding 0 is unbounded

    def pow(self, x, n: int):
        if n < 0:
            return self.inv(self.pow(x, -n))
        lo, hi = x[0] ** n, x[1] ** n
        if n % 2 == 0 and x[0] < 0 < x[1]:
            return (0.0, max(lo, hi))
        return (min(lo, hi), max(lo, hi))

    @staticmethod
    def _ok(x):
        return Interval.WHOLE if x[0] != x[0] or x[1] != x[1] else x       # inf - inf, 0 * inf

    @staticmethod
    def _monotone(f, x):
        def safe(t):
            try:
                return f(t)
            except OverflowError:
                return math.inf
        return (safe(x[0]), safe(x[1]))

    def exp(self, x):
        return self._monotone(math.exp, x)

    def erf(self, x):
        return self._monotone(math.erf, x)

    def tanh(self, x):
        return self._monotone(math.tanh, x)

    def log(self, x):
        if x[0] <= 0:
            raise ValueError("log of an interval that reaches 0")
        return self._monotone(math.log, x)

    def sqrt(self, x):
        if x[1] < 0:
            raise ValueError("sqrt of a negative interval")
        return (math.sqrt(max(x[0], 0.0)), math.sqrt(x[1]))

    def cos(self, x):
        return self._periodic(math.cos, x, 0.0)

    def sin(self, x):
        return self._periodic(math.sin, x, math.pi / 2)

    @staticmethod
    def _periodic(f, x, peak):
        """f = cos(t - peak): its ends, with 1 / -1 wherever a maximum peak + 2 k pi / a minimum
        peak + (2k + 1) pi may lie in the interval (found with a margin, so never missed)."""
        lo, hi = x
        if not (hi - lo < 2 * math.pi):
            return (-1.0, 1.0)
        ends = (f(lo), f(hi))
        out_lo, out_hi = min(ends), max(ends)
        margin = 1e-9 * (1.0 + abs(lo) + abs(hi))
        for offset, value in ((peak, 1.0), (peak + math.pi, -1.0)):
            k = math.ceil((lo - margin - offset) / (2 * math.pi))
            if offset + 2 * math.pi * k <= hi + margin:
                out_lo, out_hi = min(out_lo, value), max(out_hi, value)
        return (out_lo, out_hi)


INTERVAL = Interval()


def slope(kind: str, a: float, e: float) -> float:
    """The largest |f'| of the primitive ``kind`` over [a - e, a + e]: its row of the derivative
    table evaluated in ``Interval``; infinite where that has no finite bound."""
    x = (a - e, a + e)
    try:
        d = derivative(INTERVAL, kind, x, getattr(INTERVAL, kind)(x))
    except (OverflowError, ValueError, ZeroDivisionError):
        return math.inf
    m = max(abs(d[0]), abs(d[1]))
    return m if m == m else math.inf


class RoundingBackend:
    """The float backend of ``dtype`` with a running error bound on every number (see the module)."""

    def __init__(self, dtype, shift: bool = True):
        self.dtype = np.dtype(dtype)
        self.name = f"rounding-{self.dtype.name}"
        self.shift = shift          # False: max_shift is 0, as in the exact backends
        self.u = float(np.finfo(self.dtype).eps) / 2
        t = self.dtype.type
        self.eta = float(np.finfo(self.dtype).smallest_subnormal)
        self.rnd = lambda x: float(t(x))
        self.pi = self._pi()
        self.exp = self._unary(math.exp, "exp")
        self.log = self._unary(math.log, "log")
        self.sqrt = self._elementwise(self.sqrt1)
        self.erf = self._unary(math.erf, "erf")
        self.tanh = self._unary(math.tanh, "tanh")
        self.sin = self._unary(math.sin, "sin")
        self.cos = self._unary(math.cos, "cos")
        self.step = self._elementwise(self.step1)

    # ------------------------------------------------------------------ numbers
    def r(self, v: float) -> float:
        """The error of one rounding to a result v: u |v|, plus eta for a result in the subnormal range."""
        return self.u * abs(v) + self.eta

    def c(self, p, q=1) -> Rounded:
        f = exact(p, q)
        v = self.rnd(f.numerator / f.denominator)
        return Rounded(v, float(abs(Fraction(v) - f)), self)

    def _pi(self) -> Rounded:
        """numpy's pi is the double nearest pi (|pi - np.pi| < 1.3e-16), rounded again to the dtype."""
        v = self.rnd(math.pi)
        return Rounded(v, abs(v - math.pi) + 1.3e-16, self)

    def input(self, a) -> np.ndarray:
        """Float inputs are exact: error 0."""
        a = np.asarray(a, dtype=np.float64)
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(*a.shape):
            out[idx] = Rounded(self.rnd(a[idx]), 0.0, self)
        return out

    def sqrt1(self, a: Rounded) -> Rounded:
        if a.v < 0:
            return Rounded(math.nan, math.inf, self)
        v = self.rnd(math.sqrt(a.v))
        e = slope("sqrt", a.v, a.e) * a.e if a.e else 0.0
        return Rounded(v, e + self.r(v), self)

    def step1(self, a: Rounded) -> Rounded:
        """[a > 0]: exact where the bound decides the sign of the exact argument, else off by up to 1
        (the computed and the exact value may lie on two sides of the kink)."""
        v = 1.0 if a.v > 0 else float(STEP_AT_KINK)
        return Rounded(v, 0.0 if (a.v > a.e or a.v <= -a.e) else 1.0, self)

    def _unary(self, f, kind: str):
        def one(a: Rounded) -> Rounded:
            try:
                v = self.rnd(f(a.v))
            except (OverflowError, ValueError):
                return Rounded(math.inf, math.inf, self)
            e = slope(kind, a.v, a.e) * a.e if a.e else 0.0
            return Rounded(v, e + C_F * self.r(v), self)
        return self._elementwise(one)

    @staticmethod
    def _elementwise(fn):
        ufunc = np.frompyfunc(fn, 1, 1)

        def apply(a):
            out = ufunc(a)
            return out.astype(object) if isinstance(out, np.ndarray) else out
        return apply

    # ------------------------------------------------------------------ arrays
    def zeros(self, shape):
        out = np.empty(shape, dtype=object)
        out.fill(Rounded(0.0, 0.0, self))
        return out

    def array(self, values):
        return np.array(values, dtype=object)

    def max_shift(self, x, mask=None):
        """As the float backend: the row maximum of the computed values (over ``mask``), a constant
        with no error -- any constant gives the same exact function (the shift-invariance law)."""
        if not self.shift:
            return self.zeros(np.shape(x)[:-1] + (1,))
        v = np.vectorize(lambda r: r.v, otypes=[np.float64])(np.asarray(x, dtype=object)) \
            if np.size(x) else np.zeros(np.shape(x))
        masked = v if mask is None else np.where(mask, v, -np.inf)
        m = masked.max(-1, keepdims=True) if v.shape[-1] else np.zeros(v.shape[:-1] + (1,))
        m = np.where(np.isfinite(m), m, 0.0)
        out = np.empty(m.shape, dtype=object)
        for idx in np.ndindex(*m.shape):
            out[idx] = Rounded(self.rnd(m[idx]), 0.0, self)
        return out


def _value_and_bound(r) -> tuple[float, float]:
    """A Rounded number's (v, e); a plain number a spec left in an array (the 0 of a triangle) is
    exact up to its own rounding to a float."""
    if isinstance(r, Rounded):
        return r.v, r.e
    v = float(r)
    return v, float(abs(Fraction(r) - Fraction(v))) if math.isfinite(v) else math.inf


def values_and_bounds(arr) -> tuple[np.ndarray, np.ndarray]:
    """(v, e) float64 arrays of an array of Rounded numbers."""
    arr = np.asarray(arr, dtype=object)
    v = np.vectorize(lambda r: _value_and_bound(r)[0], otypes=[np.float64])(arr) if arr.size else np.zeros(arr.shape)
    e = np.vectorize(lambda r: _value_and_bound(r)[1], otypes=[np.float64])(arr) if arr.size else np.zeros(arr.shape)
    return v, e



# ---------------------------------------------------------------------------------------------- the rule
def order_factor(L: int) -> float:
    """numpy sums pairwise: its error is at most 2 ceil(log2 L) + 2 times a sequential sum's running
    bound, L the longest sum (the largest dim)."""
    return 2 * math.ceil(math.log2(max(L, 2))) + 2


def max_abs(a) -> float:
    a = np.asarray(a, dtype=object).ravel()
    return float(max((abs(v) for v in a), default=0))


def abs_diff(a, exact) -> np.ndarray:
    """|a - exact| entrywise as float64 (inf where a is not finite)."""
    a = np.asarray(a, dtype=np.float64)
    ex = np.asarray(exact, dtype=object)
    out = np.empty(a.shape, dtype=np.float64)
    for idx in np.ndindex(*a.shape):
        out[idx] = float(abs(a[idx] - ex[idx])) if np.isfinite(a[idx]) else math.inf
    return out


class FloatPathErrors:
    """One output of a spec's float path against its exact value ``truth`` (mpmath numbers):
        |v - exact| <= e (1 + BOUND_SLACK) + share * floor   (the running-error run (v, e): its own bound)
        max |got - exact| <= K max e + floor                  (numpy's float run, summing pairwise)
    with floor = REFERENCE_FLOOR_ROUNDINGS u max|exact|. ``seq_ok`` and ``float_ok`` say which hold."""

    def __init__(self, got, truth, v_seq, e_seq, u: float, K: float):
        from vjpcert.core import tolerance as tol
        scale = max_abs(truth)
        self.floor = tol.REFERENCE_FLOOR_ROUNDINGS * u * scale
        self.seq_err = abs_diff(v_seq, truth)
        self.e_seq = np.asarray(e_seq, dtype=np.float64)
        self.seq_ok = bool(np.all(self.seq_err <= self.e_seq * (1 + tol.BOUND_SLACK)
                                  + self.floor * tol.REFERENCE_FLOOR_SHARE_FOR_BOUND))
        self.err_arr = abs_diff(got, truth)
        self.err = float(self.err_arr.max()) if self.err_arr.size else 0.0
        self.bound = K * (float(self.e_seq.max()) if self.e_seq.size else 0.0) + self.floor
        self.float_ok = self.err <= self.bound

    def worst_sequential(self) -> tuple:
        """The entry where the running-error run is furthest past its bound."""
        k = int(np.argmax(self.seq_err - self.e_seq))
        return tuple(int(i) for i in np.unravel_index(k, self.seq_err.shape))

    def worst_float(self) -> tuple:
        k = int(np.argmax(self.err_arr))
        return tuple(int(i) for i in np.unravel_index(k, self.err_arr.shape))
