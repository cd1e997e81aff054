"""The spec as a JAX custom-VJP function: check_grads passes the spec's backward, fails a gross bug."""
import pytest

import optional

optional.importorskip("jax", reason="JAX is optional (pip install -e '.[jax]'); its kill-matrix column needs it")

from conftest import OPS  # noqa: E402
check_grads = optional.imported("vjpcert.numeric.jax_bridge", "check_grads")
from vjpcert.numeric.sampling import sample_point  # noqa: E402


# each op's own gross bug (not one below finite differences' floor): check_grads must fail every one
GROSS = {"softmax": "sign_flip", "layernorm": "dropped_mean_term", "attention": "dK_missing_scale",
         "linear": "bias_gradient_mean_not_sum"}


@pytest.mark.parametrize("name", list(GROSS))
def test_check_grads_passes_the_spec_and_fails_a_gross_bug(name):
    op = OPS[name]
    pt = sample_point(op, op.check_dims, "random", 0)
    assert check_grads(op, pt)
    bug = next(m for m in op.mutants if m.name == GROSS[name])
    assert not check_grads(op.with_mutant(bug), pt)