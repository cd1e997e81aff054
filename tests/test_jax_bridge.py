"""The spec as a JAX custom-VJP function: check_grads passes the spec's backward, fails a gross bug."""
import pytest

pytest.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]'); its kill-matrix column needs it")

from conftest import OPS  # noqa: E402
from vjpcert.numeric.jax_bridge import check_grads  # noqa: E402
from vjpcert.numeric.sampling import sample_point  # noqa: E402


@pytest.mark.parametrize("name", ["softmax", "layernorm", "attention", "linear"])
def test_check_grads_passes_the_spec_and_fails_a_sign_flip(name):
    op = OPS[name]
    pt = sample_point(op, op.check_dims, "random", 0)
    assert check_grads(op, pt)
    flip = next(m for m in OPS["softmax"].mutants if m.name == "sign_flip")
    if name == "softmax":
        assert not check_grads(op.with_mutant(flip), pt)
