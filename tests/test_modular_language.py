"""The modular tier runs the spec language as numpy does (core.language): keyword arguments are obeyed or
refused, never dropped; in-place updates mutate (aliases and views see them); the structural and linear
constructs compute what numpy computes. Each construct comes as a right and a wrong backward: the right
one is never `failed`, the wrong one is `failed` with a witness, and both agree with the exact tier."""
import functools
import random

import numpy as np
import pytest

from vjpcert.core.registry import SpecError, op
from vjpcert.symbolic.fixed.prover import prove_claim

from optional import compiled

# imported at the first test that uses them, not at collection: importing the modular tier compiles its
# Numba loops (tests/optional.py)
mb, mc = compiled("vjpcert.symbolic.modular.backend"), compiled("vjpcert.symbolic.modular.check")


@functools.cache
def _prime() -> int:
    return mc.draw_prime(random.Random(0))


def _mask(rows, n):
    return (np.arange(n)[None, :] + np.arange(rows)[:, None]) % 3 != 0     # from shapes only


# ---- each case: (forward, right backward, wrong backward); x is (rows, n), w is (n,)
def _sum_where(B, x, w):
    return np.sum(x * x * w, axis=1, where=_mask(*x.shape), initial=0)


def _sum_where_right(B, x, w, dy):
    m = _mask(*x.shape)
    return np.where(m, 2 * x * w * dy[:, None], B.c(0)), np.sum(x * x * dy[:, None], axis=0, where=m, initial=0)


def _sum_where_wrong(B, x, w, dy):                       # the backward of the sum without its mask
    return 2 * x * w * dy[:, None], (x * x * dy[:, None]).sum(0)


def _reshape_f(B, x, w):
    rows, n = x.shape
    return np.reshape(x * x * w, (n, rows), order="F")


def _reshape_f_right(B, x, w, dy):
    rows, n = x.shape
    g = dy.T.reshape(-1).reshape(n, rows).T              # reshape(dy, (rows, n), order="F") spelled out
    return 2 * x * w * g, (x * x * g).sum(0)


def _reshape_f_wrong(B, x, w, dy):                       # order C where the forward's is F
    rows, n = x.shape
    g = np.reshape(dy, (rows, n))
    return 2 * x * w * g, (x * x * g).sum(0)


def _alias(B, x, w):
    y = x * x
    z = y
    z += w                                               # y is z: y is now x^2 + w
    return y * x


def _alias_right(B, x, w, dy):
    return dy * (3 * x * x + w), (dy * x).sum(0)


def _alias_wrong(B, x, w, dy):                           # as if z += w had rebound z
    return dy * 3 * x * x, (dy * 0).sum(0)


def _view(B, x, w):
    y = x * x
    head = y[:2]
    head *= 3                                            # writes through to rows 0, 1 of y
    return y * w


def _scale(rows):
    s = np.ones((rows, 1), dtype=np.int64)
    s[:2] = 3
    return s


def _view_right(B, x, w, dy):
    s = _scale(x.shape[0])
    return dy * w * 2 * x * s, (dy * x * x * s).sum(0)


def _view_wrong(B, x, w, dy):                            # as if head *= 3 had left y alone
    return dy * w * 2 * x, (dy * x * x).sum(0)


def _setitem(B, x, w):
    out = B.zeros(x.shape)
    out[:, 1] = x[:, 0] * x[:, 1]
    out[:, 0] = x[:, 0] * w[0]
    return out


def _setitem_right(B, x, w, dy):
    dx = B.zeros(x.shape)
    dx[:, 0] = dy[:, 1] * x[:, 1] + dy[:, 0] * w[0]
    dx[:, 1] = dy[:, 1] * x[:, 0]
    dw = B.zeros(w.shape)
    dw[0] = (dy[:, 0] * x[:, 0]).sum()
    return dx, dw


def _setitem_wrong(B, x, w, dy):                         # the second write is dropped
    dx = B.zeros(x.shape)
    dx[:, 0] = dy[:, 1] * x[:, 1] + dy[:, 0] * w[0]
    dw = B.zeros(w.shape)
    dw[0] = (dy[:, 0] * x[:, 0]).sum()
    return dx, dw


