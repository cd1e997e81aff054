"""Recurrent networks people write in PyTorch, proved from their own code at small dims: a Python loop
over Elman's cell and one over an LSTM cell (against the specs ``elman_rnn``, ``lstm``), torch.nn.GRU and torch.nn.LSTM themselves, an LSTM
cell written by hand; and the control, a loop over a step whose hand-written autograd backward forgets
tanh's derivative, refuted."""
import pytest

from optional import importorskip
from vjpcert.core.errors import SpecError
from vjpcert.specs import builtin_ops
from vjpcert.symbolic.fixed.prover import prove_claim

torch = importorskip("torch")
models = importorskip("torch_models")
pytorch = importorskip("vjpcert.frontends.pytorch")
OPS = builtin_ops()
SEQ = {"x": ("T", "k")}


def _all_proved(o, dims):
    return {claim: prove_claim(o, claim, dims).verdict for claim in o.claims()}


def test_a_torch_loop_over_elman_s_cell_is_proved_with_the_spec_s_shapes():
    o = pytorch.from_torch(models.elman_loop, name="tfr_elman_loop", spec=OPS["elman_rnn"])
    verdicts = _all_proved(o, o.dims[1])
    assert set(verdicts.values()) == {"proved"} and "matches_spec[elman_rnn]" in verdicts, verdicts


@pytest.mark.slow        # seconds; the Elman loop stands for it in the default run
def test_a_torch_loop_over_an_lstm_cell_is_proved_and_is_the_spec_s_network():
    o = pytorch.from_torch(models.lstm_loop, name="tfr_lstm_loop", spec=OPS["lstm"])
    verdicts = _all_proved(o, o.dims[1])
    assert set(verdicts.values()) == {"proved"} and "matches_spec[lstm]" in verdicts, verdicts


# LSTM stands for the three in the default run (its graph has the most in it); --slow runs them all
@pytest.mark.parametrize("kind, dtype", [pytest.param("GRU", None, marks=pytest.mark.slow), ("LSTM", "float64"),
                                         pytest.param("RNN", None, marks=pytest.mark.slow)])
def test_torch_s_own_recurrent_layers_are_proved_from_their_code(kind, dtype):
    o = pytorch.from_torch(models.Recurrent, init={"k": "k", "n": "n", "kind": kind}, name=f"tfr_nn_{kind}",
                           inputs=SEQ, output=("T", "n"), dims=[{"T": 2, "n": 2, "k": 3}], dtype=dtype)
    verdicts = _all_proved(o, o.dims[0])
    assert set(verdicts.values()) == {"proved"}, verdicts
    assert len(verdicts) == 5                        # x, and the layer's two weights and two biases


def test_torch_s_lstm_in_float32_is_refused_where_its_graph_is_a_fused_kernel():
    """On the CPU in float32 nn.LSTM runs oneDNN's fused layer, a graph unlike the float64 one and with
    no exact rule: refused, naming the op, never proved for another graph than the one trained with."""
    o = pytorch.from_torch(models.Recurrent, init={"k": "k", "n": "n", "kind": "LSTM"}, name="tfr_nn_lstm32",
                           inputs=SEQ, output=("T", "n"), dims=[{"T": 2, "n": 2, "k": 3}])
    with pytest.raises(SpecError, match="mkldnn_rnn_layer"):
        prove_claim(o, "vjp[x]", o.dims[0])


def test_an_lstm_cell_written_by_hand_is_proved():
    o = pytorch.from_torch(models.lstm_cell, name="tfr_lstm_cell",
                           inputs={"x": ("k",), "h": ("n",), "c": ("n",), "Wi": ("4*n", "k"), "Wh": ("4*n", "n")},
                           output=("n",), dims=[{"n": 2, "k": 3}])
    assert set(_all_proved(o, o.dims[0]).values()) == {"proved"}


def test_a_loop_over_a_step_with_a_wrong_autograd_backward_is_failed():
    o = pytorch.from_torch(models.elman_loop_wrong_step, name="tfr_elman_wrong", spec=OPS["elman_rnn"])
    cert = prove_claim(o, "vjp[W]", o.dims[1])
    assert cert.verdict == "failed" and cert.evidence["witness"], cert.evidence
