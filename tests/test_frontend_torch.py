"""The PyTorch frontend: real torch code (an autograd.Function, PyTorch's own formulas) proved and
failed from its torch source alone, and every way a user's file could make a verdict lie refused."""
import json
import sys
import textwrap

import numpy as np
import pytest

import optional

torch = optional.importorskip("torch", reason="the PyTorch frontend needs PyTorch")
F = optional.importorskip("torch.nn.functional")
models = optional.importorskip("torch_models")

from vjpcert.cli import main  # noqa: E402
from vjpcert.core.backends import F32, F64, MpmathBackend  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402
from vjpcert.specs import resolve_op  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402

ROWS_N = {"x": ("rows", "n"), "gamma": ("n",)}


def rms_op(cls, **kw):
    return from_torch(lambda x, gamma, eps: cls.apply(x, gamma, eps), name=cls.__name__, inputs=ROWS_N,
                      dims=[{"rows": 1, "n": 2}, {"rows": 2, "n": 3}], params={"eps": 1e-6}, **kw)


# ------------------------------------------------------------------------------ done when
def test_a_custom_rmsnorm_function_is_proved_from_its_torch_code():
    op = rms_op(models.RMSNorm)
    certs = [prove_claim(op, c, d) for d in op.dims for c in op.claims()]
    assert [c.verdict for c in certs] == ["proved"] * 4
    assert any("1e-06 as 1/1000000" in a for a in certs[0].assumptions)


def test_the_same_function_with_one_wrong_term_fails_with_a_witness():
    op = rms_op(models.RMSNormWrongTerm)
    cert = prove_claim(op, "vjp[x]", {"rows": 2, "n": 3})
    assert cert.verdict == "failed"
    w = cert.evidence["witness"]
    assert w["point"] and w["component"].startswith("x[") and float(w["residual"]) > 1e-6
    assert prove_claim(op, "vjp[gamma]", {"rows": 2, "n": 3}).verdict == "proved"   # the right term stays right


def test_the_forward_is_tied_to_the_spec_and_a_wrong_forward_fails_it():
    op = rms_op(models.RMSNorm, spec=resolve_op("rmsnorm"))
    assert prove_claim(op, "matches_spec[rmsnorm]", {"rows": 2, "n": 3}).verdict == "proved"
    wrong = from_torch(lambda x, gamma, eps: models.RMSNorm.apply(x, gamma, 1e-3), name="rms_eps", inputs=ROWS_N,
                       dims=[{"rows": 2, "n": 3}], params={"eps": 1e-6}, spec=resolve_op("rmsnorm"))
    assert prove_claim(wrong, "matches_spec[rmsnorm]", {"rows": 2, "n": 3}).verdict == "failed"
    assert prove_claim(wrong, "vjp[x]", {"rows": 2, "n": 3}).verdict == "proved"   # consistent with itself


# ------------------------------------------------------------------------------ the evaluator is PyTorch
CASES = {
    "rmsnorm_fn": (lambda x, gamma: models.RMSNorm.apply(x, gamma, 1e-6), [(3, 5), (5,)]),
    "rms_norm": (lambda x, gamma: F.rms_norm(x, x.shape[-1:], gamma, 1e-6), [(3, 5), (5,)]),
    "layer_norm": (lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, 1e-5), [(3, 5), (5,), (5,)]),
    "softmax": (lambda x: torch.softmax(x, -1), [(3, 5)]),
    "softmax_dim0": (lambda x: torch.softmax(x, 0), [(3, 5)]),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), [(3, 5)]),
    "gelu": (lambda x: F.gelu(x), [(3, 5)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 5)]),
    "silu": (lambda x: F.silu(x), [(3, 5)]),
    "linear": (lambda x, W, b: F.linear(x, W, b), [(3, 4), (2, 4), (2,)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [(4, 3), (4, 3), (4, 3)]),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [(2, 4, 3)] * 3),
    "masked_fill": (lambda x: torch.softmax(x.masked_fill(torch.ones(3, 5, dtype=torch.bool).triu(1), float("-inf")),
                                            -1), [(3, 5)]),
    "views": (lambda x, w: (x.t() @ w).reshape(-1).unsqueeze(0).expand(2, -1).flip(1)[:, 1:].cumsum(1),
              [(3, 4), (3, 2)]),
    "in_place": (lambda x: _in_place(x), [(3, 4)]),
    "cat_split": (lambda x: torch.cat(list(reversed(x.split([1, 3], -1))), -1) * torch.arange(4.0), [(2, 4)]),
    "rope_half": (lambda x: _rotate(x), [(3, 4)]),
}


