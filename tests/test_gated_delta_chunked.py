"""The gated delta rule's chunked form (``specs/gated_delta_chunked.py``): the triangular solve inside a
chunk is the exact inverse at every size around its squarings, the chunked form is the recurrent one
in floats at lengths just below, at and just above multiples of the chunk size (and at a long length
with a partial last chunk), every claim is proved at its dims, a solve one squaring short is refuted by
the chunk op's law at the first chunk length it is wrong at, the VJP claims and the forms' agreement are
proved for every size, and chunk states wrong in their last step are failed there."""
from fractions import Fraction

import numpy as np
import pytest

from vjpcert.core.backends import F64
from vjpcert.core.matrix_functions import unit_lower_inverse
from vjpcert.core.registry import Mutant
from vjpcert.core.spec_array import plain
from vjpcert.specs import builtin_ops
from vjpcert.specs.gated_delta_chunked import _heads, _masks, _solve, _t
from vjpcert.specs.gated_delta_rule import gates, unit_keys
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.fixed.prover import prove_claim

OPS = builtin_ops()
RULE, CHUNKED = OPS["gated_delta_rule"], OPS["gated_delta_rule_chunked"]
STATE, OUT = OPS["gated_delta_chunk_state"], OPS["gated_delta_chunk_out"]


class _Exact:
    """Just what the solve asks of a backend, over Python's exact rationals."""
    c = staticmethod(Fraction)


@pytest.mark.parametrize("n", range(1, 18))
def test_the_triangular_solve_is_the_exact_inverse_at_every_size_around_its_squarings(n):
    rng = np.random.default_rng(n)
    A = np.empty((2, n, n), dtype=object)
    A[...] = [[[Fraction(int(x), 7) for x in row] for row in head] for head in rng.integers(-9, 10, (2, n, n))]
    A = np.where(np.tril(np.ones((n, n), dtype=bool), -1), A, Fraction(0))
    T = unit_lower_inverse(_Exact, A)
    eye = np.where(np.eye(n, dtype=bool), Fraction(1), Fraction(0))
    assert all(((eye + A[h]) @ T[h] == eye).all() for h in range(2))
    if n > 2:           # one squaring short (I - A alone) is not the inverse past two steps
        assert not all(((eye + A[h]) @ (eye - A[h]) == eye).all() for h in range(2))


def _inputs(rng, T, h=2, dk=4, dv=3):
    S = rng.standard_normal((h, dk, dv))
    k, v, q = unit_keys(rng, (T, h, dk)), rng.standard_normal((T, h, dv)), rng.standard_normal((T, h, dk))
    return S, k, v, gates(rng, (T, h)), gates(rng, (T, h)), q


@pytest.mark.parametrize("C", [1, 3, 4])
def test_both_forms_agree_in_floats_just_below_at_and_just_above_multiples_of_the_chunk_size(C):
    rng = np.random.default_rng(C)
    for T in sorted({max(1, C - 1), C, C + 1, 2 * C - 1, 2 * C, 2 * C + 1}):
        x = _inputs(rng, T)
        dy = rng.standard_normal((T, 2, 3))
        np.testing.assert_allclose(plain(CHUNKED(F64, *x, C)), plain(RULE(F64, *x)), rtol=1e-10, atol=1e-12)
        for a, b in zip(CHUNKED.vjp(F64, *x, dy, C), RULE.vjp(F64, *x, dy)):
            np.testing.assert_allclose(plain(a), plain(b), rtol=1e-9, atol=1e-11)


def test_both_forms_agree_in_floats_at_a_long_length_with_a_partial_last_chunk():
    rng = np.random.default_rng(0)
    x = _inputs(rng, 1030, dk=8, dv=4)                  # 16 chunks of 64 and one of 6 steps
    np.testing.assert_allclose(plain(CHUNKED(F64, *x, 64)), plain(RULE(F64, *x)), rtol=1e-9, atol=1e-12)
    # a chunk size given positionally is the one used: a wrong chunk op would show at either
    assert np.allclose(plain(CHUNKED(F64, *x, 100)), plain(CHUNKED(F64, *x, 64)))


# Proofs of the built-in claims themselves: the committed certificates hold them, and CI verifies they
# are current (same spec, same checker code) and replays a sample; the default run keeps the laws'
# proof for every size (the new normal-form rules' positive control) and the wrong chunk states.
@pytest.mark.slow
def test_every_claim_is_proved_at_every_dims_of_the_ladders():
    for o in (STATE, OUT, CHUNKED):
        for dims in o.dims:
            for claim in o.claims():
                cert = prove_claim(o, claim, dims)
                assert cert.verdict == "proved", (o.name, dims, claim, cert.evidence)


def test_a_solve_one_squaring_short_is_refuted_by_the_chunk_op_s_law_where_it_is_wrong():
    """I - A is the inverse for chunks of one and two steps: the law holds there, and is failed (with a
    witness) at three steps, the ladder's last rung."""
    short = STATE.with_mutant(next(m for m in STATE.mutants if m.name == "triangular_solve_one_squaring_short"))
    verdicts = {d["n"]: prove_claim(short, "one_more_step_is_the_cell", d) for d in STATE.dims}
    assert [verdicts[n].verdict for n in (1, 2)] == ["proved", "proved"]
    assert verdicts[3].verdict == "failed" and "witness" in verdicts[3].evidence


