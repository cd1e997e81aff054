"""Causal linear attention (``specs/linear_attention.py``) and the chunked recurrence it is built with
(``core.chunked``): the chunked form is the recurrent form, and its backward its VJP, for every length
and every chunk size (by induction over the chunks, from the chunk ops' claims for every chunk length);
a chunked op that breaks the construct, or chunk ops that are not the recurrence's steps, are never
proved; and the two forms agree in floats at a long length whose last chunk is partial."""
import numpy as np
import pytest

from vjpcert.core.backends import F64
from vjpcert.core.chunked import EQUALS_RECURRENT, chunked
from vjpcert.core.errors import SpecError
from vjpcert.core.registry import Mutant, op
from vjpcert.specs import builtin_ops
from vjpcert.specs.linear_attention import (CHUNK, DECAY, STATE, linear_attention, linear_attention_chunk_out,
                                            linear_attention_chunk_state, powers, recurrent)
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.fixed.prover import prove_claim

OPS = builtin_ops()
RECURRENT, CHUNKED = OPS["linear_attention"], OPS["linear_attention_chunked"]


def test_every_claim_of_both_forms_is_proved_at_every_dims_of_the_ladder():
    for o in (RECURRENT, CHUNKED):
        for dims in o.dims:
            for claim in o.claims():
                cert = prove_claim(o, claim, dims)
                assert cert.verdict == "proved", (o.name, dims, claim, cert.evidence)


@pytest.mark.parametrize("claim", CHUNKED.claims())
def test_the_chunked_form_is_the_recurrent_one_for_every_length_and_chunk_size(claim):
    cert = prove_general(CHUNKED, claim, budget=120)
    ev = cert.evidence
    assert cert.verdict == "proved-general", ev.get("reason")
    assert ev["proof"] == "induction on the number of chunks" and "C >= 1" in ev["statement"]
    assert cert.dims == {"T": "T", "d": "d", "e": "e", "h": "h"} and "C >= 1 (an integer)" in cert.assumptions
    # every premise is a claim of a chunk op for every chunk length n, the partial last chunk among them
    assert ev["chunk_op_claims"] and all(r["verdict"] == "proved-general" and r["statement_dims"]["n"] == "n"
                                         for r in ev["chunk_op_claims"].values())
    assert [i["verdict"] for i in ev["instances"]] == ["proved"] * 3


def test_the_chunk_ops_carry_the_laws_that_make_them_the_recurrence_s_steps():
    assert {"one_step_is_the_cell", "one_more_step_is_the_cell"} <= set(linear_attention_chunk_state.general)
    assert {"one_step_is_the_readout", "one_more_step_is_the_readout"} <= set(linear_attention_chunk_out.general)


def _chunk_state(name, forward):
    o = op(name=name, inputs=dict(linear_attention_chunk_state.inputs), output=STATE, params={"gamma": DECAY},
           **CHUNK)(forward)
    o.defvjp(linear_attention_chunk_state.vjp)
    o.every_size("vjp[S]", "vjp[k]", "vjp[v]")
    return o


def test_a_chunk_state_that_is_not_the_cell_s_steps_is_refuted_not_proved():
    """The bug my first chunked forward had: k_j weighted by gamma^j instead of gamma^(n-1-j). Its
    backward is consistent with it (each VJP claim alone proved), so only the generated laws catch it,
    and the chunked op's equality with the recurrence is then failed with a witness, not proved."""
    def forward(B, S, k, v, gamma):
        n = k.shape[1]
        return gamma ** n * S + (k * powers(B, gamma, n)[None, :, None]).transpose(0, 2, 1) @ v

    def backward(B, S, k, v, gamma, dy):
        n = k.shape[1]
        w = powers(B, gamma, n)
        return gamma ** n * dy, (v @ dy.transpose(0, 2, 1)) * w[None, :, None], (k * w[None, :, None]) @ dy
    wrong = op(name="tla_wrong_chunk_state", inputs=dict(linear_attention_chunk_state.inputs), output=STATE,
               params={"gamma": DECAY}, **CHUNK)(forward)
    wrong.defvjp(backward)
    wrong.every_size("vjp[S]", "vjp[k]", "vjp[v]")
    ch = chunked(linear_attention, state=wrong, out=linear_attention_chunk_out, name="tla_wrong_chunked",
                 dims=CHUNKED.dims)
    ch.every_size("vjp[k]", EQUALS_RECURRENT)
    assert prove_general(wrong, "vjp[k]", budget=60).verdict == "proved-general"
    law = prove_general(wrong, "one_more_step_is_the_cell", budget=60)
    assert law.verdict == "failed" and law.evidence["witness"], law.evidence
    cert = prove_general(ch, EQUALS_RECURRENT, budget=120)
    assert cert.verdict == "failed" and cert.evidence["witness"], cert.evidence
    assert prove_claim(ch, EQUALS_RECURRENT, {"h": 1, "T": 3, "d": 2, "e": 1}).verdict == "failed"


