"""Recurrences (``core.recurrence``): ``scan`` means what jax.lax.scan means, a recurrence op is its
cell scanned with backpropagation through time over the cell's backward, and its VJP claims are proved
for every length by induction from the cell's -- never for a backward that is not that loop, and never
where the cell's claims fail. Elman's network (``specs/elman_rnn.py``) is the worked op."""
import numpy as np
import pytest

import vjpcert.core.recurrence as R
from vjpcert.core.backends import F64
from vjpcert.core.errors import SpecError
from vjpcert.core.registry import Mutant, op
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.every_size.general import prove_general
from vjpcert.symbolic.fixed.prover import prove_claim

OPS = builtin_ops()
RNN, CELL = OPS["elman_rnn"], OPS["elman_cell"]
NETWORKS = ("elman_rnn", "gru", "lstm")


def _claims():
    """Every claim of every network; the gated ones' (seconds each) behind --slow."""
    return [pytest.param(name, claim, marks=() if name == "elman_rnn" else pytest.mark.slow)
            for name in NETWORKS for claim in OPS[name].claims()]


# Elman's dropped carry and off-by-one saved state stand for the bug families in the default run
STANDING = {("elman_rnn", "carry_gradient_dropped"), ("elman_rnn", "off_by_one_saved_state")}


def _mutants():
    return [pytest.param(name, m.name, marks=() if (name, m.name) in STANDING else pytest.mark.slow)
            for name in NETWORKS for m in OPS[name].mutants]


# ------------------------------------------------------------------------------ scan
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_is_a_loop_that_carries_and_stacks(reverse):
    rng = np.random.default_rng(0)
    xs, ws, c0 = rng.standard_normal((5, 3)), rng.standard_normal((5, 3)), rng.standard_normal(3)
    carry, ys = R.scan(F64, lambda c, x: (c * x[0] + x[1], c.sum() + x[0]), c0, (xs, ws), reverse=reverse)
    c, want = c0, [None] * 5
    for t in (range(4, -1, -1) if reverse else range(5)):
        c, want[t] = c * xs[t] + ws[t], c.sum() + xs[t]
    np.testing.assert_array_equal(carry, c)
    np.testing.assert_array_equal(ys, np.stack(want))


def test_a_scan_over_a_symbolic_length_is_refused_by_the_every_size_trace():
    """A scan unrolls: over a length that is a symbol it has no one statement (the induction does)."""
    @op(name="tr_cumulative", inputs={"x": ("T", "n")}, output=("n",), dims=[{"T": 2, "n": 2}])
    def cumulative(B, x):
        return R.scan(B, lambda c, x_t: (c + x_t, c), B.zeros(x.shape[1:]), x)[0]

    @cumulative.defvjp
    def _(B, x, dy):
        return (np.stack([dy] * x.shape[0]),)
    cumulative.every_size("vjp[x]")
    cert = prove_general(cumulative, "vjp[x]", budget=30)
    assert cert.verdict == "inconclusive" and "symbolic-size axis" in cert.evidence["reason"], cert.evidence
    assert prove_claim(cumulative, "vjp[x]", {"T": 3, "n": 2}).verdict == "proved"


# ------------------------------------------------------------------------------ building a recurrence
def test_a_recurrence_is_refused_where_its_cell_does_not_fit():
    with pytest.raises(SpecError, match="carry 'z'"):
        R.recurrence(CELL, carry="z", over="x", name="tr_bad_carry", dims=[{"T": 1, "n": 2, "k": 2}])
    with pytest.raises(SpecError, match="not the shape of its carry"):
        R.recurrence(CELL, carry="W", over="x", name="tr_bad_shape", dims=[{"T": 1, "n": 2, "k": 2}])
    with pytest.raises(SpecError, match="length 'n'"):
        R.recurrence(CELL, carry="h", over="x", name="tr_bad_length", length="n", dims=[{"n": 2, "k": 2}])


