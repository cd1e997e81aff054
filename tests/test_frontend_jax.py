"""The JAX frontend (the optional [jax] extra; skipped where JAX is not installed): a custom_vjp
proved and failed from its JAX code, the jaxpr evaluated against JAX itself, refusals."""
import numpy as np
import pytest

import optional

jax = optional.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]')")
# The prover runs each strategy in a forked child; JAX warns at every fork because it runs threads.
# The children never call JAX (the claim is traced in the parent), so the warning does not apply.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
jnp = optional.importorskip("jax.numpy")

from vjpcert.cli import main  # noqa: E402
from vjpcert.core.backends import F64, MpmathBackend  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.frontends.jaxpr import from_jax, report_functions  # noqa: E402
from vjpcert.specs import resolve_op  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402


def make_rmsnorm(wrong: bool):
    @jax.custom_vjp
    def rmsnorm(x, gamma):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * gamma

    def fwd(x, gamma):
        return rmsnorm(x, gamma), (x, gamma)

    def bwd(res, dy):
        x, gamma = res
        r = jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        g = dy * gamma
        inner = r if wrong else r * r                  # the wrong one drops a factor rstd
        return r * (g - x * inner * jnp.mean(g * x, -1, keepdims=True)), jnp.sum(dy * x * r, 0)
    rmsnorm.defvjp(fwd, bwd)
    return rmsnorm


DIMS = {"rows": 2, "n": 3}


def test_a_custom_vjp_rmsnorm_is_proved_and_tied_to_the_spec():
    op = from_jax(make_rmsnorm(False), name="rms", spec=resolve_op("rmsnorm"), dims=[DIMS])
    assert [prove_claim(op, c, DIMS).verdict for c in op.claims()] == ["proved"] * 3


def test_the_same_custom_vjp_with_one_wrong_term_fails_with_a_witness():
    op = from_jax(make_rmsnorm(True), name="rms_wrong", spec=resolve_op("rmsnorm"), dims=[DIMS])
    cert = prove_claim(op, "vjp[x]", DIMS)
    assert cert.verdict == "failed" and cert.evidence["witness"]["point"]
    assert prove_claim(op, "matches_spec[rmsnorm]", DIMS).verdict == "proved"   # the forward is right


def test_jax_softmax_takes_a_row_maximum_that_is_proved_to_cancel():
    fn, _ = report_functions()["softmax"]
    op = from_jax(fn, name="sm", spec=resolve_op("softmax"), dims=[DIMS])
    assert "max_shift_free" in op.claims()
    assert all(prove_claim(op, c, DIMS).verdict == "proved" for c in op.claims())


CASES = ["softmax", "log_softmax", "layer_norm", "rms_norm", "gelu", "gelu_tanh", "linear"]


@pytest.mark.parametrize("name", CASES)
def test_the_jaxpr_evaluates_to_what_jax_computes(name):
    fn, params = report_functions()[name]
    spec = {"layer_norm": "layernorm", "rms_norm": "rmsnorm", "gelu": "gelu_erf"}.get(name, name)
    op = from_jax(fn, name=name, params=params, spec=resolve_op(spec))
    dims = op.check_dims
    rng = np.random.default_rng(2)
    arrays = {k: rng.standard_normal(op.shape(d, dims)) for k, d in op.inputs.items()}
    with jax.enable_x64(True):
        xs = [jnp.asarray(a) for a in arrays.values()]
        y, vjp = jax.vjp(lambda *a: fn(*a, **params), *xs)
        dy = rng.standard_normal(y.shape)
        want = [np.asarray(y)] + [np.asarray(g) for g in vjp(jnp.asarray(dy))]
    for B in (F64, MpmathBackend(30)):
        conv = (lambda v: B.convert(v)) if hasattr(B, "convert") else (lambda v: v)
        vals = {k: conv(v) for k, v in arrays.items()}
        got = [op.forward(B, **vals, **params)] + list(op.vjp(B, **vals, **params, dy=conv(dy)))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g, dtype=object).astype(np.float64), w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn,match", [
    (lambda x: jnp.abs(x), "abs"),
    (lambda x: jnp.sort(x, -1), "sort"),
    (lambda x: x * 2 if float(x.sum()) > 0 else x, "branches on"),
])
def test_value_dependent_jax_code_is_bad_input(fn, match):
    with pytest.raises(SpecError, match=match):
        op = from_jax(fn, name="bad", inputs={"x": ("rows", "n")}, dims=[DIMS])
        prove_claim(op, "vjp[x]", DIMS)


