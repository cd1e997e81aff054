"""Backwards written the way people write them -- into a fresh buffer, through slices of it, with
``np.add.at`` -- are proved for every size by the every-size tier, and their classic bugs are refuted
there: the in-place writes follow numpy's semantics (aliases, views) as values, never as storage
that a later write could silently change. The construct x interpreter matrix holds each write to
numpy cell by cell (``tests/language_cases.py``); these are whole claims."""
import numpy as np
import pytest

from vjpcert.core.registry import op
from vjpcert.symbolic.every_size.general import prove_general

TAPS = (0, 2, 2, 1)        # a static gather with a repeated row: the backward must add both


def _shift_op(name, backward):
    """y[t] = w0 x[t] + w1 x[t + 1] (x[n] = 0): a width-2 window, for every length."""
    @op(name=name, inputs={"x": ("n",), "w": (2,)}, output=("n",), dims=[{"n": 2}, {"n": 3}])
    def shift(B, x, w):
        return w[0] * x + w[1] * np.pad(x[1:], (0, 1))

    @shift.defvjp
    def _(B, x, w, dy):
        return backward(B, x, w, dy), np.stack([(dy * x).sum(), (dy[:-1] * x[1:]).sum()])
    shift.every_size("vjp[x]", "vjp[w]")
    return shift


def _into_slices(B, x, w, dy):
    dx = B.zeros(x.shape)
    tail = dx[1:]                   # a view: the write lands in dx
    tail += w[1] * dy[:-1]
    dx += w[0] * dy
    return dx


def _taps_swapped(B, x, w, dy):
    dx = B.zeros(x.shape)
    dx[1:] += w[0] * dy[:-1]        # the two taps' weights exchanged
    dx += w[1] * dy
    return dx


def _view_written_after_its_base(B, x, w, dy):
    dx = B.zeros(x.shape)
    tail = dx[1:]
    dx[:] = w[0] * dy               # overwrites dx: tail sees it (numpy's view) ...
    tail += w[1] * dy[:-1]          # ... so this adds to w0 dy: correct
    return dx


def _gather_op(name, backward):
    """y = x[TAPS]: rows of x picked by static indices, one of them twice, for every width."""
    @op(name=name, inputs={"x": (3, "d")}, output=(len(TAPS), "d"), dims=[{"d": 2}, {"d": 3}])
    def gather(B, x):
        return x[np.array(TAPS)]

    @gather.defvjp
    def _(B, x, dy):
        return (backward(B, x, dy),)
    gather.every_size("vjp[x]")
    return gather


def _scatter_add(B, x, dy):
    dx = B.zeros(x.shape)
    np.add.at(dx, np.array(TAPS), dy)
    return dx


def _scatter_assign(B, x, dy):
    dx = B.zeros(x.shape)
    dx[np.array(TAPS)] = dy         # the classic bug: a repeated row keeps only its last gradient
    return dx


@pytest.mark.parametrize("backward", [_into_slices, _view_written_after_its_base])
def test_a_backward_written_into_slices_of_a_fresh_buffer_is_proved_for_every_size(backward):
    shift = _shift_op(f"tw_{backward.__name__}", backward)
    for claim in ("vjp[x]", "vjp[w]"):
        cert = prove_general(shift, claim, budget=120)
        assert cert.verdict == "proved-general", (claim, cert.evidence.get("reason"))


def test_swapped_taps_written_into_slices_are_refuted_for_every_size():
    cert = prove_general(_shift_op("tw_taps_swapped", _taps_swapped), "vjp[x]", budget=120)
    assert cert.verdict == "failed", cert.evidence.get("reason")


def test_a_scatter_add_backward_of_a_gather_is_proved_for_every_width():
    cert = prove_general(_gather_op("tw_scatter_add", _scatter_add), "vjp[x]", budget=120)
    assert cert.verdict == "proved-general", cert.evidence.get("reason")


def test_a_scatter_by_assignment_loses_a_repeated_row_and_is_refuted_for_every_width():
    cert = prove_general(_gather_op("tw_scatter_assign", _scatter_assign), "vjp[x]", budget=120)
    assert cert.verdict == "failed", cert.evidence.get("reason")


def test_a_write_into_a_transposed_view_is_refused_never_guessed():
    """numpy writes through a transpose into its base; this tier declines such a write (and a use of a
    transpose after its base changed) rather than follow it as a copy."""
    def backward(B, x, w, dy):
        dx = B.zeros(x.shape)[None, :]
        dx.T[:, 0] += w[0] * dy
        dx.T[1:, 0] += w[1] * dy[:-1]
        return dx[0]
    cert = prove_general(_shift_op("tw_transposed_write", backward), "vjp[x]", budget=60)
    assert cert.verdict == "inconclusive", cert.verdict
    assert "through a view" in cert.evidence.get("reason", ""), cert.evidence
