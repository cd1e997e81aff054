"""Framework code is proved for the dtype and device it is traced in, and a graph that changes with
either is never proved in its place: a fused path taken only in low precision (or only on CUDA) is
refused at the default settings, and proved or failed when its dtype is asked for."""
import json
import sys
import textwrap

import pytest

import optional

torch = optional.importorskip("torch", reason="the PyTorch frontend needs PyTorch")
F = optional.importorskip("torch.nn.functional")

from vjpcert.cli import main  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.core.validate import validate  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402
from vjpcert.specs import resolve_op  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402

XW = {"x": ("n",), "w": ("n",)}
DIMS = {"n": 3}
CAST_WORDS = "casts read as exact: the proof is about the real function the graph computes, not its rounding"

# A user's op file: a fused autograd.Function for the dtypes training runs in, plain ops for float64.
# The fused backward forgets the factor 2 of d(x*x*w)/dx.
MODULE = '''
import torch


class FusedSquareMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * x * w

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy * x * w, dy * x * x


class FusedSquareMulCorrect(FusedSquareMul):
    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return 2 * dy * x * w, dy * x * x


def square_mul(x, w):
    if x.dtype in (torch.float16, torch.bfloat16, torch.float32):
        return FusedSquareMul.apply(x, w)
    return x * x * w


def square_mul_correct(x, w):
    if x.dtype in (torch.float16, torch.bfloat16, torch.float32):
        return FusedSquareMulCorrect.apply(x, w)
    return x * x * w


def square_mul_half(x, w):
    if x.dtype == torch.bfloat16:
        return FusedSquareMul.apply(x, w)
    return x * x * w


def square_mul_everywhere(x, w):
    return FusedSquareMulCorrect.apply(x, w)


def mixed_precision(x, w):
    return (x.float() * x.float() * w.float()).to(x.dtype)


def swapped_sum(x, w):
    if x.dtype == torch.float32:
        return (w + x) * (w * x)
    return (x + w) * (x * w)


def swapped_difference(x, w):
    a, b = torch.arange(x.shape[0], dtype=x.dtype), torch.ones_like(x)
    if x.dtype == torch.float32:
        return x * w * (b - a)
    return x * w * (a - b)


def on_device(x, w):
    if x.is_cuda:
        return FusedSquareMul.apply(x, w)
    return x * x * w


def on_device_type(x, w):
    if x.device.type == "cuda":
        return FusedSquareMul.apply(x, w)
    return x * x * w


def on_device_and_dtype(x, w):
    if x.dtype == torch.float32 and torch.cuda.is_available():
        return FusedSquareMul.apply(x, w)
    return x * x * w


def device_passed_along(x, w):
    ones = torch.ones(x.shape, device=x.device, dtype=x.dtype)
    y = x * x * w * ones
    return y.contiguous() if x.is_cuda else y
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "user_fused.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("user_fused", None)
    import user_fused
    yield user_fused
    sys.modules.pop("user_fused", None)


def op_of(fn, **kw):
    return from_torch(fn, name=fn.__name__, inputs=XW, dims=[DIMS], **kw)


def planned(fn, **kw):
    """The op as planning sees it: validated (its graph traced and compared at every dtype and device
    it is held to). A refusal is raised here, when the op is planned, not when it is declared: one
    refused op in a file does not take its neighbours with it."""
    op = op_of(fn, **kw)
    validate(op)
    return op


def verdicts(op):
    return [prove_claim(op, c, DIMS).verdict for c in op.claims()]


# ------------------------------------------------------------------------------ the dtype
def test_a_fused_low_precision_path_is_refused_at_the_default_dtype(user):
    with pytest.raises(SpecError, match=r"square_mul.*depends on the dtype.*float32.*dtype="):
        planned(user.square_mul)


def test_a_path_taken_in_bfloat16_only_is_refused_too(user):
    with pytest.raises(SpecError, match=r"depends on the dtype.*bfloat16"):
        planned(user.square_mul_half)


def test_the_cli_refuses_it_as_bad_input_naming_the_function(tmp_path, user, capsys):
    code = main(["prove", "torch:user_fused:square_mul", "--input", "x=n", "--input", "w=n", "--dims", "n=3",
                 "--quiet", "--reports", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "user_fused.square_mul" in err and "depends on the dtype" in err and "--dtype" in err


def test_at_float32_the_fused_path_fails_with_a_witness(user):
    op = op_of(user.square_mul, dtype="float32")
    cert = prove_claim(op, "vjp[x]", DIMS)
    assert cert.verdict == "failed"
    w = cert.evidence["witness"]
    assert w["point"] and w["component"] and w["exact"]
    assert prove_claim(op, "vjp[w]", DIMS).verdict == "proved"


def test_the_cli_proves_at_float32_when_asked_and_fails_the_fused_path(tmp_path, user):
    reports = tmp_path / "r"
    code = main(["prove", "torch:user_fused:square_mul", "--input", "x=n", "--input", "w=n", "--dims", "n=3",
                 "--dtype", "float32", "--quiet", "--reports", str(reports)])
    got = {p.name.split("__")[1]: json.loads(p.read_text())
           for p in (reports / "certificates" / "user_fused.square_mul").glob("*.json")}
    assert code == 1 and got["vjp-x"]["verdict"] == "failed" and got["vjp-w"]["verdict"] == "proved"
    assert any("traced at float32 on cpu" in a for a in got["vjp-w"]["assumptions"])


def test_the_correct_fused_path_is_proved_at_float32(user):
    assert verdicts(op_of(user.square_mul_correct, dtype="float32")) == ["proved", "proved"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_half_precision_paths_are_traced_when_asked(user, dtype):
    assert verdicts(op_of(user.square_mul, dtype=dtype))[0] == "failed"
    assert verdicts(op_of(user.square_mul_correct, dtype=dtype)) == ["proved", "proved"]


def test_explicit_float64_proves_the_float64_graph_and_says_nothing_else_was_compared(user):
    op = op_of(user.square_mul, dtype="float64")
    cert = prove_claim(op, "vjp[x]", DIMS)
    assert cert.verdict == "proved"
    assert any("traced at float64 on cpu" in a and "not compared" in a for a in cert.assumptions)


def test_a_function_with_one_graph_at_every_dtype_is_proved_at_the_default(user):
    for fn in (user.square_mul_everywhere, user.mixed_precision):
        assert verdicts(op_of(fn)) == ["proved", "proved"], fn.__name__


def test_operands_swapped_where_the_math_commutes_are_one_graph_and_elsewhere_are_not(user):
    assert verdicts(op_of(user.swapped_sum)) == ["proved", "proved"]
    with pytest.raises(SpecError, match="swapped_difference.*depends on the dtype"):
        planned(user.swapped_difference)


def test_pytorch_rms_norm_rounds_eps_to_the_dtype_and_is_still_one_graph():
    """F.rms_norm writes eps rounded to the input's dtype into the graph: the same constant, not a
    different graph; at float32 it is read as the decimal float32 prints (1e-06), so the spec matches."""
    def rms(x, gamma):
        return F.rms_norm(x, x.shape[-1:], gamma, 1e-6)
    for dtype in (None, "float32"):
        op = from_torch(rms, name="rms", spec=resolve_op("rmsnorm"), dims=[{"rows": 2, "n": 3}], dtype=dtype)
        assert verdicts_at(op, {"rows": 2, "n": 3}) == ["proved"] * 3, dtype


def verdicts_at(op, dims):
    return [prove_claim(op, c, dims).verdict for c in op.claims()]


def test_an_unknown_dtype_is_bad_input(user):
    with pytest.raises(SpecError, match="dtype"):
        op_of(user.square_mul_everywhere, dtype="float8")


def test_the_cli_rejects_dtype_for_an_op_declared_in_its_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "user_declared.py").write_text(textwrap.dedent('''
        from vjpcert import torch_op

        @torch_op(inputs={"x": ("n",)}, dims=[{"n": 2}], dtype="float32")
        def declared(x):
            return x * x
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        assert main(["prove", "torch:user_declared:declared", "--dtype", "float16", "--quiet",
                     "--reports", str(tmp_path / "r")]) == 2
        assert "--dtype" in capsys.readouterr().err
        assert main(["prove", "torch:user_declared:declared", "--quiet", "--reports", str(tmp_path / "r")]) == 0
    finally:
        sys.modules.pop("user_declared", None)