def _sorted(x):
    y = x * 2
    return jnp.sort(y, -1)                    # the line a refusal must name


def test_a_refusal_names_the_users_file_and_line():
    import inspect
    line = inspect.getsourcelines(_sorted)[1] + 2
    op = from_jax(_sorted, name="sorted", inputs={"x": ("rows", "n")}, dims=[DIMS])
    with pytest.raises(SpecError, match=rf"test_frontend_jax.py:{line}: sort") as info:
        prove_claim(op, "vjp[x]", DIMS)
    assert "frontends" not in str(info.value)


MODULE = '''
import jax
import jax.numpy as jnp

def rmsnorm(x, gamma, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * gamma
'''


def test_cli_proves_a_jax_target(tmp_path, monkeypatch):
    (tmp_path / "user_jax_rms.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["prove", "jax:user_jax_rms:rmsnorm", "--spec", "rmsnorm", "--param", "eps=1e-6",
                 "--dims", "rows=2,n=3", "--quiet", "--reports", str(tmp_path / "r")])
    assert code == 0
    assert len(list((tmp_path / "r" / "certificates" / "user_jax_rms.rmsnorm").glob("*.json"))) == 3


MODULE_LEVEL_CUSTOM_VJP = '''
import jax
from vjpcert import jax_op


@jax.custom_vjp
def square(x):
    return x * x


def square_fwd(x):
    return x * x, x


def square_bwd(x, g):
    return ({factor} * x * g,)


square.defvjp(square_fwd, square_bwd)


@jax_op(inputs={{"x": ("n",)}}, dims=[{{"n": 2}}])
def f(x):
    return square(x)
'''


@pytest.mark.parametrize("factor,code", [(2, 0), (3, 1)])
def test_a_module_level_custom_vjp_is_judged_in_a_new_process(tmp_path, factor, code):
    """JAX's documented form, a ``jax.custom_vjp`` defined at the top of the user's module, in a process
    of its own. It was refused: reading the custom_vjp object for kept state pickled it, which caches
    its class's slot names on ``jax.custom_vjp`` -- the check's own write taken for the op's."""
    import subprocess
    import sys
    (tmp_path / "my_jax_ops.py").write_text(MODULE_LEVEL_CUSTOM_VJP.format(factor=factor))
    run = subprocess.run([sys.executable, "-c", "import sys; from vjpcert.cli import main; sys.exit(main(sys.argv[1:]))",
                          "prove", "my_jax_ops.py", "--quiet", "--reports", "r"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == code, run.stdout[-2000:] + run.stderr[-2000:]


def _square_vjp(bwd):
    @jax.custom_vjp
    def square(x):
        return x * x
    square.defvjp(lambda x: (x * x, x), lambda x, g: (bwd(x, g),))
    return square


EAGER_CASES = {   # name -> (the function, made at the test: JAX loads at first use; the refusal's words)
    "tests_for_the_tracer": (lambda: _square_vjp(lambda x, g: (2 if isinstance(g, jax.core.Tracer) else 3) * x * g),
                             "another function when it runs on real arrays"),
    "honest": (lambda: _square_vjp(lambda x, g: 2 * x * g), None),
    "where_masks_a_nan_derivative": (lambda: lambda x: jnp.where(x > 0, jnp.sqrt(x + 1), 1.0), "returns nan"),
    "where_masks_the_argument": (lambda: lambda x: jnp.where(x > 0, jnp.sqrt(jnp.where(x > 0, x + 1, 1.0)), 1.0), None),
}


@pytest.mark.parametrize("name", list(EAGER_CASES))
def test_the_jaxpr_proved_is_what_jax_runs_on_real_arrays(name):
    """A custom_vjp's bwd can tell it runs under a tracer and compute another function there; a
    where() that masks a square root of a negative number has a nan derivative JAX returns. The jaxpr
    is held to JAX's own run on real arrays at random points; each honest twin is proved."""
    make, refusal = EAGER_CASES[name]
    op = from_jax(make(), name=f"eager_{name}", inputs={"x": ("n",)}, dims=[{"n": 3}])
    if refusal is None:
        assert prove_claim(op, "vjp[x]", {"n": 3}).verdict == "proved"
    else:
        with pytest.raises(SpecError, match=refusal):
            prove_claim(op, "vjp[x]", {"n": 3})