def test_a_hand_written_chunked_backward_is_not_proved_by_induction():
    """The construct's loop replaced (a mutant's backward): no induction holds; a wrong one is failed
    with the ring's witness, at the length of two chunks."""
    m = next(x for x in CHUNKED.mutants if x.name == "state_cotangent_not_carried_between_chunks")
    twin = CHUNKED.with_mutant(m)
    cert = prove_general(twin, "vjp[k]", budget=60)
    assert cert.verdict == "failed" and "not the chunked recurrence's own" in cert.evidence["reason"]
    assert cert.evidence["witness"]


def test_chunk_ops_that_do_not_fit_the_recurrence_are_refused():
    with pytest.raises(SpecError, match="not one of the recurrence's"):
        bad = op(name="tla_bad_input", inputs={"S": STATE, "x": ("h", "n", "d")}, output=STATE, **CHUNK)(
            lambda B, S, x: S)
        bad.defvjp(lambda B, S, x, dy: (dy, x * 0))
        chunked(linear_attention, state=bad, out=linear_attention_chunk_out, name="tla_bad", dims=CHUNKED.dims)
    with pytest.raises(SpecError, match="not built by core.recurrence"):
        chunked(OPS["softmax"], state=linear_attention_chunk_state, out=linear_attention_chunk_out,
                name="tla_not_a_recurrence", dims=CHUNKED.dims)
    with pytest.raises(SpecError, match="chunk size"):
        chunked(linear_attention, state=linear_attention_chunk_state, out=linear_attention_chunk_out,
                name="tla_chunk_0", dims=CHUNKED.dims, chunk=0)


def test_both_forms_agree_in_floats_at_a_long_length_with_a_partial_last_chunk():
    rng = np.random.default_rng(0)
    h, T, d, e, C = 2, 1030, 4, 3, 64                     # 16 full chunks and one of 6 steps
    q, k = rng.standard_normal((h, T, d)) / 2, rng.standard_normal((h, T, d)) / 2
    v, dy = rng.standard_normal((h, T, e)), rng.standard_normal((h, T, e))
    gamma = 0.97
    def f(x):
        return np.asarray(x, dtype=float)
    np.testing.assert_allclose(f(CHUNKED(F64, q, k, v, gamma, C)), f(recurrent(F64, q, k, v, gamma)), rtol=1e-10,
                               atol=1e-10)
    for a, b in zip(CHUNKED.vjp(F64, q, k, v, dy, gamma, C), RECURRENT.vjp(F64, q, k, v, dy, gamma)):
        np.testing.assert_allclose(f(a), f(b), rtol=1e-10, atol=1e-10)
    # a param given positionally is the one used (not silently its default)
    assert not np.allclose(f(CHUNKED(F64, q, k, v, 0.5, C)), f(recurrent(F64, q, k, v, gamma)))


def test_the_equality_law_holds_the_forward_under_test_not_the_construct_s():
    """A mutant's forward (each chunk from a zero state) is what the law compares with the recurrence:
    failed at two chunks, in the ring and for every size."""
    m = next(x for x in CHUNKED.mutants if x.name == "chunks_start_from_a_zero_state")
    twin = CHUNKED.with_mutant(m)
    assert prove_claim(twin, EQUALS_RECURRENT, {"h": 1, "T": 3, "d": 2, "e": 1}).verdict == "failed"
    assert prove_claim(twin, EQUALS_RECURRENT, {"h": 1, "T": 1, "d": 2, "e": 2}).verdict == "proved"   # one chunk
    assert prove_general(twin, EQUALS_RECURRENT, budget=60).verdict == "failed"


def _state_wrong_from_three_steps(name):
    """The chunk state right over one or two steps and wrong from three on (step j written again j (j - 1)
    times): a chunked op with C = 2 never meets the wrong part, one with C = 3 does."""
    def forward(B, S, k, v, gamma):
        right = linear_attention_chunk_state.forward(B, S, k, v, gamma)
        j = B.array(np.arange(k.shape[1]))
        return right + (k * (j * (j - 1))[None, :, None]).transpose(0, 2, 1) @ v
    o = op(name=name, inputs=dict(linear_attention_chunk_state.inputs), output=STATE, params={"gamma": DECAY},
           **CHUNK)(forward)
    o.defvjp(linear_attention_chunk_state.vjp)
    return o


def test_a_hand_written_law_under_a_generated_name_is_refused_not_taken_as_the_premise():
    """The premises of the induction are the laws chunked generates from the recurrence's cell. A chunk
    op that brings its own law under one of their names (here one that holds for every state op) would
    make the induction prove a chunked form that is wrong for every chunk size from 3 on: refused."""
    wrong = _state_wrong_from_three_steps("tla_vacuous_premise")
    for name in ("one_step_is_the_cell", "one_more_step_is_the_cell"):
        wrong.law(lambda B, S, k, v, gamma, forward: (S, S), name=name)
    with pytest.raises(SpecError, match="one_step_is_the_cell.*generates.*written by hand"):
        chunked(linear_attention, state=wrong, out=linear_attention_chunk_out, name="tla_vacuous_chunked",
                dims=CHUNKED.dims)


