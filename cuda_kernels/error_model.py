"""First-order rounding-error models of the kernels: what a kernel's output may differ from the spec.

Each kernel file restates its kernel's float32 arithmetic, step by step and in the kernel's own
summation order, over ``Tracked`` arrays (numpy float64, at the kernel's float32 inputs). Every
float32 operation of the kernel rounds: its result is ``r (1 + delta)`` with ``|delta| <= u``
(u = 2^-24; a library function such as ``expf`` within its documented error, ``c u`` with c from
``settings``). To first order a computed output is

    y_hat = y + sum_k c_k delta_k

over all the roundings delta_k the kernel made on the way to y (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., chapters 3-4: a sum's error is the sum of its partial sums' roundings).
A Tracked array carries, per element, the float64 value ``v`` of the step in exact arithmetic and
the norms of its coefficient vector c: ``1`` = l1 norm, ``2`` = l2 norm (in units of u). Then

  * deterministically  |y_hat - y| <= u ||c||_1                     (Higham's bound, to first order)
  * probabilistically  |y_hat - y| <= lambda u ||c||_2  with probability >= 1 - 2 exp(-lambda^2 / 2),
    when the deltas are independent and of mean zero (Higham and Mary's model, SIAM J. Sci. Comput.
    41(5), 2019; the tail is Hoeffding's inequality for a sum of bounded independent terms).

The accumulation length and the condition factor of "L u x kappa" are inside ||c||: a sum of n terms
in the kernel's order contributes its n - 1 partial sums (a sequential sum of positive terms: ~n^2/2
times the mean term, a block tree: far less), and every cancellation shows as coefficients larger
than the result.

Which roundings may be combined in l2 (as independent) is tracked conservatively: each element's
coefficients are split into ``p`` (private: roundings no other element of the array depends on)
and ``s`` (shared: roundings other elements may depend on too, e.g. a row statistic that was
broadcast). A sum combines the private parts of its terms in l2 (different terms' private
roundings are different roundings) and the shared parts with the triangle inequality; what a sum
inherits from its terms becomes shared in the result (the same terms may feed other sums: a row of
P feeds every column of P V), its own partial-sum roundings private. An elementwise step combines
its operands' parts with the triangle inequality (|f_x| c_x + |f_y| c_y), an operand broadcast to
several elements passing everything on as shared; a new rounding is private and independent of
everything before it; an output's bound adds its private and shared norms. Every combination
over-estimates or is exact, so the bound is never tighter than the model allows.

The models also compute ``v``: it must equal the float64 spec (to float64 rounding), or the model
does not describe the kernel's formula -- the checker tests that before it uses a bound.
"""
from __future__ import annotations

import numpy as np

from vjpcert.cuda_kernels import settings as tol

_CHUNK_ELEMENTS = 1 << 22        # contractions materialise (rows, cols, k) products in chunks this big


