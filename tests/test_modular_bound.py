"""The degree bound of the modular backend (symbolic.modular.bound) is an upper bound, and a useful one:
small computations run twice, on the modular backend (the tracked bound) and in SymPy with the atoms as
opaque functions (the true numerator of the result in lowest terms), compared."""
import random
from fractions import Fraction

import numpy as np
import pytest
import sympy

from vjpcert.symbolic.modular.bound import LEAF

from optional import compiled

# imported at the first test that uses them, not at collection: importing the modular tier compiles its
# Numba loops (tests/optional.py)
mb, mc = compiled("vjpcert.symbolic.modular.backend"), compiled("vjpcert.symbolic.modular.check")

E, T, W = sympy.Function("E"), sympy.Function("T"), sympy.Function("W")


class SymB:
    """Atoms as opaque functions: exp(a) = E(a), tanh(a) = T(a), sqrt(a) = 1 / W(a) -- the variable
    of a root is its inverse w, as in the modular bound (a root only ever inverted here)."""

    exp = staticmethod(np.vectorize(lambda a: E(a), otypes=[object]))
    tanh = staticmethod(np.vectorize(lambda a: T(a), otypes=[object]))
    sqrt = staticmethod(np.vectorize(lambda a: 1 / W(a), otypes=[object]))

    @staticmethod
    def c(p, q=1):
        return sympy.Rational(p, q)


def _leaves_sym(name, shape):
    return np.array(sympy.symbols(f"{name}0:{int(np.prod(shape))}"), dtype=object).reshape(shape)


def _true_degree(expr) -> int:
    num, _ = sympy.fraction(sympy.together(expr))
    num = sympy.expand(num)
    if num == 0:
        return -1
    gens = sorted(num.atoms(sympy.Symbol), key=str) + sorted(num.atoms(sympy.Function), key=str)
    return sympy.Poly(num, *gens).total_degree()


def _tracked(fn, shapes, field=False):
    rng = random.Random(7)
    p = mc.draw_prime(rng)
    F = mb.Field(p, {k: (rng.getrandbits(64), rng.getrandbits(64)) for k in
                  ("exp", "log", "sqrt", "erf", "tanh", "circle", "cpow")}, rng.randrange(1, p))
    gen = np.random.default_rng(3)
    args = [mb.ModArray(F, gen.integers(1, p, size=s, dtype=np.int64), None, LEAF, None) for s in shapes]
    out = fn(mb.ModularBackend(F), *args)
    return (out.b.n, F) if field else out.b.n


def _symbolic(fn, shapes):
    args = [_leaves_sym(chr(ord("a") + i), s) for i, s in enumerate(shapes)]
    return _true_degree(np.asarray(fn(SymB, *args)).item())


def layernorm_rows(B, x, r):
    xc = x - x.mean(-1, keepdims=True)
    xh = xc * (1 / B.sqrt((xc * xc).mean(-1, keepdims=True) + B.c(1, 1000)))
    return (xh * r).sum()


def softmax_rows(B, s, r):
    e = B.exp(s)
    return ((e / e.sum(-1, keepdims=True)) * r).sum()


def attention(B, x, v, r):
    e = B.exp(x @ x.T)
    return (((e / e.sum(-1, keepdims=True)) @ v) * r).sum()


def ln_then_attention(B, x, r):
    """The GPT-2 case in small: every row of V carries its own LayerNorm root, summed over by P @ V."""
    xc = x - x.mean(-1, keepdims=True)
    h = xc * (1 / B.sqrt((xc * xc).mean(-1, keepdims=True) + B.c(1, 1000)))
    e = B.exp(h @ h.T)
    return (((e / e.sum(-1, keepdims=True)) @ h) * r).sum()


def shared_denominator_sums(B, x, y, r):
    """x_ij / y_i summed over j many times: y_i is one factor, however often it is reached."""
    q = x / y
    return (q.sum(-1, keepdims=True) * q * r).sum() + (q * q).sum()


def gelu_tanh_of_rational(B, x, y, r):
    u = x / (y.sum(-1, keepdims=True))
    return ((u * (1 + B.tanh(u + B.c(1, 3) * u * u * u))) * r).sum()


def a_gate_and_its_square(B, x, r):
    """1 / (1 + x) met once with exponent 1 and once with 2: the sum's denominator has it squared
    (the group with the smaller exponent is the first operand, so it is the one kept on a tie)."""
    q = 1 / (1 + x)
    return ((q + q * q) * r).sum()


def gated_recurrence(B, x, w, r):
    """Three steps of a gate: each step's division a new class, the state carrying all the steps'
    classes before it, the gates summed over by w @ h."""
    h = x[0]
    for t in range(1, 3):
        z = 1 / (1 + B.exp(w @ h))
        h = z * h + (1 - z) * x[t]
    return (h * r).sum()


CASES = [
    (a_gate_and_its_square, [(2,), (2,)]),
    (gated_recurrence, [(3, 2), (2, 2), (2,)]),
    (layernorm_rows, [(2, 3), (2, 3)]),
    (softmax_rows, [(2, 3), (2, 3)]),
    (attention, [(3, 2), (3, 2), (3, 2)]),
    (ln_then_attention, [(3, 2), (3, 2)]),
    (shared_denominator_sums, [(2, 3), (2, 1), (2, 3)]),
    (gelu_tanh_of_rational, [(2, 2), (2, 2), (2, 2)]),
]