def test_a_recurrence_draws_its_inputs_in_its_step_ops_domains():
    """A gate drawn outside (0, 1) makes a thousand-step state grow past any working precision (the
    gated delta rule's recall law was `failed` at T = 1025 that way): the recurrence takes its step
    ops' samplers, which draw whole sequences, and refuses two domains for one input."""
    from vjpcert.numeric.sampling import sample_point
    gdr = OPS["gated_delta_rule"]
    assert gdr.sample["alpha"] is OPS["gated_delta_cell"].sample["alpha"]
    for case in ("near_constant",):        # where the gate drawn near -1.47 at every step grew the state
        pt = sample_point(gdr, {"T": 1025, "h": 2, "dk": 3, "dv": 2}, case, 0)
        assert ((0 < pt["alpha"]) & (pt["alpha"] < 1) & (0 < pt["beta"]) & (pt["beta"] < 1)).all(), case
        np.testing.assert_allclose((pt["k"] ** 2).sum(-1), 1.0)
        S = pt["S"]
        for t in range(1025):           # bounded: alpha (I - beta k k^T) is a contraction
            S = OPS["gated_delta_cell"].forward(F64, S, pt["k"][t], pt["v"][t], pt["alpha"][t], pt["beta"][t])
        assert np.abs(S).max() < 1e3, case
    assert (OPS["selective_scan"].sample["A"](np.random.default_rng(0), (4, 3)) < 0).all()

    @op(name="tr_other_domain", inputs={"h": ("n",), "x": ("n",)}, output=("n",),
        dims=[{"n": 2}], sample={"x": lambda rng, shape: rng.uniform(0, 1, shape)})
    def readout(B, h, x):
        return h * x

    @readout.defvjp
    def _(B, h, x, dy):
        return dy * x, dy * h

    @op(name="tr_cell_domain", inputs={"h": ("n",), "x": ("n",)}, output=("n",),
        dims=[{"n": 2}], sample={"x": lambda rng, shape: rng.uniform(-1, 0, shape)})
    def cell(B, h, x):
        return h + x

    @cell.defvjp
    def _(B, h, x, dy):
        return dy, dy
    with pytest.raises(SpecError, match="one input has one domain"):
        R.recurrence(cell, carry="h", over="x", readout=readout, name="tr_two_domains", dims=[{"T": 1, "n": 2}])


def test_the_recurrence_is_its_cell_scanned_and_its_backward_the_loop_over_the_cell_s():
    rng = np.random.default_rng(1)
    T, n, k = 4, 3, 2
    h, x, W, U, b = (rng.standard_normal(s) for s in ((n,), (T, k), (n, n), (n, k), (n,)))
    hs, hp = [], h
    for t in range(T):
        hp = np.tanh(W @ hp + U @ x[t] + b)
        hs.append(hp)
    np.testing.assert_allclose(RNN(F64, h, x, W, U, b), np.stack(hs), rtol=1e-14)
    assert RNN.recurrence.intact(RNN) and RNN.recurrence.cell is CELL
    # the cell's code is the recurrence's too (an edit of the cell's file stales its certificates)
    assert CELL.forward in RNN._extra_functions and CELL.vjp in RNN._extra_functions


# ------------------------------------------------------------------------------ every length, by induction
@pytest.mark.parametrize("name, claim", _claims())
def test_every_claim_of_a_network_is_proved_for_every_length_by_induction(name, claim):
    net = OPS[name]
    cert = prove_general(net, claim, budget=120)
    ev = cert.evidence
    assert cert.verdict == "proved-general", ev.get("reason")
    assert ev["proof"] == "induction on the length" and "T -> T + 1" in ev["statement"]
    assert cert.dims == {"T": "T", "k": "k", "n": "n"} and "T >= 1" in cert.assumptions
    assert set(ev["cell_claims"]) == {f"vjp[{net.recurrence.carry}]", claim} and ev["cell"] == net.recurrence.cell.name
    assert [i["verdict"] for i in ev["instances"]][:2] == ["proved"] * 2 and len(ev["instances"]) == 3


