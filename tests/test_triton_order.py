"""Program order in the Triton tier: Triton's interpreter runs a launch's programs one after another in
grid order, where a GPU runs them in any order (and at once). The checker runs each launch's programs
in several orders (grid, reversed, seeded shuffles: triton_kernels/interpreter.py) and fails a kernel
whose outputs depend on the order. The controls and twins are in tests/triton/controls.py."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import optional

import vjpcert.triton_kernels  # noqa: F401  (TRITON_INTERPRET before anything decorates a kernel)

optional.importorskip("torch", reason="the Triton tier needs torch: pip install -e '.[triton]'")
optional.importorskip("triton", reason="the Triton tier needs triton: pip install -e '.[triton]'")

from vjpcert.triton_kernels.check import check_triton_claim, detect_mode  # noqa: E402,F401  (pytestmark reads it)

ROOT = Path(__file__).resolve().parents[1]
# a condition as text is evaluated when a test is set up, not when the file is collected (detect_mode
# imports torch and triton)
pytestmark = pytest.mark.skipif("detect_mode() != 'interpreter'",
                                reason="program orders are chosen in Triton's interpreter only")
CONTROLS_MODULE = optional.from_file(ROOT / "tests" / "triton" / "controls.py", "triton_controls")


def _check(kernel, dims, cases=("random",)):
    return check_triton_claim(kernel.op, kernel.claim, dims, kernel=kernel, cases=cases)


def test_a_split_softmax_whose_last_program_does_not_wait_fails_naming_the_order():
    """Right in grid order (the last program runs last), wrong once it runs first: the witness says
    which order, which entry, and the entry in grid order and in that order."""
    kernel, dims, _ = CONTROLS_MODULE.CONTROLS["softmax_split_racy"]
    cert = _check(kernel, dims)
    assert cert.verdict == "failed", cert.evidence.get("program_orders")
    w = cert.evidence["witness"]
    assert w["check"] == "program order" and w["order"] == "reversed", w
    assert w["output"] == "y" and len(w["index"]) == 2
    assert w["grid_order"] != w["kernel"] and w["differing"] > 0           # kernel: its value in that order
    assert abs(w["grid_order"] - w["spec_f64"]) < 1e-6 < abs(w["kernel"] - w["spec_f64"])
    assert w["order_seed"] == cert.evidence["program_orders"]["seed"]
    assert "softmax_split_racy_kernel" in {launch["kernel"] for launch in w["launches"]}


@pytest.mark.parametrize("dims", [{"rows": 5, "n": 33}, {"rows": 2, "n": 1025}, {"rows": 3, "n": 7}, {"rows": 1, "n": 1}],
                         ids=lambda d: f"{d['rows']}x{d['n']}")
def test_the_race_is_seen_wherever_a_row_has_more_than_one_program(dims):
    """n <= 16 is one program a row: no program reads another's partials, and nothing is racy."""
    kernel, _, _ = CONTROLS_MODULE.CONTROLS["softmax_split_racy"]
    cert = _check(kernel, dims)
    racy = dims["n"] > CONTROLS_MODULE.BLOCK_SPLIT
    assert cert.verdict == ("failed" if racy else "kernel-match"), cert.evidence.get("witness")


# 5 x 33 is already three programs a row; 1,025 (65 programs a row, 4 s in the interpreter): --slow
@pytest.mark.parametrize("dims", [{"rows": 5, "n": 33}, pytest.param({"rows": 2, "n": 1025}, marks=pytest.mark.slow)],
                         ids=lambda d: f"{d['rows']}x{d['n']}")
def test_the_two_pass_twin_gives_the_same_bits_in_every_order(dims):
    cert = _check(CONTROLS_MODULE.TWINS["softmax_split_two_pass"], dims)
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    orders = cert.evidence["program_orders"]
    assert orders["ran"][:2] == ["grid", "reversed"] and len(orders["ran"]) >= 4
    assert orders["compared"] == "bitwise" and orders["float_atomics"] == 0
    assert [launch["kernel"] for launch in orders["launches"]] == ["split_partials_kernel", "split_output_kernel"]


def test_the_orders_and_their_seed_are_recorded():
    """The seed of the shuffles comes from a hash of the kernel, its dims and the case (reproducible,
    different per kernel); the certificate names every order that ran, and its assumptions say so."""
    twin = CONTROLS_MODULE.TWINS["softmax_split_two_pass"]
    dims = {"rows": 5, "n": 33}
    a, b = _check(twin, dims), _check(twin, dims)
    orders = a.evidence["program_orders"]
    assert orders == b.evidence["program_orders"]
    assert isinstance(orders["seed"], int) and orders["case"] == "random"
    racy, _, _ = CONTROLS_MODULE.CONTROLS["softmax_split_racy"]
    assert _check(racy, dims).evidence["program_orders"]["seed"] != orders["seed"]
    assert any("program orders" in text and "reversed" in text for text in a.assumptions)


def test_a_launch_of_one_program_has_one_order():
    cert = _check(CONTROLS_MODULE.TWINS["softmax_split_two_pass"], {"rows": 1, "n": 1})
    assert cert.verdict == "kernel-match"
    assert cert.evidence["program_orders"]["ran"] == ["grid"]
    assert "one program" in cert.evidence["program_orders"]["note"]
    # one launch of two programs has two orders: the shuffles repeat them and are not run again
    from vjpcert.triton_kernels.registry import discover
    gelu = discover()[0]["vjpcert_gelu_tanh_fwd"]
    cert = check_triton_claim(gelu.op, gelu.claim, {"rows": 1, "n": 100}, cases=("random",))
    assert cert.verdict == "kernel-match" and cert.evidence["program_orders"]["ran"] == ["grid", "reversed"]


