"""Convolutional networks from PyTorch's own backwards: F.conv2d (stride, padding, dilation, groups,
bias), F.batch_norm in training mode and F.max_pool2d (with padding; a tie routed to the first
maximum, as PyTorch does) are proved at fixed dims, the max-pool on the kink too; hand-written
backwards that forget BatchNorm's mean term, flip no kernel or send a tie's gradient everywhere fail
with exact witnesses."""
from __future__ import annotations

import pytest

import optional

torch = optional.importorskip("torch")
F = optional.importorskip("torch.nn.functional")
models = optional.importorskip("torch_models")

from vjpcert.core.registry import KINK_CLAIM, SpecError  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402
check_modular = optional.imported("vjpcert.symbolic.modular.check", "check_modular")   # its Numba loops: at first use

NCHW = ("N", "C", "H", "W")


def _proved(op, dims):
    for claim in op.claims():
        cert = prove_claim(op, claim, dims)
        assert cert.verdict == ("checked" if claim == KINK_CLAIM else "proved"), (claim, cert.evidence)


CONVS = {
    "same": (lambda x, w, b: F.conv2d(x, w, b, padding=1), {"N": 1, "C": 2, "O": 2, "H": 3, "W": 3}, 1),
    "stride_2": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), {"N": 1, "C": 1, "O": 2, "H": 4, "W": 3}, 1),
    "dilation_2": (lambda x, w, b: F.conv2d(x, w, b, dilation=2, padding=2), {"N": 1, "C": 1, "O": 1, "H": 3, "W": 3}, 1),
    "depthwise": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), {"N": 1, "C": 2, "O": 2, "H": 3, "W": 2}, 2),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_pytorch_s_conv2d_is_proved_from_its_own_backward(name):
    fn, dims, groups = CONVS[name]
    inputs = {"x": NCHW, "w": ("O", f"C//{groups}" if groups > 1 else "C", 3, 3), "b": ("O",)}
    if groups > 1:
        inputs["w"] = ("O", 1, 3, 3)
    _proved(from_torch(fn, name=f"fcnn_conv_{name}", inputs=inputs, dims=[dims]), dims)


def test_a_conv2d_is_checked_mod_p_at_a_resnet_stage_s_size():
    op = from_torch(lambda x, w: F.conv2d(x, w, padding=1), name="fcnn_conv_big", inputs={"x": NCHW, "w": ("O", "C", 3, 3)},
                    dims=[{"N": 1, "C": 1, "O": 1, "H": 2, "W": 2}])
    cert = check_modular(op, "vjp[w]", {"N": 2, "C": 16, "O": 16, "H": 14, "W": 14})
    assert cert.verdict == "checked-probabilistic", cert.evidence


def test_batch_norm_in_training_mode_is_proved_and_one_without_its_mean_term_fails():
    dims = {"N": 3, "C": 2}
    inputs = {"x": ("N", "C"), "g": ("C",), "b": ("C",)}
    _proved(from_torch(lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True), name="fcnn_bn",
                       inputs=inputs, dims=[dims]), dims)
    right = from_torch(models.BatchNormRight.apply, name="fcnn_bn_right", inputs=inputs, dims=[dims])
    assert prove_claim(right, "vjp[x]", dims).verdict == "proved"
    wrong = from_torch(models.BatchNormNoMeanTerm.apply, name="fcnn_bn_wrong", inputs=inputs, dims=[dims])
    cert = prove_claim(wrong, "vjp[x]", dims)          # a square root: the witness is mpmath's, at 50 and 100 digits
    assert cert.verdict == "failed" and cert.evidence["witness"]["digits"] == [50, 100], cert.evidence
    mod = check_modular(wrong, "vjp[x]", {"N": 64, "C": 32})
    assert mod.verdict == "failed" and mod.evidence["witness"]["exact"], mod.evidence
    assert mod.evidence["witness"]["real_point"]["confirmed"]


def test_f_batch_norm_itself_is_proved_with_its_arrays_passed_by_name():
    """F.batch_norm(input, running_mean, running_var, weight, bias, training): running_mean=None as a
    parameter sits between the arrays, so they are passed by their names (what the command line's
    `--input weight=C --param running_mean=None` means); arrays not named as its arguments are refused."""
    dims = {"N": 3, "C": 2}
    params = {"running_mean": None, "running_var": None, "training": True}
    op = from_torch(F.batch_norm, name="fcnn_bn_by_name", inputs={"input": ("N", "C"), "weight": ("C",), "bias": ("C",)},
                    params=params, dims=[dims])
    _proved(op, dims)
    with pytest.raises(SpecError, match="running_mean"):
        from_torch(F.batch_norm, name="fcnn_bn_unnamed", inputs={"x": ("N", "C"), "weight": ("C",), "bias": ("C",)},
                   params=params, dims=[dims])


