"""JAX's convolution from its own backward: lax.conv_general_dilated (strides, padding, kernel dilation,
feature groups, any layout) and the convolutions JAX's backward derives from it (input dilation,
negative padding, batch groups, a reversed kernel) compute JAX's own numbers and are proved at fixed
dims; a custom VJP whose input gradient forgets to reverse the kernel fails with a witness."""
from __future__ import annotations

import numpy as np
import pytest

import optional

jax = optional.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]')")
lax = optional.importorskip("jax.lax")

from vjpcert.core import reference  # noqa: E402
from vjpcert.frontends.jax_graph import _x64  # noqa: E402
from vjpcert.frontends.jaxpr import from_jax  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402

NCHW = ("NCHW", "OIHW", "NCHW")
CONVS = {        # each a lambda: reading lax here would import JAX at collection
    "stride_2_padded": (lambda x, w: lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NCHW),
                        {"x": (1, 2, 4, 4), "w": (3, 2, 3, 3)}),
    "same": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NCHW),
             {"x": (1, 2, 3, 3), "w": (2, 2, 3, 3)}),
    "nhwc_dilated": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), ((2, 2), (2, 2)), rhs_dilation=(2, 2),
                                                           dimension_numbers=("NHWC", "HWIO", "NHWC")),
                     {"x": (1, 3, 3, 2), "w": (3, 3, 2, 2)}),
    "depthwise": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), feature_group_count=2,
                                                        dimension_numbers=NCHW),
                  {"x": (1, 2, 3, 3), "w": (2, 1, 3, 3)}),
}


def _op(name, fn, shapes):
    inputs = {k: tuple(f"{k}{i}" for i in range(len(v))) for k, v in shapes.items()}
    dims = {f"{k}{i}": n for k, v in shapes.items() for i, n in enumerate(v)}
    return from_jax(fn, name=f"jcnn_{name}", inputs=inputs, dims=[dims]), dims


@pytest.mark.parametrize("name", sorted(CONVS))
def test_jax_s_convolution_computes_jax_s_numbers_and_is_proved_from_its_own_backward(name):
    fn, shapes = CONVS[name]
    op, dims = _op(name, fn, shapes)
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal(v) for k, v in shapes.items()}
    with _x64(jax):
        y, vjp = jax.vjp(fn, *arrays.values())
        dy = rng.standard_normal(y.shape)
        grads = vjp(dy)
    np.testing.assert_allclose(reference.forward(op, **arrays), np.asarray(y), rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(reference.vjp(op, dy, **arrays), grads):
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-12, atol=1e-12)
    for claim in op.claims():
        assert prove_claim(op, claim, dims).verdict == "proved", claim


def test_a_custom_vjp_that_does_not_reverse_the_kernel_fails():
    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=NCHW)

    @jax.custom_vjp
    def wrong(x, w):
        return conv(x, w)

    def fwd(x, w):
        return conv(x, w), (x, w)

    def bwd(res, dy):
        x, w = res
        dx = lax.conv_general_dilated(dy, w.transpose(1, 0, 2, 3), (1, 1), ((1, 1), (1, 1)),
                                      dimension_numbers=NCHW)        # the kernel not reversed
        _, vjp = jax.vjp(lambda w_: conv(x, w_), w)
        return dx, vjp(dy)[0]
    wrong.defvjp(fwd, bwd)
    op, dims = _op("unreversed", wrong, {"x": (1, 2, 3, 3), "w": (2, 2, 3, 3)})
    cert = prove_claim(op, "vjp[x]", dims)
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"], cert.evidence
    assert prove_claim(op, "vjp[w]", dims).verdict == "proved"


POOLS = {        # lax.reduce_window as flax and haiku write max-, min- and average pooling
    "max_2x2_nchw": (lambda x: lax.reduce_window(x, -np.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
                     {"x": (1, 2, 4, 4)}),
    "max_3x3s2_same_nhwc": (lambda x: lax.reduce_window(x, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
                            {"x": (1, 5, 5, 2)}),
    "min_2x2": (lambda x: lax.reduce_window(x, np.inf, lax.min, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
                {"x": (1, 1, 4, 4)}),
    "avg_3x3s2_padded": (lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 2, 2),
                                                     ((0, 0), (0, 0), (1, 1), (1, 1))) / 9, {"x": (1, 2, 5, 5)}),
}


def _jax_numbers(fn, arrays, dy_seed=1):
    with _x64(jax):
        y, vjp = jax.vjp(fn, *arrays.values())
        dy = np.random.default_rng(dy_seed).standard_normal(y.shape)
        return np.asarray(y), dy, [np.asarray(g) for g in vjp(dy)]


# the default run reads a 2x2 max-pool and a padded average pool; --slow every layout of the table
DEFAULT_POOLS = ("max_2x2_nchw", "avg_3x3s2_padded")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT_POOLS else pytest.mark.slow)
                                  for n in sorted(POOLS)])
def test_jax_s_pooling_computes_jax_s_numbers_ties_included_and_is_proved_on_its_kinks(name):
    """Random inputs and small integers (ties in every window): our reading of reduce_window and of
    select_and_scatter_add gives JAX's own numbers, the gradient of a tie at JAX's index; every claim
    is proved, and the value on the kink is checked."""
    fn, shapes = POOLS[name]
    op, dims = _op(name, fn, shapes)
    rng = np.random.default_rng(0)
    for arrays in ({k: rng.standard_normal(v) for k, v in shapes.items()},
                   {k: rng.integers(-1, 2, v).astype(float) for k, v in shapes.items()}):
        y, dy, grads = _jax_numbers(fn, arrays)
        np.testing.assert_allclose(reference.forward(op, **arrays), y, rtol=1e-12, atol=1e-12)
        for ours, theirs in zip(reference.vjp(op, dy, **arrays), grads):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    verdicts = {claim: prove_claim(op, claim, dims).verdict for claim in op.claims()}
    assert all(v == "proved" for c, v in verdicts.items() if c != "at_the_kink"), verdicts
    if name.startswith(("max", "min")):
        assert verdicts["at_the_kink"] == "checked", verdicts


def test_a_max_pool_whose_custom_vjp_routes_a_tie_to_the_last_maximum_fails_on_the_kink_only():
    """The negative control of the tie: a custom VJP that scatters with ``gt`` (a later equal tap
    replaces the selection, so the last maximum wins) is right on every region and wrong on a tie."""
    import importlib
    try:        # JAX's own, private: the only way to scatter with another select than ge
        wr = importlib.import_module("jax._src.lax.windowed_reductions")
    except ImportError:
        pytest.skip("this JAX has no jax._src.lax.windowed_reductions")
    if not hasattr(wr, "_select_and_scatter_add"):
        pytest.skip("this JAX has no _select_and_scatter_add")
    window, strides = (1, 1, 2, 2), (1, 1, 2, 2)

    @jax.custom_vjp
    def pool(x):
        return lax.reduce_window(x, -np.inf, lax.max, window, strides, "VALID")

    def fwd(x):
        return pool(x), x

    def bwd(x, dy):
        return (wr._select_and_scatter_add(dy, x, lax.gt_p, window, strides, ((0, 0),) * 4),)
    pool.defvjp(fwd, bwd)
    op, dims = _op("max_last_tie", pool, {"x": (1, 1, 2, 4)})
    assert prove_claim(op, "vjp[x]", dims).verdict == "proved"
    cert = prove_claim(op, "at_the_kink", dims)
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"], cert.evidence