def _in_place(x):
    y = x * 2
    z = y.view(-1)
    y.add_(1.5)                      # z sees the update: functionalization must keep that
    return z.view(3, 4) * x


def _rotate(x):
    half = x.shape[-1] // 2
    pos = torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(-1)
    freq = 10000.0 ** (-torch.arange(half, dtype=x.dtype) / half)
    ang = pos * freq
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


@pytest.mark.parametrize("name", list(CASES))
def test_the_graph_evaluates_to_what_pytorch_computes(name):
    """A rule that misread an ATen op would make every proof about the wrong function: each case's
    forward and backward, evaluated from the graph in float64 and in mpmath, equal eager PyTorch."""
    fn, shapes = CASES[name]
    inputs = {f"a{i}": tuple(f"d{i}_{j}" for j in range(len(s))) for i, s in enumerate(shapes)}
    dims = {f"d{i}_{j}": n for i, s in enumerate(shapes) for j, n in enumerate(s)}
    try:
        op = from_torch(fn, name=name, inputs=inputs, dims=[dims])
    except SpecError as exc:
        pytest.fail(str(exc))
    rng = np.random.default_rng(1)
    arrays = {k: rng.standard_normal(s) for k, s in zip(inputs, shapes)}
    xs = [torch.tensor(a, requires_grad=True) for a in arrays.values()]
    y = fn(*xs)
    dy = rng.standard_normal(tuple(y.shape))
    grads = torch.autograd.grad(y, xs, torch.tensor(dy), allow_unused=True)
    want = [y.detach().numpy()] + [np.zeros(a.shape) if g is None else g.numpy() for a, g in zip(arrays.values(), grads)]
    for B in (F64, MpmathBackend(30)):
        vals = {k: (B.convert(v) if hasattr(B, "convert") else v) for k, v in arrays.items()}
        got = [op.forward(B, **vals)] + list(op.vjp(B, **vals, dy=B.convert(dy) if hasattr(B, "convert") else dy))
        for g, w in zip(got, want):
            g = np.asarray(g, dtype=object).astype(np.float64)
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_float32_evaluation_stays_in_float32():
    op = from_torch(CASES["layer_norm"][0], name="ln", inputs={"x": ("r", "n"), "g": ("n",), "b": ("n",)},
                    dims=[{"r": 3, "n": 5}])
    x, g, b = (np.ones(s, dtype=np.float32) for s in ((3, 5), (5,), (5,)))
    x[0, 0] = 2
    assert op.forward(F32, x=x, g=g, b=b).dtype == np.float32


# ------------------------------------------------------------------------------ what must be refused
def refused(fn, shapes, match):
    inputs = {f"a{i}": tuple(f"d{i}_{j}" for j in range(len(s))) for i, s in enumerate(shapes)}
    dims = {f"d{i}_{j}": n for i, s in enumerate(shapes) for j, n in enumerate(s)}
    with pytest.raises(SpecError, match=match):
        op = from_torch(fn, name="bad", inputs=inputs, dims=[dims])
        prove_claim(op, "vjp[a0]", dims)


def _branchy(x):
    if x.sum() > 0:              # make_fx would otherwise bake in one branch and prove it everywhere
        return x * 2
    return x * 3


@pytest.mark.parametrize("fn,match", [
    (_branchy, "branches on"),
    (lambda x: x * x.sum().item(), "branches on|_local_scalar_dense"),
    (lambda x: torch.sort(x, -1).values, "aten.sort"),
    (lambda x: (x + torch.full_like(x, float("-inf"))).sum(-1), "-inf"),
    (lambda x: torch.where(x + torch.full_like(x, float("-inf")) > 0, x, x), "-inf"),
    (lambda x: (x, x), "one tensor"),
])
def test_a_graph_that_depends_on_input_values_is_bad_input_naming_the_cause(fn, match):
    refused(fn, [(2, 3)], match)