class Tracked:
    """A float64 value array with the l1/l2 norms (units of u) of its first-order rounding
    coefficients, private (p1, p2) and shared (s1, s2). Arithmetic between Tracked arrays (or with
    exact float32 numbers) is a float32 kernel operation: the result is rounded once."""

    __slots__ = ("v", "p1", "p2", "s1", "s2")
    __array_priority__ = 100           # numpy arrays on the left defer to our operators

    def __init__(self, v, p1=0.0, p2=0.0, s1=0.0, s2=0.0):
        self.v = np.asarray(v, dtype=np.float64)
        shape = self.v.shape
        self.p1, self.p2, self.s1, self.s2 = (np.broadcast_to(np.asarray(a, np.float64), shape)
                                              for a in (p1, p2, s1, s2))

    # ---- views
    @property
    def shape(self):
        return self.v.shape

    def l1(self) -> np.ndarray:
        return self.p1 + self.s1

    def l2(self) -> np.ndarray:
        return self.p2 + self.s2

    def __getitem__(self, key):
        return Tracked(self.v[key], self.p1[key], self.p2[key], self.s1[key], self.s2[key])

    def reshape(self, *shape):
        return Tracked(*(a.reshape(*shape) for a in (self.v, self.p1, self.p2, self.s1, self.s2)))

    def swapaxes(self, a, b):
        return Tracked(*(np.swapaxes(x, a, b) for x in (self.v, self.p1, self.p2, self.s1, self.s2)))

    def where(self, mask, other: float = 0.0) -> "Tracked":
        """Elements outside ``mask`` set to an exact constant (a kernel writing 0 to masked entries)."""
        keep = lambda a, o: np.where(mask, a, o)   # noqa: E731
        return Tracked(keep(self.v, other), keep(self.p1, 0), keep(self.p2, 0), keep(self.s1, 0), keep(self.s2, 0))

    def shared(self) -> "Tracked":
        """All coefficients as shared: the value is about to reach several elements."""
        return Tracked(self.v, 0.0, 0.0, self.p1 + self.s1, self.p2 + self.s2)

    # ---- arithmetic (each a float32 operation: one rounding)
    def __add__(self, o):
        return _binary(self, o, lambda a, b: a + b, lambda a, b: (1.0, 1.0))

    def __radd__(self, o):
        return _binary(o, self, lambda a, b: a + b, lambda a, b: (1.0, 1.0))

    def __sub__(self, o):
        return _binary(self, o, lambda a, b: a - b, lambda a, b: (1.0, 1.0))

    def __rsub__(self, o):
        return _binary(o, self, lambda a, b: a - b, lambda a, b: (1.0, 1.0))

    def __mul__(self, o):
        return _binary(self, o, lambda a, b: a * b, lambda a, b: (np.abs(b), np.abs(a)), scaling=True)

    def __rmul__(self, o):
        return _binary(o, self, lambda a, b: a * b, lambda a, b: (np.abs(b), np.abs(a)), scaling=True)

    def __truediv__(self, o):
        return _binary(self, o, lambda a, b: a / b, lambda a, b: (1 / np.abs(b), np.abs(a) / b ** 2))

    def __rtruediv__(self, o):
        return _binary(o, self, lambda a, b: a / b, lambda a, b: (1 / np.abs(b), np.abs(a) / b ** 2))

    def __neg__(self):
        return Tracked(-self.v, self.p1, self.p2, self.s1, self.s2)      # exact


def exact(a) -> Tracked:
    """A value the kernel holds exactly (a float32 input, an integer count, a multiply by 2^k)."""
    return Tracked(np.asarray(a, np.float64))


def constant(value: float) -> Tracked:
    """A constant rounded once to float32 on the host (1/sqrt(2), eps, 1/sqrt(d)): one rounding that
    every element using it shares."""
    v = np.float64(value)
    exact32 = float(np.float32(v)) == v
    return Tracked(v) if exact32 else Tracked(v, 0.0, 0.0, abs(v), abs(v))


def _as_tracked(x) -> Tracked:
    return x if isinstance(x, Tracked) else exact(x)


def _binary(x, y, f, grads, scaling=False) -> Tracked:
    x, y = _as_tracked(x), _as_tracked(y)
    with np.errstate(all="ignore"):
        v = f(x.v, y.v)
        gx, gy = grads(x.v, y.v)
    out = _propagate(v, (x, gx), (y, gy))
    if scaling and (_power_of_two(x) or _power_of_two(y)):
        return out                      # a product with an exact power of two does not round
    return round_(out)


def _power_of_two(t: Tracked) -> bool:
    if np.any(t.p1) or np.any(t.s1) or t.v.size == 0:
        return False
    mant, _ = np.frexp(np.abs(t.v))
    return bool(np.all(mant == 0.5))


def _propagate(v, *terms) -> Tracked:
    """First-order propagation of the operands' errors through an elementwise step: the operands'
    coefficients scaled by |df/dx| and added with the triangle inequality; an operand that reaches
    several elements (broadcast) passes its private part on as shared."""
    shape = np.shape(v)
    p1 = p2 = s1 = s2 = 0.0
    for t, g in terms:
        g = np.abs(np.asarray(g, np.float64))
        if t.shape != shape:
            t = t.shared()
        p1 = p1 + g * t.p1
        p2 = p2 + g * t.p2
        s1 = s1 + g * t.s1
        s2 = s2 + g * t.s2
    with np.errstate(invalid="ignore"):
        clean = lambda a: np.nan_to_num(np.broadcast_to(a, shape), nan=0.0)   # noqa: E731  (0 * inf)
    return Tracked(v, clean(p1), clean(p2), clean(s1), clean(s2))


def round_(x: Tracked, units: float = 1.0) -> Tracked:
    """One new rounding of every element, relative error at most ``units`` u."""
    r = units * np.abs(x.v)
    return Tracked(x.v, x.p1 + r, np.hypot(x.p2, r), x.s1, x.s2)


def absolute_error(x: Tracked, units: float) -> Tracked:
    """A new error of at most ``units`` u in absolute terms (a function accurate to an absolute bound)."""
    return Tracked(x.v, x.p1 + units, np.hypot(x.p2, units), x.s1, x.s2)