def _inplace_backward_right(B, x, w, dy):                # in-place updates in the backward itself
    g = dy * (3 * x * x)
    h = g
    h += dy * w                                          # g is h
    return g, (dy * x).sum(0)


CASES = {
    "sum_where": (_sum_where, ("rows",), _sum_where_right, _sum_where_wrong),
    "reshape_order_f": (_reshape_f, ("n", "rows"), _reshape_f_right, _reshape_f_wrong),
    "alias_iadd": (_alias, ("rows", "n"), _alias_right, _alias_wrong),
    "view_imul": (_view, ("rows", "n"), _view_right, _view_wrong),
    "setitem": (_setitem, ("rows", "n"), _setitem_right, _setitem_wrong),
    "alias_iadd_backward": (_alias, ("rows", "n"), _inplace_backward_right, _alias_wrong),
}


def _make(case, right):
    forward, output, good, bad = CASES[case]
    name = f"modular_language_{case}_{'right' if right else 'wrong'}"
    f = op(inputs={"x": ("rows", "n"), "w": ("n",)}, output=output, dims=[{"rows": 3, "n": 4}],
           name=name)(lambda B, x, w: forward(B, x, w))
    f.defvjp(good if right else bad)
    return f


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_right_backward_is_not_failed_and_agrees_with_the_exact_tier(case):
    f = _make(case, right=True)
    for claim in ("vjp[x]", "vjp[w]"):
        c = mc.check_modular(f, claim, {"rows": 6, "n": 5}, trials=2)
        assert c.verdict == "checked-probabilistic", (claim, c.verdict, c.evidence)
        assert prove_claim(f, claim, {"rows": 3, "n": 4}).verdict == "proved"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wrong_backward_is_failed_with_a_witness_and_agrees_with_the_exact_tier(case):
    f = _make(case, right=False)
    c = mc.check_modular(f, "vjp[x]", {"rows": 6, "n": 5}, trials=2)
    assert c.verdict == "failed", c.evidence
    assert int(c.evidence["witness"]["residual_mod_p"]) != 0
    assert prove_claim(f, "vjp[x]", {"rows": 3, "n": 4}).verdict == "failed"


# ---- keyword arguments outside the language are refused, not dropped
def _arr(shape, seed=0, tangent=True):
    F = mb.Field(_prime(), {k: (1, 2) for k in ("exp", "log", "sqrt", "erf", "tanh", "circle", "cpow")}, 5)
    gen = np.random.default_rng(seed)
    v = gen.integers(0, 50, size=shape)
    t = gen.integers(0, 50, size=shape) if tangent else None
    return mb.ModArray(F, v, t, None, None, leaf=False), v, t, F      # a computed array: writable


@pytest.mark.parametrize("call", [
    lambda x: np.sum(x, axis=0, dtype=np.int64),
    lambda x: x.sum(axis=0, out=None),
    lambda x: np.reshape(x, (-1,), order="A"),
    lambda x: np.mean(x, axis=0, dtype=np.int64),
    lambda x: np.concatenate([x, x], axis=0, dtype=np.int64),
    lambda x: np.stack([x, x], axis=0, out=None),
    lambda x: np.broadcast_to(x, (2, 3, 4), subok=True),
    lambda x: np.add(x, x, where=True),
    lambda x: np.pad(x, 1, mode="edge"),
])
def test_keywords_outside_the_language_are_refused(call):
    x, *_ = _arr((3, 4))
    with pytest.raises(SpecError, match="not part of the spec language"):
        call(x)


def test_writes_into_inputs_stay_refused():
    F = mb.Field(_prime(), {}, 5)
    x = mb.ModArray(F, np.arange(4), None)                 # a leaf, as the checker makes inputs
    with pytest.raises(SpecError, match="read-only"):
        x += 1
    with pytest.raises(SpecError, match="read-only"):
        x[1:][0] = 2


def test_a_write_through_a_reshape_is_refused_not_guessed():
    x, *_ = _arr((3, 4))
    r = x.reshape(-1)                                   # a view or a copy, by the layout numpy chose
    with pytest.raises(SpecError, match="view"):
        r += 1


