"""Certifying your own ops and kernels inside your own pytest suite, with the `vjpcert` fixture
(installed with vjpcert as a pytest plugin). CI runs this file."""
from pathlib import Path

import numpy as np
import pytest

MY_OPS = str(Path(__file__).with_name("my_ops.py"))
MY_TORCH_OPS = str(Path(__file__).with_name("my_torch_ops.py"))


def test_my_op_is_proved(vjpcert):
    certs = vjpcert.proved(f"{MY_OPS}::softplus")
    assert {c.claim for c in certs} == {"vjp[x]", "difference_is_identity"}


def test_my_op_is_checked_to_many_digits(vjpcert):
    certs = vjpcert.checked(f"{MY_OPS}::softplus", dps=30)
    derivative_checks = [c for c in certs if c.claim != "reference"]     # (reference: the float path)
    assert derivative_checks and min(c.evidence["digits"] for c in derivative_checks) > 20


def my_softmax_forward(x):
    """A user's float32 implementation (the 'kernel' under test): max-subtracted, float32 throughout."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def my_softmax_backward(x, dy):
    y = my_softmax_forward(x)
    return (y * (dy - (y * dy).sum(-1, keepdims=True)),)


def test_my_kernel_matches_the_spec(vjpcert):
    vjpcert.matches_spec("softmax", my_softmax_forward, kind="forward", dtype=np.float32)
    vjpcert.matches_spec("softmax", my_softmax_backward, kind="backward", dtype=np.float32)


def test_my_torch_backward_is_proved(vjpcert):
    """The autograd.Function's backward, from its torch code: proved = J^T dy of its forward, and the
    forward proved equal to the certified RMSNorm at eps = 1e-6."""
    pytest.importorskip("torch")
    certs = vjpcert.proved(f"{MY_TORCH_OPS}::my_rmsnorm")
    assert {c.claim for c in certs} == {"vjp[x]", "vjp[gamma]", "matches_spec[rmsnorm]"}


def test_my_torch_layernorm_at_my_eps(vjpcert):
    """An implementation that uses eps = 1e-6 is checked against the spec at eps = 1e-6."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    def backward(x, gamma, beta, dy, eps):
        xs = [torch.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
        y = F.layer_norm(xs[0], xs[0].shape[-1:], xs[1], xs[2], eps)
        return tuple(g.numpy() for g in torch.autograd.grad(y, xs, torch.tensor(dy)))
    vjpcert.matches_spec("layernorm", backward, kind="backward", dtype=np.float64, params={"eps": 1e-6})
