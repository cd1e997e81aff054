"""The every-size tier speaks the spec language of ``core.language``: its array refuses with the shared
messages and the keyword table, follows the language's reductions and layouts for every size
(``where=`` / ``initial=``, moveaxis, swapaxes, outer, diff, pad, einsum, strided slices of padded
arrays), proves a strided, padded conv2d for every size and refutes a wrong backward of it, treats
sqrt(x*x) as |x| (never as x) and knows the sigmoid well enough to prove an LSTM cell."""
import numpy as np
import pytest

from vjpcert.core import language
from vjpcert.core.registry import op
from vjpcert.numeric.reference import check_reference
from vjpcert.symbolic.every_size.form import build_statement
from vjpcert.symbolic.every_size.concrete import cross_check
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.every_size.shape_trace import derive
from vjpcert.symbolic.fixed.prover import prove_claim

HERE = "tests/test_every_size_language.py"


# ------------------------------------------------------------------------------ the shared refusals
def _rows_op(name, forward):
    @op(name=name, inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 3}])
    def f(B, x):
        return forward(B, x)

    @f.defvjp
    def _(B, x, dy):
        return (dy,)
    f.every_size("vjp[x]")
    return f


REFUSED = {
    "comparison": (lambda B, x: x * (x > 0), language.COMPARISON),
    "branch": (lambda B, x: x if x[0, 0] else -x, language.BRANCH),
    "float": (lambda B, x: x * float(x[0, 0]), language.FLOAT_CALL),
    "abs": (lambda B, x: abs(x), language.COMPARISON),
    "maximum": (lambda B, x: np.maximum(x, 0), language.COMPARISON),
    "numpy exp": (lambda B, x: np.exp(x), language.NUMPY_TRANSCENDENTAL.format(name="exp")),
    "sum dtype": (lambda B, x: x * np.sum(x, axis=-1, keepdims=True, dtype=object),
                  "np.sum(..., dtype=...) is not part of the spec language"),
    "method kw": (lambda B, x: x * x.sum(-1, keepdims=True, dtype=object),
                  "np.sum(..., dtype=...) is not part of the spec language"),
    "pad mode": (lambda B, x: np.pad(x, 1, mode="reflect")[1:-1, 1:-1],
                 "np.pad(..., mode='reflect') is not part of the spec language"),
    "not in the language": (lambda B, x: np.cumprod(x, -1), "np.cumprod is not part of the spec language"),
    "implicit einsum": (lambda B, x: np.einsum("ij", x), "explicit output subscripts"),
    "diagonal einsum": (lambda B, x: x * np.einsum("ii->i", x[:, :1] @ x[:1, :])[:, None],
                        "repeated letter"),
    # below size 2 a roll by 2 wraps twice; at size 1 numpy's squeeze() would drop that axis too
    "roll by 2": (lambda B, x: np.roll(x, 2, axis=-1), "only a shift of 1 is followed"),
    "squeeze without an axis": (lambda B, x: np.squeeze(x[:, None, :]), "name the axes"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_the_trace_refuses_with_the_language_s_own_words(case):
    forward, words = REFUSED[case]
    cert = prove_general(_rows_op(f"tl_{case.replace(' ', '_')}", forward), "vjp[x]")
    ev = cert.evidence
    assert cert.verdict == "inconclusive", ev
    assert words in ev["reason"], ev["reason"]
    assert ev["refused_at"].startswith(f"{HERE}:"), ev["refused_at"]


def test_the_comparison_text_is_not_copied_into_the_trace():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "symbolic" / "every_size"
    text = "".join(p.read_text() for p in root.glob("*.py"))
    assert "branch-free in their inputs" not in text       # core.language holds the words once


# ------------------------------------------------------------------------------ constructs, for every size
def _mask(x):
    n = x.shape[-1]
    return np.tril(np.ones((n, n), dtype=bool))[-1:, :] & np.triu(np.ones((n, n), dtype=bool), k=1)[:1, :]


CONSTRUCTS = {
    "sum_where": lambda B, x: x * np.sum(x, axis=-1, keepdims=True, where=_mask(x), initial=0),
    "sum_initial": lambda B, x: x + np.sum(x * x, axis=-1, keepdims=True, initial=3),
    "method_where": lambda B, x: x * x.sum(-1, keepdims=True, where=_mask(x), initial=1),
    "mean_where": lambda B, x: x - np.mean(x, axis=-1, keepdims=True, where=np.ones((1, x.shape[-1]), dtype=bool)),
    "moveaxis": lambda B, x: np.moveaxis(x[:, :, None] * x[:, None, :], 0, -1).sum(0).T,
    "swapaxes": lambda B, x: np.swapaxes(x, 0, 1).swapaxes(1, 0) * x,
    "outer": lambda B, x: np.outer(x[0], x[-1])[:1, :] * x,
    "diff": lambda B, x: np.concatenate([np.diff(x, axis=-1), x[:, :1]], -1) + np.diff(x, axis=0).sum(0),
    "pad": lambda B, x: np.pad(x, ((0, 0), (2, 1)))[:, 1:-2] * x,
    "einsum": lambda B, x: np.einsum("rn,sn,sm->rm", x, x, x) + np.einsum("rn->nr", x).T,
    "sliced_pad": lambda B, x: np.pad(x, ((1, 0), (1, 1)))[1:, 2:x.shape[-1] + 2] * x,
    "flip": lambda B, x: np.flip(x, axis=-1) * x + np.flip(x),
    "flip_of_pieces": lambda B, x: np.flip(np.pad(x, ((0, 0), (2, 0))), axis=1)[:, 1:x.shape[-1] + 1] * x,
    "roll": lambda B, x: np.roll(x, 1, axis=-1) * x + np.roll(x, -1, axis=0),
    "tile": lambda B, x: np.tile(x, (1, 2))[:, x.shape[-1]:] * x + np.tile(x[:, :1], 2)[:, 1:],
    "split": lambda B, x: (lambda a, b: np.concatenate([b, a]))(*np.split(x, [1], axis=0)) * x,
    "unit_axes": lambda B, x: np.squeeze(x[:, None, :], axis=1) * np.expand_dims(x, (0, 2))[0, :, 0, :]
    + x * x[:, :1].ravel()[:, None],
    "reshape_F": lambda B, x: x * np.reshape(x[:, :1], (1, -1), order="F").T,
}


@pytest.mark.parametrize("name", list(CONSTRUCTS))
def test_the_trace_computes_what_numpy_computes(name):
    construct = CONSTRUCTS[name]

    @op(name=f"tl_{name}", inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 4}])
    def f(B, x):
        return x + construct(B, x)

    @f.defvjp
    def _(B, x, dy):                       # only the forward's statement is compared here
        return (dy * 0,)
    stmt = build_statement(f, "vjp[x]", derive(f, "vjp[x]"))
    checked = cross_check(stmt, [{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 3, "n": 4}, {"rows": 3, "n": 5}])
    assert checked["status"] == "exact", checked


