import pytest

from vjpcert.specs import builtin_ops

OPS = builtin_ops()


def op_claims(proof=None):
    """(op, claim) pairs; with ``proof``, only ops proved that way ("monolithic"/"compositional")."""
    return [(name, claim) for name, op in OPS.items() if proof is None or proof in op.proofs
            for claim in op.claims() if proof != "compositional" or claim.startswith("vjp[")]


def op_mutants(proof=None):
    return [(name, m.name) for name, op in OPS.items() if proof is None or proof in op.proofs
            for m in op.mutants]


@pytest.fixture(scope="session")
def ops():
    return OPS

pytest_plugins = ["pytester"]