def function(x: Tracked, f, df, units: float) -> Tracked:
    """y = f(x) by a library function accurate to ``units`` u relative: x's errors times |f'(x)|,
    then the function's own error."""
    x = _as_tracked(x)
    with np.errstate(all="ignore"):
        v = f(x.v)
        g = df(x.v, v)
    return round_(_propagate(v, (x, g)), units)


def exp(x: Tracked) -> Tracked:
    """expf: 2 ulp, and a result below 2^-126 may be flushed to 0 (an absolute error)."""
    y = function(x, np.exp, lambda a, y: y, tol.FUNCTION_ERROR_U["exp"])
    return absolute_error(y, tol.UNDERFLOW / tol.UNIT_ROUNDOFF)


def log(x: Tracked) -> Tracked:
    return function(x, np.log, lambda a, y: 1 / np.abs(a), tol.FUNCTION_ERROR_U["log"])


def sqrt(x: Tracked) -> Tracked:
    return function(x, np.sqrt, lambda a, y: 0.5 / y, tol.FUNCTION_ERROR_U["sqrt"])


def erf(x: Tracked) -> Tracked:
    from scipy.special import erf as _erf
    return function(x, _erf, lambda a, y: 2 / np.sqrt(np.pi) * np.exp(-a * a), tol.FUNCTION_ERROR_U["erf"])


def tanh(x: Tracked) -> Tracked:
    return function(x, np.tanh, lambda a, y: 1 - y * y, tol.FUNCTION_ERROR_U["tanh"])


# ------------------------------------------------------------------------------ sums, in kernel order
def _partial_norms(terms: np.ndarray, axis: int):
    """(l1, l2, total) over ``axis`` of the roundings of a sequential sum ``acc = 0; acc += t`` of
    exact-arithmetic terms: adding to an exact 0, or adding an exact 0, does not round."""
    partial = np.cumsum(terms, axis=axis)
    rounds = (terms != 0) & ((partial - terms) != 0)
    w = np.where(rounds, np.abs(partial), 0.0)
    total = partial.take(-1, axis=axis) if terms.shape[axis] else np.zeros(w.sum(axis=axis).shape)
    return w.sum(axis=axis), np.sqrt((w * w).sum(axis=axis)), total


def _tree_norms(leaves: np.ndarray):
    """l1, l2 of the roundings of a block tree over the last axis (size a power of two):
    level s adds slot t + s into slot t for t < s."""
    a = leaves
    r1 = np.zeros(a.shape[:-1])
    r2 = np.zeros(a.shape[:-1])
    while a.shape[-1] > 1:
        h = a.shape[-1] // 2
        lo, hi = a[..., :h], a[..., h:]
        s = lo + hi
        rounds = (lo != 0) & (hi != 0)
        w = np.where(rounds, np.abs(s), 0.0)
        r1 += w.sum(-1)
        r2 = np.hypot(r2, np.sqrt((w * w).sum(-1)))
        a = s
    return r1, r2, a[..., 0]