def test_a_generated_premise_replaced_after_the_build_is_not_proved_from():
    """The laws list edited after chunked built the op (a generated law swapped for one that always
    holds): the induction does not take it as its premise, and the wrong chunk state is still found."""
    from vjpcert.core.registry import Law
    wrong = _state_wrong_from_three_steps("tla_swapped_premise")
    ch = chunked(linear_attention, state=wrong, out=linear_attention_chunk_out, name="tla_swapped_chunked",
                 dims=CHUNKED.dims, chunk=3)
    ch.every_size(EQUALS_RECURRENT)
    law = prove_general(wrong, "one_more_step_is_the_cell", budget=60)
    assert law.verdict == "failed", law.evidence                # the generated law finds it
    wrong.laws[:] = [Law(l.name, lambda B, S, k, v, gamma, forward: (S, S), l.doc, l.params, False)
                     if l.name == "one_more_step_is_the_cell" else l for l in wrong.laws]
    cert = prove_general(ch, EQUALS_RECURRENT, budget=60)
    assert cert.verdict == "inconclusive" and "no premise of the induction" in cert.evidence["reason"], cert.evidence


def test_a_law_tagged_by_hand_as_a_generated_one_is_no_premise():
    """A spec that copies what a generated law looks like (its name, its recurrence set on the function
    as the construct once marked its own) and swaps it in after the build: still no premise, because
    the construct keeps its own record of the functions it made."""
    from vjpcert.core.registry import Law
    wrong = _state_wrong_from_three_steps("tla_forged_premise")
    ch = chunked(linear_attention, state=wrong, out=linear_attention_chunk_out, name="tla_forged_chunked",
                 dims=CHUNKED.dims, chunk=3)
    ch.every_size(EQUALS_RECURRENT)

    def vacuous(B, S, k, v, gamma, forward):
        return S, S
    vacuous.premise_of = linear_attention.recurrence
    wrong.laws[:] = [Law(l.name, vacuous, l.doc, l.params, False) if l.name == "one_more_step_is_the_cell" else l
                     for l in wrong.laws]
    cert = prove_general(ch, EQUALS_RECURRENT, budget=60)
    assert cert.verdict == "inconclusive" and "no premise of the induction" in cert.evidence["reason"], cert.evidence


def test_a_generated_law_moved_onto_another_chunk_op_is_no_premise_there():
    """A law chunked generated on the built-in chunk state, swapped after the build into the laws of a
    wrong chunk state of the same recurrence: the construct generated it on another op, so it is no
    premise of the second induction."""
    from vjpcert.core.registry import Law
    wrong = _state_wrong_from_three_steps("tla_moved_premise")
    ch = chunked(linear_attention, state=wrong, out=linear_attention_chunk_out, name="tla_moved_chunked",
                 dims=CHUNKED.dims, chunk=3)
    ch.every_size(EQUALS_RECURRENT)
    theirs = {l.name: l for l in linear_attention_chunk_state.laws}
    wrong.laws[:] = [theirs[l.name] if l.name in theirs and l.name.startswith("one_") else l for l in wrong.laws]
    cert = prove_general(ch, EQUALS_RECURRENT, budget=60)
    assert cert.verdict == "inconclusive" and "no premise of the induction" in cert.evidence["reason"], cert.evidence


def test_a_chunked_op_is_not_chunked_again_and_its_long_numeric_length_crosses_a_chunk_boundary():
    """A chunked op answers for the recurrence it computes (its length, where the numeric tier checks a
    long sequence too), but it is no recurrence to chunk: its equality law would then be held to the
    first chunked op, while the induction proves the second one equal to the cell's recurrence."""
    from vjpcert.numeric.check import numeric_dims
    with pytest.raises(SpecError, match="already computed in chunks"):
        chunked(CHUNKED, state=linear_attention_chunk_state, out=linear_attention_chunk_out, name="tla_twice",
                dims=CHUNKED.dims)
    long = numeric_dims(CHUNKED)[-1]
    assert long["T"] >= 1025 and long["T"] % CHUNKED.params["C"].default == 1


def test_a_chunk_op_is_the_step_of_one_recurrence_only():
    """Chunk ops carry the laws of the recurrence they were built for: the same ops in a second chunked
    op over another recurrence would be proved against the first one's cell. Refused."""
    from vjpcert.core.recurrence import recurrence
    from vjpcert.specs.linear_attention import linear_attention_cell, linear_attention_readout
    other = recurrence(linear_attention_cell, readout=linear_attention_readout, carry="S", over=("q", "k", "v"),
                       name="tla_other_recurrence", axis=1, zero_carry=True, order=("q", "k", "v"),
                       dims=RECURRENT.dims)
    with pytest.raises(SpecError, match="another recurrence"):
        chunked(other, state=linear_attention_chunk_state, out=linear_attention_chunk_out, name="tla_other_chunked",
                dims=CHUNKED.dims)