def test_a_maximum_used_as_a_shift_is_proved_to_cancel_and_one_that_does_not_fails():
    """A hand-written softmax subtracts the (detached) row maximum: exact arithmetic evaluates it as 0,
    which is the function only because the claim max_shift_free proves nothing depends on it."""
    def softmax(x):
        e = torch.exp(x - x.amax(-1, keepdim=True).detach())
        return e / e.sum(-1, keepdim=True)
    dims = {"rows": 2, "n": 3}
    good = from_torch(softmax, name="sm", inputs={"x": ("rows", "n")}, dims=[dims])
    assert good.claims() == ["vjp[x]", "max_shift_free"]
    assert [prove_claim(good, c, dims).verdict for c in good.claims()] == ["proved", "proved"]
    bad = from_torch(lambda x: x - x.amax(-1, keepdim=True).detach(), name="shifted", inputs={"x": ("rows", "n")},
                     dims=[dims])
    assert prove_claim(bad, "max_shift_free", dims).verdict == "failed"


def test_an_input_named_B_is_an_input_like_any_other():
    """The spec convention passes the backend first; a framework op takes it positionally, so a
    function of (A, B) is proved (and its wrong twin fails), not refused for a duplicate name."""
    dims = [{"m": 2, "k": 3, "n": 2}]
    ab = {"A": ("m", "k"), "B": ("k", "n")}
    right = from_torch(lambda A, B: torch.tanh(A @ B), name="tanh_of_A_B", inputs=ab, dims=dims)
    assert [prove_claim(right, c, dims[0]).verdict for c in ("vjp[A]", "vjp[B]")] == ["proved", "proved"]

    class WrongB(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, B):
            ctx.save_for_backward(A, B)
            return A @ B

        @staticmethod
        def backward(ctx, g):
            A, B = ctx.saved_tensors
            return g @ B.T, A.T @ g * 2
    wrong = from_torch(lambda A, B: WrongB.apply(A, B), name="wrong_dB", inputs=ab, dims=dims)
    assert prove_claim(wrong, "vjp[B]", dims[0]).verdict == "failed"
    assert prove_claim(wrong, "vjp[A]", dims[0]).verdict == "proved"


def test_a_function_whose_backward_has_the_wrong_shape_is_bad_input():
    refused(lambda x: models.WrongShape.apply(x), [(2, 3)], "invalid gradient")


def test_a_rounded_constant_is_not_laundered_into_an_irrational():
    """sqrt(2/pi) typed to 12 digits in a backward: wrong at 2e-13 with the constants as printed,
    and still wrong with named constants (0.797884560802 is not the float64 rounding of anything)."""
    class Gelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            t = torch.tanh(0.797884560802 * (x + 0.044715 * x ** 3))
            return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 0.134145 * x * x))
    for constants in ("decimal", "named"):
        op = from_torch(lambda x: Gelu.apply(x), name="gelu12", inputs={"x": ("n",)}, dims=[{"n": 2}],
                        constants=constants)
        assert prove_claim(op, "vjp[x]", {"n": 2}).verdict == "failed"


def test_named_constants_prove_pytorch_gelu_and_are_stated():
    op = from_torch(lambda x: F.gelu(x), name="gelu", inputs={"x": ("n",)}, dims=[{"n": 2}], constants="named")
    cert = prove_claim(op, "vjp[x]", {"n": 2})
    assert cert.verdict == "proved"
    assert any("0.7071067811865476 as sqrt(1/2)" in a for a in cert.assumptions)


def test_an_unused_input_has_a_zero_cotangent_and_an_identity_returns_a_copy():
    op = from_torch(lambda x, w: x * 1.0, name="ident", inputs={"x": ("n",), "w": ("n",)}, dims=[{"n": 2}])
    x = np.array([1.0, 2.0])
    y = op.forward(F64, x=x, w=x)
    assert y is not x and not np.shares_memory(y, x)
    assert [prove_claim(op, c, {"n": 2}).verdict for c in op.claims()] == ["proved", "proved"]