# ------------------------------------------------------------------------------ the device
@pytest.mark.parametrize("name", ["on_device", "on_device_type", "on_device_and_dtype"])
def test_a_device_dependent_path_is_refused(user, name):
    with pytest.raises(SpecError, match=rf"{name}.*depends on the device"):
        planned(getattr(user, name))


def test_the_device_is_not_hidden_by_an_explicit_dtype(user):
    with pytest.raises(SpecError, match="depends on the device"):
        planned(user.on_device_and_dtype, dtype="float32")


def test_reading_the_device_without_changing_the_graph_is_proved_and_stated(user):
    op = op_of(user.device_passed_along)
    certs = [prove_claim(op, c, DIMS) for c in op.claims()]
    assert [c.verdict for c in certs] == ["proved", "proved"]
    assert any("is_cuda" in a and "as on CUDA" in a for a in certs[0].assumptions)


# ------------------------------------------------------------------------------ what a certificate says
def test_assumptions_name_the_dtype_the_device_and_the_casts(user):
    cert = prove_claim(op_of(user.square_mul_everywhere), "vjp[x]", DIMS)
    words = " | ".join(cert.assumptions)
    assert "traced at float64 on cpu" in words
    assert "float32" in words and "bfloat16" in words and "float16" in words
    cert = prove_claim(op_of(user.mixed_precision, dtype="bfloat16"), "vjp[x]", DIMS)
    words = " | ".join(cert.assumptions)
    assert "traced at bfloat16 on cpu" in words and CAST_WORDS in words