def test_a_tracer_that_misreads_a_pad_is_caught_by_the_cross_check(monkeypatch):
    """Negative control of the construct tests: a pad that puts its zeros on the wrong side derives a
    statement about another function, and the cross-check says so."""
    from vjpcert.symbolic.every_size import backend, layouts

    def wrong(a, pad_width, **kw):
        w = np.broadcast_to(np.asarray(pad_width), (np.ndim(a), 2))[:, ::-1]
        return layouts.pad(a, w, **kw)
    monkeypatch.setitem(backend.FUNCTIONS, "pad", wrong)

    @op(name="tl_misread_pad", inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 4}])
    def f(B, x):
        return x * np.pad(x, ((0, 0), (2, 1)))[:, 1:-2]

    @f.defvjp
    def _(B, x, dy):
        return (dy * 0,)
    stmt = build_statement(f, "vjp[x]", derive(f, "vjp[x]"))
    checked = cross_check(stmt, [{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 3, "n": 4}])
    assert checked["status"] != "exact", checked


def test_a_tracer_that_forgets_to_reverse_a_flip_is_caught_by_the_cross_check(monkeypatch):
    from vjpcert.symbolic.every_size import backend
    from vjpcert.symbolic.every_size.symarray import lift
    monkeypatch.setitem(backend.FUNCTIONS, "flip", lambda a, axis=None: lift(a))

    @op(name="tl_unreversed_flip", inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 4}])
    def f(B, x):
        return x * np.flip(x, axis=-1)

    @f.defvjp
    def _(B, x, dy):
        return (dy * 0,)
    stmt = build_statement(f, "vjp[x]", derive(f, "vjp[x]"))
    checked = cross_check(stmt, [{"rows": 1, "n": 2}, {"rows": 2, "n": 3}])
    assert checked["status"] != "exact", checked


