"""Trials that identify their atoms alike: the modular tier's bound on a collision between atoms.

An atom mod p is keyed by its argument's value, so two distinct atoms whose arguments collide at a
trial's point are taken for one. Each trial digests how it identified its atoms (``Field.atom_partition``:
the classes in the order the atoms were computed, the folds, the signs of the odd kinds); where every
trial's digest is the same, a false identification must recur in every trial, and the collision terms of
``false_pass_bound`` fall with the power of the trials instead of staying at one trial's."""
import random

import numpy as np
import pytest

from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.modular.bound import LEAF

from optional import compiled

# imported at the first test that uses them, not at collection: importing the modular tier compiles its
# Numba loops (tests/optional.py)
modular, mb = compiled("vjpcert.symbolic.modular.check"), compiled("vjpcert.symbolic.modular.backend")


def _field(seed: int):
    rng = random.Random(seed)
    p = modular.draw_prime(rng)
    return mb.Field(p, {k: (rng.getrandbits(64), rng.getrandbits(64)) for k in modular.KINDS}, rng.randrange(1, p))


def _digest(seed: int, kind: str, *calls) -> str:
    """The digest of a trial that applies B.<kind> to each list of argument values in turn (a negative
    value is its residue p - |a|)."""
    with _field(seed) as F:
        B = mb.ModularBackend(F)
        for values in calls:
            getattr(B, kind)(mb.ModArray(F, np.asarray(values, dtype=object).astype(np.int64) % F.p, None, LEAF, None))
    return F.atom_partition


def test_trials_with_the_same_classes_agree_whatever_the_values():
    assert _digest(1, "exp", [5, 7, 9]) == _digest(2, "exp", [11, 13, 17])
    assert _digest(1, "exp", [5, 5, 7]) == _digest(2, "exp", [3, 3, 8])
    assert _digest(1, "exp", [5, 7]) == _digest(2, "exp", [7, 5])        # labels by first appearance


def test_a_collision_in_one_trial_only_is_a_disagreement():
    assert _digest(1, "exp", [5, 5, 7]) != _digest(2, "exp", [5, 6, 7])
    # across two calls: the second call's atom is the first one's in one trial only
    assert _digest(1, "exp", [5, 7], [5]) != _digest(2, "exp", [5, 7], [9])
    # and in a kind hashed by |a| with its sign
    assert _digest(1, "tanh", [3, 4]) != _digest(2, "tanh", [3, -3])


def test_a_fold_in_one_trial_only_is_a_disagreement():
    assert _digest(1, "exp", [0, 5]) != _digest(2, "exp", [4, 5])         # exp(0) = 1: no atom at all
    assert _digest(1, "exp", [0, 5]) == _digest(2, "exp", [0, 9])
    assert _digest(1, "log", [1, 5]) != _digest(2, "log", [2, 5])         # log(1) = 0
    assert _digest(1, "tanh", [0, 5]) != _digest(2, "tanh", [6, 5])       # tanh(0) = 0


def test_the_relative_sign_of_an_odd_kind_s_class_counts():
    assert _digest(1, "tanh", [3, -3]) == _digest(2, "tanh", [4, -4])
    assert _digest(1, "tanh", [-3, 3]) == _digest(2, "tanh", [4, -4])     # relative to the class's first
    assert _digest(1, "tanh", [3, -3]) != _digest(2, "tanh", [4, 4])
    assert _digest(1, "erf", [3, 3, -3]) != _digest(2, "erf", [4, -4, -4])


def test_the_digest_is_taken_where_compared_and_then_drops_the_arguments():
    with _field(3) as F:
        mb.ModularBackend(F).exp(mb.ModArray(F, np.arange(1, 7, dtype=np.int64), None, LEAF, None))
    assert F.atom_values                                  # the trial ended: kept until compared
    assert F.atom_partition is not None and F.atom_values is None and F.atom_count == {"exp": 6}
    with _field(4) as G:
        mb.ModularBackend(G).exp(mb.ModArray(G, np.arange(1, 7, dtype=np.int64), None, LEAF, None))
    G.forget_atom_arguments()                             # dropped undigested: agrees with no trial
    assert G.atom_partition is None and G.atom_count == {"exp": 6}


