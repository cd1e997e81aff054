"""The values a framework graph is evaluated on, and the arithmetic every frontend shares.

A framework graph mixes two kinds of arrays:

* **traced** values depend on the op's inputs: arrays over the backend ``B`` (object arrays of exact
  atoms, SymPy or mpmath numbers; float64 / float32 arrays);
* **static** values do not: masks built from shapes (``arange``, ``tril``), index arrays, constants
  (``full``, ``scalar_tensor``). They are computed exactly, without ``B``: bool and int64 arrays, and
  object arrays of ``Fraction`` for floating constants.

Only static values may be compared or used to select entries (a causal mask is static; ``x > 0`` is a
comparison of traced values and is refused as bad input, as it is in a spec). A value may also carry
a static ``neginf`` mask: entries that are minus infinity, as an additive attention mask makes them.
They are excluded from a softmax (as the attention spec excludes masked logits), ``exp`` makes them
0, comparing them with -inf gives the mask back; every other use of them is refused.


Float constants of a graph are read as exact numbers by ``frontends.constants``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from vjpcert.core.registry import SpecError
from vjpcert.frontends.constants import Constants, decimal_of



def own_array(a) -> bool:
    """An array type of its own that follows the spec language's numpy protocols (the modular tier's
    arrays mod p): traced values of that backend stay that type, as they do in a spec."""
    return not isinstance(a, np.ndarray) and hasattr(type(a), "__array_function__")


def as_array(a):
    """A traced result as an array: numpy's (a 0-d result made an array again), or the backend's own."""
    return a if isinstance(a, np.ndarray) or own_array(a) else np.asarray(a)


def fresh_copy(a):
    """A copy of an array to write into (numpy's, or the backend's own, which copies itself)."""
    return a.copy() if own_array(a) else np.array(a, copy=True)


class Val:
    """One array of a graph: ``a`` (static exact numbers, or an array over B), ``static``, and the
    static ``neginf`` mask (None when no entry is -inf)."""

    __slots__ = ("a", "static", "neginf", "nan", "indicator", "ramp")

    def __init__(self, a, static: bool, neginf=None, nan=None, indicator: bool = False):
        self.a = a if isinstance(a, np.ndarray) or own_array(a) else np.asarray(a, dtype=object)
        self.static = static
        # a traced 0/1 array: an order comparison of input-dependent numbers, made of B.step (a kink)
        self.indicator = indicator
        # for relu(z) = z step(z): the Val step(z), which is also step(relu(z)) (see torch_rules._step)
        self.ramp = None
        self.neginf = self._mask(neginf)
        # NaN only in static values, and only to be selected away (JAX's jnp.var writes a NaN into
        # the branch for an empty axis); any arithmetic on it is refused
        self.nan = self._mask(nan)

    def _mask(self, m):
        if m is None:
            return None
        m = np.broadcast_to(np.asarray(m, dtype=bool), self.a.shape)
        return m if m.any() else None

    @property
    def shape(self):
        return self.a.shape

    @property
    def kind(self) -> str:
        """'bool', 'int' or 'float' (static values); traced values are 'float'."""
        if not self.static:
            return "float"
        if self.a.dtype == bool:
            return "bool"
        if self.a.dtype.kind in "iu":
            return "int"
        return "float"

    def mask(self) -> np.ndarray:
        return self.neginf if self.neginf is not None else np.zeros(self.a.shape, dtype=bool)

    def nan_mask(self) -> np.ndarray:
        return self.nan if self.nan is not None else np.zeros(self.a.shape, dtype=bool)

    def __repr__(self):
        return f"Val({'static' if self.static else 'traced'} {self.kind} {self.a.shape})"


# ------------------------------------------------------------------------------------ evaluation context
class Context:
    """Arithmetic on ``Val``s over one backend; ``at`` names the graph node for error messages."""

    def __init__(self, B, constants: Constants, op_name: str | None = None):
        self.B = B
        self.constants = constants
        self.op_name = op_name
        # a backend with arrays of its own (mod p) takes a static array's exact numbers at once
        # (B.array of ints and Fractions); the others get one B.c constant per entry
        self._exact_arrays = own_array(B.zeros((0,)))
        self.at = ""
        self.sites = 0                   # maxima of input values met (see max_site)
        self.casts: set[str] = set()     # dtype conversions met (for the assumptions)

    # ---------------------------------------------------------------- errors
    def refuse(self, problem: str):
        raise SpecError(self.op_name, f"{self.at}: {problem}" if self.at else problem)

    # ---------------------------------------------------------------- making values
    def scalar(self, v, dtype: str | None = None) -> Val:
        """A Python scalar argument of a node (an int, a bool, a float constant; ``dtype``: a
        constant's own dtype where it has one)."""
        if isinstance(v, Val):
            return v
        if isinstance(v, (bool, np.bool_)):
            return Val(np.array(bool(v)), True)
        if isinstance(v, (int, np.integer)):
            return Val(np.array(int(v), dtype=np.int64), True)
        if isinstance(v, Fraction):
            return Val(np.array(v, dtype=object), True)
        if isinstance(v, (float, np.floating)):
            v = float(v)
            if math.isnan(v):
                return Val(np.array(Fraction(0), dtype=object), True, nan=np.array(True))
            if math.isinf(v):
                if v > 0:
                    self.refuse("a +inf constant has no exact value (only -inf, as a mask, is supported)")
                return Val(np.array(Fraction(0), dtype=object), True, neginf=np.array(True))
            read = self.constants.read(v, dtype)
            if isinstance(read, Fraction):
                return Val(np.array(read, dtype=object), True)
            return Val(self._array_of([read(self.B)], ()), False)
        self.refuse(f"cannot read the argument {v!r} ({type(v).__name__}) as a number")

    def full(self, shape, value, kind: str | None = None) -> Val:
        """A static array of one value (full, zeros, ones, scalar_tensor)."""
        s = self.scalar(value)
        shape = tuple(int(n) for n in shape)
        if not s.static:
            return Val(np.broadcast_to(s.a, shape).copy(), False)
        a = np.broadcast_to(s.a, shape).copy()
        out = Val(a, True, None if s.neginf is None else np.broadcast_to(s.neginf, shape),
                  None if s.nan is None else np.broadcast_to(s.nan, shape))
        return self.convert(out, kind) if kind else out

    def _array_of(self, items, shape) -> np.ndarray:
        B = self.B
        if not items:
            return B.zeros(shape)
        return as_array(B.array(items)).reshape(shape)

    def lift(self, v: Val) -> np.ndarray:
        """The array over B of a value (static numbers become B.c(...) constants)."""
        v = self.scalar(v) if not isinstance(v, Val) else v
        if v.nan is not None:
            self.refuse("a NaN is used as a number")
        if not v.static:
            return v.a
        B = self.B
        if self._exact_arrays and v.a.size and v.a.dtype.kind in "biu":
            return B.array(v.a.astype(np.int64)).reshape(v.a.shape)    # a mask or an index table, at once
        flat = v.a.ravel().tolist()
        if self._exact_arrays and flat:
            if all(getattr(x, "denominator", None) == 1 and abs(x) < 2**62 for x in flat):  # whole numbers
                return B.array(np.array([int(x) for x in flat], dtype=np.int64)).reshape(v.a.shape)
            exact = [int(x) if isinstance(x, (bool, int, np.integer, np.bool_)) else Fraction(x) for x in flat]
            return B.array(exact).reshape(v.a.shape)
        items = [B.c(int(x)) if isinstance(x, (bool, int, np.integer, np.bool_)) else B.c(Fraction(x))
                 for x in flat]
        return self._array_of(items, v.a.shape)

    def convert(self, v: Val, kind: str) -> Val:
        """A dtype conversion: exact on static values; on traced values only float -> float (the
        identity in exact arithmetic); a traced value cast to bool or int is a comparison."""
        if kind == "float":
            if v.static and v.kind != "float":
                return Val(v.a.astype(object) * Fraction(1), True, v.neginf)
            return v
        self._no_nan(v)
        if not v.static and v.indicator:              # a comparison's 0/1 as bool, int or float: itself
            return v
        if not v.static:
            self.refuse(f"a traced value is cast to {kind}: that is a comparison (rounding, truth) of "
                        f"input-dependent numbers")
        if v.neginf is not None:
            self.refuse(f"-inf cast to {kind}")
        if kind == "bool":
            return Val(np.vectorize(bool, otypes=[bool])(v.a) if v.a.size else v.a.astype(bool), True)
        if kind == "int":
            if v.kind == "float" and any(Fraction(x).denominator != 1 for x in v.a.ravel()):
                self.refuse("a non-integer constant is truncated to int")
            return Val(np.vectorize(int, otypes=[np.int64])(v.a) if v.a.size else v.a.astype(np.int64), True)
        self.refuse(f"unknown dtype kind {kind!r}")

    # ---------------------------------------------------------------- elementwise arithmetic
    def _static_exact(self, v: Val) -> np.ndarray:
        return v.a.astype(object) if v.a.dtype != object else v.a

    def binary(self, op: str, x, y, alpha=None) -> Val:
        """x op y for op in + - * / (true division), numpy broadcasting; ``alpha`` scales y (ATen's
        add/sub)."""
        x, y = self.scalar(x), self.scalar(y)
        self._no_nan(x, y)
        if alpha is not None and alpha != 1:
            y = self.binary("*", y, alpha)
        mx, my = x.mask(), y.mask()
        try:
            shape = np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            self.refuse(f"shapes {x.shape} and {y.shape} do not broadcast")
        mask = None
        if x.neginf is not None or y.neginf is not None:
            mask = self._inf_rule(op, x, y, mx, my, shape)
        if x.static and y.static:
            a, b = self._static_exact(x), self._static_exact(y)
            if op == "/":
                if any(v == 0 for v in np.broadcast_to(b, shape).ravel()):
                    self.refuse("division by an exact zero")
                a = a * Fraction(1)
            out = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}[op](a, b)
            out = np.asarray(out, dtype=object)
            if x.kind in ("int", "bool") and y.kind in ("int", "bool") and op != "/":
                out = np.asarray(out.astype(np.int64) if out.size else out.astype(np.int64))
            return Val(out, True, mask)
        a, b = self.lift(x), self.lift(y)
        if mask is not None:   # masked entries hold placeholders: keep them finite and harmless
            zero = self.lift(self.scalar(0))
            a = np.where(np.broadcast_to(mx, a.shape), zero, a) if x.neginf is not None else a
            b = np.where(np.broadcast_to(my, b.shape), zero, b) if y.neginf is not None else b
        out = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}[op](a, b)
        return Val(as_array(out), False, mask)

    def _no_nan(self, *vals):
        if any(v.nan is not None for v in vals):
            self.refuse("a NaN is used as a number")

    def _positive_static(self, v: Val) -> bool:
        return v.static and v.neginf is None and all(Fraction(t) > 0 for t in v.a.ravel())

    def _inf_rule(self, op, x, y, mx, my, shape):
        """Where -inf may go: -inf + finite, -inf - finite, and -inf times or over a positive
        constant stay -inf; anything else (-inf - -inf, -inf * a traced value) is refused."""
        if op == "+":
            return np.broadcast_to(mx, shape) | np.broadcast_to(my, shape)
        if op == "-" and y.neginf is None:
            return np.broadcast_to(mx, shape).copy()
        if op in ("*", "/") and y.neginf is None and self._positive_static(y):
            return np.broadcast_to(mx, shape).copy()
        if op == "*" and x.neginf is None and self._positive_static(x):
            return np.broadcast_to(my, shape).copy()
        self.refuse(f"-inf reaches '{op}' with an operand that is not a positive constant: its value "
                    f"would be NaN or +inf")

    def neg(self, x: Val) -> Val:
        x = self.scalar(x)
        self._no_nan(x)
        if x.neginf is not None:
            self.refuse("-inf is negated (+inf has no exact value)")
        return Val(np.asarray(-x.a), x.static) if x.static else Val(as_array(-x.a), False)

    def unary(self, kind: str, x: Val) -> Val:
        """A transcendental function over B (static arguments are lifted: sqrt(2) stays exact)."""
        x = self.scalar(x)
        self._no_nan(x)
        B = self.B
        if x.neginf is not None:
            if kind != "exp":
                self.refuse(f"-inf reaches {kind}")
            keep = ~x.neginf
            a = self.lift(Val(x.a, x.static))
            zero = self.lift(self.scalar(0))
            safe = np.where(keep, a, zero)
            return Val(as_array(np.where(keep, B.exp(safe), zero)), False)
        a = self.lift(x)
        if kind == "rsqrt":
            return Val(as_array(1 / B.sqrt(a)), False)
        if kind == "sigmoid":
            return Val(as_array(1 / (1 + B.exp(-a))), False)
        if kind == "expm1":
            return Val(as_array(B.exp(a) - 1), False)
        if kind == "log1p":
            return Val(as_array(B.log(1 + a)), False)
        if kind == "reciprocal":
            return Val(as_array(1 / a), False)
        fn = getattr(B, kind, None)
        if fn is None:
            self.refuse(f"the backend has no {kind}")
        return Val(as_array(fn(a)), False)

    def power(self, x: Val, k) -> Val:
        """x ** k for a constant exponent: integers, and +-1/2 (square roots)."""
        x = self.scalar(x)
        if isinstance(k, Val):
            if not k.static or k.a.shape != ():
                self.refuse("x ** y with a tensor exponent y is not supported (use exp and log)")
            k = k.a.item()
        if isinstance(k, float):
            if not math.isfinite(k):
                self.refuse(f"x ** {k!r}")
            k = decimal_of(k)
        k = Fraction(k)
        self._no_nan(x)
        if x.neginf is not None:
            self.refuse("-inf raised to a power")
        if k.denominator == 1:
            n = int(k)
            if x.static:
                if n < 0 and any(v == 0 for v in x.a.ravel()):
                    self.refuse("division by an exact zero")
                return Val(np.asarray(self._static_exact(x) ** n if n >= 0 else Fraction(1) / self._static_exact(x) ** -n,
                                      dtype=object), True)
            a = self.lift(x)
            if n == 0:
                return Val(as_array(a * 0 + 1), False)
            return Val(as_array(a ** n if n > 0 else 1 / a ** -n), False)
        if k.denominator == 2:
            root = self.unary("sqrt", x)
            return self.power(root, int(k.numerator))
        self.refuse(f"x ** {k} is not supported: integer and half-integer powers only")

    # ---------------------------------------------------------------- selection and comparison
    def where(self, cond: Val, x, y) -> Val:
        cond = self.scalar(cond)
        if not cond.static and cond.indicator:        # a kink: x m + y (1 - m), m = [a > b] (B.step)
            x, y = self.scalar(x), self.scalar(y)
            if x.neginf is not None or y.neginf is not None or x.nan is not None or y.nan is not None:
                self.refuse("-inf or NaN selected by a comparison of input-dependent numbers")
            m = cond.a
            a, b = self.lift(x), self.lift(y)
            return Val(as_array(a * m + b * (1 - m)), False)
        if not cond.static:
            self.refuse("entries are selected by a traced value that is no comparison; masks must be built "
                        "from shapes")
        c = self.convert(cond, "bool").a
        x, y = self.scalar(x), self.scalar(y)
        shape = np.broadcast_shapes(c.shape, x.shape, y.shape)
        mask = np.where(c, np.broadcast_to(x.mask(), shape), np.broadcast_to(y.mask(), shape))
        nan = np.where(c, np.broadcast_to(x.nan_mask(), shape), np.broadcast_to(y.nan_mask(), shape))
        if x.static and y.static:
            a, b = x.a, y.a
            if x.kind != y.kind:
                a, b = self._static_exact(self.convert(x, "float")), self._static_exact(self.convert(y, "float"))
            return Val(np.asarray(np.where(c, a, b)), True, mask, nan)
        if nan.any():
            self.refuse("a NaN is selected into an input-dependent value")
        a, b = self.lift(Val(x.a, x.static)), self.lift(Val(y.a, y.static))
        return Val(as_array(np.where(np.broadcast_to(c, shape), np.broadcast_to(a, shape),
                                       np.broadcast_to(b, shape))), False, mask)

    def compare(self, op: str, x, y) -> Val:
        """A comparison; exact on static values. On a traced value the only decidable ones are
        against infinities: inputs are real, so a traced entry is -inf exactly where its mask says."""
        x, y = self.scalar(x), self.scalar(y)
        self._no_nan(x, y)
        if x.static and y.static and x.neginf is None and y.neginf is None:
            a, b = self._static_exact(x), self._static_exact(y)
            fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                  "gt": np.greater, "ge": np.greater_equal}[op]
            return Val(np.asarray(fn(a, b), dtype=bool), True)
        if op in ("eq", "ne"):
            for t, o in ((x, y), (y, x)):
                if o.static and o.a.shape == () and o.neginf is not None:      # t == -inf
                    m = t.mask()
                    return Val(m.copy() if op == "eq" else ~m, True)
        if x.neginf is None and y.neginf is None:
            # a comparison is made of kinks, exactly: [x > y] = step(x - y), [x >= y] = 1 - step(y - x),
            # [x = y] = 1 - step(x - y) - step(y - x) (PyTorch's maximum backward splits a tie with it)
            d = self.lift(x) - self.lift(y)
            step = self.B.step
            m = {"gt": lambda: step(d), "lt": lambda: step(-d), "ge": lambda: 1 - step(-d),
                 "le": lambda: 1 - step(d), "eq": lambda: 1 - step(d) - step(-d),
                 "ne": lambda: step(d) + step(-d)}[op]()
            return Val(as_array(m), False, indicator=True)
        self.refuse(f"'{op}' compares an input-dependent number with -inf entries")

    def logical(self, op: str, *xs) -> Val:
        vals = [self.scalar(x) for x in xs]
        if not all(v.static for v in vals):
            if not all(v.static or v.indicator for v in vals):
                self.refuse(f"logical '{op}' of a traced value that is no comparison")
            m = [v.a if not v.static else self.lift(self.convert(v, "int")) for v in vals]
            out = {"not": lambda: 1 - m[0], "and": lambda: m[0] * m[1],
                   "or": lambda: m[0] + m[1] - m[0] * m[1], "xor": lambda: m[0] + m[1] - 2 * m[0] * m[1]}[op]()
            return Val(as_array(out), False, indicator=True)
        a = [self.convert(v, "bool").a for v in vals]
        fn = {"not": np.logical_not, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
        return Val(np.asarray(fn(*a), dtype=bool), True)

    # ---------------------------------------------------------------- reductions and products
    def tie_split(self, x, y) -> Val:
        """max(x, y) with the derivative both frameworks give their binary maximum: x where x > y, y
        where y > x, half to each on a tie (PyTorch's maximum backward, lax.max's balanced JVP):
        x w + y (1 - w), w = [x > y] + [x = y] / 2 -- the kink of the language (``B.step``), so the
        claims are proved region by region and at_the_kink checks the split."""
        d = self.binary("-", x, y)
        above, below = self.unary("step", d), self.unary("step", self.neg(d))
        w = self.binary("+", above, self.binary("*", self.binary("-", self.binary("-", 1, above), below),
                                               Fraction(1, 2)))
        return self.binary("+", self.binary("*", x, w), self.binary("*", y, self.binary("-", 1, w)))

    def reduce_sum(self, x: Val, axes, keepdims: bool, mean: bool = False) -> Val:
        x = self.scalar(x)
        self._no_nan(x)
        axes = tuple(range(x.a.ndim)) if axes is None or len(axes) == 0 else \
            tuple(sorted(a % max(x.a.ndim, 1) for a in axes))
        if x.neginf is not None:
            self.refuse("a sum over -inf entries")
        count = int(np.prod([x.a.shape[a] for a in axes])) if x.a.ndim else 1
        if x.static:
            a = self._static_exact(x) if (mean or x.kind == "float") else x.a
            s = np.asarray(a.sum(axis=axes, keepdims=keepdims) if x.a.ndim else a, dtype=object)
            if mean:
                if count == 0:
                    self.refuse("mean over an empty axis")
                s = np.asarray(s * Fraction(1, count), dtype=object)
            elif x.kind in ("int", "bool"):
                s = s.astype(np.int64)
            return Val(s, True)
        a = x.a
        s = a.sum(axis=axes, keepdims=keepdims) if a.ndim else a
        s = as_array(s)
        if mean:
            if count == 0:
                self.refuse("mean over an empty axis")
            s = as_array(s * self.B.c(1, count))
        return Val(s, False)

    def any_all(self, op: str, x: Val, axes, keepdims) -> Val:
        x = self.scalar(x)
        if not x.static:
            self.refuse(f"'{op}' of a traced value")
        b = self.convert(x, "bool").a
        axes = None if axes is None else tuple(axes)
        fn = np.any if op == "any" else np.all
        return Val(np.asarray(fn(b, axis=axes, keepdims=keepdims), dtype=bool), True)

    def matmul(self, x: Val, y: Val) -> Val:
        x, y = self.scalar(x), self.scalar(y)
        self._no_nan(x, y)
        if x.neginf is not None or y.neginf is not None:
            self.refuse("-inf in a matrix product")
        if x.static and y.static:
            return Val(np.asarray(np.matmul(self._static_exact(x), self._static_exact(y)), dtype=object), True)
        return Val(as_array(np.matmul(self.lift(x), self.lift(y))), False)

    def max_site(self, x: Val, axes, keepdims: bool) -> Val:
        """A maximum of input values over ``axes`` (a softmax's shift, as JAX and hand-written code
        compute it): B.max_shift of each row, i.e. 0 in exact arithmetic and the maximum in floats.
        The graph is then the framework's function only if nothing it computes depends on that value:
        the claim ``max_shift_free``, which every op whose code calls B.max_shift carries (the exact
        tier proves it with a free shift per row, ``core.trace.TraceBackend``)."""
        x = self.scalar(x)
        self._no_nan(x)
        if x.neginf is not None:
            self.refuse("a maximum over -inf entries")
        if x.static:
            a = self._static_exact(x)
            return Val(np.asarray(np.max(a, axis=tuple(axes), keepdims=keepdims), dtype=object), True)
        nd = x.a.ndim
        axes = tuple(sorted(a % nd for a in axes))
        rest = [i for i in range(nd) if i not in axes]
        moved = np.transpose(x.a, rest + list(axes))
        flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
        m = as_array(self.B.max_shift(flat))                       # shape rest + (1,)
        out_shape = tuple(1 if i in axes else x.shape[i] for i in range(nd)) if keepdims else \
            tuple(x.shape[i] for i in rest)
        self.sites += 1
        return Val(as_array(m.reshape(out_shape)), False)

    def softmax(self, x: Val, axis: int, log: bool = False) -> Val:
        """Row softmax (or log-softmax) along ``axis``, its mathematical definition: exp(x_i) / sum_j
        exp(x_j). Entries that are -inf are excluded (exp(-inf) = 0). The shift by the row maximum is
        B.max_shift: 0 in exact arithmetic, the maximum in floats (what PyTorch's kernels do)."""
        x = self.scalar(x)
        self._no_nan(x)
        B = self.B
        a = np.moveaxis(self.lift(Val(x.a, x.static)), axis, -1)
        if x.neginf is None:
            s = a - B.max_shift(a)
            if log:
                out = s - B.log(B.exp(s).sum(-1, keepdims=True))
            else:
                e = B.exp(s)
                out = e / e.sum(-1, keepdims=True)
            return Val(as_array(np.moveaxis(as_array(out), -1, axis)), False)
        keep = np.moveaxis(~x.neginf, axis, -1)
        if log:
            self.refuse("log-softmax of a row with -inf entries")
        if not keep.any(-1).all():
            self.refuse("a softmax row is entirely -inf (PyTorch gives NaN there)")
        zero = self.lift(self.scalar(0))
        safe = np.where(keep, a, zero)
        e = np.where(keep, B.exp(safe - B.max_shift(safe, keep)), zero)
        out = e / e.sum(-1, keepdims=True)
        return Val(as_array(np.moveaxis(as_array(out), -1, axis)), False)

    # ---------------------------------------------------------------- structure
    def structural(self, x: Val, fn) -> Val:
        """An op that moves entries around (reshape, transpose, slice, expand): the same on the values
        and on the -inf mask."""
        x = self.scalar(x)
        a = as_array(fn(x.a))
        m = None if x.neginf is None else np.asarray(fn(x.neginf))
        nan = None if x.nan is None else np.asarray(fn(x.nan))
        return Val(a, x.static, m, nan)

    def concat(self, xs, axis: int) -> Val:
        xs = [self.scalar(x) for x in xs if not (isinstance(x, Val) and x.a.size == 0 and x.a.ndim == 1)]
        self._no_nan(*xs)
        if all(x.static for x in xs):
            kinds = {x.kind for x in xs}
            arrays = [x.a if len(kinds) == 1 else self._static_exact(self.convert(x, "float")) for x in xs]
            a = np.concatenate(arrays, axis=axis)
            static = True
        else:
            a = np.concatenate([self.lift(Val(x.a, x.static)) for x in xs], axis=axis)
            static = False
        m = np.concatenate([x.mask() for x in xs], axis=axis)
        return Val(a, static, m)

    def output(self, v: Val) -> np.ndarray:
        """An array the op returns: over B, a fresh array (never an input's own)."""
        if not isinstance(v, Val):
            self.refuse(f"the graph returns a {type(v).__name__}, not a tensor")
        self._no_nan(v)
        if v.neginf is not None:
            self.refuse("the graph returns -inf entries")
        return fresh_copy(self.lift(v))
