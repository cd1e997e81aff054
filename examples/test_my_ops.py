"""Certifying your own ops and kernels inside your own pytest suite, with the `vjpcert` fixture
(installed with vjpcert as a pytest plugin). CI runs this file."""
from pathlib import Path

import numpy as np

MY_OPS = str(Path(__file__).with_name("my_ops.py"))


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
