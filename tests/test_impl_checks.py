"""Checking someone's implementation against a spec (``vjpcert check --impl``, the fixture's
``matches_spec``): parameters, float32 from the command line, the forward of an autograd.Function,
float64 leaks, and the 50-digit reference of the forward check. Each test names the gap it closes."""
import json
import sys
import textwrap

import numpy as np
import pytest

import optional

torch = optional.importorskip("torch", reason="PyTorch is needed for the implementations under test")
F = optional.importorskip("torch.nn.functional")
models = optional.importorskip("torch_models")

from vjpcert.cli import main  # noqa: E402
from vjpcert.impl import check_backward  # noqa: E402
from vjpcert.specs import resolve_op  # noqa: E402
from vjpcert.testing import CertificationError, assert_matches_spec  # noqa: E402


def layer_norm_backward(eps):
    """PyTorch's LayerNorm backward at a given eps, numpy in and out (float64)."""
    def backward(x, gamma, beta, dy):
        xs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, gamma, beta)]
        y = F.layer_norm(xs[0], xs[0].shape[-1:], xs[1], xs[2], eps)
        return tuple(g.numpy() for g in torch.autograd.grad(y, xs, torch.tensor(dy)))
    return backward


# ------------------------------------------------------------------------------ gap: no way to pass parameters
def test_a_layernorm_with_eps_1e_6_is_checked_at_eps_1e_6():
    op = resolve_op("layernorm")
    impl = layer_norm_backward(1e-6)
    assert check_backward(op, impl, name="ln", params={"eps": 1e-6}).verdict == "checked"
    # the negative control: the same implementation against the spec's default eps (1e-5) fails
    assert check_backward(op, impl, name="ln").verdict == "failed"


def test_params_reach_the_implementation_and_unknown_ones_are_refused():
    op = resolve_op("layernorm")
    seen = []

    def impl(x, gamma, beta, dy, eps):
        seen.append(eps)
        return layer_norm_backward(eps)(x, gamma, beta, dy)
    assert check_backward(op, impl, name="ln", params={"eps": 1e-6}).verdict == "checked"
    assert set(seen) == {1e-6}
    from vjpcert.core.registry import SpecError
    with pytest.raises(SpecError, match="epsilon"):
        check_backward(op, impl, name="ln", params={"epsilon": 1e-6})


# ------------------------------------------------------------------------------ gap: float64 forward check
def test_a_correct_float64_layer_norm_forward_passes_on_near_constant_rows():
    """The reference is the 50-digit spec, not the float64 spec (which is also the baseline: the
    bound collapsed to the floor and a correct F.layer_norm was rejected)."""
    def forward(x, gamma, beta):
        return F.layer_norm(torch.tensor(x), x.shape[-1:], torch.tensor(gamma), torch.tensor(beta), 1e-5).numpy()
    assert_matches_spec("layernorm", forward, kind="forward", dtype=np.float64)


def test_an_autograd_function_with_a_wrong_forward_fails_the_backward_check():
    cert = check_backward(resolve_op("layernorm"), models.WrongForwardLayerNorm, name="wrong-forward", dtype=np.float64)
    assert cert.verdict == "failed" and cert.evidence["witness"]["cotangent"] == "forward"
    with pytest.raises(CertificationError, match="forward"):
        assert_matches_spec("layernorm", models.WrongForwardLayerNorm, kind="backward", dtype=np.float64)


# ------------------------------------------------------------------------------ gap: float64 leaks
def softmax_backward_in_float64(x, dy):
    """Right formula, but computed and returned in float64 whatever it is given."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    return (y * (dy - (y * dy).sum(-1, keepdims=True)),)


def softmax_forward_in_float64(x):
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_a_float64_result_fails_a_float32_check():
    with pytest.raises(CertificationError, match="float64"):
        assert_matches_spec("softmax", softmax_backward_in_float64, kind="backward", dtype=np.float32)
    with pytest.raises(CertificationError, match="float64"):
        assert_matches_spec("softmax", softmax_forward_in_float64, kind="forward", dtype=np.float32)
    # the negative control: the same code passes where float64 is what was asked for
    assert_matches_spec("softmax", softmax_backward_in_float64, kind="backward", dtype=np.float64)


# ------------------------------------------------------------------------------ gap: the CLI checks only float64
IMPL_MODULE = '''
import numpy as np
import torch
import torch.nn.functional as F

def ln_backward(x, gamma, beta, dy):
    xs = [torch.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
    y = F.layer_norm(xs[0], xs[0].shape[-1:], xs[1], xs[2], 1e-6)
    return tuple(g.numpy() for g in torch.autograd.grad(y, xs, torch.tensor(dy)))

def softmax_backward(x, dy):
    e = np.exp(x - x.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    return (y * (dy - (y * dy).sum(-1, keepdims=True)),)

def softmax_backward_f32(x, dy):
    return softmax_backward(x.astype(np.float32), dy.astype(np.float32))

def softmax_backward_low(x, dy):
    """In float32, returned in the dtype it was given (bfloat16, float16)."""
    dx, = softmax_backward_f32(x, dy)
    return (dx.astype(x.dtype),)
'''


@pytest.fixture
def impl_module(tmp_path, monkeypatch):
    (tmp_path / "my_impls.py").write_text(textwrap.dedent(IMPL_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_impls"
    sys.modules.pop("my_impls", None)


def test_the_cli_checks_float32_and_takes_params(tmp_path, impl_module):
    reports = tmp_path / "r"
    base = ["check", "--quiet", "--reports", str(reports)]
    assert main([*base, "softmax", "--impl", f"{impl_module}:softmax_backward", "--dtype", "float32"]) == 0
    rec = json.loads(next((reports / "certificates" / "softmax").glob("implementation__impl-*.json")).read_text())
    assert rec["method"] == "tolerance-rule@float32" and rec["evidence"]["dtype"] == "float32"
    assert main([*base, "layernorm", "--impl", f"{impl_module}:ln_backward", "--param", "eps=1e-6"]) == 0
    assert main([*base, "layernorm", "--impl", f"{impl_module}:ln_backward"]) == 1      # at eps 1e-5


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_cli_checks_low_precision(tmp_path, impl_module, dtype):
    reports = tmp_path / "r"
    base = ["check", "--quiet", "--reports", str(reports), "softmax", "--dtype", dtype]
    assert main([*base, "--impl", f"{impl_module}:softmax_backward_low"]) == 0
    rec = json.loads(next((reports / "certificates" / "softmax").glob("implementation__impl-*.json")).read_text())
    assert rec["method"] == f"tolerance-rule@{dtype}" and rec["evidence"]["dtype"] == dtype
    # a float32 answer is float32 code, not a low-precision implementation
    assert main([*base, "--impl", f"{impl_module}:softmax_backward_f32"]) == 1


@pytest.mark.parametrize("args,message", [
    (["--param", "eps"], "name=value"),
    (["--param", "epsilon=1e-6"], "epsilon"),
    (["--dtype", "float8"], "float8"),
])
def test_bad_impl_options_are_exit_2(tmp_path, impl_module, capsys, args, message):
    code = main(["check", "--quiet", "--reports", str(tmp_path / "r"), "layernorm",
                 "--impl", f"{impl_module}:ln_backward", *args])
    assert code == 2 and message in capsys.readouterr().err
