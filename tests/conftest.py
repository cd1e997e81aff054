import pytest

from specs import builtin_ops

OPS = builtin_ops()


def op_claims():
    return [(name, claim) for name, op in OPS.items() for claim in op.claims()]


def op_mutants():
    return [(name, m.name) for name, op in OPS.items() for m in op.mutants]


@pytest.fixture(scope="session")
def ops():
    return OPS