def _cumsum_op(backward):
    @op(name=f"tl_cumsum_{backward.__name__}", inputs={"x": ("rows", "n")}, output=("rows", "n"),
        dims=[{"rows": 1, "n": 3}, {"rows": 2, "n": 4}])
    def f(B, x):
        return np.cumsum(x * x, axis=1)
    f.defvjp(backward)
    f.every_size("vjp[x]")
    return f


def suffix_sums(B, x, dy):
    return (2 * x * np.flip(np.cumsum(np.flip(dy, axis=1), axis=1), axis=1),)


def prefix_sums(B, x, dy):                 # the forward's own direction: wrong
    return (2 * x * np.cumsum(dy, axis=1),)


def test_a_prefix_sum_is_followed_for_every_size_and_a_wrong_backward_fails():
    """np.cumsum is a sum over the whole axis masked by Ind(i - k): the statement matches numpy at
    every size the cross-check tries; the backward that sums the wrong way fails with a witness, the
    right one (a reverse cumsum through np.flip) is never failed -- the normal form does not yet
    rename k -> n - 1 - k under a mask, so it is inconclusive, as the fixed-dims ring proves it."""
    right, wrong = _cumsum_op(suffix_sums), _cumsum_op(prefix_sums)
    stmt = build_statement(right, "vjp[x]", derive(right, "vjp[x]"))
    assert cross_check(stmt, [{"rows": 1, "n": 2}, {"rows": 2, "n": 3}, {"rows": 1, "n": 5}])["status"] == "exact"
    assert prove_general(right, "vjp[x]").verdict in ("proved-general", "inconclusive")
    assert prove_claim(right, "vjp[x]", {"rows": 2, "n": 4}).verdict == "proved"
    cert = prove_general(wrong, "vjp[x]")
    assert cert.verdict == "failed" and cert.evidence["witness"]["dims"]


def test_a_tracer_that_sums_the_wrong_side_of_the_prefix_is_caught_by_the_cross_check(monkeypatch):
    """The control of the construct: a cumsum read as a suffix sum (Ind(k - i)) is not numpy's."""
    from vjpcert.symbolic.every_size import layouts
    real = layouts.Ind
    monkeypatch.setattr(layouts, "Ind", lambda e: real(-e))
    f = _cumsum_op(suffix_sums)
    stmt = build_statement(f, "vjp[x]", derive(f, "vjp[x]"))
    assert cross_check(stmt, [{"rows": 1, "n": 2}, {"rows": 2, "n": 3}])["status"] != "exact"


# ------------------------------------------------------------------------------ a strided, padded conv2d
def _conv_forward(B, x, w):
    """y[k, p, q] = sum_{c,i,j} xp[c, 2p + i, 2q + j] w[k, c, i, j], xp = x padded by 1 (stride 2, 3x3)."""
    Ho, Wo = x.shape[1] // 2, x.shape[2] // 2
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    y = 0
    for i in range(3):
        for j in range(3):
            y = y + np.einsum("chw,kc->khw", xp[:, i:i + 2 * Ho:2, j:j + 2 * Wo:2], w[:, :, i, j])
    return y


def _next(a, axis):
    """a[..., t + 1, ...] with a zero past the end along ``axis``."""
    cut = [slice(None)] * a.ndim
    cut[axis] = slice(1, None)
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, 1)
    return np.pad(a[tuple(cut)], widths)


# Input row 2p + r of the unpadded input is padded row 2p + r + 1 = i + 2t: for r = 0 the tap i = 1 at
# t = p; for r = 1 the tap i = 2 at t = p and the tap i = 0 at t = p + 1.
TAPS = {0: ((1, False),), 1: ((2, False), (0, True))}
WRONG_TAPS = {0: ((1, False),), 1: ((0, False), (2, True))}     # the kernel's rows flipped for odd rows


