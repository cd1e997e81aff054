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
"""
from __future__ import annotations

import hashlib
import itertools
import math
import numbers
from fractions import Fraction

import flint
import numpy as np

from vjpcert.core.registry import SpecError, refuse
from vjpcert.symbolic.modular import bound as bnd
from vjpcert.symbolic.modular.arith import ModP, Pole
from vjpcert.symbolic.modular.bound import ATOM, LEAF


class NeedAnotherPrime(Exception):
    """A constant square root sqrt(c) has no value mod this prime: draw another prime. ``root`` names
    the c, so the next trials can test their prime for it before any work (``modular._Point``)."""

    def __init__(self, message: str, root: int | None = None):
        super().__init__(message)
        self.root = root


# ------------------------------------------------------------------------------ bounds
# ``symbolic.modular.bound``: (deg N, log2 |N|_1) and the denominators by provenance; ``None`` is an
# exact 0.
CIRCLE_N, CIRCLE_H = 2, 1.0     # sin, cos = 2u / (1 + u^2), (1 - u^2) / (1 + u^2) in one atom u


# ------------------------------------------------------------------------------ the field
class Field(ModP):
    """The arithmetic mod p of one trial (``modular_arith.ModP``) and its keyed atom hashes."""

    def __init__(self, p: int, keys: dict, sqrt_pi: int):
        super().__init__(p)
        self.keys = keys                       # kind -> (k1, k2) uint64 keys of the atom hash
        self.sqrt_pi = sqrt_pi
        self.atom_values: dict[str, list] = {}  # kind -> the arguments hashed (their distinct count)
        self.atom_arg: dict[str, tuple] = {}   # kind -> (deg N, deg D, log2|N|_1, log2|D|_1) of the arguments
        self.pole_degree = 0.0                 # sum of the degrees of every inverted entry's numerator
        self.inverted_atoms: set = set()       # atom sources whose inverse was taken as a variable
        self.plain_atoms: set = set()          # atom sources that entered arithmetic themselves
        self.sqrt_atoms: dict = {}             # source -> the values of one B.sqrt call's atoms
        self.atoms_seen: set = set()           # (kind, id of the argument's computation) counted
        self._roots: dict[int, int] = {}
        self._values: dict = {}                # computation id -> its residues (``value``)

    def end_trial(self):
        """Drop what only the trial itself needs -- its cached values and the matmuls' work arrays,
        GBs at production dims -- keeping the counts the bound reads (the trials' fields are kept)."""
        self._values.clear()
        self._buffers.clear()

    def value(self, sid, compute):
        """The residues of the computation ``sid``, computed once per trial: the backward recomputes
        forward values (an attention's scores and probabilities, an MLP's hidden layer), and those are
        most of a block's matmuls after the tangents'. A sid names the operation, its structural
        details and every operand's sid and shape (``derive``), so one sid is one value -- the same
        identity ``atom`` already counts atoms by. None (a value of unknown provenance): computed."""
        if sid is None:
            return compute()
        v = self._values.get(sid)
        if v is None:
            v = self._values[sid] = compute()
        return v

    @property
    def atoms_used_both_ways(self) -> int:
        """How many inverted root atoms s also entered arithmetic as s (from any call: the same atom is
        recomputed by the backward, so they are matched by value -- two distinct atoms of one value
        count too, which only overcounts): the residual is a Laurent polynomial in those."""
        inverted = [self.sqrt_atoms[s].ravel() for s in self.inverted_atoms]
        plain = [self.sqrt_atoms[s].ravel() for s in self.plain_atoms if s in self.sqrt_atoms]
        if not inverted or not plain:
            return 0
        inverted = np.concatenate(inverted)
        return int(np.isin(inverted, np.concatenate(plain)).sum())

    @property
    def atom_count(self) -> dict[str, int]:
        """kind -> entries hashed in this evaluation, a computation counted once (``atom``): a bound on
        its distinct atoms as *polynomials* (distinct values would undercount exactly when two
        distinct arguments collide)."""
        return {kind: int(sum(v.size for v in vs)) for kind, vs in self.atom_values.items()}

    def _circle(self, kind: str, v):
        """sin and cos of one argument lie on the circle: with u a keyed hash of |a|,
        cos = (1 - u^2) / (1 + u^2) and sin = 2u / (1 + u^2) (times the sign of a): sin^2 + cos^2 = 1
        holds exactly (its only algebraic relation), sin is odd, cos even, sin(0) = 0, cos(0) = 1."""
        p = self.p
        upper = v > p // 2
        u = self.hash("circle", np.where(upper, p - v, v))
        u2 = self.mul(u, u)
        w = self.inv(self.add(u2, np.ones_like(u2)))
        if kind == "cos":
            out = self.mul(self.sub(np.ones_like(u2), u2), w)
            return np.where(v == 0, 1, out)
        out = self.mul(self.add(u, u), w)
        out = np.where(upper, (p - out) % p, out)
        return np.where(v == 0, 0, out)

    # ---- scalars
    def residue(self, q: Fraction) -> int:
        q = Fraction(q)
        den = q.denominator % self.p
        if den == 0:
            raise NeedAnotherPrime(f"the constant {q} has a denominator divisible by p")
        return q.numerator * pow(den, -1, self.p) % self.p

    def prime_root(self, c: int) -> int:
        r = self._roots.get(c)
        if r is None:
            if c % self.p == 0:
                raise NeedAnotherPrime(f"sqrt({c}) with p | {c}", root=c)
            if flint.fmpz(c).jacobi(self.p) != 1:
                raise NeedAnotherPrime(f"sqrt({c}) has no value mod p", root=c)
            r = self._roots[c] = int(flint.fmpz(c).sqrtmod(self.p))
        return r

    # ---- atoms
    @staticmethod
    def _mix(x):
        """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
        with np.errstate(over="ignore"):
            x = x + np.uint64(0x9E3779B97F4A7C15)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))

    def hash(self, kind: str, v):
        k1, k2 = self.keys[kind]
        x = self._mix(np.asarray(v, dtype=np.int64).astype(np.uint64) ^ np.uint64(k1))
        x = self._mix(x ^ np.uint64(k2))
        return (x % np.uint64(self.p)).astype(np.int64)

    def atom(self, kind: str, v, arg_bound, sid=None):
        """The atom kind(v), keyed by the value v, with the ring's folds and parities. ``sid`` names
        how the argument was computed: the same computation again (the backward recomputing the
        forward) is the same atoms, not new ones to count."""
        v = np.asarray(v, dtype=np.int64)
        # sin and cos of one argument share one circle atom u: their pairs are counted together
        counted = "circle" if kind in ("sin", "cos") else kind
        if sid is None or (kind, sid) not in self.atoms_seen:
            self.atom_values.setdefault(counted, []).append(np.empty(v.size, dtype=np.bool_))  # sizes only
            if sid is not None:
                self.atoms_seen.add((kind, sid))
        arg = arg_bound.numbers() if arg_bound is not None else (0, 0, 0.0, 0.0)
        old = self.atom_arg.get(counted, arg)
        self.atom_arg[counted] = tuple(max(x, y) for x, y in zip(old, arg))
        return self.value(None if sid is None else ("atom", sid), lambda: self._atom_value(kind, v))

    def _atom_value(self, kind: str, v):
        p = self.p
        if kind in ("sin", "cos"):
            return self._circle(kind, v)
        if kind in ("erf", "tanh"):                     # odd: f(-a) = -f(a), f(0) = 0
            upper = v > p // 2
            h = self.hash(kind, np.where(upper, p - v, v))
            out = np.where(upper, (p - h) % p, h)
            return np.where(v == 0, 0, out)
        h = self.hash(kind, v)
        if kind == "exp":
            return np.where(v == 0, 1, h)
        if kind == "sqrt":
            return np.where(v == 0, 0, np.where(v == 1, 1, h))
        if kind == "log":
            return np.where(v == 1, 0, h)
        return h


# ------------------------------------------------------------------------------ exact constants
def _exact_mul(a, b):
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


def _exact_pow(a, k: int):
    if k < 0:
        return _exact_pow(_exact_inv(a), -k)
    out = (Fraction(1), ())
    for _ in range(k):
        out = _exact_mul(out, a)
    return out


def _exact_inv(a):
    if a[0] == 0:
        raise SpecError(None, "division by an exact zero")
    return _canon(1 / a[0], {base: -e for base, e in a[1]})


def _exact_sqrt(a):
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


def _exact_bound(a):
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


# ------------------------------------------------------------------------------ arrays
_HANDLED = {}


def _implements(*fns):
    def register(impl):
        for fn in fns:
            _HANDLED[fn] = impl
        return impl
    return register


_OPAQUE = itertools.count()


# Types whose repr is their value, matched exactly: a subclass (an int whose __index__ is not its
# value) may hide what it does behind an inherited repr
_VALUE_TYPES = frozenset({bool, int, float, complex, str, Fraction, type(None), type(Ellipsis)})
_NUMPY_SCALARS = frozenset(np.sctypeDict.values())


def _desc(x):
    """A stable description of a structural argument (an index, a shape, a mask) for ``derive``."""
    t = type(x)
    if isinstance(x, ModArray):
        return ("traced", x.sid)
    if t is np.ndarray and x.dtype.kind in "biufc":
        return ("array", x.dtype.str, x.shape, hashlib.blake2b(np.ascontiguousarray(x).tobytes(),
                                                              digest_size=16).hexdigest())
    if t in (tuple, list):
        return (t.__name__, tuple(_desc(e) for e in x))
    if t is dict:
        return ("dict", tuple(sorted((k, _desc(v)) for k, v in x.items())))
    if t is slice:
        return ("slice", _desc(x.start), _desc(x.stop), _desc(x.step))
    if t in _NUMPY_SCALARS:
        return repr(x.item())
    if t in _VALUE_TYPES or isinstance(x, np.dtype):
        return repr(x)                           # its repr is its value
    if t is type:
        return ("type", x.__module__, x.__qualname__, id(x))
    # anything else (an object with __index__, a subclass, a callable, ...) may hide what it does
    # behind its repr: a fresh token, so the computation is never taken for another one
    # (``Field.value``, atom counts)
    return ("opaque", next(_OPAQUE))


def derive(op: str, detail, *operands):
    """The id of a value computed by ``op`` (with ``detail``) from ``operands`` (ModArrays: their ids
    and shapes), or None when one operand's is unknown."""
    parts = []
    for x in operands:
        if isinstance(x, ModArray):
            if x.sid is None:
                return None
            parts.append((x.sid, x.shape))
        else:
            parts.append(_desc(x))
    return hashlib.blake2b(repr((op, detail, tuple(parts))).encode(), digest_size=16).digest()


class ModArray:
    """An array of residues mod p with its tangent (None: exactly 0) and bounds. Spec code sees the
    numpy array interface it uses: shape, indexing, reshape, .T, sum, mean, arithmetic, @, and the
    numpy functions in ``_HANDLED``. It is read-only, and it refuses comparisons and branches."""

    __slots__ = ("F", "v", "t", "b", "tb", "exact", "qa", "atom", "sid")
    __array_priority__ = 1000

    def __init__(self, F: Field, v, t=None, b=LEAF, tb=None, exact=None):
        self.F, self.v, self.t, self.exact = F, np.asarray(v, dtype=np.int64), t, exact
        # bounds of the value and of the tangent (``modular_bound``): index arrays with this array's axes
        self.b, self.tb = bnd.align(b, self.v.ndim), bnd.align(tb, self.v.ndim)
        self.qa = None          # an exact rational array (B.array of ints, arithmetic on it): exponents
        self.atom = None        # the source id of an array of atoms, as B.sqrt returned it (``inverse``)
        # how the value was computed (None: not known), a hash of the operations from named leaves and
        # constants: equal ids are equal polynomials entry by entry, so a recomputed atom is one atom
        self.sid = None
        if t is not None:
            self.t = np.broadcast_to(np.asarray(t, dtype=np.int64), self.v.shape)

    # ---- lifting
    def _lift(self, x) -> "ModArray":
        return lift(self.F, x)

    # ---- structure
    @property
    def shape(self):
        return self.v.shape

    @property
    def ndim(self):
        return self.v.ndim

    @property
    def size(self):
        return self.v.size

    def __len__(self):
        return len(self.v)

    def _map(self, fn, desc=None) -> "ModArray":
        """A structural map (reshape, transpose, slice, repeat): the bounds' index arrays move along."""
        out = ModArray(self.F, fn(self.v), None if self.t is None else fn(self.t),
                       bnd.remap(self.b, fn, self.shape), bnd.remap(self.tb, fn, self.shape),
                       self.exact if self.v.ndim == 0 else None)
        out.qa = None if self.qa is None else fn(self.qa)
        out.atom = self.atom                 # a slice or a reshape of atoms is still atoms
        out.sid = None if desc is None else derive("map", desc, self)
        return out

    def __getitem__(self, key):
        if isinstance(key, ModArray) or (isinstance(key, tuple) and any(isinstance(k, ModArray) for k in key)):
            refuse("an array is indexed by traced values: indices must come from shapes or structural params")
        return self._map(lambda a: a[key], ("getitem", _desc(key)))

    def __setitem__(self, key, value):
        refuse("a write into an array in place (x[...] = ...): inputs are read-only to spec code")

    def reshape(self, *shape, **kw):
        return self._map(lambda a: a.reshape(*shape, **kw), ("reshape", _desc(shape), _desc(kw)))

    def ravel(self):
        return self.reshape(-1)

    flatten = ravel

    def squeeze(self, axis=None):
        return self._map(lambda a: a.squeeze(axis), ("squeeze", _desc(axis)))

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return self._map(lambda a: a.transpose(*axes), ("transpose", _desc(axes)))

    def swapaxes(self, i, j):
        order = list(range(self.ndim))
        order[i], order[j] = order[j], order[i]
        return self.transpose(*order)

    @property
    def T(self):
        return self._map(lambda a: a.T, ("T",))

    def copy(self):
        return self._map(lambda a: a.copy(), ("copy",))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    # ---- reductions
    def sum(self, axis=None, keepdims=False):
        F = self.F
        _used(self)
        axes = tuple(range(self.ndim)) if axis is None else tuple(a % self.ndim for a in np.atleast_1d(axis))
        v = F.sum(self.v, axis, keepdims)
        t = None if self.t is None else F.sum(np.ascontiguousarray(self.t), axis, keepdims)
        out = ModArray(F, v, t, bnd.sum_axes(self.b, self.shape, axes, keepdims),
                       bnd.sum_axes(self.tb, self.shape, axes, keepdims), None)
        out.sid = derive("sum", (axes, bool(keepdims)), self)
        return out

    def mean(self, axis=None, keepdims=False):
        count = self.v.size if axis is None else int(np.prod([self.v.shape[a] for a in np.atleast_1d(axis)]))
        return self.sum(axis, keepdims) * lift(self.F, Fraction(1, count))

    # ---- arithmetic
    def __add__(self, o):
        o = self._lift(o)
        F = self.F
        _used(self, o)
        exact = None
        if self.exact is not None and o.exact is not None and not self.exact[1] and not o.exact[1]:
            exact = (self.exact[0] + o.exact[0], ())
        v = F.add(self.v, o.v)
        nd = v.ndim
        out = ModArray(F, v, _tadd(F, self.t, o.t), bnd.add(self.b, o.b, nd), bnd.add(self.tb, o.tb, nd), exact)
        out.sid = derive("add", None, self, o)
        return _with_qa(out, self, o, lambda x, y: x + y)

    __radd__ = __add__

    def __neg__(self):
        F = self.F
        _used(self)
        out = ModArray(F, F.neg(self.v), None if self.t is None else F.neg(self.t), self.b, self.tb,
                       None if self.exact is None else _exact_mul(self.exact, (Fraction(-1), ())))
        out.qa = None if self.qa is None else -self.qa
        out.sid = derive("neg", None, self)
        return out

    def __pos__(self):
        return self

    def __sub__(self, o):
        return self + (-self._lift(o))

    def __rsub__(self, o):
        return self._lift(o) + (-self)

    def __mul__(self, o):
        o = self._lift(o)
        F = self.F
        _used(self, o)
        t = _tadd(F, None if self.t is None else F.mul(self.t, o.v), None if o.t is None else F.mul(self.v, o.t))
        exact = _exact_mul(self.exact, o.exact) if self.exact is not None and o.exact is not None else None
        sid = derive("mul", None, self, o)
        v = F.value(sid, lambda: F.mul(self.v, o.v))
        nd = v.ndim
        out = ModArray(F, v, t, bnd.mul(self.b, o.b, nd),
                       bnd.add(bnd.mul(self.tb, o.b, nd), bnd.mul(self.b, o.tb, nd), nd), exact)
        out.sid = sid
        return _with_qa(out, self, o, lambda x, y: x * y)

    __rmul__ = __mul__

    def inverse(self) -> "ModArray":
        F = self.F
        if self.exact is not None:
            return exact_const(F, _exact_inv(self.exact))
        if self.qa is not None:
            if any(q == 0 for q in self.qa.ravel()):
                raise SpecError(None, "division by an exact zero")
            return qarray(F, np.vectorize(lambda q: 1 / q, otypes=[object])(self.qa))
        if self.b is None:
            raise SpecError(None, "division by an exact zero")
        if self.atom is not None:
            # 1 / s for an atom s: the variable w = 1 / s (uniform where s is; s = 0 is a pole). Sound
            # while s itself never enters the residual: ``Field.atoms_used_both_ways`` checks that.
            F.inverted_atoms.add(self.atom)
            u = F.value(derive("inv", None, self), lambda: F.inv(self.v))
            F.pole_degree += self.v.size
            t = None if self.t is None else F.neg(F.mul(F.mul(u, u), self.t))
            w = bnd.Bound(1, 0)
            out = ModArray(F, u, t, w, bnd.mul(self.tb, bnd.mul(w, w, self.ndim), self.ndim))
            out.sid = derive("inv", None, self)
            return out
        _used(self)
        u = F.value(derive("inv", None, self), lambda: F.inv(self.v))
        t = None if self.t is None else F.neg(F.mul(F.mul(u, u), self.t))   # d(1/a) = -da / a^2
        ib = bnd.inv(self.b, self.shape)        # one new denominator per entry: a's numerator
        F.pole_degree += self.b.n * self.v.size
        nd = self.ndim
        out = ModArray(F, u, t, ib, bnd.mul(self.tb, bnd.mul(ib, ib, nd), nd))
        out.sid = derive("inv", None, self)
        return out

    def __truediv__(self, o):
        return self * self._lift(o).inverse()

    def __rtruediv__(self, o):
        return self._lift(o) * self.inverse()

    def __pow__(self, k):
        if isinstance(k, ModArray) and k.qa is not None:
            return _pow_exact_array(self, k.qa)
        if isinstance(k, ModArray):
            if k.exact is None or k.exact[1]:
                refuse("x ** y with a non-constant exponent is not supported; use B.exp/B.log")
            k = k.exact[0]
        if isinstance(k, float):
            refuse(f"a float exponent ({k!r}): write exponents as ints or Fractions")
        k = Fraction(k)
        if k.denominator == 1:
            k = int(k)
            if self.exact is not None:
                return exact_const(self.F, _exact_pow(self.exact, k))
            if k < 0:
                return self.inverse() ** (-k)
            if k == 0:
                return lift(self.F, 1) + self * 0
            F = self.F
            _used(self)
            v = F.pow(self.v, k)
            t = None if self.t is None else F.mul(F.mul_scalar(F.pow(self.v, k - 1), k), self.t)
            nd = self.ndim
            tb = bnd.mul(bnd.mul(bnd.const(k), bnd.pow_(self.b, k - 1), nd), self.tb, nd)
            out = ModArray(F, v, t, bnd.pow_(self.b, k), tb)
            out.sid = derive("pow", k, self)
            return out
        if k == Fraction(1, 2):
            return sqrt(self)
        if k == Fraction(-1, 2):
            return sqrt(self).inverse()
        if self.exact is not None and not self.exact[1] and self.exact[0] > 0:
            return cpow(self.F, self.exact[0], k)
        refuse(f"x ** {k} is not supported; use B.sqrt or integer powers")

    def __matmul__(self, o):
        o = self._lift(o)
        return _matmul(self, o)

    def used(self):
        """The value enters arithmetic (not only its inverse): recorded for ``Field.atoms_used_both_ways``."""
        if self.atom is not None:
            self.F.plain_atoms.add(self.atom)

    def __rmatmul__(self, o):
        return _matmul(self._lift(o), self)

    # ---- what a spec may not do
    def _no_compare(self, other):
        refuse("a comparison (==, !=, <, <=, >, >=, max, abs, sort, ...) of traced values: specs must be "
               "branch-free in their inputs (a comparison is a kink or a branch the proof cannot follow)")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _no_compare
    __hash__ = object.__hash__

    def __bool__(self):
        refuse("a branch depends on a traced value (if, and, or, np.where on values, any/all): specs "
               "must be branch-free in their inputs; build masks from shapes or structural params")

    def __abs__(self):
        refuse("abs() of a traced value: |x| has a kink at 0 and the proof cannot follow it")

    def __float__(self):
        refuse("float() or math.* was applied to a traced value: use B.exp, B.sqrt, ...")

    __int__ = __index__ = __complex__ = __float__

    def __array__(self, *args, **kwargs):
        refuse("a traced value was converted to a plain numpy array (np.asarray, np.array, a numpy "
               "function the modular backend does not follow): use array methods and B's functions")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            refuse(f"np.{ufunc.__name__}.{method} on traced values is not supported by the modular backend")
        ops = {np.add: lambda a, b: a + b, np.subtract: lambda a, b: a - b, np.multiply: lambda a, b: a * b,
               np.true_divide: lambda a, b: a / b, np.matmul: lambda a, b: a @ b,
               np.negative: lambda a: -a, np.positive: lambda a: a}
        if ufunc not in ops:
            refuse(f"np.{ufunc.__name__} was applied to traced values (use B.exp, B.sqrt, ... for "
                   f"numbers; comparisons and max/abs are not allowed)")
        F = next(x.F for x in inputs if isinstance(x, ModArray))
        return ops[ufunc](*[x if isinstance(x, ModArray) else lift(F, x) for x in inputs])

    def __array_function__(self, func, types, args, kwargs):
        impl = _HANDLED.get(func)
        if impl is None:
            refuse(f"np.{func.__name__} on traced values is not supported by the modular backend")
        return impl(*args, **kwargs)

    def __repr__(self):
        return f"ModArray(shape={self.shape}, p={self.F.p})"


def _tadd(F, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return F.add(a, b)


def lift(F: Field, x) -> ModArray:
    """An operand as a ModArray: ints and Fractions exactly, integer/bool numpy arrays as constants;
    floats are refused (a float constant is already rounded)."""
    if isinstance(x, ModArray):
        return x
    if isinstance(x, (bool, np.bool_, numbers.Integral, Fraction)):
        return exact_const(F, (Fraction(int(x)) if not isinstance(x, Fraction) else x, ()))
    if isinstance(x, np.ndarray) and x.dtype.kind in "biu":
        v = np.mod(x.astype(object), F.p).astype(np.int64) if x.dtype.kind == "u" else np.mod(x.astype(np.int64), F.p)
        big = np.abs(x.astype(np.float64)).max(initial=0)
        out = ModArray(F, v, None, bnd.const(int(big)) if big else None, None)
        out.sid = derive("ints", _desc(x))
        return out
    if isinstance(x, (list, tuple)):
        return stack([lift(F, e) for e in x])
    if isinstance(x, (float, np.floating, complex)) or (isinstance(x, np.ndarray) and x.dtype.kind in "fc"):
        refuse(f"a float ({x!r}) reached the spec's arithmetic: write constants as B.c(p, q) or "
               f"B.c('0.044715') so they stay exact")
    refuse(f"a {type(x).__name__} ({x!r}) reached the spec's arithmetic; use the backend B for numbers")


def _qa_of(x: ModArray):
    if x.qa is not None:
        return x.qa
    if x.exact is not None and not x.exact[1]:
        return np.array(x.exact[0], dtype=object)
    return None


def _with_qa(out: ModArray, a: ModArray, b: ModArray, fn) -> ModArray:
    """Keep an exact rational array exact through + and * (RoPE's exponents -2i/d)."""
    if out.exact is None and (a.qa is not None or b.qa is not None):
        qa, qb = _qa_of(a), _qa_of(b)
        if qa is not None and qb is not None:
            out.qa = fn(qa, qb)
    return out


def qarray(F: Field, qa) -> ModArray:
    """An exact rational array: its residues, and the Fractions (for exponents)."""
    qa = np.asarray(qa, dtype=object)
    v = np.vectorize(lambda q: F.residue(Fraction(q)), otypes=[np.int64])(qa) if qa.size else \
        np.zeros(qa.shape, np.int64)
    # every entry q = (q L) / L for L the lcm of the denominators: one constant class, |q L| <= big L
    big = max([abs(Fraction(q)) for q in qa.ravel()] + [Fraction(1)])
    den = math.lcm(*[Fraction(q).denominator for q in qa.ravel()], 1)
    b = bnd.const(Fraction(1, den))
    out = ModArray(F, v.astype(np.int64), None, bnd.Bound(0, math.log2(max(1, big * den)), b.cls), None)
    out.qa = np.vectorize(Fraction, otypes=[object])(qa) if qa.size else qa
    out.sid = derive("rationals", repr(out.qa.tolist()), None)
    return out


def _pow_exact_array(base: ModArray, ks) -> ModArray:
    """base ** k for an exact rational base and an exact array of exponents: each entry exact where k
    is an integer or a half, else one algebraic-constant atom keyed by (base, k), as the ring's cpow."""
    F = base.F
    if base.exact is None or base.exact[1] or base.exact[0] <= 0:
        refuse("x ** k with an array of exponents needs a positive rational constant base")
    q = base.exact[0]
    flat = []
    for k in np.asarray(ks, dtype=object).ravel():
        k = Fraction(k)
        if k.denominator == 1:
            flat.append(int(exact_const(F, _exact_pow((q, ()), int(k))).v))
        elif k.denominator == 2 and _exact_sqrt((q, ())) is not None:
            root = _exact_sqrt((q, ()))
            flat.append(int(exact_const(F, _exact_pow(root, int(k.numerator))).v))
        else:
            flat.append(int(cpow(F, q, k).v))
    v = np.array(flat, dtype=np.int64).reshape(np.shape(ks))
    return ModArray(F, v, None, ATOM, None)


def exact_const(F: Field, exact) -> ModArray:
    q, bases = exact
    v = F.residue(q)
    for base, e in bases:
        root = F.sqrt_pi if base == "pi" else F.prime_root(base)
        v = v * pow(root, e, F.p) % F.p if e >= 0 else v * pow(pow(root, -e, F.p), -1, F.p) % F.p
    out = ModArray(F, np.int64(v), None, _exact_bound(exact), None, exact)
    out.sid = derive("const", repr(exact))
    return out


def cpow(F: Field, base: Fraction, k: Fraction) -> ModArray:
    """An algebraic constant base^k (k not an integer or 1/2): one atom, keyed by (base, k)."""
    import hashlib
    key = int.from_bytes(hashlib.sha256(f"{base}^{k}".encode()).digest()[:7], "big")   # stable across runs
    v = F.atom("cpow", np.int64(key), None)
    return ModArray(F, v, None, ATOM, None)


def _used(*arrays):
    for x in arrays:
        if isinstance(x, ModArray) and x.atom is not None:
            x.F.plain_atoms.add(x.atom)


def _matmul(a: ModArray, b: ModArray) -> ModArray:
    F = a.F
    _used(a, b)
    if a.ndim == 0 or b.ndim == 0:
        refuse("matmul with a scalar operand")
    K = a.shape[-1]
    sid = derive("matmul", None, a, b)
    v = F.value(sid, lambda: F.matmul(a.v, b.v))
    pairs = ([(a.t, b.v)] if a.t is not None else []) + ([(a.v, b.t)] if b.t is not None else [])
    t = None
    if pairs and a.ndim >= 2 and b.ndim >= 2:
        ta = np.broadcast_shapes(np.shape(a.v)[:-2], np.shape(b.v)[:-2])
        pairs = [(np.broadcast_to(x, ta + np.shape(x)[-2:]), np.broadcast_to(y, ta + np.shape(y)[-2:]))
                 for x, y in pairs]
        t = F.matmul_sum(pairs)                      # d(ab) = da b + a db in one contraction
    elif pairs:
        t = F.matmul(*pairs[0]) if len(pairs) == 1 else F.add(F.matmul(*pairs[0]), F.matmul(*pairs[1]))
    shapes = (a.ndim, b.ndim, a.shape, b.shape)
    vb = bnd.matmul(a.b, b.b, *shapes)
    tb = bnd.add(bnd.matmul(a.tb, b.b, *shapes), bnd.matmul(a.b, b.tb, *shapes), np.ndim(v))
    out = ModArray(F, v, t, vb, tb, None)
    out.sid = sid
    return out


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


def sqrt(a):
    return _unary("sqrt", a)


# ------------------------------------------------------------------------------ numpy functions
def _F_of(values):
    for v in values:
        if isinstance(v, ModArray):
            return v.F
    raise SpecError(None, "no backend array among the arguments")


def _lift_all(values):
    F = _F_of(values)
    return F, [lift(F, v) for v in values]


def _join(fn, arrays, **kw):
    F, arrays = _lift_all(list(arrays))
    _used(*arrays)
    v = fn([a.v for a in arrays], **kw)
    t = None
    if any(a.t is not None for a in arrays):
        t = fn([np.zeros(a.shape, np.int64) if a.t is None else np.asarray(a.t) for a in arrays], **kw)
    ax = kw.get("axis", 0) % v.ndim
    placed = [_placed(a, fn, ax, v.ndim) for a in arrays]
    out = ModArray(F, v, t, bnd.join([b for b, _ in placed], v.ndim),
                   bnd.join([tb for _, tb in placed], v.ndim), None)
    out.sid = derive(fn.__name__, _desc(kw), *arrays)
    return out


def _placed(a, fn, ax: int, ndim: int):
    """a's bounds with index arrays valid on the joined array: stacked, a new unit axis; concatenated,
    a class that varies along the axis is replaced by the product of its distinct factors along it,
    constant along the axis (a multiple of each entry's; the other pieces' entries then count factors
    they lack, which ``bnd.join``'s union accounts for)."""
    def move(b):
        if b is None or not b.cls:
            return b
        if fn is np.stack:
            return bnd.unit_axes(bnd.align(b, a.ndim), lambda x: np.expand_dims(x, ax))
        b = bnd.align(b, a.ndim)
        cls = {}
        for key, (idx, e, deg, bits) in b.cls.items():
            if idx.shape[ax] == 1:
                bnd._add_class(cls, key[0], idx, e, deg, bits)
            else:
                count = bnd._distinct_along(idx, [ax])
                shape = tuple(1 if i == ax else s for i, s in enumerate(idx.shape))
                fresh = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
                bnd._add_class(cls, ("prod", key, (ax,)), fresh, e, count * deg, count * bits)
        return bnd.Bound(b.n, b.h, cls)
    return move(a.b), move(a.tb)


@_implements(np.concatenate)
def concatenate(arrays, axis=0, **kw):
    return _join(np.concatenate, arrays, axis=axis)


@_implements(np.stack)
def stack(arrays, axis=0, **kw):
    return _join(np.stack, arrays, axis=axis)


@_implements(np.where)
def where(cond, a, b):
    if isinstance(cond, ModArray):
        refuse("np.where on a condition computed from traced values: masks must come from shapes or "
               "structural params")
    cond = np.asarray(cond, dtype=bool)
    F, (a, b) = _lift_all([a, b])
    _used(a, b)
    v = np.where(cond, a.v, b.v)
    t = None
    if a.t is not None or b.t is not None:
        t = np.where(cond, 0 if a.t is None else a.t, 0 if b.t is None else b.t)
    out = ModArray(F, v, t, bnd.join([a.b, b.b], v.ndim), bnd.join([a.tb, b.tb], v.ndim), None)
    out.sid = derive("where", _desc(cond), a, b)
    return out


@_implements(np.sum)
def _np_sum(a, axis=None, keepdims=False, **kw):
    return a.sum(axis, keepdims)


@_implements(np.mean)
def _np_mean(a, axis=None, keepdims=False, **kw):
    return a.mean(axis, keepdims)


@_implements(np.transpose)
def _np_transpose(a, axes=None):
    return a.transpose(*(axes or ()))


@_implements(np.swapaxes)
def _np_swapaxes(a, i, j):
    return a.swapaxes(i, j)


@_implements(np.reshape)
def _np_reshape(a, shape, **kw):
    return a.reshape(shape)


@_implements(np.expand_dims)
def _np_expand_dims(a, axis):
    out = a._map(lambda x: np.expand_dims(x, axis), ("expand_dims", _desc(axis)))
    return a.reshape(out.shape) if out.ndim else out


@_implements(np.squeeze)
def _np_squeeze(a, axis=None):
    return a._map(lambda x: np.squeeze(x, axis), ("squeeze", _desc(axis)))


@_implements(np.moveaxis)
def _np_moveaxis(a, source, destination):
    return a._map(lambda x: np.moveaxis(x, source, destination), ("moveaxis", _desc(source), _desc(destination)))


@_implements(np.broadcast_to)
def _np_broadcast_to(a, shape, **kw):
    shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    return a._map(lambda x: np.broadcast_to(x, shape), ("broadcast_to", _desc(shape)))


@_implements(np.repeat)
def _np_repeat(a, repeats, axis=None):
    return a._map(lambda x: np.repeat(x, repeats, axis), ("repeat", _desc(repeats), _desc(axis)))


@_implements(np.tile)
def _np_tile(a, reps):
    return a._map(lambda x: np.tile(x, reps), ("tile", _desc(reps)))


@_implements(np.split)
def _np_split(a, indices_or_sections, axis=0):
    n = len(np.split(np.empty(a.shape[axis]), indices_or_sections))
    return [a._map(lambda x, i=i: np.split(x, indices_or_sections, axis)[i],
                   ("split", _desc(indices_or_sections), _desc(axis), i)) for i in range(n)]


@_implements(np.shape)
def _np_shape(a):
    return a.shape


@_implements(np.ndim)
def _np_ndim(a):
    return a.ndim


@_implements(np.matmul)
def _np_matmul(a, b):
    F, (a, b) = _lift_all([a, b])
    return _matmul(a, b)


@_implements(np.zeros_like)
def _np_zeros_like(a, *args, **kw):
    out = ModArray(a.F, np.zeros(a.shape, np.int64), None, None, None)
    out.sid = derive("zeros", _desc(a.shape))
    return out


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
        out = ModArray(self.F, np.zeros(shape, np.int64), None, None, None)
        out.sid = derive("zeros", _desc(shape))
        return out

    def array(self, values):
        flat = np.asarray(values, dtype=object)
        if all(isinstance(v, (numbers.Integral, Fraction)) and not isinstance(v, bool) for v in flat.ravel()):
            return qarray(self.F, np.vectorize(Fraction, otypes=[object])(flat) if flat.size else flat)
        return stack([lift(self.F, v) for v in values]) if len(values) else self.zeros((0,))

    def max_shift(self, x, mask=None):
        """0 in exact arithmetic, as in every exact backend (the claim max_shift_free covers floats)."""
        return self.zeros(np.shape(x.v if isinstance(x, ModArray) else x)[:-1] + (1,))

    def exp(self, a):
        return _unary("exp", lift(self.F, a))

    def log(self, a):
        return _unary("log", lift(self.F, a))

    def sqrt(self, a):
        return _unary("sqrt", lift(self.F, a))

    def erf(self, a):
        return _unary("erf", lift(self.F, a))

    def tanh(self, a):
        return _unary("tanh", lift(self.F, a))

    def sin(self, a):
        return _unary("sin", lift(self.F, a))

    def cos(self, a):
        return _unary("cos", lift(self.F, a))