# ------------------------------------------------------------------------------ command line, files, fixture
MODULE = '''
import torch
from vjpcert import torch_op


class RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, gamma, rstd)
        return x * rstd * gamma

    @staticmethod
    def backward(ctx, dy):
        x, gamma, rstd = ctx.saved_tensors
        g = dy * gamma
        dx = rstd * (g - x * rstd * rstd * (g * x).mean(-1, keepdim=True))
        return dx, (dy * x * rstd).sum(0), None


def rmsnorm(x, gamma, eps=1e-6):
    return RMSNorm.apply(x, gamma, eps)


@torch_op(inputs={"x": ("rows", "n"), "gamma": ("n",)}, dims=[{"rows": 2, "n": 3}], params={"eps": 1e-6})
def declared(x, gamma, eps):
    return RMSNorm.apply(x, gamma, eps)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_rms.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path / "user_rms.py"
    sys.modules.pop("user_rms", None)


def _verdicts(reports, op):
    return sorted(json.loads(p.read_text())["verdict"] for p in (reports / "certificates" / op).glob("*.json"))


def test_cli_proves_a_torch_target_with_declared_inputs_in_worker_processes(tmp_path, user_module):
    reports = tmp_path / "r"
    code = main(["prove", "torch:user_rms:rmsnorm", "--input", "x=rows,n", "--input", "gamma=n",
                 "--dims", "rows=2,n=3", "--param", "eps=1e-6", "--jobs", "2", "--quiet", "--reports", str(reports)])
    assert code == 0 and _verdicts(reports, "user_rms.rmsnorm") == ["proved", "proved"]


def test_cli_takes_inputs_and_dims_from_a_spec_and_ties_the_forward_to_it(tmp_path, user_module):
    reports = tmp_path / "r"
    assert main(["prove", "torch:user_rms:rmsnorm", "--spec", "rmsnorm", "--dims", "rows=2,n=3",
                 "--quiet", "--reports", str(reports)]) == 0
    names = {p.name for p in (reports / "certificates" / "user_rms.rmsnorm").glob("*.json")}
    assert "symbolic__matches_spec-rmsnorm__n3-rows2.json" in names


def test_a_user_file_with_torch_op_is_an_op_file_and_works_in_the_fixture(tmp_path, user_module):
    reports = tmp_path / "r"
    assert main(["prove", str(user_module), "--quiet", "--reports", str(reports)]) == 0
    assert _verdicts(reports, "declared") == ["proved", "proved"]
    from vjpcert.testing import assert_proved
    assert len(assert_proved(f"{user_module}::declared")) == 2


@pytest.mark.parametrize("args,message", [
    (["torch:user_rms:rmsnorm"], "declare its inputs and dims"),
    (["torch:user_rms:nope", "--spec", "rmsnorm"], "cannot load"),
    (["torch:user_rms:declared", "--input", "x=n"], "declared in its module already"),
    (["softmax", "--param", "eps=1"], "torch:/jax: target"),
    (["torch:user_rms:rmsnorm", "--spec", "rmsnorm", "--constants", "named", "--param", "eps"], "name=value"),
])
def test_bad_torch_targets_are_exit_2(tmp_path, user_module, capsys, args, message):
    assert main(["prove", "--quiet", "--reports", str(tmp_path / "r"), *args]) == 2
    assert message in capsys.readouterr().err


def test_the_readme_s_torch_example_is_proved_in_a_new_process(tmp_path):
    """As a newcomer runs it, in a shell of its own: the first torch code the process traces imports
    torch._dynamo, which rebinds torch.manual_seed -- the library loading, not state the op keeps (the
    suite's workers had traced torch before, and missed that this refused the example)."""
    import shutil
    import subprocess
    from pathlib import Path
    example = Path(__file__).resolve().parents[1] / "examples" / "my_torch_ops.py"
    shutil.copy(example, tmp_path / example.name)
    run = subprocess.run([sys.executable, "-c", "import sys; from vjpcert.cli import main; sys.exit(main(sys.argv[1:]))",
                          "prove", example.name, "--quiet", "--reports", "r"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert _verdicts(tmp_path / "r", "my_rmsnorm") == ["proved"] * 3


# ------------------------------------------------------------------ the graph against the eager run
def _square_function(backward):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            return backward(x, dy)
    return Square.apply


def _fake_tensor(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _row_major(dy):
    return dy.as_strided(tuple(dy.shape), (dy.shape[1], 1))      # reads dy's memory as if row-major


EAGER_CASES = {   # name -> (the function, made at the test: torch loads at first use; inputs; the refusal's words)
    "tests_for_the_tracer": (lambda: _square_function(lambda x, dy: (2 if _fake_tensor(dy) else 3) * x * dy),
                             {"x": ("n",)}, "another function when it runs on real arrays"),
    "honest": (lambda: _square_function(lambda x, dy: 2 * x * dy), {"x": ("n",)}, None),
    "where_masks_a_nan_derivative": (lambda: lambda x: torch.where(x > 0, torch.sqrt(x + 1), torch.ones_like(x)),
                                     {"x": ("n",)}, "returns nan"),
    "where_masks_the_argument": (lambda: lambda x: torch.where(x > 0, torch.sqrt(torch.where(x > 0, x + 1, 1.0)), 1.0),
                                 {"x": ("n",)}, None),
    "reads_dy_s_layout": (lambda: lambda x: _square_function(lambda x, dy: 2 * x * _row_major(dy))(x),
                          {"x": ("rows", "n")}, "strided views"),
    # a forward with nan at most points (log of a negative entry) is still compared, at every entry
    "tests_for_the_tracer_past_a_log": (lambda: lambda x: _square_function(
        lambda x, dy: (2 if _fake_tensor(dy) else 3) * x * dy)(torch.log(x)), {"x": ("n",)},
        "another function when it runs on real arrays"),
    "honest_past_a_log": (lambda: lambda x: _square_function(lambda x, dy: 2 * x * dy)(torch.log(x)), {"x": ("n",)}, None),
    # a path only the lower precisions take, where the traced graph still looks the same
    "tests_for_the_tracer_below_float64": (lambda: lambda x: _square_function(
        lambda x, dy: (2 if _fake_tensor(dy) or x.dtype == torch.float64 else 3) * x * dy)(x), {"x": ("n",)},
        "another function when it runs on real arrays"),
    # the forward alone, as inference runs it, takes another path
    "forward_tests_grad_mode": (lambda: lambda x: x * x if torch.is_grad_enabled() or _fake_tensor(x) else x * x * 2,
                                {"x": ("n",)}, "the forward alone"),
}


@pytest.mark.parametrize("name", list(EAGER_CASES))
def test_the_graph_proved_is_what_pytorch_runs_on_real_tensors(name):
    """Code can tell it is traced (a FakeTensor, the tracer's mode) or read dy's memory layout, and
    compute another function there: the graph is held to PyTorch's eager run at random points, with
    the inputs and dy in other layouts too. A backward that is nan where the forward is finite (a
    where() that masks a square root of a negative number) is refused too: exact algebra reads that
    root as a formal one, 0 times it as 0. Each honest twin is proved."""
    make, inputs, refusal = EAGER_CASES[name]
    dims = {"n": 3, "rows": 2} if "rows" in str(inputs) else {"n": 3}
    op = from_torch(make(), name=f"eager_{name}", inputs=inputs, dims=[dims])
    if refusal is None:
        assert prove_claim(op, "vjp[x]", dims).verdict == "proved"
    else:
        with pytest.raises(SpecError, match=refusal):
            prove_claim(op, "vjp[x]", dims)


def test_an_index_from_a_python_list_is_read_exactly_and_a_float_tensor_of_python_numbers_is_refused():
    """The trace lifts ``x[:, [0, 1, 3, 2]]``'s index into the graph as a constant tensor: read as the
    integers it holds (it was an internal KeyError). A float tensor built from Python numbers holds
    roundings no exact rule reads: refused, named."""
    dims = {"rows": 2, "n": 4}
    op = from_torch(lambda x: x[:, [0, 1, 3, 2]] * x, name="list_index", inputs={"x": ("rows", "n")}, dims=[dims])
    assert prove_claim(op, "vjp[x]", dims).verdict == "proved"
    op = from_torch(lambda x: x * torch.tensor([0.5, 0.25, 2.0, 1.0], dtype=x.dtype), name="float_table",
                    inputs={"x": ("rows", "n")}, dims=[dims])
    with pytest.raises(SpecError, match="builds a float tensor from Python numbers"):
        prove_claim(op, "vjp[x]", dims)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="known gap: the eager run is told from a real one by "
                   "what it sets (one thread, so that forked strategies do not hang in OpenMP) and by its points "
                   "(a fixed seed); running it in a child at the training thread count, from points drawn from a "
                   "hash of the op's code, waits for the next reissue of the framework certificates")
def test_a_backward_that_tells_the_eager_check_from_a_real_run_is_never_proved():
    """A backward right where the tracer or the check runs it (one thread) and wrong on the threads
    training runs with."""
    fn = _square_function(lambda x, dy: (2 if _fake_tensor(dy) or torch.get_num_threads() == 1 else 3) * x * dy)
    op = from_torch(fn, name="tells_the_check", inputs={"x": ("n",)}, dims=[{"n": 2}])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)                 # as training runs (a test worker runs one)
    try:
        verdict = prove_claim(op, "vjp[x]", {"n": 2}).verdict
    except SpecError:
        return
    finally:
        torch.set_num_threads(threads)
    assert verdict != "proved"