def _conv_backward(taps):
    def backward(B, x, w, dy):
        C, H, W = x.shape
        parts = {}
        for r in (0, 1):
            for s in (0, 1):
                acc = 0
                for i, shift_i in taps[r]:
                    for j, shift_j in TAPS[s]:
                        d = _next(dy, 1) if shift_i else dy
                        d = _next(d, 2) if shift_j else d
                        acc = acc + np.einsum("khw,kc->chw", d, w[:, :, i, j])
                parts[r, s] = acc
        rows = [np.stack([parts[r, 0], parts[r, 1]], -1).reshape(C, H // 2, W) for r in (0, 1)]
        dx = np.stack(rows, 2).reshape(C, H, W)
        dw = np.stack([np.stack([np.einsum("khw,chw->kc", dy, np.pad(x, ((0, 0), (1, 1), (1, 1)))
                                           [:, i:i + H:2, j:j + W:2]) for j in range(3)], -1)
                       for i in range(3)], -2)
        return dx, dw
    return backward


def _conv_op(name, taps):
    @op(name=name, inputs={"x": ("C", "2*Ho", "2*Wo"), "w": ("K", "C", 3, 3)}, output=("K", "Ho", "Wo"),
        dims=[{"C": 1, "K": 1, "Ho": 2, "Wo": 2}, {"C": 2, "K": 1, "Ho": 3, "Wo": 2}])
    def conv(B, x, w):
        return _conv_forward(B, x, w)
    conv.defvjp(_conv_backward(taps))
    conv.every_size("vjp[x]", "vjp[w]")
    return conv


@pytest.mark.slow      # ten seconds of every-size proof; the wrong conv2d below is refuted by default
def test_a_strided_padded_conv2d_is_proved_for_every_size():
    conv = _conv_op("tl_conv2d", TAPS)
    for claim in ("vjp[x]", "vjp[w]"):
        cert = prove_general(conv, claim, budget=240)
        ev = cert.evidence
        assert cert.verdict == "proved-general", (claim, ev.get("reason"), ev.get("proof"))
        assert ev["proof"]["status"] == "proved"
        assert cert.dims["Ho"] == "Ho" and "2*Ho" not in cert.dims


def test_a_wrong_conv2d_backward_is_refuted_with_a_counter_example():
    conv = _conv_op("tl_conv2d_wrong", WRONG_TAPS)
    cert = prove_general(conv, "vjp[x]", budget=240)
    ev = cert.evidence
    assert cert.verdict in ("failed", "inconclusive"), ev
    assert cert.verdict != "proved-general"


CONV_DIMS = [{"C": 1, "K": 1, "Ho": 1, "Wo": 2}, {"C": 2, "K": 1, "Ho": 2, "Wo": 3}, {"C": 1, "K": 2, "Ho": 3, "Wo": 2}]


def test_the_nine_strided_slices_are_cut_into_common_pieces_exactly():
    """The forward adds nine strided slices of the padded input, each cut by the pad in other places:
    their common refinement (rows {0}, {1..Ho-1} by columns {0}, {1..Wo-1}) agrees with numpy at
    every size the cross-check tries, Ho = 1 (an empty cell) included."""
    conv = _conv_op("tl_conv2d_cut", TAPS)
    stmt = build_statement(conv, "vjp[w]", derive(conv, "vjp[w]"))
    checked = cross_check(stmt, CONV_DIMS)
    assert checked["status"] == "exact", checked


def test_a_misaligned_cut_is_caught_by_the_cross_check(monkeypatch):
    """Negative control of the refinement: a locate that finds the right piece but reads it at the
    cell's own local indices (the offset between a cell and a larger piece dropped: a cut put in the
    wrong place) derives a statement about another function, and the cross-check says so."""
    from vjpcert.symbolic.every_size import grid, symarray
    right = grid.locate

    def off_by_one(ctx, maps, A):
        for Q in A.pieces:
            if right(ctx, maps, symarray.SymArray(A._shape, [Q], A.boolean)) is not None:
                return Q.value
        return None
    monkeypatch.setattr(grid, "locate", off_by_one)
    conv = _conv_op("tl_conv2d_misaligned", TAPS)
    stmt = build_statement(conv, "vjp[w]", derive(conv, "vjp[w]"))
    checked = cross_check(stmt, CONV_DIMS)
    assert checked["status"] != "exact", checked


def test_adjacent_ranges_of_one_sum_are_joined_and_near_misses_are_not():
    """The normal form joins a sum split at a pad's edge (the first or last entry apart from the rest)
    back into one sum; an entry one place off (f[1] beside f[1..n-1], f[n] past the end) stays apart."""
    import sympy as sp
    from vjpcert.symbolic.every_size.normal import Normaliser
    n, k, f = sp.Symbol("n", integer=True, positive=True), sp.Symbol("k", integer=True), sp.IndexedBase("f")
    whole = sp.Sum(f[k], (k, 0, n - 1))
    N = Normaliser([n])
    assert N.is_zero(sp.Sum(f[k + 1], (k, 0, n - 2)) + f[0] - whole)[0]
    assert N.is_zero(sp.Sum(f[k], (k, 0, n - 2)) + f[n - 1] - whole)[0]
    assert not N.is_zero(sp.Sum(f[k + 1], (k, 0, n - 2)) + f[1] - whole)[0]
    assert not N.is_zero(sp.Sum(f[k], (k, 0, n - 2)) + f[n] - whole)[0]


def test_the_conv2d_float_reference_is_checked_with_a_dim_declared_as_2_ho():
    from vjpcert.core.reference import forward, infer_dims
    conv = _conv_op("tl_conv2d_ref", TAPS)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 6, 4)), rng.standard_normal((1, 2, 3, 3))
    assert infer_dims(conv, {"x": x, "w": w}) == {"C": 2, "K": 1, "Ho": 3, "Wo": 2}
    assert forward(conv, x=x, w=w).shape == (1, 3, 2)
    with pytest.raises(Exception, match="2\\*Ho"):
        infer_dims(conv, {"x": rng.standard_normal((2, 5, 4)), "w": w})     # 5 is no 2*Ho
    cert = check_reference(conv, conv.dims[1])
    assert cert.verdict == "checked", cert.evidence


