"""The arithmetic mod p beneath the modular tier (symbolic.modular.arith) is exact: every operation is
compared with Python's integers, at the extremes (entries p - 1, the longest exact contraction and one
past it, broadcast batches, vectors) and on random residues; a contraction too long for float64 is shown
to go wrong, so these comparisons can fail."""
import functools
import random

import numpy as np
import pytest
import sympy

from optional import compiled

# imported at the first test, not at collection: importing arith compiles its Numba loops
ma = compiled("vjpcert.symbolic.modular.arith")
modular_check = compiled("vjpcert.symbolic.modular.check")


@functools.cache
def _primes():
    rng = random.Random(18)
    return [modular_check.draw_prime(rng) for _ in range(3)] + [int(sympy.prevprime(2 ** 60))]


PRIMES = ("drawn_1", "drawn_2", "drawn_3", "prevprime_2_60")  # three random primes in [2^59, 2^60), the largest below 2^60


@pytest.fixture
def p(request):
    """The prime named by the test's parameter, drawn at the test (the draw imports the modular tier)."""
    return _primes()[PRIMES.index(request.param)]


def _residues(p, shape, rng, extreme):
    if extreme == "top":
        return np.full(shape, p - 1, dtype=np.int64)
    if extreme == "limbs":     # every 20-bit limb as large as a residue allows
        return np.full(shape, min(p - 1, (1 << 60) - 1 - (1 << 40)), dtype=np.int64)
    return rng.integers(0, p, size=shape, dtype=np.int64)


def _exact_matmul(a, b, p):
    return np.matmul(a.astype(object), b.astype(object)) % p


# the product each contraction length takes (KARATSUBA_MIN_CONTRACTION), and each forced for every length
METHODS = {"auto": None, "preshift": 10 ** 9, "karatsuba": 1}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("p", PRIMES, indirect=True)
@pytest.mark.parametrize("extreme", ["random", "top", "limbs"])
@pytest.mark.parametrize("shapes", [
    ((3, 5), (5, 4)),                                   # b pre-shifted (the smaller)
    ((2, 7), (7, 9)),                                   # a pre-shifted
    # at the contraction limits: read at the test (importing arith compiles its loops)
    lambda: ((4, ma.MAX_CONTRACTION), (ma.MAX_CONTRACTION, 3)),  # the longest single dgemm
    lambda: ((3, ma.MAX_CONTRACTION + 1), (ma.MAX_CONTRACTION + 1, 2)),   # two chunks
    lambda: ((2, 3 * ma.MAX_CONTRACTION + 7), (3 * ma.MAX_CONTRACTION + 7, 2)),
    lambda: ((3, ma.KARATSUBA_MAX_CONTRACTION), (ma.KARATSUBA_MAX_CONTRACTION, 2)),   # Karatsuba's longest chunk
    lambda: ((2, ma.KARATSUBA_MAX_CONTRACTION + 1), (ma.KARATSUBA_MAX_CONTRACTION + 1, 3)),
    ((2, 1, 3, 4), (3, 4, 5)),                          # broadcast batches
    ((2, 3, 4, 5), (5, 2)),                             # b pre-shifted, a with more batch axes
    ((3, 2), (4, 2, 2, 6)),                             # a pre-shifted, b with more batch axes
    ((5,), (5, 3)), ((3, 5), (5,)), ((6,), (6,)),       # vectors
    ((2, 0), (0, 3)),                                   # an empty contraction
    ((0, 3), (3, 2)), ((2, 3), (3, 0)), ((0, 2, 3), (3, 4)),   # empty outputs
])
def test_matmul_is_exact(method, p, extreme, shapes, monkeypatch):
    sa, sb = shapes() if callable(shapes) else shapes
    if METHODS[method] is not None:
        monkeypatch.setattr("vjpcert.symbolic.modular.arith.KARATSUBA_MIN_CONTRACTION", METHODS[method])
    rng = np.random.default_rng(abs(hash((p, extreme, sa, sb))) % 2 ** 32)
    a, b = _residues(p, sa, rng, extreme), _residues(p, sb, rng, extreme)
    got = ma.ModP(p).matmul(a, b)
    want = _exact_matmul(a, b, p)
    assert got.dtype == np.int64 and got.shape == np.shape(want)
    assert (np.asarray(got, dtype=object) == want).all()


@pytest.mark.parametrize("p", PRIMES, indirect=True)
def test_elementwise_and_sums_are_exact(p):
    rng = np.random.default_rng(p % 2 ** 32)
    F = ma.ModP(p)
    a = np.concatenate([_residues(p, (500,), rng, "random"), [0, 1, p - 1, p - 2]]).astype(np.int64)
    b = np.concatenate([_residues(p, (500,), rng, "random"), [p - 1, p - 1, p - 1, 2]]).astype(np.int64)
    A, Bo = a.astype(object), b.astype(object)
    assert (F.mul(a, b).astype(object) == A * Bo % p).all()
    assert (F.add(a, b).astype(object) == (A + Bo) % p).all()
    assert (F.sub(a, b).astype(object) == (A - Bo) % p).all()
    assert (F.neg(a).astype(object) == (-A) % p).all()
    s = p - 1
    assert (F.mul_scalar(a, s).astype(object) == A * s % p).all()
    unreduced = np.concatenate([rng.integers(0, 2 ** 62, size=500, dtype=np.int64), [2 ** 62 - 1, p, 2 * p]])
    for s in (p - 1, 2, (1 << 30) - 1, 1 << 30, p + 5):    # mul_scalar takes any int64 in [0, 2^62)
        assert (F.mul_scalar(unreduced, s).astype(object) == unreduced.astype(object) * s % p).all()
    assert (F.mul(a[:, None], b[None, :7]).astype(object) == A[:, None] * Bo[None, :7] % p).all()   # broadcast
    big = np.full((3, 5000), p - 1, dtype=np.int64)
    assert (F.sum(big, 1).astype(object) == 5000 * (p - 1) % p).all()
    nz = a[a != 0]
    assert (F.mul(F.inv(nz), nz) == 1).all()
    assert (F.mul(F.pow(nz, -3), F.pow(nz, 3)) == 1).all()
    with pytest.raises(ma.Pole):
        F.inv(a)                                        # a holds a 0


