"""The pytest plugin, as a user meets it: loaded by entry point, readable failures."""

WRONG = '''
from vjpcert.core.registry import op

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])
def cube(B, x):
    return x * x * x

@cube.defvjp
def cube_vjp(B, x, dy):
    return (2 * x * x * dy,)          # should be 3 x^2 dy
'''

TESTS = '''
import numpy as np
from pathlib import Path
OPS = str(Path(__file__).with_name("wrong_ops.py"))

def test_proof_fails_readably(vjpcert):
    vjpcert.proved(OPS + "::cube")

def test_kernel_fails_readably(vjpcert):
    def bad_softmax(x):
        e = np.exp(x)
        return e / e.sum(-1, keepdims=True) * np.float32(1.001)   # 0.1% off: above float32's bound
    vjpcert.matches_spec("softmax", bad_softmax, kind="forward")
'''


def test_failures_show_the_witness_and_the_residual(pytester):
    pytester.makepyfile(wrong_ops=WRONG, test_user=TESTS)
    result = pytester.runpytest_subprocess("-q")          # the plugin comes from its entry point
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "CertificationError" in out and "failed" in out
    assert "witness" in out and "residual" in out and '"x[' in out
    assert "error" in out and "> bound" in out and "softmax forward" in out


def test_the_plugin_is_registered_by_entry_point():
    from importlib import metadata
    eps = [e for e in metadata.entry_points(group="pytest11") if e.name == "vjpcert"]
    assert eps and eps[0].value == "vjpcert.pytest_plugin"