# ------------------------------------------------------------------------------ a strided slice's transpose
def _spread(a):
    """a[t] placed at entry 2t of an array twice as long, zeros between: the transpose of x[::2],
    written as numpy users write it (stack with zeros, reshape)."""
    return np.stack([a, 0 * a], axis=-1).reshape(2 * a.shape[0])


def _window3_op(name, offsets):
    """y[t] = sum_i w[i] xp[2t + i], xp = x padded by one (a 1-d stride-2 conv of width 3); its backward
    spreads w[i] dy back to every other entry, shifted by the tap: three interleaves padded at different
    offsets, added (strided pieces that must be cut per residue class to be aligned)."""
    @op(name=name, inputs={"x": ("2*n",), "w": (3,)}, output=("n",), dims=[{"n": 2}, {"n": 3}])
    def conv(B, x, w):
        n = x.shape[0] // 2
        xp = np.pad(x, 1)
        return sum(w[i] * xp[i:i + 2 * n:2] for i in range(3))

    @conv.defvjp
    def _(B, x, w, dy):
        n = dy.shape[0]
        xp = np.pad(x, 1)
        dxp = sum(np.pad(_spread(w[i] * dy), (lo, 2 - lo)) for i, lo in enumerate(offsets))
        dw = np.stack([(dy * xp[i:i + 2 * n:2]).sum() for i in range(3)])
        return dxp[1:-1], dw
    conv.every_size("vjp[x]", "vjp[w]")
    return conv


def test_the_transpose_of_a_strided_slice_written_as_an_interleave_is_proved_for_every_size():
    conv = _window3_op("tl_window3", (0, 1, 2))
    for claim in ("vjp[x]", "vjp[w]"):
        cert = prove_general(conv, claim, budget=120)
        assert cert.verdict == "proved-general", (claim, cert.evidence.get("reason"))


def test_an_interleave_one_place_off_is_refuted_for_every_size():
    conv = _window3_op("tl_window3_wrong", (0, 2, 1))
    cert = prove_general(conv, "vjp[x]", budget=120)
    assert cert.verdict == "failed", cert.evidence.get("reason")