@pytest.mark.slow
def test_a_chunk_op_s_vjp_and_the_chunked_op_s_are_proved_for_every_size():
    """The chunk ops' claims for every chunk length n (the gates' product and the triangular solve read
    at a symbolic n), and from them the chunked op's for every T and C, by induction on the chunks."""
    for o in (STATE, OUT):
        cert = prove_general(o, "vjp[v]", budget=120)
        assert cert.verdict == "proved-general", (o.name, cert.evidence)
    cert = prove_general(CHUNKED, "vjp[v]", budget=300)
    assert cert.verdict == "proved-general", cert.evidence
    assert cert.evidence["proof"] == "induction on the number of chunks"


def test_a_chunk_of_one_step_is_the_cell_for_every_size_through_the_solve_s_definition():
    """At a constant size (the law's one step) the every-size tier runs unit_lower_inverse's definition,
    as every other tier does: an atom there would know nothing of T = 1."""
    for o, law in ((STATE, "one_step_is_the_cell"), (OUT, "one_step_is_the_readout")):
        cert = prove_general(o, law, budget=60)
        assert cert.verdict == "proved-general", (o.name, cert.evidence)


def test_the_forms_agree_for_every_length_and_chunk_size():
    """The chunk ops' laws (one step more is the cell, and its readout) are proved for every chunk length:
    the normal form takes the last step out of the n-step side (its sums, its gates' product, its
    inverse's last row by forward substitution) and reads the rest as the (n - 1)-step inverse. From them,
    by induction on the chunks, the chunked forward is the recurrent one for every T and C."""
    cert = prove_general(CHUNKED, "equals_the_recurrent_form", budget=300)
    assert cert.verdict == "proved-general", cert.evidence
    assert cert.evidence["proof"] == "induction on the number of chunks"
    premises = cert.evidence["chunk_op_claims"]            # each proved for every n inside this proof
    for law in ("gated_delta_chunk_state: one_more_step_is_the_cell",
                "gated_delta_chunk_out: one_more_step_is_the_readout"):
        assert premises[law]["verdict"] == "proved-general", premises


def _wrong_state(bug):
    """The chunk state's forward with one bug a size shift could hide: each is right at a chunk of one
    step (or of two) and wrong beyond, in the last step or in the inverse that the normal form splits."""
    def forward(B, S, k, v, alpha, beta):
        K, V, a, b = _heads(k), _heads(v), alpha.T, beta.T
        _, strict = _masks(K.shape[1])
        g, ratio, T, rhs, R = _solve(B, S, K, V, a, b)
        gn, before_last = a.prod(1), strict.any(0)     # j < n - 1
        if bug == "last_write_dropped":               # the chunk's last row of R left out
            R = np.where(before_last[None, :, None], R, B.c(0))
        elif bug == "last_gate_dropped":              # gamma_(n-1) for gamma_n
            gn = np.where(before_last[None], a, B.c(1)).prod(1)
        elif bug == "inverse_transposed":             # R = T^T rhs
            R = _t(T) @ rhs
        elif bug == "inverse_of_the_inverted_decay":  # (I + A)^-1 with gamma_j / gamma_i in A
            T = unit_lower_inverse(B, np.where(strict, b[:, :, None] / ratio * (K @ _t(K)), B.c(0)))
            R = T @ rhs
        return gn[:, None, None] * S - _t(K) @ ((gn[:, None] / g)[:, :, None] * R)
    return STATE.with_mutant(Mutant(bug, forward, "forward", ("one_more_step_is_the_cell",), bug))


@pytest.mark.parametrize("bug", ["last_write_dropped", "last_gate_dropped", "inverse_transposed",
                                 "inverse_of_the_inverted_decay"])
def test_a_chunk_state_wrong_in_its_last_step_or_its_inverse_is_failed_for_every_size(bug):
    """The negative control of the size shift: the law of a wrong chunk state is failed with a witness,
    never proved-general."""
    cert = prove_general(_wrong_state(bug), "one_more_step_is_the_cell", budget=120)
    assert cert.verdict == "failed", cert.evidence
    assert "witness" in cert.evidence


def test_mod_p_at_a_length_with_a_partial_last_chunk_and_a_backward_that_drops_the_carry_fails():
    from vjpcert.symbolic.modular.check import check_modular
    dims = {"T": 70, "h": 2, "dk": 8, "dv": 4, "C": 32}                 # chunks of 32, 32 and 6
    assert check_modular(CHUNKED, "vjp[k]", dims, trials=1).verdict == "checked-probabilistic"
    dropped = CHUNKED.with_mutant(next(m for m in CHUNKED.mutants
                                       if m.name == "state_cotangent_not_carried_between_chunks"))
    cert = check_modular(dropped, "vjp[k]", dims, trials=1)
    assert cert.verdict == "failed" and "witness" in cert.evidence
