"""The spec as a torch.autograd.Function: gradcheck passes the spec's backward and fails a gross bug."""
import pytest

import optional

torch = optional.importorskip("torch", reason="PyTorch not installed (pip install 'vjpcert[torch]')")

from conftest import OPS  # noqa: E402
from vjpcert.numeric.sampling import sample_point  # noqa: E402
gradcheck = optional.imported("vjpcert.numeric.torch_bridge", "gradcheck")


# the default run holds gradcheck to a leaf op of each kind; --slow to every built-in op
GRADCHECK_DEFAULT = ("softmax", "layernorm", "gelu_erf", "rope_half", "attention_causal", "mlp")


@pytest.mark.parametrize("name", [n if n in GRADCHECK_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in OPS])
def test_gradcheck_passes_every_builtin_backward(name):
    op = OPS[name]
    assert gradcheck(op, sample_point(op, op.check_dims, "random", 0))


def test_gradcheck_fails_a_sign_flip_but_not_one_part_in_ten_million():
    op = OPS["softmax"]
    pt = sample_point(op, op.check_dims, "random", 0)
    flip = op.with_mutant(next(m for m in op.mutants if m.name == "sign_flip"))
    tiny = op.with_mutant(next(m for m in op.mutants if m.name == "fp32_accumulated_dot"))
    assert not gradcheck(flip, pt)
    assert gradcheck(tiny, pt), "gradcheck's default tolerances cannot see a 1e-7 error"
