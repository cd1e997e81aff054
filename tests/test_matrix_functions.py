"""The language's matrix function ``unit_lower_inverse`` and the every-size tier's readings it rests on: its
definition is the inverse of I + tril(A, -1) (held to forward substitution written here), its rule is its
definition's derivative (and a wrong rule refuses the derivation), the every-size tier proves a solve's
VJP for every size with an atom per entry and refutes wrong backwards of it; a product along an axis of
symbolic size is read as exp of a sum of logs under a stated assumption; and the canonical naming of a
sum of many indices meets its equal under another naming."""
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from sympy import IndexedBase, Sum

from vjpcert.core import matrix_functions
from vjpcert.core.matrix_functions import unit_lower_inverse
from vjpcert.core.registry import op
from vjpcert.symbolic.every_size import heads
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.every_size.layouts import PRODUCT_ASSUMPTION
from vjpcert.symbolic.every_size.normal import Normaliser


class _Exact:
    c = staticmethod(Fraction)


def _forward_substitution(A):
    """(I + tril(A, -1))^-1 of one matrix, row by row: T[i] = e_i - sum_(k < i) A[i, k] T[k]."""
    n = A.shape[0]
    T = [[Fraction(0)] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            T[i][j] = Fraction(int(i == j)) - sum((A[i, k] * T[k][j] for k in range(i)), Fraction(0))
    return np.array(T, dtype=object)


@pytest.mark.parametrize("n", range(1, 10))
def test_the_definition_is_the_inverse_and_reads_only_the_strictly_lower_triangle(n):
    rng = np.random.default_rng(n)
    A = np.array([[[Fraction(int(x), 5) for x in row] for row in m] for m in rng.integers(-9, 10, (2, n, n))],
                 dtype=object)          # entries on and above the diagonal too: they are not read
    T = unit_lower_inverse(_Exact, A)
    assert T.shape == (2, n, n)
    for h in range(2):
        assert (T[h] == _forward_substitution(A[h])).all()


def test_the_rule_is_the_definition_s_derivative_and_a_wrong_rule_refuses(monkeypatch):
    assert heads.lower_inverse_agrees()
    heads.lower_inverse_agrees.cache_clear()
    # the control: the rule without the strictly lower part of dA (dT = -T dA T)
    monkeypatch.setitem(matrix_functions.RULES, "unit_lower_inverse",
                        lambda M, T, dA: M.neg(M.matmul(M.matmul(T, dA), T)))
    try:
        assert not heads.lower_inverse_agrees()
        cert = prove_general(_solve_op("mf_wrong_rule", right=True), "vjp[A]")
        assert cert.verdict == "inconclusive", cert.evidence
        assert "the rule of unit_lower_inverse disagrees" in str(cert.evidence), cert.evidence
    finally:
        heads.lower_inverse_agrees.cache_clear()


DIMS = dict(dims=[{"n": 1, "m": 2}, {"n": 2, "m": 1}, {"n": 3, "m": 2}], check_dims={"n": 4, "m": 2})


def _solve_op(name, *, right=True, masked=True, transposed=True):
    """y = (I + tril(A, -1))^-1 x, with a backward that is right or wrong in one way."""
    @op(name=name, inputs={"A": ("n", "n"), "x": ("n", "m")}, output=("n", "m"), **DIMS)
    def f(B, A, x):
        return unit_lower_inverse(B, A) @ x

    @f.defvjp
    def _(B, A, x, dy):
        T = unit_lower_inverse(B, A)
        dA = -(T.T @ dy @ (T @ x).T)
        return (np.tril(dA, -1) if masked else dA), (T.T if transposed else T) @ dy
    f.every_size("vjp[A]", "vjp[x]")
    return f


def test_a_triangular_solve_s_vjp_is_proved_for_every_size():
    f = _solve_op("mf_solve")
    for claim in ("vjp[A]", "vjp[x]"):
        cert = prove_general(f, claim)
        assert cert.verdict == "proved-general", cert.evidence
        assert cert.evidence["cross_check"]["status"] == "exact", cert.evidence["cross_check"]


@pytest.mark.parametrize("bug, claim", [("masked", "vjp[A]"), ("transposed", "vjp[x]")])
def test_a_wrong_backward_of_a_triangular_solve_fails_with_a_witness(bug, claim):
    cert = prove_general(_solve_op(f"mf_solve_not_{bug}", **{bug: False}), claim)
    assert cert.verdict == "failed", cert.evidence
    assert "witness" in cert.evidence, cert.evidence


def _cumprod_op(name, reversed_sum=True):
    """gamma_i = a_1 ... a_i along a symbolic axis (the gates' decay of a chunked delta rule); its
    backward sums gamma_i dy_i over i >= l, or over i <= l (wrong)."""
    def gamma(B, a):
        n = a.shape[1]
        return np.where(np.tril(np.ones((n, n), dtype=bool))[None], a[:, None, :], B.c(1)).prod(2)

    @op(name=name, inputs={"a": ("h", "n")}, output=("h", "n"), dims=[{"h": 1, "n": 2}, {"h": 2, "n": 3}])
    def f(B, a):
        return gamma(B, a)

    @f.defvjp
    def _(B, a, dy):
        n = a.shape[1]
        incl = np.tril(np.ones((n, n), dtype=bool))
        return (np.where((incl if reversed_sum else incl.T)[None], (gamma(B, a) * dy)[:, :, None], B.c(0)).sum(1)
                / a,)
    f.every_size("vjp[a]")
    return f


def test_a_product_along_a_symbolic_axis_is_proved_under_its_stated_assumption():
    cert = prove_general(_cumprod_op("mf_cumprod"), "vjp[a]")
    assert cert.verdict == "proved-general", cert.evidence
    assert PRODUCT_ASSUMPTION in cert.assumptions


def test_a_product_s_backward_summed_the_wrong_way_fails():
    cert = prove_general(_cumprod_op("mf_cumprod_wrong", reversed_sum=False), "vjp[a]")
    assert cert.verdict == "failed", cert.evidence


def test_a_product_whose_factors_are_masked_otherwise_is_refused():
    @op(name="mf_cumprod_masked_to_2", inputs={"a": ("h", "n")}, output=("h",), dims=[{"h": 1, "n": 2}])
    def f(B, a):
        n = a.shape[1]
        return np.where(np.tril(np.ones((n, n), dtype=bool))[:1], a, B.c(2)).prod(1)

    @f.defvjp
    def _(B, a, dy):
        return (dy[:, None] * a,)
    f.every_size("vjp[a]")
    cert = prove_general(f, "vjp[a]")
    assert cert.verdict == "inconclusive", cert.evidence
    assert "masked otherwise" in cert.evidence["reason"]


def test_a_sum_of_many_indices_meets_its_equal_named_otherwise(monkeypatch):
    """Seven indices (5040 orders): the classes of colour refinement leave few, and the least printed form
    over them is the same for every naming."""
    n, m = sp.symbols("n m", integer=True, positive=True)
    e = [IndexedBase(f"e{k}") for k in range(6)]
    N = Normaliser([n, m])
    a = sp.symbols("a0:7", integer=True)
    b = sp.symbols("b0:7", integer=True)

    def term(v, last=e[5]):
        body = e[0][v[0], v[1]] * e[1][v[1], v[2]] * e[2][v[2], v[3]] * e[3][v[3], v[4]] * e[4][v[4], v[5]] \
            * last[v[5], v[6]] * e[0][v[6], v[6]] * e[0][v[0], v[0]]
        ranges = {s: (0, (n if k % 2 else m) - 1) for k, s in enumerate(v)}
        return Sum(body, *[(s, *ranges[s]) for s in sorted(v, key=str)])       # the sums in the names' order
    perm = (b[3], b[0], b[6], b[2], b[5], b[1], b[4])
    assert N(term(a)) == N(term(perm))
    assert N(term(a)) != N(term(perm, last=e[4]))                   # the control: another body
    # the control: one order, by name, and the two do not meet
    monkeypatch.setattr(Normaliser, "_refined_orders", lambda self, V, factors: [sorted(V, key=str)])
    N = Normaliser([n, m])
    assert N(term(a)) != N(term(perm))


def test_the_heads_of_the_matrix_an_atom_inverts_are_held_to_the_table():
    """The atom's arguments are indices: the matrix it inverts lives in its class, and SymPy differentiates
    it there. A head the derivative table has no row for is refused there too."""
    from vjpcert.symbolic.every_size.inverse import PREFIX, head
    from vjpcert.symbolic.every_size.shape_trace import DerivationRefused
    n = sp.Symbol("n", integer=True, positive=True)
    X = IndexedBase("X")
    g = tuple(sp.Symbol(f"{PREFIX}{k}", integer=True) for k in range(2))
    i, j = sp.symbols("i j", integer=True)
    ranges = {t: (0, n - 1) for t in g}
    ok = head(g, sp.exp(X[g]), sp.exp(X[g]), n, ranges)(sp.Tuple(X), i, j)
    heads.check_heads(ok, X)
    odd = head(g, sp.atan(X[g]), sp.atan(X[g]), n, ranges)(sp.Tuple(X), i, j)
    with pytest.raises(DerivationRefused, match="no row"):
        heads.check_heads(odd, X)


def test_a_mask_narrows_a_sum_only_as_far_as_it_bounds_the_index():
    """sum_(j <= n - 1) Ind(s - j) a[j] is the sum over j <= n - 2 where s <= n - 2 (the terms cut off are 0),
    and stays the longer sum where s may be n - 1."""
    n = sp.Symbol("n", integer=True, positive=True)
    s, j = sp.symbols("s j", integer=True)
    a = IndexedBase("a")
    from vjpcert.symbolic.every_size.atoms import Ind
    long, short = (Sum(Ind(s - j) * a[j], (j, 0, hi)) for hi in (n - 1, n - 2))
    N = Normaliser([n], {s: (0, n - 2)})
    assert N(long) == N(short)
    assert N.stats.ranges_narrowed == 1
    N = Normaliser([n], {s: (0, n - 1)})
    assert N(long) != N(short)


def _prefix_heads(whole_chunk: bool):
    """The inverse over n and over n - 1 steps of A[i, j] = sum_(l <= i) x[l] y[j] (a decay's sum up to
    the row), or, ``whole_chunk``, of sum_(l < size) x[l] y[j], which the last step changes everywhere."""
    from vjpcert.symbolic.every_size.atoms import Ind
    from vjpcert.symbolic.every_size.inverse import PREFIX, head
    n = sp.Symbol("n", integer=True, positive=True)
    x, y = IndexedBase("x"), IndexedBase("y")
    g = tuple(sp.Symbol(f"{PREFIX}{k}", integer=True) for k in range(2))
    lv = sp.Symbol("l", integer=True)
    out = []
    for size in (n, n - 1):
        body = Sum((1 if whole_chunk else Ind(g[0] - lv)) * x[lv], (lv, 0, size - 1)) * y[g[1]]
        ranges = {t: (0, size - 1) for t in g}
        out.append(head(g, Normaliser([n], ranges)(body), body, size, ranges))
    return n, sp.Tuple(x, y), out


@pytest.mark.parametrize("whole_chunk", [False, True])
def test_an_inverse_on_its_leading_block_is_the_inverse_of_its_matrix_s_leading_block(whole_chunk):
    """T = (I + tril(A, -1))^-1 over n steps, at a row and column below n - 1, is the inverse over n - 1
    steps of A's leading block -- when A's entries there are the same (a sum up to the row), and not when
    the last step changes them (a sum over the whole chunk), nor where the row may be the last."""
    n, bases, (Tn, Tm) = _prefix_heads(whole_chunk)
    i, j = sp.symbols("i j", integer=True)
    N = Normaliser([n], {i: (0, n - 2), j: (0, n - 2)})
    assert (N(Tn(bases, i, j)) == N(Tm(bases, i, j))) is not whole_chunk
    N = Normaliser([n], {i: (0, n - 1), j: (0, n - 2)})
    assert N(Tn(bases, i, j)) != N(Tm(bases, i, j))
    assert N(Tn(bases, j, j)) == 1 and N(Tn(bases, j, j + 1)) == 0        # unit lower triangular


def _written_out(e, at: dict):
    """e at concrete sizes and indices ``at``: sums written out, and each inverse entry by forward
    substitution from its matrix's entries (``LowerInverse.written_out``) -- the definition, apart from
    every rule of the normal form."""
    from vjpcert.symbolic.every_size.inverse import LowerInverse
    e = e.xreplace(at).doit()

    def entry(a):
        cls = type(a)
        A = lambda batch, r, c: sp.expand(cls.matrix_entry(batch, r, c).xreplace(at).doit())
        return cls.written_out(tuple(a.args[1:-2]), int(a.args[-2]), int(a.args[-1]), A)
    return sp.expand(e.replace(lambda x: isinstance(x, LowerInverse), entry).doit())


def test_the_last_step_taken_out_writes_the_inverse_s_last_row_by_forward_substitution():
    """With n's last step taken out (the normal form of a chunk against its first n - 1 steps), a sum
    over n steps is the sum over n - 1 and its last term, and the inverse's last row at a column below
    n - 1 is forward substitution against the rows above it: its normal form, written out at n = 2..5,
    is the inverse written out there. At a column that may be n - 1 the entry is left as it is."""
    from vjpcert.symbolic.every_size.atoms import Ind
    n, bases, (Tn, Tm) = _prefix_heads(False)
    x, y = bases
    j, k = sp.symbols("j k", integer=True)
    N = Normaliser([n], {j: (0, n - 2)}, peel={n})
    last_row = N(Tn(bases, n - 1, j))
    assert N.stats.last_rows_substituted == 1 and N.stats.last_steps_taken >= 1
    assert not last_row.atoms(Tn)                  # no entry of the size-n inverse left
    for size in range(2, 6):
        for col in range(size - 1):
            at = {n: size, j: col}
            assert _written_out(last_row, at) == _written_out(Tn(bases, n - 1, j), at), (size, col)
    assert _written_out(last_row, {n: 3, j: 0}) != _written_out(-Tn(bases, n - 1, j), {n: 3, j: 0})
    wide = Normaliser([n], {j: (0, n - 1)}, peel={n})
    assert wide(Tn(bases, n - 1, j)) == Tn(bases, n - 1, j) and wide.stats.last_rows_substituted == 0
    total = Sum(Ind(j - k) * x[k], (k, 0, n - 1))
    assert N(total) == N(Sum(Ind(j - k) * x[k], (k, 0, n - 2)) + Ind(j - n + 1) * x[n - 1])
    assert N(total) != N(Sum(x[k], (k, 0, n - 2)))


def test_an_inverse_s_zero_upper_triangle_narrows_the_index_of_its_column_not_its_row():
    """T[i, k] is 0 for k > i: sum_(k <= n - 1) T[i, k] x[k] is the sum over k <= n - 2 where i <= n - 2.
    T[k, i] is not 0 for k > i, so sum_(k <= n - 1) T[k, i] x[k] keeps its last term; both written out
    at n = 2..5 agree with their normal forms."""
    n, bases, (Tn, _) = _prefix_heads(False)
    x = bases[0]
    i, k = sp.symbols("i k", integer=True)
    N = Normaliser([n], {i: (0, n - 2)})
    row, column = (Sum(Tn(bases, *ik) * x[k], (k, 0, n - 1)) for ik in ((i, k), (k, i)))
    assert N(row) == N(Sum(Tn(bases, i, k) * x[k], (k, 0, n - 2)))
    assert N(column) != N(Sum(Tn(bases, k, i) * x[k], (k, 0, n - 2)))
    for e in (row, column):
        nf = N(e)
        for size in range(2, 6):
            for iv in range(size - 1):
                assert _written_out(nf, {n: size, i: iv}) == _written_out(e, {n: size, i: iv}), (e, size, iv)


def test_an_inverse_s_class_is_its_matrix_over_its_generic_indices_ranges():
    """Two bodies with one normal form over batches of different extents are one matrix only on the smaller
    batch: their inverses are two classes, so neither's entries stand for the other's."""
    from vjpcert.symbolic.every_size.inverse import PREFIX, head
    n, h = sp.symbols("n h", integer=True, positive=True)
    X = IndexedBase("X")
    g = tuple(sp.Symbol(f"{PREFIX}{k}", integer=True) for k in range(3))
    ranges = {g[0]: (0, h - 1), g[1]: (0, n - 1), g[2]: (0, n - 1)}
    same = head(g, X[g], X[g], n, ranges) is head(g, X[g], X[g], n, dict(ranges))
    other = head(g, X[g], X[g], n, {**ranges, g[0]: (0, h - 2)})
    assert same and other is not head(g, X[g], X[g], n, ranges)


def test_a_sum_whose_limits_read_another_index_is_not_split_at_its_last_step():
    """Taking the last step out of a sum is exact where every limit is a dim's: a limit that reads another
    index stays a normal-form error (never proved), with or without the last step taken out."""
    from vjpcert.symbolic.every_size.atoms import NormalFormError
    n = sp.Symbol("n", integer=True, positive=True)
    i, j = sp.symbols("i j", integer=True)
    x = IndexedBase("x")
    for peel in ((), {n}):
        with pytest.raises(NormalFormError, match="depend on dims only"):
            Normaliser([n], peel=peel)(Sum(x[i, j], (j, 0, n - 1), (i, 0, j)))
    # an index bound again inside its own sum: taking a term out would rename the inner sum's index too
    with pytest.raises(NormalFormError, match="bound again"):
        Normaliser([n], peel={n})(Sum(x[j, j] * Sum(x[j, 0], (j, 0, n - 1)), (j, 0, n - 1)))