@pytest.mark.parametrize("shape, target", [((2, 6), (4, 3)), ((2, 6), (3, 4)), ((2, 9), (2, 3, 3)),
                                           ((3, 2, 2), (2, 6)), ((4,), (2, 1, 2))])
def test_a_reshape_that_regroups_constant_axes_computes_what_numpy_computes(shape, target):
    """Split (C order: the leading axis the slower) and merge, in any mix, at the sizes where numpy
    itself is the ground truth; the rows axis stays symbolic in front of them."""
    lead = ("rows",)

    @op(name=f"tl_regroup_{len(shape)}_{len(target)}_{target[0]}", inputs={"x": (*lead, *shape)},
        output=(*lead, *target), dims=[{"rows": 2}])
    def regroup(B, x):
        return x.reshape(x.shape[0], *target) * B.c(2)

    @regroup.defvjp
    def _(B, x, dy):
        return (dy.reshape(x.shape) * B.c(2),)
    regroup.every_size("vjp[x]")
    cert = prove_general(regroup, "vjp[x]", budget=60)
    assert cert.verdict == "proved-general", cert.evidence.get("reason")
    stmt = build_statement(regroup, "vjp[x]", derive(regroup, "vjp[x]"))
    assert cross_check(stmt, [{"rows": 1}, {"rows": 3}])["status"] == "exact"


def test_a_reshape_that_reads_the_axes_in_the_wrong_order_is_caught_by_the_cross_check(monkeypatch):
    """Negative control of the split: groups read with the constant axis the slower (Fortran order
    inside the group) derive a statement about another function, and the cross-check says so."""
    from vjpcert.symbolic.every_size import constructs
    right = constructs._split

    def transposed(A, ax, c):
        out = right(A, ax, c)
        n = A._shape[ax] / c
        return right(A, ax, int(n)).swapaxes(ax, ax + 1) if n.is_Integer else out
    monkeypatch.setattr(constructs, "_split", transposed)

    @op(name="tl_regroup_misread", inputs={"x": ("rows", 6)}, output=("rows", 2, 3), dims=[{"rows": 2}])
    def regroup(B, x):
        return x.reshape(x.shape[0], 2, 3) * x.reshape(x.shape[0], 2, 3)

    @regroup.defvjp
    def _(B, x, dy):
        return ((2 * dy * x.reshape(x.shape[0], 2, 3)).reshape(x.shape),)
    stmt = build_statement(regroup, "vjp[x]", derive(regroup, "vjp[x]"))
    checked = cross_check(stmt, [{"rows": 1}, {"rows": 2}])
    assert checked["status"] == "mismatch", checked