@pytest.mark.parametrize("fn, shapes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_tracked_degree_bounds_the_true_degree_and_is_not_far_above(fn, shapes):
    tracked = _tracked(fn, shapes)
    true = _symbolic(fn, shapes)
    assert true <= tracked, (fn.__name__, true, tracked)
    assert tracked <= 2 * true + 4, (fn.__name__, true, tracked)


def root_both_ways(B, x, r):
    """s and 1 / s of one root: a Laurent polynomial in w = 1 / s, which the bound must notice."""
    s = B.sqrt(x)
    return ((s + 1 / B.sqrt(x)) * r).sum()


def test_a_root_used_both_as_itself_and_inverted_widens_the_bound():
    from vjpcert.symbolic.modular.check import false_pass_bound
    shapes = [(2, 2), (2, 2)]
    n, F = _tracked(root_both_ways, shapes, field=True)
    true = _symbolic(root_both_ways, shapes)
    assert F.atoms_used_both_ways == 4                      # every entry's root, matched by value
    stated = false_pass_bound((n, 0, 1.0, 0.0), [F], 1, 0)["degree"]
    assert true <= stated and n < true                      # the Bound alone would undercount


def test_a_root_only_inverted_is_not_widened():
    n, F = _tracked(layernorm_rows, [(2, 3), (2, 3)], field=True)
    assert F.inverted_atoms and F.atoms_used_both_ways == 0


def test_an_atom_is_counted_once_per_computation_and_distinct_ones_each():
    """The backward recomputing the forward's exp(x) adds no atoms; exp of two different slices, or of
    x and of x + 0 computed another way, are counted as distinct (a computation id, never a value)."""
    rng = random.Random(5)
    p = mc.draw_prime(rng)
    F = mb.Field(p, {k: (rng.getrandbits(64), rng.getrandbits(64)) for k in
                  ("exp", "log", "sqrt", "erf", "tanh", "circle", "cpow")}, rng.randrange(1, p))
    from vjpcert.symbolic.modular.backend import derive
    x = mb.ModArray(F, np.random.default_rng(1).integers(1, p, size=(3, 4), dtype=np.int64), None, LEAF, None)
    x.sid = derive("leaf", "x")
    B = mb.ModularBackend(F)
    B.exp(x), B.exp(x), B.exp(x.reshape(3, 4))
    assert F.atom_count["exp"] == 12 + 12                  # exp(x) once, exp(x.reshape) once more
    B.exp(x[:, :2]), B.exp(x[:, 2:])
    assert F.atom_count["exp"] == 24 + 6 + 6
    B.exp(x * 1)
    assert F.atom_count["exp"] == 36 + 12
    y = mb.ModArray(F, x.v, None, LEAF, None)                  # same values, unknown computation
    B.exp(y)
    assert F.atom_count["exp"] == 48 + 12


# ---- how the classes are held: shared groups, merged by id, products interned
def _per_row(shape=(2, 3)):
    """1 / (x + 1) with one factor per entry, and the bound of x + 1."""
    from vjpcert.symbolic.modular import bound as mb
    u = mb.add(mb.LEAF, mb.const(1), len(shape))
    return mb, mb.inv(u, shape)


def test_a_merge_that_adds_nothing_is_the_larger_group_itself_and_one_that_does_is_new():
    mb, q = _per_row()
    (idx, sources), = q.cls.values()
    assert mb._merge(sources, sources, max) is sources
    squared = mb.pow_(q, 2)
    (_, sq), = squared.cls.values()
    both = mb._merge(sources, sq, max)
    assert both is not sources and list(both.e) == [2.0] and both.d == 2.0
    assert mb._merge(sources, sq, mb.operator.add).d == 3.0     # a product: the exponents add


def test_a_class_met_twice_through_two_sums_is_one_factor_and_distinct_axes_are_two():
    mb, q = _per_row()
    first, again = mb.sum_axes(q, (2, 3), (1,)), mb.sum_axes(q, (2, 3), (1,))
    assert mb.add(first, again, 1).d == first.d == 3.0           # three distinct factors per row
    columns = mb.sum_axes(q, (2, 3), (0,))
    both = mb.add(mb.sum_axes(first, (2,), (0,)), mb.sum_axes(columns, (3,), (0,)), 0)
    assert both.d == 12.0                                         # 6 + 6: a row product is not a column one


def test_forgetting_the_interned_products_only_loosens_a_bound():
    mb, q = _per_row()
    before = mb.sum_axes(q, (2, 3), (1,))
    mb.forget_products()
    assert mb.add(before, mb.sum_axes(q, (2, 3), (1,)), 1).d == before.d     # q's own products are kept
    (key, (idx, s)), = q.cls.items()
    same = mb.Bound(q.n, q.h, {key: (idx, mb.Sources(s.ids, s.e, s.deg, s.bits))})   # the same classes
    assert mb.add(before, mb.sum_axes(same, (2, 3), (1,)), 1).d == 2 * before.d      # counted twice


def test_merged_sources_stay_sorted_and_unique_and_keep_every_exponent():
    from vjpcert.symbolic.modular import bound as mb
    rng = np.random.default_rng(11)
    for _ in range(50):
        parts = []
        for _ in range(2):
            ids = np.unique(rng.integers(0, 40, size=rng.integers(1, 20)))
            e = rng.integers(1, 4, size=len(ids)).astype(float)
            parts.append(mb.Sources(ids, e, np.ones(len(ids)), np.ones(len(ids))))
        for how in (max, mb.operator.add):
            out = mb._merge(*parts, how)
            assert (np.diff(out.ids) > 0).all()
            want = {}
            for part in parts:
                for i, e in zip(part.ids.tolist(), part.e.tolist()):
                    want[i] = how(want[i], e) if i in want else e
            assert dict(zip(out.ids.tolist(), out.e.tolist())) == want
            assert out.d == sum(want.values())
