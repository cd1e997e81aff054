"""The mutation suite: the committed kill matrix is current and complete, no mutant survives every
tier, our tiers kill no correct backward, and the matrix machinery itself can fail."""
import json
from pathlib import Path

import pytest

from conftest import OPS
from vjpcert.mutate import run_row, summarise
from vjpcert.ops import OpRef

MATRIX = Path(__file__).resolve().parents[1] / "reports" / "mutation" / "kill_matrix.json"


@pytest.fixture(scope="module")
def matrix():
    if not MATRIX.exists():
        pytest.fail("reports/mutation/kill_matrix.json is missing: run `vjpcert mutate`")
    return json.loads(MATRIX.read_text())


def test_there_are_at_least_sixty_mutants_across_every_op():
    assert sum(len(o.mutants) for o in OPS.values()) >= 60
    assert all(o.mutants for o in OPS.values()), [n for n, o in OPS.items() if not o.mutants]


def test_the_committed_matrix_covers_the_current_mutants(matrix):
    rows = {(r["op"], r["mutant"]) for r in matrix["rows"]}
    expected = {(n, m.name) for n, o in OPS.items() for m in o.mutants} | {(n, "(correct)") for n in OPS}
    assert rows == expected, "the kill matrix is stale: run `vjpcert mutate`"
    stale = [n for n, h in matrix["spec_sha256"].items() if OPS[n].spec_sha256 != h]
    assert not stale, f"specs changed since the matrix was made: {stale} (run `vjpcert mutate`)"


def test_no_mutant_survives_every_tier_and_the_symbolic_tier_kills_all(matrix):
    s = matrix["summary"]
    assert s["survive_every_tier"] == []
    assert s["symbolic"]["killed"] == s["symbolic"]["of"] == s["mutants"]


def test_our_tiers_kill_no_correct_backward(matrix):
    assert matrix["summary"]["symbolic"]["false_kills"] == []
    assert matrix["summary"]["numeric"]["false_kills"] == []


@pytest.mark.torch          # a row runs every tier, torch's gradcheck and JAX's check_grads among them
@pytest.mark.jax
def test_the_matrix_machinery_can_fail():
    """A correct row is not killed; a gross mutant is killed by every tier that runs."""
    good = run_row(OpRef("scaled_dot"))
    bad = run_row(OpRef("scaled_dot", mutant="dq_uses_q"))
    assert not any(t and t["killed"] for t in good["tiers"].values())
    assert all(t["killed"] for t in bad["tiers"].values() if t)
    s = summarise([good, bad])
    assert s["survive_every_tier"] == [] and s["symbolic"]["kill_rate"] == 1.0


def test_a_run_of_some_ops_updates_their_rows_and_keeps_the_others(tmp_path):
    from vjpcert.mutate import _kept_from
    path = tmp_path / "kill_matrix.json"
    old = {"rows": [{"op": "a", "mutant": "(correct)"}, {"op": "a", "mutant": "m1"}, {"op": "b", "mutant": "(correct)"},
                    {"op": "b", "mutant": "m2"}, {"op": "gone", "mutant": "(correct)"}],
           "spec_sha256": {"a": "old-a", "b": "old-b", "gone": "old-g"}}
    path.write_text(json.dumps(old))
    rows, fingerprint = _kept_from(path, [{"op": "a", "mutant": "(correct)"}, {"op": "a", "mutant": "m3"}],
                                   {"a": "new-a"}, ["b", "a"])
    assert [(r["op"], r["mutant"]) for r in rows] == [("b", "(correct)"), ("b", "m2"), ("a", "(correct)"),
                                                      ("a", "m3"), ("gone", "(correct)")]
    assert fingerprint == {"a": "new-a", "b": "old-b", "gone": "old-g"}     # a kept row keeps its own hash
    assert _kept_from(tmp_path / "none.json", rows[:1], {"b": "x"}, ["b"]) == (rows[:1], {"b": "x"})