# ---- structural and linear constructs: values and tangents as numpy computes them, mod p
CONSTRUCTS = {
    "flip": lambda x: np.flip(x, axis=1),
    "roll": lambda x: np.roll(x, 2, axis=1),
    "pad": lambda x: np.pad(x, ((1, 0), (0, 2))),
    "take": lambda x: np.take(x, np.array([2, 0, 0]), axis=1),
    "take_along_axis": lambda x: np.take_along_axis(x, np.array([[1, 0, 3, 3]] * 3), axis=1),
    "tril": lambda x: np.tril(x, -1),
    "triu": lambda x: np.triu(x, 1),
    "moveaxis": lambda x: np.moveaxis(x.reshape(3, 2, 2), 0, -1),
    "int_index": lambda x: x[np.array([2, 0]), 1:],
    "bool_index": lambda x: x[:, np.array([True, False, True, True])],
    "reshape_f": lambda x: np.reshape(x, (2, 6), order="F"),
    "ravel_f": lambda x: np.ravel(x, order="F"),
    "strided": lambda x: x[::-2, 1::2],
    "cumsum": lambda x: np.cumsum(x, axis=1),
    "cumsum_flat": lambda x: np.cumsum(x),
    "diff": lambda x: np.diff(x, n=2, axis=1),
    "sum_where": lambda x: np.sum(x, axis=1, where=_mask(3, 4), initial=7),
    "prod": lambda x: np.prod(x, axis=0),
    "outer": lambda x: np.outer(x[0], x[1]),
    "einsum_matmul": lambda x: np.einsum("ij,kj->ik", x, x),
    "einsum_trace_free": lambda x: np.einsum("ij,ij->j", x, x),
    "einsum_transpose": lambda x: np.einsum("ij->ji", x),
    "einsum_sum": lambda x: np.einsum("ij->i", x),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_a_construct_computes_what_numpy_computes(name):
    fn = CONSTRUCTS[name]
    x, v, t, F = _arr((3, 4), seed=hash(name) % 1000)
    out = fn(x)
    want = np.asarray(fn(v)) % _prime()                     # small entries: int64 is exact
    assert out.shape == want.shape
    assert np.array_equal(np.asarray(out.v) % _prime(), want.astype(np.int64))
    if name == "prod":                                  # d prod = sum_i prod_{j != i} x_j dx_i
        tw = sum(np.prod(np.where(np.arange(3)[:, None] == i, t, v).astype(object), axis=0)
                 for i in range(3)) % _prime()
    elif name in ("outer", "einsum_matmul", "einsum_trace_free"):
        tw = None                                       # bilinear: checked by the VJP cases below
    else:
        tw = np.asarray(fn(t.astype(object))) % _prime() - (7 if name == "sum_where" else 0)
    if tw is not None:
        assert np.array_equal(np.asarray(out.t) % _prime(), np.asarray(tw % _prime()).astype(np.int64))


def test_add_at_scatters_with_repeats():
    x, v, t, F = _arr((5,))
    out = mb.ModularBackend(F).zeros((4,))
    np.add.at(out, np.array([0, 2, 0, 0]), x[:4])
    want = np.zeros(4, dtype=object)
    np.add.at(want, np.array([0, 2, 0, 0]), v[:4].astype(object))
    assert np.array_equal(np.asarray(out.v), want.astype(np.int64))


def test_a_base_written_later_is_seen_by_its_views():
    x, v, t, F = _arr((3, 4))
    y = x * 1
    col = y[:, 1]
    y[:, 1] = x[:, 0]
    assert np.array_equal(np.asarray(col.v), v[:, 0])
    assert np.array_equal(np.asarray(col.t), t[:, 0])


def test_a_cached_value_is_not_reused_after_a_write():
    x, v, t, F = _arr((3, 4))
    y = x * x
    before = (y * 2).v.copy()
    y[0] = 0
    after = (y * 2).v
    assert not np.array_equal(before, after) and np.all(np.asarray(after)[0] == 0)


def test_einsum_that_cannot_be_lowered_is_refused():
    x, *_ = _arr((4, 4))
    with pytest.raises(SpecError, match="einsum"):
        np.einsum("ii->i", x)


def test_a_copy_does_not_see_a_later_write_of_its_base():
    x, v, t, F = _arr((3, 4))
    y = x * 1
    picked, copied = y[np.array([0, 1])], y.copy()
    y[:] = 0
    assert np.array_equal(np.asarray(picked.v), v[:2]) and np.array_equal(np.asarray(copied.v), v)


def test_a_reshape_used_after_its_base_was_written_is_refused():
    x, *_ = _arr((3, 4))
    y = x * 1
    r = y.reshape(-1)
    y[0] = 0
    with pytest.raises(SpecError, match="view"):
        r * 2


def test_add_at_carries_tangents():
    x, v, t, F = _arr((5,))
    out = x * 1
    np.add.at(out, np.array([0, 2, 0]), x[:3])
    want_v, want_t = v.copy(), t.copy()
    np.add.at(want_v, np.array([0, 2, 0]), v[:3])
    np.add.at(want_t, np.array([0, 2, 0]), t[:3])
    assert np.array_equal(np.asarray(out.v), want_v) and np.array_equal(np.asarray(out.t), want_t)


# ---- the bounds stay upper bounds through writes (the harness of tests/test_modular_bound.py)
def written_rows(B, x, y, r):
    out = np.zeros_like(x)
    out[0] = x[0] / y[0]
    out[1] = x[1] * x[1] * x[1]
    return (out * r).sum()


def scattered(B, x, y, r):
    out = np.zeros_like(x)
    np.add.at(out, (np.array([0, 0, 1]), np.array([1, 1, 0])), (x / y)[0])
    return (out * r).sum()


def view_updated(B, x, y, r):
    z = x * y
    head = z[:1]
    head *= x[:1] / y[:1]
    z += 1
    return (z * r).sum()


@pytest.mark.parametrize("fn", [written_rows, scattered, view_updated], ids=lambda f: f.__name__)
def test_the_bound_bounds_the_true_degree_through_writes(fn):
    from test_modular_bound import _symbolic, _tracked
    shapes = [(2, 3), (2, 3), (2, 3)]
    tracked, true = _tracked(fn, shapes), _symbolic(fn, shapes)
    assert true <= tracked, (true, tracked)


def test_control_a_write_that_forgets_the_written_bound_is_caught(monkeypatch):
    """The check above is not vacuous: a write keeping only the old bound (zeros here) undercounts."""
    from test_modular_bound import _symbolic, _tracked
    from vjpcert.symbolic.modular import views
    monkeypatch.setattr(views, "_placed", lambda b, target, shape: None)
    shapes = [(2, 3), (2, 3), (2, 3)]
    with pytest.raises((AssertionError, AttributeError)):
        assert _symbolic(written_rows, shapes) <= _tracked(written_rows, shapes)


# ---- 0-d values: a numpy scalar is immutable (x += y rebinds x), a 0-d array is not
def test_a_scalar_in_place_update_rebinds_and_a_0d_array_mutates():
    x, v, t, F = _arr((3,))
    B = mb.ModularBackend(F)
    s = x.sum()                                          # a numpy scalar
    alias = s
    s += 1
    assert int(alias.v) == int(v.sum()) and int(s.v) == int(v.sum()) + 1
    first = x[0]                                         # a[0] of a 1-d array: a scalar, not a view
    first *= 2
    assert np.array_equal(np.asarray(x.v), v)
    acc = B.zeros(())                                    # np.zeros(()) is a 0-d array
    alias = acc
    acc += x.sum()
    assert int(alias.v) == int(v.sum())


def test_a_scalar_parameter_updated_in_place_is_rebound_not_refused():
    F = mb.Field(_prime(), {}, 5)
    eps = mb.ModArray(F, np.int64(3), None)                 # a leaf parameter, as the checker makes them
    eps += 1
    assert int(eps.v) == 4


@pytest.mark.parametrize("call", [
    lambda x: np.sum(x, 0, np.int64),                   # numpy's third positional is dtype
    lambda x: x.sum(0, np.int64),
    lambda x: x.mean(0, np.int64),
    lambda x: np.prod(x, 0, np.int64),
    lambda x: np.pad(x, 1, "edge"),                     # mode by position
    lambda x: np.reshape(x, (-1,), "A"),
    lambda x: x.ravel("K"),
])
def test_arguments_by_position_are_not_misread(call):
    x, *_ = _arr((3, 4))
    with pytest.raises((SpecError, TypeError)):
        call(x)