def test_float_atomics_are_held_to_the_tolerance_rule_in_every_order_not_called_a_race():
    """The row's total by float atomic_add: the order changes its rounding (the bits differ, which the
    record shows), every order is within the bound, so the kernel matches."""
    cert = _check(CONTROLS_MODULE.TWINS["softmax_split_atomic"], {"rows": 3, "n": 513})
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    orders = cert.evidence["program_orders"]
    assert orders["float_atomics"] > 0 and orders["compared"].startswith("tolerance")
    assert orders["largest_difference"] > 0          # the relaxation was needed here, not idle


def test_float_atomics_do_not_excuse_a_program_that_reads_the_total_too_early():
    kernel, dims, _ = CONTROLS_MODULE.CONTROLS["softmax_split_atomic_racy"]
    cert = _check(kernel, dims)
    assert cert.verdict == "failed"
    w = cert.evidence["witness"]
    assert w["check"] == "program order" and w["float_atomics"] > 0 and w["error"] > w["bound"], w


def test_the_orders_are_the_orders_the_programs_ran_in():
    """A kernel that writes its program id at the position of an atomic ticket records the order the
    programs really ran in: grid order, reversed, and a shuffle that is a permutation; the patch is
    gone after the block."""
    import triton
    import triton.language as tl
    import triton.runtime.interpreter as interp
    from vjpcert.triton_kernels import harness
    from vjpcert.triton_kernels.interpreter import faithful

    @triton.jit
    def ticket_kernel(counter_ptr, out_ptr):
        pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
        tl.store(out_ptr + tl.atomic_add(counter_ptr, 1), pid)

    def sequence(order):
        with harness.run_context(), faithful(order=order, order_seed=7) as record:
            counter = harness.device_tensor(np.zeros(1, np.int32))
            out = harness.device_tensor(np.full(12, -1, np.int32))
            ticket_kernel[(3, 4)](counter, out)
            return harness.to_numpy(out).tolist(), record

    before = (interp.GridExecutor.__call__, vars(interp.interpreter_builder).get("set_grid_idx"))
    grid, record = sequence("grid")
    assert grid == list(range(12)) and record.launches[0]["grid"] == [3, 4, 1]
    assert sequence("reversed")[0] == list(range(12))[::-1]
    shuffled = sequence("shuffled 1")[0]
    assert sorted(shuffled) == list(range(12)) and shuffled != grid
    assert sequence("shuffled 1")[0] == shuffled                       # the seed fixes it
    assert (interp.GridExecutor.__call__, vars(interp.interpreter_builder).get("set_grid_idx")) == before


def test_a_faithful_block_inside_another_keeps_its_order_unless_it_names_one():
    import triton.runtime.interpreter as interp
    from vjpcert.triton_kernels.interpreter import faithful
    with faithful(order="reversed") as outer:
        wrapper = interp.GridExecutor.__call__
        with faithful() as inherited:
            assert inherited is outer and interp.GridExecutor.__call__ is wrapper
        with faithful(order="shuffled 2") as inner:
            assert inner is not outer and interp.GridExecutor.__call__.vjpcert_original is wrapper.vjpcert_original
        assert interp.GridExecutor.__call__ is wrapper


def test_a_launcher_that_makes_itself_faithful_still_runs_in_every_order():
    """Liger's launchers enter faithful() themselves (for their libdevice imports): that block must not
    put its launches back in grid order, out of the checker's sight."""
    import dataclasses
    from vjpcert.triton_kernels.interpreter import faithful
    kernel, dims, _ = CONTROLS_MODULE.CONTROLS["softmax_split_racy"]

    def launcher(x):
        with faithful():
            return kernel.launcher(x)
    cert = _check(dataclasses.replace(kernel, name="control_racy_in_its_own_block", launcher=launcher), dims)
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "program order"


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel is not installed")
def test_liger_launches_are_seen_and_run_in_every_order():
    from vjpcert.triton_kernels.registry import discover
    k = discover()[0]["liger_softmax_fwd"]
    cert = check_triton_claim(k.op, k.claim, {"rows": 5, "n": 33}, cases=("random",))
    orders = cert.evidence["program_orders"]
    assert cert.verdict == "kernel-match" and orders["launches"] and len(orders["ran"]) == 5, orders


def test_an_interpreter_that_no_longer_loops_the_grid_in_order_is_inconclusive_not_a_verdict(monkeypatch):
    """The order patch maps the k-th program of the interpreter's loop to the k-th of the chosen order;
    a loop that visits the grid some other way would make "reversed" a lie, so the checker says it
    cannot tell rather than certify (the negative control of that assumption)."""
    import triton.runtime.interpreter as interp

    def backwards_loop(self, *args, **kwargs):
        builder = interp.interpreter_builder
        builder.set_grid_dim(2, 1, 1)
        for x in (1, 0):
            builder.set_grid_idx(x, 0, 0)

    monkeypatch.setattr(interp.GridExecutor, "__call__", backwards_loop)
    cert = _check(CONTROLS_MODULE.TWINS["softmax_split_two_pass"], {"rows": 5, "n": 33})
    assert cert.verdict == "inconclusive" and "program-order patch" in cert.evidence["reason"]