def _runs_op(name, runs, backward_order):
    """x (runs * n, m) read as ``runs`` runs of n rows (C order: the run the slower axis), the runs in
    reverse order and merged back: the channel groups of a grouped convolution, moved as blocks. The
    backward moves dy's runs in ``backward_order``: the reverse (right) or any other (wrong)."""
    def reverse_runs(a):
        r = a.reshape(runs, a.shape[0] // runs, a.shape[1])
        return np.stack([r[k] for k in range(runs)[::-1]]).reshape(a.shape)

    @op(name=name, inputs={"x": (f"{runs}*n", "m")}, output=(f"{runs}*n", "m"), dims=[{"n": 2, "m": 2}])
    def f(B, x):
        return reverse_runs(x) * x

    @f.defvjp
    def _(B, x, dy):
        n = x.shape[0] // runs
        moved = (dy * x).reshape(runs, n, x.shape[1])
        return (np.stack([moved[r] for r in backward_order]).reshape(x.shape) + dy * reverse_runs(x),)
    f.every_size("vjp[x]")
    return f


@pytest.mark.parametrize("runs", [2, 3])
def test_a_reshape_into_runs_and_back_computes_what_numpy_computes(runs):
    """(c n) -> (c, n) and back, n symbolic: c consecutive runs, as a grouped convolution's channels
    are; proved for every size, and the general form equals numpy's at concrete sizes."""
    f = _runs_op(f"tl_runs_{runs}", runs, list(range(runs))[::-1])
    cert = prove_general(f, "vjp[x]", budget=60)
    assert cert.verdict == "proved-general", cert.evidence.get("reason")
    stmt = build_statement(f, "vjp[x]", derive(f, "vjp[x]"))
    assert cross_check(stmt, [{"n": 1, "m": 1}, {"n": 3, "m": 2}])["status"] == "exact"


def test_runs_moved_in_the_wrong_order_are_refuted_for_every_size():
    f = _runs_op("tl_runs_unmoved", 3, [0, 1, 2])
    cert = prove_general(f, "vjp[x]", budget=60)
    assert cert.verdict == "failed", cert.evidence.get("reason")


def test_a_reshape_into_runs_read_in_the_wrong_order_is_caught_by_the_cross_check(monkeypatch):
    """Negative control of the runs: (c n) -> (c, n) with the runs stacked last to first derives a
    statement about another function, and the cross-check against numpy says so."""
    from vjpcert.symbolic.every_size import constructs
    right = constructs.stack
    monkeypatch.setattr(constructs, "stack", lambda arrays, axis=0, **kw: right(arrays[::-1], axis, **kw))
    f = _runs_op("tl_runs_misread", 3, [2, 1, 0])
    stmt = build_statement(f, "vjp[x]", derive(f, "vjp[x]"))
    assert cross_check(stmt, [{"n": 2, "m": 1}, {"n": 3, "m": 2}])["status"] == "mismatch"


# ------------------------------------------------------------------------------ an input named y
def _shift_op(name, rhs):
    """A law over inputs x and y whose output (n, n) has another shape than y (n, 2m): the input y must
    never be read as the output y."""
    @op(name=name, inputs={"x": ("n", "2*m"), "y": ("n", "2*m")}, output=("n", "n"), dims=[{"n": 2, "m": 2}])
    def f(B, x, y):
        return x @ y.T

    @f.law(name="shifted")
    def _(B, x, y):
        return x[:, 1:] - y[:, :-1], rhs(x, y)
    f.every_size("shifted")
    return f


def test_a_law_over_an_input_named_y_reads_the_input_for_every_size():
    cert = prove_general(_shift_op("tl_shift", lambda x, y: -(y[:, :-1] - x[:, 1:])), "shifted", budget=120)
    assert cert.verdict == "proved-general", cert.evidence


def test_a_wrong_law_over_an_input_named_y_is_refuted():
    cert = prove_general(_shift_op("tl_shift_wrong", lambda x, y: x[:, 1:] - y[:, 1:]), "shifted", budget=120)
    assert cert.verdict == "failed", cert.evidence


# ------------------------------------------------------------------------------ |x| and the sigmoid
def _sqrt_square_op(name, backward):
    @op(name=name, inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])
    def f(B, x):
        return B.sqrt(x * x)
    f.defvjp(backward)
    f.every_size("vjp[x]")
    return f


def test_sqrt_of_a_square_is_the_absolute_value_for_every_size():
    right = _sqrt_square_op("tl_sqrt_sq", lambda B, x, dy: (dy * x / B.sqrt(x * x),))
    cert = prove_general(right, "vjp[x]")
    assert cert.verdict == "proved-general", (cert.evidence.get("reason"), cert.evidence.get("proof"))


def test_the_sign_written_another_way_is_proved_too_and_the_fixed_dims_tier_agrees():
    """x^2 / sqrt(x^2) / x is x / |x| again: the same derivative, proved by both tiers."""
    other = _sqrt_square_op("tl_sqrt_sq_other", lambda B, x, dy: (dy * x * x / B.sqrt(x * x) / x,))
    assert prove_general(other, "vjp[x]").verdict == "proved-general"
    assert prove_claim(other, "vjp[x]", {"n": 3}).verdict == "proved"


@pytest.mark.parametrize("wrong", ["identity", "abs"])
def test_sqrt_of_a_square_is_never_x(wrong):
    """sqrt(x^2) = x is false for x < 0, and |x| is no derivative of |x|: neither backward is proved,
    and the fixed-dims tier fails both."""
    backward = {"identity": lambda B, x, dy: (dy,), "abs": lambda B, x, dy: (dy * B.sqrt(x * x),)}
    f = _sqrt_square_op(f"tl_sqrt_sq_{wrong}", backward[wrong])
    cert = prove_general(f, "vjp[x]")
    assert cert.verdict != "proved-general", cert.evidence
    assert cert.verdict == "failed" or cert.evidence.get("reason"), cert.evidence
    assert prove_claim(f, "vjp[x]", {"n": 3}).verdict == "failed"


