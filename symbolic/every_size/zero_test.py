"""The exact zero test of the every-size tier's rational functions of atoms (python-flint), and the
instantiation of a statement at concrete sizes (every sum written out) for the cross-check.
"""
from __future__ import annotations

import itertools

import sympy as sp
from sympy import Indexed, Sum

from vjpcert.symbolic.every_size.atoms import NormalFormError
from vjpcert.symbolic.every_size.inverse import LowerInverse


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
    softmax denominator) recurs in every entry of a row.

    One walk with the values of the bound symbols in an environment (no copy of a sum's body per
    term, which SymPy would rebuild and re-simplify each time): a subterm's value is memoised under
    the values of the bound symbols that occur in it, so a factor that does not depend on a sum's
    index is written out once for the whole sum."""
    e = sp.sympify(e)
    memo = {} if memo is None else memo
    env0 = {sp.sympify(k): sp.sympify(v) for k, v in values.items()}
    bindable = set(env0)
    for s in e.atoms(Sum):
        bindable.update(v for v, *_ in s.limits)
    occurs: dict = {}

    def bound_in(x) -> frozenset:
        """The bindable symbols free in x (a sum's own indices are not free in it)."""
        hit = occurs.get(x)
        if hit is None:
            if x in bindable:
                hit = frozenset((x,))
            elif not x.args:
                hit = frozenset()
            elif isinstance(x, Sum):
                hit = bound_in(x.function).difference(v for v, *_ in x.limits).union(
                    *(bound_in(lo) | bound_in(hi) for _, lo, hi in x.limits))
            else:
                hit = frozenset().union(*(bound_in(a) for a in x.args))
            occurs[x] = hit
        return hit

    def walk(x, env: dict):
        if x in env:
            return env[x]
        if not x.args:
            return x
        key = (x, frozenset((s, env[s]) for s in bound_in(x) if s in env))
        hit = memo.get(key)
        if hit is not None:
            return hit
        if isinstance(x, Sum):
            names, ranges = [], []
            for v, lo, hi in x.limits:
                lo, hi = walk(lo, env), walk(hi, env)
                if not (lo.is_Integer and hi.is_Integer):
                    raise NormalFormError(f"sum bounds {lo}..{hi} are not concrete")
                names.append(v)
                ranges.append(range(int(lo), int(hi) + 1))
            out = sp.Add(*[walk(x.function, {**env, **dict(zip(names, map(sp.Integer, ks)))})
                           for ks in itertools.product(*ranges)])
        elif isinstance(x, LowerInverse):          # forward substitution over A's entries written out
            idx = [walk(a, env) for a in x.args[1:]]
            if not all(i.is_Integer for i in idx):
                raise NormalFormError(f"{x}: index not concrete after instantiation")
            *batch, i, j = (int(i) for i in idx)
            out = x.written_out(tuple(batch), i, j, lambda b, r, c: expand_sums(
                x.matrix_entry(b, r, c), {**{k: v for k, v in env0.items()}}, memo, arrays))
        elif isinstance(x, Indexed) and arrays is not None:
            idx = tuple(walk(i, env) for i in x.indices)
            if not all(i.is_Integer for i in idx):
                raise NormalFormError(f"{x}: index not concrete after instantiation")
            arr = arrays[x.base.label.name]
            idx = tuple(int(i) for i in idx)
            if len(idx) != arr.ndim or any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
                raise NormalFormError(f"{x} is outside the array {x.base.label.name} of shape {arr.shape}")
            out = sp.sympify(arr[idx])
        else:
            args = [walk(a, env) for a in x.args]
            out = x if all(a is b for a, b in zip(args, x.args)) else x.func(*args)
        memo[key] = out
        return out
    return walk(e, env0)
