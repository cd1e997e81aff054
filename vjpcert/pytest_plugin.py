"""The vjpcert pytest plugin (entry point ``pytest11``): a ``vjpcert`` fixture in every test suite.

    def test_my_softmax(vjpcert):
        vjpcert.proved("my_ops.py::my_softmax")
        vjpcert.checked("my_ops.py::my_softmax", dps=30)
        vjpcert.matches_spec("softmax", my_softmax_kernel, kind="forward")
        vjpcert.triton_matches("softmax", my_triton_softmax_launcher, kind="forward")
"""
from __future__ import annotations

import pytest

# Without a GPU, Triton kernels can only run in Triton's interpreter, which must be switched on before a
# test module decorates its kernels (a cheap driver probe: neither torch nor triton is imported here).
import vjpcert.triton_kernels  # noqa: F401,E402


class _Certifier:
    from vjpcert.testing import CertificationError  # noqa: F401  (re-exported for users)

    @staticmethod
    def proved(op, claims=None, dims=None, budget: float = 60.0):
        from vjpcert.testing import assert_proved
        return assert_proved(op, claims=claims, dims=dims, budget=budget)

    @staticmethod
    def checked(op, claims=None, dims=None, dps: int = 50):
        from vjpcert.testing import assert_checked
        return assert_checked(op, claims=claims, dims=dims, dps=dps)

    @staticmethod
    def matches_spec(op, impl, **kwargs):
        from vjpcert.testing import assert_matches_spec
        return assert_matches_spec(op, impl, **kwargs)

    @staticmethod
    def triton_matches(op, launcher, **kwargs):
        from vjpcert.testing import assert_triton_matches
        return assert_triton_matches(op, launcher, **kwargs)


@pytest.fixture
def vjpcert():
    """Prove, check, and compare implementations against specs, with readable failures."""
    return _Certifier()


def pytest_report_header(config):
    from importlib import metadata
    try:
        return f"vjpcert {metadata.version('vjpcert')} (plugin: fixture `vjpcert`)"
    except metadata.PackageNotFoundError:
        return None