def test_the_normal_form_reads_abs_as_a_root_never_as_x():
    import sympy as sp
    from vjpcert.symbolic.every_size.normal import Normaliser
    x = sp.IndexedBase("x", real=True)[sp.Symbol("i", integer=True)]
    N = Normaliser()
    assert N.is_zero(sp.Abs(x) ** 2 - x * x)[0]
    assert N.is_zero(sp.sign(x) * sp.Abs(x) - x)[0]
    assert N.is_zero(sp.sign(x) - x / sp.Abs(x))[0]
    assert not N.is_zero(sp.Abs(x) - x)[0]                  # sqrt(x^2) = x is false for x < 0
    assert not N.is_zero(sp.sign(x) - 1)[0]
    assert not N.is_zero(sp.Abs(x) + x)[0]


def _sig(B, z):
    return 1 / (1 + B.exp(-z))


def _lstm_forward(B, x, c, Wi, Wf, Wo, Wg):
    i, f, o, g = _sig(B, x @ Wi), _sig(B, x @ Wf), _sig(B, x @ Wo), B.tanh(x @ Wg)
    return o * B.tanh(f * c + i * g)


def _lstm_backward(wrong: bool):
    def backward(B, x, c, Wi, Wf, Wo, Wg, dy):
        i, f, o, g = _sig(B, x @ Wi), _sig(B, x @ Wf), _sig(B, x @ Wo), B.tanh(x @ Wg)
        t = B.tanh(f * c + i * g)
        dcn = dy * o * (1 - t * t)
        do, di, df, dg = dy * t, dcn * g, dcn * c, dcn * i
        dzi, dzf, dzo = di * i * (1 - i), df * f * (1 - f), do * o * (1 if wrong else (1 - o))
        dzg = dg * (1 - g * g)
        dx = dzi @ Wi.T + dzf @ Wf.T + dzo @ Wo.T + dzg @ Wg.T
        zero = Wi * 0
        return dx, dcn * f, zero, zero, zero, zero
    return backward


def _lstm_op(name, wrong):
    m = ("n", "m")
    @op(name=name, inputs={"x": ("rows", "n"), "c": ("rows", "m"), "Wi": m, "Wf": m, "Wo": m, "Wg": m},
        output=("rows", "m"), dims=[{"rows": 1, "n": 2, "m": 2}])
    def cell(B, x, c, Wi, Wf, Wo, Wg):
        return _lstm_forward(B, x, c, Wi, Wf, Wo, Wg)
    cell.defvjp(_lstm_backward(wrong))
    cell.every_size("vjp[x]", "vjp[c]")
    return cell


def test_an_lstm_cell_is_proved_for_every_size():
    cell = _lstm_op("tl_lstm", wrong=False)
    for claim in ("vjp[x]", "vjp[c]"):
        cert = prove_general(cell, claim, budget=240)
        assert cert.verdict == "proved-general", (claim, cert.evidence.get("reason"), cert.evidence.get("proof"))


def test_an_lstm_cell_with_a_wrong_sigmoid_derivative_is_never_proved():
    cert = prove_general(_lstm_op("tl_lstm_wrong", wrong=True), "vjp[x]", budget=240)
    assert cert.verdict != "proved-general", cert.evidence


def test_a_refusal_in_a_user_s_file_outside_the_package_quotes_its_line(tmp_path):
    import runpy
    path = tmp_path / "users_spec.py"
    path.write_text('''import numpy as np
from vjpcert import op


@op(name="tl_users_roll", inputs={"x": ("rows", "n")}, output=("rows", "n"), dims=[{"rows": 2, "n": 3}])
def f(B, x):
    return np.roll(x, 1) * B.c(2)


@f.defvjp
def _(B, x, dy):
    return (np.roll(dy, -1) * B.c(2),)
f.every_size("vjp[x]")
''')
    cert = prove_general(runpy.run_path(str(path))["f"], "vjp[x]", budget=30)
    assert cert.verdict == "inconclusive"
    assert cert.evidence["refused_at"] == "users_spec.py:7"
    assert cert.evidence["refused_code"] == "return np.roll(x, 1) * B.c(2)"
