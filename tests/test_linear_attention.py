"""Causal linear attention (``specs/linear_attention.py``): the chunked form is the recurrent form for
every chunk size of the ladder's lengths, the last partial chunk included; each form's backward is
its VJP; and the two forms agree in floats at a long length whose last chunk is partial."""
import numpy as np

from vjpcert.core.backends import F64
from vjpcert.specs import builtin_ops
from vjpcert.specs.linear_attention import chunked, recurrent
from vjpcert.symbolic.fixed.prover import prove_claim

OPS = builtin_ops()
RECURRENT, CHUNKED = OPS["linear_attention"], OPS["linear_attention_chunked"]


def test_every_claim_of_both_forms_is_proved_at_every_dims_of_the_ladder():
    for o in (RECURRENT, CHUNKED):
        for dims in o.dims:
            for claim in o.claims():
                cert = prove_claim(o, claim, dims)
                assert cert.verdict == "proved", (o.name, dims, claim, cert.evidence)


def test_the_laws_cover_every_chunking_of_the_longest_length():
    """A chunk of C >= T steps is the whole sequence: C = 1 .. T is every chunking there is at T."""
    longest = max(d["T"] for d in CHUNKED.dims)
    assert {law.params["C"] for law in CHUNKED.laws} == set(range(1, longest + 1))
    assert any(d["T"] % CHUNKED.params["C"].default for d in CHUNKED.dims)   # a partial last chunk


def test_a_chunked_forward_whose_chunks_do_not_meet_is_refuted_with_a_witness():
    """The control, written here: the state is not carried from chunk to chunk."""
    from vjpcert.core.registry import Mutant
    def forgets(B, q, k, v, gamma, C):
        return np.concatenate([chunked(B, q[:, s:s + C], k[:, s:s + C], v[:, s:s + C], gamma, C)
                               for s in range(0, q.shape[1], C)], axis=1)
    twin = CHUNKED.with_mutant(Mutant("chunks_forget_the_state", forgets, "forward",
                                      ("chunks_of_2_equal_the_recurrent_form",), "each chunk starts from 0"))
    cert = prove_claim(twin, "chunks_of_2_equal_the_recurrent_form", CHUNKED.dims[-1])
    assert cert.verdict == "failed" and cert.evidence["witness"]["exact"], cert.evidence
    assert prove_claim(twin, "chunks_of_5_equal_the_recurrent_form", CHUNKED.dims[-1]).verdict == "proved"


def test_both_forms_agree_in_floats_at_a_long_length_with_a_partial_last_chunk():
    rng = np.random.default_rng(0)
    h, T, d, e, C = 2, 1030, 4, 3, 64                     # 16 full chunks and one of 6 steps
    q, k = rng.standard_normal((h, T, d)) / 2, rng.standard_normal((h, T, d)) / 2
    v, dy = rng.standard_normal((h, T, e)), rng.standard_normal((h, T, e))
    gamma = 0.97
    np.testing.assert_allclose(chunked(F64, q, k, v, gamma, C), recurrent(F64, q, k, v, gamma), rtol=1e-10, atol=1e-10)
    for a, b in zip(CHUNKED.vjp(F64, q, k, v, gamma, C, dy), RECURRENT.vjp(F64, q, k, v, gamma, dy)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
