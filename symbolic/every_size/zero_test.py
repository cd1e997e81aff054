"""The exact zero test of the every-size tier's rational functions of atoms (python-flint), and the
instantiation of a statement at concrete sizes (every sum written out) for the cross-check.
"""
from __future__ import annotations

import sympy as sp
from sympy import Indexed, Sum

from vjpcert.symbolic.every_size.atoms import NormalFormError


# ----------------------------------------------------------------------------- the zero test
def rational_function_is_zero(a, opaque: bool = False) -> bool:
    """Whether an expression built from + * and integer powers of symbols and rationals is the zero
    rational function: evaluated as (numerator, denominator) polynomials in python-flint, exactly.
    (SymPy's ``together`` is the same test, two orders of magnitude slower on large cross-checks.)
    With ``opaque``, every other subterm (exp(...), sqrt(...)) is a variable of its own, keyed by the
    subterm as SymPy built it."""
    import flint
    a = sp.sympify(a)
    variables: dict = {}
    memo: dict = {}

    def var(e):
        if e not in variables:
            variables[e] = len(variables)

    # first pass: which subterms are variables (a symbol, or an opaque subterm)
    seen: set = set()

    def scan(e):
        if e.is_Rational or e in seen:
            return
        seen.add(e)
        if isinstance(e, (sp.Add, sp.Mul)):
            for t in e.args:
                scan(t)
            return
        if isinstance(e, sp.Pow) and e.exp.is_Integer:
            scan(e.base)
            return
        if e.is_Number:
            raise NormalFormError(f"inexact number {e}")
        if not (opaque or isinstance(e, sp.Symbol)):
            raise NormalFormError(f"not a rational function of atoms: {type(e).__name__}")
        var(e)
    scan(a)
    if not variables:
        return a == 0
    ctx = flint.fmpq_mpoly_ctx.get(("a", len(variables)), "degrevlex")
    gens = ctx.gens()
    one = ctx.constant(1)

    def ev(e):
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Rational:
            out = (ctx.constant(flint.fmpq(int(e.p), int(e.q))), one)
        elif isinstance(e, sp.Add):
            n, d = ev(e.args[0])
            for t in e.args[1:]:
                n2, d2 = ev(t)
                n, d = (n + n2, d) if d == d2 else (n * d2 + n2 * d, d * d2)
            out = (n, d)
        elif isinstance(e, sp.Mul):
            n, d = one, one
            for t in e.args:
                n2, d2 = ev(t)
                n, d = n * n2, d * d2
            out = (n, d)
        elif isinstance(e, sp.Pow) and e.exp.is_Integer:
            n, d = ev(e.base)
            k = int(e.exp)
            if k < 0:
                if n == 0:
                    raise NormalFormError("a power of 0 with a negative exponent")
                n, d, k = d, n, -k
            out = (n ** k, d ** k)
        else:
            out = (gens[variables[e]], one)
        memo[e] = out
        return out
    return ev(a)[0] == 0


def plainly_zero(expr) -> bool:
    """True when ``expr`` is 0 as a rational function of its non-rational subterms, each taken as it
    is (exp(...), sqrt(...), erf(...) as opaque atoms, equal only when SymPy builds them equal). Exact
    but not complete: False says nothing (``Normaliser.is_zero`` relates the atoms). Cheap: two
    evaluations of one spec built by the same operations are usually this close."""
    try:
        return rational_function_is_zero(expr, opaque=True)
    except NormalFormError:
        return False


# ----------------------------------------------------------------------------- instantiation
def expand_sums(e, values: dict, memo: dict | None = None, arrays: dict | None = None):
    """e with the dims (and any other symbols in ``values``) replaced by integers and every Sum
    written out term by term (innermost last): the general statement at one concrete size. With
    ``arrays`` (name -> numpy array) every entry x[i, j] at concrete indices becomes the array's
    entry. ``memo`` may be shared by the entries of one array: the same inner sum (a row mean, a
    softmax denominator) recurs in every entry of a row."""
    e = e.xreplace(values)
    memo = {} if memo is None else memo

    def walk(x):
        if not x.args:
            return x
        hit = memo.get(x)
        if hit is not None:
            return hit
        if isinstance(x, Sum):
            terms = [x.function]
            for v, lo, hi in x.limits:
                lo, hi = walk(lo), walk(hi)
                if not (lo.is_Integer and hi.is_Integer):
                    raise NormalFormError(f"sum bounds {lo}..{hi} are not concrete")
                terms = [t.xreplace({v: sp.Integer(k)}) for t in terms for k in range(int(lo), int(hi) + 1)]
            out = sp.Add(*[walk(t) for t in terms])
        elif isinstance(x, Indexed) and arrays is not None:
            idx = tuple(walk(i) for i in x.indices)
            if not all(i.is_Integer for i in idx):
                raise NormalFormError(f"{x}: index not concrete after instantiation")
            arr = arrays[x.base.label.name]
            idx = tuple(int(i) for i in idx)
            if len(idx) != arr.ndim or any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
                raise NormalFormError(f"{x} is outside the array {x.base.label.name} of shape {arr.shape}")
            out = sp.sympify(arr[idx])
        else:
            args = [walk(a) for a in x.args]
            out = x if all(a is b for a, b in zip(args, x.args)) else x.func(*args)
        memo[x] = out
        return out
    return walk(e)