def test_a_float64_certificate_is_not_current_for_a_float32_task(tmp_path, user, capsys):
    from vjpcert.plan import plan_op, split_current
    reports = tmp_path / "r"
    args = ["prove", "torch:user_fused:square_mul_everywhere", "--input", "x=n", "--input", "w=n",
            "--dims", "n=3", "--quiet", "--no-general", "--reports", str(reports)]
    assert main(args) == 0
    name = "user_fused.square_mul_everywhere"
    op64 = from_torch(user.square_mul_everywhere, name=name, inputs=XW, dims=[DIMS])
    op32 = from_torch(user.square_mul_everywhere, name=name, inputs=XW, dims=[DIMS], dtype="float32")
    assert op64.spec_sha256 != op32.spec_sha256
    todo, done = split_current(plan_op(op64, ("symbolic",), general=False), {name: op64}, reports)
    assert len(done) == 2 and not todo                      # the control: the same task is current
    todo, done = split_current(plan_op(op32, ("symbolic",), general=False), {name: op32}, reports)
    assert len(todo) == 2 and not done
    capsys.readouterr()
    assert main([a for a in args if a != "--quiet"] + ["--dtype", "float32"]) == 0
    out = capsys.readouterr()
    assert "(2 run, 0 current)" in out.out + out.err


# ------------------------------------------------------------------------------ JAX
JAX_MODULE = '''
import jax
import jax.numpy as jnp


def _fused(correct):
    @jax.custom_vjp
    def f(x, w):
        return x * x * w

    def fwd(x, w):
        return f(x, w), (x, w)

    def bwd(res, dy):
        x, w = res
        return ((2 if correct else 1) * dy * x * w, dy * x * x)
    f.defvjp(fwd, bwd)
    return f


fused, fused_correct = _fused(False), _fused(True)


def square_mul(x, w):
    if x.dtype == jnp.float64:
        return x * x * w
    return fused(x, w)


def square_mul_correct(x, w):
    if x.dtype == jnp.float64:
        return x * x * w
    return fused_correct(x, w)


def square_mul_everywhere(x, w):
    return fused_correct(x, w) + 1e-6 * w


def on_backend(x, w):
    if jax.default_backend() == "gpu":
        return fused(x, w)
    return x * x * w


def on_devices(x, w):
    if jax.devices()[0].platform == "gpu":
        return fused(x, w)
    return x * x * w
'''


@pytest.fixture
def jax_user(tmp_path, monkeypatch):
    pytest.importorskip("jax", reason="JAX is optional")
    (tmp_path / "user_jax_fused.py").write_text(textwrap.dedent(JAX_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_jax_fused", None)
    import user_jax_fused
    yield user_jax_fused
    sys.modules.pop("user_jax_fused", None)


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_jax_custom_vjp_taken_below_float64_is_refused_then_failed_at_float32(jax_user):
    from vjpcert.frontends.jaxpr import from_jax
    with pytest.raises(SpecError, match=r"square_mul.*depends on the dtype.*float32.*dtype="):
        validate(from_jax(jax_user.square_mul, name="square_mul", inputs=XW, dims=[DIMS]))
    op = from_jax(jax_user.square_mul, name="square_mul", inputs=XW, dims=[DIMS], dtype="float32")
    cert = prove_claim(op, "vjp[x]", DIMS)
    assert cert.verdict == "failed" and cert.evidence["witness"]["point"]
    assert any("traced at float32 on cpu" in a for a in cert.assumptions)
    twin = from_jax(jax_user.square_mul_correct, name="twin", inputs=XW, dims=[DIMS], dtype="float32")
    assert verdicts(twin) == ["proved", "proved"]


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_jax_one_graph_at_every_dtype_is_proved_and_its_constant_read_as_printed(jax_user):
    from vjpcert.frontends.jaxpr import from_jax
    for dtype in (None, "float32", "bfloat16"):
        op = from_jax(jax_user.square_mul_everywhere, name="every", inputs=XW, dims=[DIMS], dtype=dtype)
        certs = [prove_claim(op, c, DIMS) for c in op.claims()]
        assert [c.verdict for c in certs] == ["proved", "proved"], dtype
        words = " | ".join(certs[0].assumptions)
        assert f"traced at {dtype or 'float64'} on cpu" in words


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
@pytest.mark.parametrize("name", ["on_backend", "on_devices"])
def test_jax_code_that_asks_the_backend_is_refused(jax_user, name):
    from vjpcert.frontends.jaxpr import from_jax
    with pytest.raises(SpecError, match=rf"{name}.*depends on the device.*jax[.](default_backend|devices)"):
        validate(from_jax(getattr(jax_user, name), name=name, inputs=XW, dims=[DIMS], dtype="float32"))