@pytest.mark.parametrize("n,distinct", [(5000, 4990), (5000, 300), (7, 3), (1, 1), (0, 1)])
def test_the_joined_entries_are_those_of_a_dictionary_walk(n, distinct):
    """``_joined`` on its two paths (a few values met twice; many) against the plain walk in order."""
    from vjpcert.symbolic.modular.field import _joined
    rng = np.random.default_rng(n + distinct)
    rep = rng.integers(0, distinct, size=n).astype(np.int64) * 1_000_003 + 7
    idx = np.flatnonzero(rng.random(n) < 0.9)
    seen, later, first = {}, [], []
    for i in idx:
        if rep[i] in seen:
            later.append(i)
            first.append(seen[rep[i]])
        else:
            seen[rep[i]] = i
    got_later, got_first = _joined(rep, idx)
    assert got_later.tolist() == later and got_first.tolist() == first


# ---- the bound
class _Trial:
    """What false_pass_bound reads of a trial's field, with the atoms of a recurrence at production size:
    a million exp atoms whose arguments have degree a million."""

    def __init__(self, digest, count=10 ** 6, arg_degree=10 ** 6):
        self.atom_count = {"exp": count}
        self.atom_arg = {"exp": (arg_degree, 0, 1.0, 0.0)}
        self._roots = {}
        self.atom_partition = digest
        self.pole_degree = 0.0
        self.atoms_used_both_ways = 0


BOUND = (10 ** 4, 0, 40.0, 0.0)          # the residual's (deg N, deg D, log2 |N|_1, log2 |D|_1)


def _terms(count=10 ** 6, arg_degree=10 ** 6):
    """The per-trial Schwartz-Zippel part, the pairs and one pair's collision term, written out."""
    p_min = 2.0 ** modular.PRIME_LO_BITS
    primes = modular.PRIMES_IN_RANGE

    def divides(bits):
        return (bits + 1) / modular.PRIME_LO_BITS / primes

    zero = modular.HASH_BIAS * BOUND[0] / p_min + divides(BOUND[2])
    pairs = count * (count - 1) / 2 + count
    pair = modular.HASH_BIAS * arg_degree / p_min + divides(1.0 + 0.0 + 1)
    return zero, pairs, pair


def test_without_agreement_the_bound_is_the_per_trial_one_to_the_power_trials():
    zero, pairs, pair = _terms()
    out = modular.false_pass_bound(BOUND, [_Trial("a"), _Trial("b"), _Trial("a")], 3, 0)
    per = zero + pairs * pair
    assert 0.5 < per < 1 and out["per_trial"] == pytest.approx(per, rel=1e-9)
    assert not out["identifications_agreed"] and out["total"] == pytest.approx(per ** 3, rel=1e-9)


def test_with_agreement_the_collisions_fall_with_the_power_of_the_trials():
    zero, pairs, pair = _terms()
    out = modular.false_pass_bound(BOUND, [_Trial("a")] * 3, 3, 0)
    assert out["identifications_agreed"]
    assert out["total"] == pytest.approx(zero ** 3 + pairs * pair ** 3, rel=1e-9)
    assert out["total"] < tol.MODULAR_MAX_FALSE_PASS < out["per_trial"] ** 3


@pytest.mark.parametrize("fields,trials", [
    ([_Trial("a")], 1),                          # one trial agrees with nothing
    ([_Trial(None)] * 3, 3),                     # a trial that digested nothing
    ([_Trial("a")] * 2, 3),                      # fewer fields than trials
])
def test_agreement_needs_every_trial_and_a_digest(fields, trials):
    out = modular.false_pass_bound(BOUND, fields, trials, 0)
    assert not out["identifications_agreed"] and out["total"] == pytest.approx(out["per_trial"] ** trials)