POOLS = {
    "2x2_stride_2": (lambda x: F.max_pool2d(x, 2), {"N": 1, "C": 1, "H": 4, "W": 2}),
    "3x3_stride_2_padded": (lambda x: F.max_pool2d(x, 3, 2, padding=1), {"N": 1, "C": 1, "H": 3, "W": 3}),
    "2x2_stride_1": (lambda x: F.max_pool2d(x, 2, 1), {"N": 1, "C": 2, "H": 3, "W": 2}),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_max_pooling_is_proved_and_its_ties_go_to_the_first_maximum(name):
    fn, dims = POOLS[name]
    op = from_torch(fn, name=f"fcnn_pool_{name}", inputs={"x": NCHW}, dims=[dims])
    assert KINK_CLAIM in op.claims()
    _proved(op, dims)


def test_a_max_pool_that_sends_a_tie_s_gradient_everywhere_fails_on_the_kink():
    dims = {"N": 1, "C": 1, "H": 2, "W": 4}
    op = from_torch(models.MaxPoolEveryTie.apply, name="fcnn_pool_ties", inputs={"x": NCHW}, dims=[dims])
    # right wherever there is no tie: never failed there (the ring does not relate [x = max] to the
    # winners' steps, so it is not proved either)
    assert prove_claim(op, "vjp[x]", dims).verdict in ("proved", "inconclusive")
    cert = prove_claim(op, KINK_CLAIM, dims)
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"], cert.evidence


TRANSPOSED = {
    "stride_2": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                 {"N": 1, "C": 2, "O": 3, "H": 2, "W": 3}, ("C", "O", 3, 3)),
    "dilated": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, dilation=2, padding=2),
                {"N": 1, "C": 2, "O": 1, "H": 3, "W": 2}, ("C", "O", 3, 3)),
    "grouped": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, groups=2),
                {"N": 1, "C": 2, "O": 2, "H": 2, "W": 2}, ("C", 1, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_pytorch_s_conv_transpose2d_is_proved_from_its_own_backward(name):
    fn, dims, wdecl = TRANSPOSED[name]
    _proved(from_torch(fn, name=f"fcnn_convT_{name}", inputs={"x": NCHW, "w": wdecl, "b": ("O",)}, dims=[dims]), dims)


AGREEMENT = {
    "conv2d_strided_dilated_grouped": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
                                       {"x": (1, 4, 7, 6), "w": (4, 2, 3, 3), "b": (4,)}),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
                         {"x": (2, 4, 3, 4), "w": (4, 3, 3, 3), "b": (6,)}),
    "max_pool2d_padded": (lambda x: F.max_pool2d(x, 3, 2, padding=1), {"x": (2, 3, 5, 6)}),
    "avg_pool2d_exclude_pad": (lambda x: F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False), {"x": (2, 3, 5, 6)}),
    "avg_pool2d_divisor": (lambda x: F.avg_pool2d(x, 2, 1, divisor_override=3), {"x": (1, 2, 4, 3)}),
}


@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_each_rule_computes_pytorch_s_own_numbers(name):
    """A rule proved against itself would be proved however wrong it is: its float64 forward and
    backward are held to the values PyTorch itself computes, at random inputs."""
    import numpy as np

    from vjpcert.core import reference
    fn, shapes = AGREEMENT[name]
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal(v) for k, v in shapes.items()}
    inputs = {k: tuple(f"{k}{i}" for i in range(len(v))) for k, v in shapes.items()}
    dims = {f"{k}{i}": n for k, v in shapes.items() for i, n in enumerate(v)}
    op = from_torch(fn, name=f"fcnn_agree_{name}", inputs=inputs, dims=[dims])
    ts = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()}
    y = fn(*ts.values())
    dy = rng.standard_normal(tuple(y.shape))
    grads = torch.autograd.grad(y, list(ts.values()), torch.tensor(dy))
    np.testing.assert_allclose(reference.forward(op, **arrays), y.detach().numpy(), rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(reference.vjp(op, dy, **arrays), grads):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_what_has_no_rule_yet_is_refused_by_name():
    with pytest.raises(SpecError, match="ceil_mode"):
        op = from_torch(lambda x: F.max_pool2d(x, 2, ceil_mode=True), name="fcnn_pool_ceil", inputs={"x": NCHW},
                        dims=[{"N": 1, "C": 1, "H": 3, "W": 3}])
        prove_claim(op, "vjp[x]", {"N": 1, "C": 1, "H": 3, "W": 3})
