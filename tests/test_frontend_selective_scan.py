"""Mamba's selective scan as its users write it in PyTorch (``frontends.pytorch.selective_scan_ref``, the
Framework backwards report's: a loop
over the sequence, F.softplus with its threshold, autograd's backward), against the spec
``selective_scan``: the same numbers forward and backward in float64, and proved from torch's own code
at small dims, the value on softplus' kink included; the control, a hand-written softplus backward
that takes the linear branch on the threshold, is failed there."""
import numpy as np
import pytest

from optional import importorskip
from vjpcert.core.backends import F64
from vjpcert.core.spec_array import plain
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.fixed.prover import prove_claim

torch = importorskip("torch")
models = importorskip("torch_models")
pytorch = importorskip("vjpcert.frontends.pytorch")
SCAN = builtin_ops()["selective_scan"]


def _inputs(rng, T, d, N):
    dt = rng.standard_normal((T, d))
    dt[0, 0] = 25.0                       # one step above softplus' threshold: the linear branch
    return dict(h=rng.standard_normal((d, N)) / 2, x=rng.standard_normal((T, d)), dt=dt,
                b=rng.standard_normal((T, N)), A=-np.exp(rng.standard_normal((d, N))),
                dt_bias=rng.standard_normal(d) / 4, c=rng.standard_normal((T, N)), z=rng.standard_normal((T, d)),
                D=rng.standard_normal(d))


def test_the_spec_computes_what_the_torch_reference_computes_forward_and_backward():
    rng = np.random.default_rng(1)
    v = _inputs(rng, 7, 4, 3)
    tv = {k: torch.tensor(a, dtype=torch.float64, requires_grad=True) for k, a in v.items()}
    y = pytorch.selective_scan_ref(*tv.values())
    dy = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(plain(SCAN(F64, *v.values())), y.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name, ours in zip(SCAN.inputs, SCAN.vjp(F64, *v.values(), dy)):
        np.testing.assert_allclose(plain(ours), tv[name].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.slow     # seconds; the committed Framework backwards certificates (pytorch.selective_scan) say it too
def test_the_torch_reference_is_proved_from_its_own_code_and_is_the_spec_s_scan():
    o = pytorch.from_torch(pytorch.selective_scan_ref, name="tfs_selective_scan", spec=SCAN)
    dims = {"T": 2, "d": 2, "N": 1}
    verdicts = {claim: prove_claim(o, claim, dims).verdict for claim in o.claims()}
    assert verdicts.pop("at_the_kink") == "checked" and "matches_spec[selective_scan]" in verdicts
    assert set(verdicts.values()) == {"proved"}, verdicts


@pytest.mark.slow     # ~15 s; tests/test_frontend_kinks.py's x >= 0 mask is the frontend's kink control by default
def test_a_softplus_backward_that_takes_the_linear_branch_on_the_threshold_is_failed_there():
    o = pytorch.from_torch(models.selective_scan_ref_softplus_on_the_kink, name="tfs_selective_scan_geq", spec=SCAN)
    dims = {"T": 2, "d": 2, "N": 1}
    cert = prove_claim(o, "at_the_kink", dims)
    assert cert.verdict == "failed" and cert.evidence["witness"]["steps_on_kink"] > 0, cert.evidence
    assert prove_claim(o, "vjp[dt]", dims).verdict == "proved"          # right on both sides of it