def _order_norms(terms: np.ndarray, order: tuple):
    """(l1, l2, total) of the roundings of summing ``terms`` over the last axis in a kernel's order:
      ("sequential",)       one running sum, acc = 0; acc += t
      ("block", B)          B threads, thread t sums terms t, t + B, ... (common.block_sum); then
                            each warp of 32 a shuffle butterfly (lane l + lane l ^ 16, ^ 8, ...: the
                            tree pairing slot t with t + 16, t + 8, ...), then the warps' totals the same
      ("strided_tree", B)   B threads as above, then a shared-memory tree pairing slot t with t + B/2,
                            t + B/4, ... (common.colsum over rows)
      ("tiles", T)          a sum per tile of T consecutive terms, the tile sums added in turn
    """
    kind = order[0]
    n = terms.shape[-1]
    if kind == "sequential":
        return _partial_norms(terms, -1)
    if kind in ("block", "strided_tree"):
        B = int(order[1])
        m = -(-n // B) if n else 0
        padded = np.zeros(terms.shape[:-1] + (m * B,))
        padded[..., :n] = terms
        per = padded.reshape(terms.shape[:-1] + (m, B))
        a1, a2, lead = _partial_norms(per, -2)           # each thread's own sequential sum
        if kind == "block" and B > 32:
            w1, w2, warp_totals = _tree_norms(lead.reshape(lead.shape[:-1] + (B // 32, 32)))
            x1, x2, total = _tree_norms(warp_totals)
            t1, t2 = w1.sum(-1) + x1, np.hypot(np.sqrt((w2 * w2).sum(-1)), x2)
        else:
            t1, t2, total = _tree_norms(lead)
        return a1.sum(-1) + t1, np.hypot(np.sqrt((a2 * a2).sum(-1)), t2), total
    if kind == "tiles":
        T = int(order[1])
        m = -(-n // T) if n else 0
        padded = np.zeros(terms.shape[:-1] + (m * T,))
        padded[..., :n] = terms
        per = padded.reshape(terms.shape[:-1] + (m, T))
        a1, a2, parts = _partial_norms(per, -1)          # within each tile
        b1, b2, total = _partial_norms(parts, -1)        # the running total over tiles
        return a1.sum(-1) + b1, np.hypot(np.sqrt((a2 * a2).sum(-1)), b2), total
    if kind == "butterfly":
        # the T lanes of a row exchange by shuffles (lane l + lane l ^ T/2, ...): a tree over T slots
        T = int(order[1])
        padded = np.zeros(terms.shape[:-1] + (T,))
        padded[..., :n] = terms
        return _tree_norms(padded)
    raise ValueError(f"unknown summation order {order!r}")


def reduce_sum(x: Tracked, order: tuple, keepdims: bool = True) -> Tracked:
    """Sum over the last axis in the kernel's ``order``. The terms' private errors are independent
    of each other (l2), their shared ones may not be (triangle); the result's inherited errors are
    shared (they reach every element that uses the same terms), its partial-sum roundings private."""
    inh_p1 = x.p1.sum(-1) + x.s1.sum(-1)
    inh_p2 = np.sqrt((x.p2 * x.p2).sum(-1)) + x.s2.sum(-1)
    r1, r2, total = _order_norms(x.v, order)
    out = Tracked(total, r1, r2, inh_p1, inh_p2)
    return out.reshape(out.shape + (1,)) if keepdims else out


def contract(a: Tracked, b: Tracked, order: tuple) -> Tracked:
    """C[..., i, j] = sum_k a[..., i, k] b[..., k, j]: each product rounded, summed over k in
    ``order`` (a batched matmul; done in chunks of rows to bound memory)."""
    a, b = _as_tracked(a), _as_tracked(b)
    lead = a.shape[:-2]
    M, K = a.shape[-2:]
    N = b.shape[-1]
    out = [np.empty(lead + (M, N)) for _ in range(5)]
    step = max(1, _CHUNK_ELEMENTS // max(1, K * N))
    for i0 in range(0, M, step):
        sl = (Ellipsis, slice(i0, i0 + step), slice(None))
        ai = a[sl]
        # terms[..., i, j, k] = a[..., i, k] * b[..., k, j]
        A = lambda t: t[..., :, None, :]                       # noqa: E731
        Bt = lambda t: np.swapaxes(t, -1, -2)[..., None, :, :]  # noqa: E731
        prod = Tracked(A(ai.v) * Bt(b.v))
        grads_a, grads_b = np.abs(Bt(b.v)), np.abs(A(ai.v))
        # a's errors reach every j (shared across j), b's every i: inside this sum over k they are
        # still distinct roundings per k, so the per-term propagation is elementwise
        prod = _propagate(prod.v, (Tracked(np.broadcast_to(A(ai.v), prod.shape),
                                           *(np.broadcast_to(A(x), prod.shape) for x in (ai.p1, ai.p2, ai.s1, ai.s2))),
                                   grads_a),
                          (Tracked(np.broadcast_to(Bt(b.v), prod.shape),
                                   *(np.broadcast_to(Bt(x), prod.shape) for x in (b.p1, b.p2, b.s1, b.s2))),
                           grads_b))
        c = reduce_sum(round_(prod), order, keepdims=False)
        for o, part in zip(out, (c.v, c.p1, c.p2, c.s1, c.s2)):
            o[sl] = part
    return Tracked(*out)


def bound(t: Tracked, model: str) -> np.ndarray:
    """The error bound per element: ``deterministic`` u ||c||_1, or ``probabilistic``
    min(lambda u ||c||_2, u ||c||_1) (the deterministic bound holds too)."""
    det = tol.UNIT_ROUNDOFF * t.l1()
    if model == "deterministic":
        return det
    if model == "probabilistic":
        return np.minimum(tol.LAMBDA * tol.UNIT_ROUNDOFF * t.l2(), det)
    raise ValueError(f"unknown error model {model!r}")
