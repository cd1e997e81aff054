"""lax.scan in the JAX frontend: unrolled at its static length, forwards and reversed, so a recurrent
network written with it is proved from its own jaxpr (the transposed scan of its VJP included), and a
step whose custom_vjp backward is wrong is refuted through the scan."""
import pytest

import optional

jax = optional.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]')")
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
jnp = optional.importorskip("jax.numpy")

from vjpcert.frontends.jaxpr import from_jax  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402

ELMAN = builtin_ops()["elman_rnn"]


def _elman(step, reverse=False):
    def network(h, x, W, U, b):
        def body(h, x_t):
            h = step(h, x_t, W, U, b)
            return h, h
        return jax.lax.scan(body, h, x, reverse=reverse)[1]
    return network


def _tanh_step(h, x, W, U, b):
    return jnp.tanh(W @ h + U @ x + b)


def _wrong_step():
    @jax.custom_vjp
    def step(h, x, W, U, b):
        return _tanh_step(h, x, W, U, b)

    def fwd(h, x, W, U, b):
        return step(h, x, W, U, b), (h, x, W, U)

    def bwd(res, g):                       # BUG: tanh's derivative left out
        h, x, W, U = res
        return W.T @ g, U.T @ g, jnp.outer(g, h), jnp.outer(g, x), g
    step.defvjp(fwd, bwd)
    return step


def test_an_elman_network_written_with_lax_scan_is_proved_from_its_jaxpr_and_is_the_spec_s():
    o = from_jax(_elman(_tanh_step), name="tjs_elman", spec=ELMAN)
    for dims in o.dims[:2]:
        verdicts = {claim: prove_claim(o, claim, dims).verdict for claim in o.claims()}
        assert set(verdicts.values()) == {"proved"} and "matches_spec[elman_rnn]" in verdicts, (dims, verdicts)


def test_a_reversed_scan_is_proved_and_is_not_the_spec_s_network():
    """reverse=True runs the steps from the last input back: its own VJP is proved, and it is another
    function than Elman's network from T = 2 on (its claim to match the spec is refuted there)."""
    o = from_jax(_elman(_tanh_step, reverse=True), name="tjs_elman_reversed", spec=ELMAN)
    dims = o.dims[1]
    assert all(prove_claim(o, claim, dims).verdict == "proved" for claim in o.claims() if claim.startswith("vjp["))
    assert prove_claim(o, "matches_spec[elman_rnn]", dims).verdict == "failed"
    assert prove_claim(o, "matches_spec[elman_rnn]", o.dims[0]).verdict == "proved"        # T = 1: the same


def test_a_scanned_step_with_a_wrong_custom_vjp_is_refuted():
    o = from_jax(_elman(_wrong_step()), name="tjs_elman_wrong", spec=ELMAN)
    cert = prove_claim(o, "vjp[W]", o.dims[1])
    assert cert.verdict == "failed" and cert.evidence["witness"], cert.evidence