@pytest.mark.parametrize("name, mutant", _mutants())
def test_a_hand_written_backpropagation_through_time_is_never_proved_by_induction(name, mutant):
    """The mutants write their own loop (each with a classic bug): the op is no longer the recurrence's
    loop, so no induction is claimed for it; the every-size certificate is failed with the witness of
    the length where the ring refutes it (T = 1, 2 or 3), as the fixed-dims tier is at T = 2."""
    net = OPS[name]
    m = next(x for x in net.mutants if x.name == mutant)
    twin = net.with_mutant(m)
    for claim in m.kills:
        cert = prove_general(twin, claim, budget=60)
        assert cert.verdict == "failed" and cert.evidence["witness"], (mutant, claim, cert.evidence)
        assert "not the recurrence's own" in cert.evidence["reason"]
        assert prove_claim(twin, claim, net.dims[1]).verdict == "failed", (mutant, claim)


def test_a_hand_written_backward_that_is_right_is_not_proved_for_every_length():
    """The same loop written by hand without a bug: right at every T, but not the library's loop, so
    the every-size tier proves nothing (inconclusive), and the ring proves it at fixed T."""
    def bptt_by_hand(B, h, x, W, U, b, dy):
        values = {"h": h, "x": x, "W": W, "U": U, "b": b}
        return R.bptt(B, RNN.recurrence, values, R.states(B, RNN.recurrence, values), dy)
    twin = RNN.with_mutant(Mutant("by_hand", bptt_by_hand, "vjp", (), "the right loop, written by hand"))
    cert = prove_general(twin, "vjp[W]", budget=60)
    assert cert.verdict == "inconclusive" and "not the recurrence's own" in cert.evidence["reason"]
    assert prove_claim(twin, "vjp[W]", RNN.dims[-1]).verdict == "proved"


def test_a_recurrence_over_a_wrong_cell_is_failed_not_proved():
    """The induction rests on the cell's claims: over a cell whose backward is wrong, the cell's claim
    is not proved for every size and the unrolled instance at T = 1 is refuted -- a witness."""
    wrong = CELL.with_mutant(CELL.mutants[0])
    rnn = R.recurrence(wrong, carry="h", over="x", name="tr_rnn_wrong_cell", dims=RNN.dims)
    rnn.every_size("vjp[x]")
    cert = prove_general(rnn, "vjp[x]", budget=60)
    assert cert.verdict == "failed" and cert.evidence["witness"], cert.evidence


def test_a_wrong_loop_in_the_library_is_caught_by_the_unrolled_instances(monkeypatch):
    """The control on the induction's one trusted piece: a bptt that drops the carry's cotangent is
    refuted where the ring proves the op unrolled (T = 2), so its claims are failed, not proved."""
    def no_carry(B, rec, values, hs, dy):
        cell, carry, over, shared = rec.cell, rec.carry, rec.over, rec.shared
        step_vjp, names = R.BoundNode(cell, B).vjp, list(cell.inputs)
        steps = [dict(zip(names, step_vjp(**{carry: values[carry] if t == 0 else hs[t - 1]},
                                          **{n: values[n][t] for n in over}, **{n: values[n] for n in shared},
                                          dy=dy[t])))
                 for t in range(len(hs))]                       # BUG: each step sees dy_t alone
        out = {carry: steps[0][carry], **{n: np.stack([s[n] for s in steps]) for n in over},
               **{n: sum(s[n] for s in steps) for n in shared}}
        return tuple(out[n] for n in names)
    monkeypatch.setattr(R, "bptt", no_carry)
    rnn = R.recurrence(CELL, carry="h", over="x", name="tr_rnn_library_bug", dims=RNN.dims)
    rnn.every_size("vjp[h]")
    cert = prove_general(rnn, "vjp[h]", budget=60)
    assert cert.verdict == "failed", cert.evidence
