"""Size cases in the every-size normal form: a residual whose deltas pin a free index or a size near
the end of its range is split into cases. Each test pairs an identity that holds only case by case
(the normal form alone cannot tell) with a near miss wrong in exactly one case -- at the first value,
at the last, at the smallest size where a value enters its range, or where the first and last values
meet -- which must stay unproved."""
import sympy as sp
from sympy import IndexedBase, KroneckerDelta, Sum

from vjpcert.symbolic.every_size.cases import by_cases
from vjpcert.symbolic.every_size.normal import Normaliser

n = sp.Symbol("n", integer=True, positive=True)
j, k = sp.symbols("j k", integer=True)
x, y = IndexedBase("x", real=True), IndexedBase("y", real=True)


def normaliser():
    return Normaliser([n], {j: (0, n - 1)})


def by_cases_only(expr) -> bool:
    """Proved by cases, and not by the normal form alone (else the test shows nothing)."""
    assert not normaliser().is_zero(expr)[0]
    proved, info = by_cases(normaliser(), expr, [j])
    if proved:
        assert info["cases"] >= 2 and info["split"]
    return proved


# x[j - 1] as a sum whose pinned entry leaves the range at j = 0, and that first case written apart (in j,
# so the normal form cannot join it to the sum as the sum's own edge term)
FIRST_APART = Sum(x[k] * KroneckerDelta(k, j - 1), (k, 0, n - 1)) - x[j - 1] + KroneckerDelta(j, 0) * x[j - 1]
# x[j + 1] the same way, its last case apart
LAST_APART = Sum(x[k] * KroneckerDelta(k, j + 1), (k, 0, n - 1)) - x[j + 1] + KroneckerDelta(j, n - 1) * x[j + 1]
# two first cases apart (j = 0 and j = 1): j = 1 lies in the range from n = 2 on
TWO_FIRST_APART = (Sum(x[k] * KroneckerDelta(k, j - 2), (k, 0, n - 1)) - x[j - 2]
                   + (KroneckerDelta(j, 0) + KroneckerDelta(j, 1)) * x[j - 2])


def test_the_first_value_of_an_index_is_its_own_case():
    assert by_cases_only(FIRST_APART)
    assert not by_cases_only(Sum(x[k] * KroneckerDelta(k, j - 1), (k, 0, n - 1)) - x[j - 1]
                             + KroneckerDelta(j, 0) * x[j])                 # the first case read one off


def test_the_last_value_of_an_index_is_its_own_case():
    assert by_cases_only(LAST_APART)
    assert not by_cases_only(Sum(x[k] * KroneckerDelta(k, j + 1), (k, 0, n - 1)) - x[j + 1]
                             + KroneckerDelta(j, n - 1) * x[j])


def test_a_size_pinned_by_a_sum_s_range_is_split_into_small_sizes_and_the_rest():
    """sum_{k < n} [k = 2] x[k] is x[2] from n = 3 on and 0 below: the sizes 1 and 2 are cases."""
    picked = Sum(x[k] * KroneckerDelta(k, 2), (k, 0, n - 1))
    right = picked - x[2] + KroneckerDelta(n, 1) * x[2] + KroneckerDelta(n, 2) * x[2]
    assert by_cases_only(right)
    assert not by_cases_only(picked - x[2] + KroneckerDelta(n, 1) * x[2])       # wrong at n = 2 only


def test_a_value_is_proved_from_the_least_size_where_it_lies_in_range_not_later():
    """j = 1 lies in 0..n-1 from n = 2 on: its case must include n = 2 (a size shifted one too far would
    prove this near miss, wrong exactly at j = 1, n = 2)."""
    assert by_cases_only(TWO_FIRST_APART)
    assert not by_cases_only(TWO_FIRST_APART + KroneckerDelta(j, 1) * KroneckerDelta(n, 2) * y[0])
    assert not by_cases_only(TWO_FIRST_APART + KroneckerDelta(j, 1) * KroneckerDelta(n, 3) * y[0])


def test_where_the_first_and_the_last_value_meet_the_case_is_still_checked():
    """At n = 1 the last value j = n - 1 is the first one, j = 0: the case j = n - 1 leaves it to the
    case j = 0, which must then see the wrong term."""
    both = FIRST_APART + LAST_APART
    assert by_cases_only(both)
    for size in (1, 2):
        assert not by_cases_only(both + KroneckerDelta(j, n - 1) * KroneckerDelta(n, size) * y[0])
        assert not by_cases_only(both + KroneckerDelta(j, 0) * KroneckerDelta(n, size) * y[0])


def test_an_identity_wrong_in_the_middle_of_the_range_is_not_proved():
    assert not by_cases_only(FIRST_APART + KroneckerDelta(j, 0) * y[0] - y[0])      # wrong for j >= 1
    assert not by_cases_only(LAST_APART + KroneckerDelta(j, 1) * KroneckerDelta(n, 5) * y[0])