@pytest.mark.parametrize("method, limit", [("preshift", "MAX_CONTRACTION"),
                                           ("karatsuba", "KARATSUBA_MAX_CONTRACTION")])
def test_a_contraction_too_long_for_float64_goes_wrong(method, limit, monkeypatch):
    """The negative control, for each product: with chunks longer than its limit, the limb sums pass
    2^53 and the comparison with Python's integers catches the rounding.

    The residues are random and large: with one repeated residue every limb product is the same
    number v, and a BLAS that sums in power-of-two blocks only ever forms 2^k * m * v, which float64
    can hold exactly for this K (64 * 2730 = 2^7 * 1365), so the rounding would go unseen on some
    machines and not on others."""
    p = _primes()[-1]
    K = 64 * ma.MAX_CONTRACTION
    rng = np.random.default_rng(53)
    a = rng.integers(p // 2, p, size=(2, K), dtype=np.int64)
    b = rng.integers(p // 2, p, size=(K, 2), dtype=np.int64)
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.KARATSUBA_MIN_CONTRACTION", METHODS[method])
    monkeypatch.setattr(f"vjpcert.symbolic.modular.arith.{limit}", 10 ** 9)
    got = np.asarray(ma.ModP(p).matmul(a, b), dtype=object)
    assert (got != _exact_matmul(a, b, p)).all()


def test_a_prime_outside_the_range_is_refused():
    with pytest.raises(ValueError):
        ma.ModP(2 ** 61 - 1)


@pytest.mark.parametrize("method", ["preshift", "karatsuba"])
@pytest.mark.parametrize("block", [1, 37, 1 << 20])
def test_matmul_sum_in_blocks_is_exact(method, block, monkeypatch):
    """sum_i a_i @ b_i with contraction chunks straddling the pieces, and blocks of rows, columns and
    batch entries down to one entry (BLOCK), on strided, transposed and broadcast operands."""
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.KARATSUBA_MIN_CONTRACTION", METHODS[method])
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.MAX_CONTRACTION", 5)
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.KARATSUBA_MAX_CONTRACTION", 5)
    monkeypatch.setattr("vjpcert.symbolic.modular.arith.BLOCK", block)
    p = _primes()[0]
    rng = np.random.default_rng(block)
    for m, n in ((4, 3), (3, 6)):                       # the pre-shifted side b, then a (transposed)
        a1 = rng.integers(0, p, size=(2, 1, m, 7), dtype=np.int64)
        a2 = rng.integers(0, p, size=(2, 3, 4, m), dtype=np.int64).swapaxes(-1, -2)     # strided (m, 4)
        b1 = rng.integers(0, p, size=(7, n), dtype=np.int64)
        b2 = rng.integers(0, p, size=(3, 4, n), dtype=np.int64)
        got = ma.ModP(p).matmul_sum([(np.broadcast_to(a1, (2, 3, m, 7)), np.broadcast_to(b1, (2, 3, 7, n))),
                                     (a2, np.broadcast_to(b2, (2, 3, 4, n)))])
        want = (_exact_matmul(a1, b1, p) + _exact_matmul(a2, b2, p)) % p
        assert got.dtype == np.int64 and got.shape == want.shape
        assert (np.asarray(got, dtype=object) == want).all()


def test_the_atom_hash_is_splitmix64_keyed_twice():
    """The fused hash loop (kernels.hash_flat) gives splitmix64's finaliser, keyed twice and reduced mod
    p, computed here in numpy's wrapping uint64 arithmetic: the atoms a trial draws are this function."""
    from vjpcert.symbolic.modular.field import Field

    def mix(x):
        with np.errstate(over="ignore"):
            x = x + np.uint64(0x9E3779B97F4A7C15)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))

    p = _primes()[1]
    rng = random.Random(7)
    keys = (rng.getrandbits(64), rng.getrandbits(64))
    F = Field(p, {"exp": keys}, 1)
    v = np.concatenate([np.random.default_rng(7).integers(0, p, size=1 << 17, dtype=np.int64), [0, 1, p - 1]])
    for x in (v, v[:5].reshape(5, 1), v[3]):
        want = mix(mix(np.asarray(x).astype(np.uint64) ^ np.uint64(keys[0])) ^ np.uint64(keys[1])) % np.uint64(p)
        got = F.hash("exp", x)
        assert np.shape(got) == np.shape(want) and (np.asarray(got) == want.astype(np.int64)).all()


def test_inverses_over_many_runs_are_exact():
    """Montgomery's trick (kernels.inv_flat) over several runs of INV_RUN entries, the last one partial,
    on the parallel loop's sizes: every entry times its inverse is 1, and a 0 anywhere is a pole."""
    p = _primes()[-1]
    F = ma.ModP(p)
    a = np.random.default_rng(11).integers(1, p, size=(3, ma.mk.PARALLEL_MIN // 3 + 4097), dtype=np.int64)
    a[0, :3] = [1, p - 1, 2]
    assert (F.mul(F.inv(a), a) == 1).all()
    assert (F.inv(a[:, ::-7]) == F.inv(a)[:, ::-7]).all()           # a strided view
    a[2, -1] = 0
    with pytest.raises(ma.Pole):
        F.inv(a)