def test_more_trials_are_run_where_agreement_makes_them_state_something():
    many = dict(count=10 ** 7, arg_degree=10 ** 10)    # one trial's collision term alone is far above 1
    agreeing = [_Trial("a", **many)] * 3
    assert modular.false_pass_bound(BOUND, agreeing, 3, 0)["per_trial"] == 1.0
    assert modular._enough(BOUND, agreeing, 3, 3)            # the stated bound is below the limit already
    disagreeing = [_Trial("a", **many), _Trial("b", **many), _Trial("a", **many)]
    assert modular.false_pass_bound(BOUND, disagreeing, 3, 0)["vacuous"]
    assert modular._enough(BOUND, disagreeing, 3, 3)         # nothing more to state: stop
    two = [_Trial("a", **many)] * 2                          # agreeing but not yet below the limit
    out = modular.false_pass_bound(BOUND, two, 2, 0)
    assert out["total"] >= tol.MODULAR_MAX_FALSE_PASS and not out["vacuous"]


# ---- end to end
def _softmax():
    from vjpcert.specs import builtin_ops
    return builtin_ops()["softmax"]


def test_a_check_states_that_its_trials_agreed():
    op = _softmax()
    modular._MEMO.clear()
    cert = modular.check_modular(op, "vjp[x]", {"rows": 2, "n": 5})
    assert cert.verdict == "checked-probabilistic"
    assert cert.evidence["atom_identifications_agreed"] is True
    assert "recurs in every trial" in cert.evidence["false_pass_covers"]


def test_control_trials_that_identified_their_atoms_otherwise_get_the_per_trial_bound(monkeypatch):
    """A digest that differs from trial to trial (as a collision in one trial makes it) must leave the
    bound the per-trial one to the power trials."""
    op = _softmax()
    modular._MEMO.clear()
    monkeypatch.setattr(mb.Field, "_partition_digest", lambda self: str(self.p))
    cert = modular.check_modular(op, "vjp[x]", {"rows": 2, "n": 5})
    modular._MEMO.clear()
    assert cert.evidence["atom_identifications_agreed"] is False
    per, total = float(cert.evidence["false_pass_per_trial"]), float(cert.evidence["false_pass_probability"])
    assert total == pytest.approx(per ** cert.evidence["trials"], rel=1e-2)


def test_among_many_atoms_a_few_shared_classes_are_found_and_compared():
    """Most atoms are alone in their class; the few shared ones are found by their values and labelled
    by their first entry (and a class of many shared ones by one grouping of every entry)."""
    few = list(range(1, 200)) + [5]
    assert _digest(1, "exp", few) == _digest(2, "exp", [v + 1000 for v in few])
    assert _digest(1, "exp", few) != _digest(2, "exp", list(range(1, 200)) + [6])
    assert _digest(1, "exp", few) != _digest(2, "exp", list(range(1, 200)) + [500])
    many = [5, 5, 7, 7]
    assert _digest(1, "exp", many) == _digest(2, "exp", [3, 3, 8, 8])
    assert _digest(1, "exp", many) != _digest(2, "exp", [3, 3, 8, 9])
    assert _digest(1, "exp", many) != _digest(2, "exp", [3, 8, 3, 8])


def test_a_one_trial_check_digests_nothing_and_keeps_no_arguments(monkeypatch):
    op = _softmax()
    monkeypatch.setattr(tol, "MODULAR_MAX_TRIALS", 1)
    dims, params = modular.split_dims(op, {"rows": 2, "n": 5})
    one = modular.check_vjps(op, dims, params, trials=1)
    assert one["trials"] == 1
    F, = one["fields"]
    assert F.atom_values is None and F.digest_seconds == 0 and F.atom_partition is None
    three = modular.check_vjps(op, dims, params, trials=3)
    assert all(G.atom_values is None and G.atom_partition for G in three["fields"])
