"""The Triton tier cannot be gamed: each cheat of tests/triton/cheats.py goes red by the defence built
for it, each shown to pass where that defence is left out (the kernel's own sizes, the cases without
the gate's, the kernel's own sampler), and the honest kernels -- one whose bits vary from call to call
among them -- pass. The gate's sizes are unit-tested without Triton."""
from __future__ import annotations

import ast
import types
from pathlib import Path

import numpy as np
import pytest

import optional

from vjpcert.specs import resolve_op
from vjpcert.triton_kernels import gate
from vjpcert.triton_kernels.registry import INTERPRETER_SIZES, TritonKernel

ROOT = Path(__file__).resolve().parents[1]
CHEATS_FILE = ROOT / "tests" / "triton" / "cheats.py"
CHEATS = optional.from_file(CHEATS_FILE, "triton_cheats")


def _cheat_names() -> list[str]:
    tree = ast.parse(CHEATS_FILE.read_text(encoding="utf-8"))
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CHEATS")
    return [k.value for k in table.keys]


_needs_triton = optional.needs_triton
_check = optional.check_triton


def _gate_only(kernel) -> list[dict]:
    _needs_triton()
    from vjpcert.triton_kernels.check import triton_dims
    dims = triton_dims(kernel, "interpreter")
    assert dims[:len(kernel.sizes)] == [dict(d) for d in kernel.sizes]
    return dims[len(kernel.sizes):]


def test_the_table_names_every_cheat():
    assert _cheat_names() == list(CHEATS.CHEATS)


@pytest.mark.parametrize("name", _cheat_names())
def test_every_cheat_goes_red_by_the_check_built_for_it(name):
    kernel, check = CHEATS.CHEATS[name]
    sizes = _gate_only(kernel) if name in ("listed_sizes_only", "skips_block_when_32_divides") else [{"rows": 3, "n": 33}]
    certs = [_check(kernel, d) for d in sizes]
    red = [c for c in certs if c.verdict == "failed"]
    assert red, f"{name} passed every size: {[c.dims for c in certs]}"
    assert red[0].evidence["witness"]["check"] == check, red[0].evidence["witness"]


@pytest.mark.parametrize("name", ["listed_sizes_only", "skips_block_when_32_divides"])
def test_a_size_cheat_passes_at_the_sizes_it_declares_so_the_gate_s_sizes_are_what_catch_it(name):
    kernel, _ = CHEATS.CHEATS[name]
    assert _check(kernel, {"rows": 5, "n": 33}).verdict == "kernel-match"
    dims = _gate_only(kernel)
    assert {"rows": 2, "n": 64} in dims and {"rows": 3, "n": 96} in dims


def test_the_moderate_offset_cheat_passes_every_case_but_the_offset_sweep():
    from vjpcert.core.kernel_checks import OFFSET_SWEEP
    from vjpcert.triton_kernels.check import CASES
    kernel, _ = CHEATS.CHEATS["wrong_at_moderate_offsets"]
    others = tuple(c for c in CASES if c != OFFSET_SWEEP)
    assert _check(kernel, {"rows": 3, "n": 33}, cases=others).verdict == "kernel-match"
    w = _check(kernel, {"rows": 3, "n": 33}).evidence["witness"]
    assert w["case"] == OFFSET_SWEEP


@pytest.mark.parametrize("name", ["truth_from_gc", "truth_from_stack"])
def test_the_truth_finding_cheats_work_wherever_the_truth_exists_while_the_kernel_runs(name, monkeypatch):
    """Why their red is the ordering's doing: with a float64 result alive during each run (as when the
    reference was computed before the kernel), both cheats find it and match."""
    _needs_triton()
    from vjpcert.core import kernel_checks
    from vjpcert.triton_kernels import check
    run = check._run

    def run_with_the_truth_alive(kernel, op, inputs, dy, params, **kw):
        ref64 = [kernel_checks.reference(op, kernel.kind, inputs, dy, np.float64, kernel.params)[0]]  # noqa: F841
        return run(kernel, op, inputs, dy, params, **kw)
    monkeypatch.setattr(check, "_run", run_with_the_truth_alive)
    kernel, _ = CHEATS.CHEATS[name]
    assert _check(kernel, {"rows": 3, "n": 33}).verdict == "kernel-match"


def test_a_kernel_that_writes_into_its_input_is_named_with_the_entry():
    kernel, _ = CHEATS.CHEATS["writes_its_input"]
    w = _check(kernel, {"rows": 3, "n": 33}).evidence["witness"]
    assert w["check"] == "input written" and w["input"] == "dy" and w["after"] == 0.0 and w["before"] != 0.0
    assert w["changed"] == w["of"] == 99


def test_a_kernel_s_own_sampler_of_a_differentiable_input_adds_a_case_and_replaces_none():
    kernel, _ = CHEATS.CHEATS["own_sampler_of_x"]
    # alone, its own sampler is all it would be checked on: zeros in, zeros out, right
    assert _check(kernel, {"rows": 3, "n": 33}, cases=(gate.KERNEL_SAMPLERS,)).verdict == "kernel-match"
    cert = _check(kernel, {"rows": 3, "n": 33})
    assert cert.verdict == "failed" and cert.evidence["witness"]["case"] == "random"
    assert cert.evidence["cases"][-1] == gate.KERNEL_SAMPLERS
    assert any("then the kernel's own sampler as one more case" in a for a in cert.assumptions)


def test_a_sampler_of_something_that_is_not_an_input_is_bad_input():
    from vjpcert.core.registry import SpecError
    kernel, _ = CHEATS.CHEATS["own_sampler_of_x"]
    bad = TritonKernel("bad_sampler", "gelu_tanh", "forward", ("y",), kernel.launcher,
                       samplers={"z": lambda rng, shape, params: np.zeros(shape)})
    with pytest.raises(SpecError, match="not inputs of the spec"):
        _check(bad, {"rows": 1, "n": 2})


def test_an_honest_kernel_whose_bits_vary_between_calls_matches_and_the_variation_is_recorded():
    kernel = CHEATS.HONEST["softmax_random_block_order"]
    CHEATS.ORDER_CALLS["n"] = 0
    cert = _check(kernel, {"rows": 2, "n": 1025}, cases=("random", "large_offset"))
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    det = cert.evidence["determinism"]
    assert det["bitwise_identical"] is False and det["differing"] > 0 and det["largest_difference"] < 1e-6
    assert cert.evidence["program_orders"]["compared"].startswith("tolerance")


def test_a_kernel_whose_bits_vary_but_whose_first_two_runs_agree_is_not_called_a_fence_read(monkeypatch):
    """Its first two runs give the same bits by chance (the same order twice, here), the run with other
    fences other bits: more runs with the same fences show the bits vary, so it is not a read outside
    its tensors -- and each run is held to the rule."""
    kernel = CHEATS.HONEST["softmax_random_block_order"]
    monkeypatch.setitem(CHEATS.ORDER_CALLS, "n", 0)
    monkeypatch.setitem(CHEATS.ORDER_CALLS, "seeds", [7, 7, 8, 9, 10, 11, 12, 13])
    cert = _check(kernel, {"rows": 2, "n": 1025}, cases=("random",))
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    assert cert.evidence["determinism"]["bitwise_identical"] is False and cert.evidence["determinism"]["runs"] == 3


def test_a_kernel_whose_bits_vary_only_after_its_first_runs_is_not_called_a_race(monkeypatch):
    """Its two runs and the run with other fences agree by chance (the same order three times), the
    first other program order gives other bits: grid order run again varies too, so it is not a race,
    and every order is held to the rule."""
    kernel = CHEATS.HONEST["softmax_random_block_order"]
    monkeypatch.setitem(CHEATS.ORDER_CALLS, "n", 0)
    monkeypatch.setitem(CHEATS.ORDER_CALLS, "seeds", [7, 7, 7] + list(range(8, 40)))
    cert = _check(kernel, {"rows": 4, "n": 1025}, cases=("random",))
    assert cert.verdict == "kernel-match", cert.evidence.get("witness")
    orders = cert.evidence["program_orders"]
    assert orders["varies_in_grid_order"] and orders["compared"].startswith("tolerance rule")


def test_random_noise_does_not_hide_a_read_past_the_end():
    """A read past the end (the unmasked-load control) with a random 1-ulp flip on every call: its bits
    vary, so no bitwise fence comparison is made -- and the run with fences of 3e38 is held to the rule
    instead, which it is far outside."""
    controls = optional.from_file(ROOT / "tests" / "triton" / "controls.py", "triton_controls")
    kernel, dims, _ = controls.CONTROLS["softmax_unmasked_load"]

    def noisy(x):
        y = kernel.launcher(x)
        flip = np.random.default_rng().random(y.shape) < 0.5
        return np.where(flip, np.nextafter(y, np.float32(2)), y).astype(np.float32)
    cert = _check(TritonKernel("noisy_unmasked_load", "softmax", "forward", ("y",), noisy), dims)
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "tolerance"
    assert cert.evidence["determinism"]["bitwise_identical"] is False


def test_a_kernel_whose_bits_vary_is_held_to_the_rule_in_every_run():
    """The control of the one above: the same kernel, 0.1% off on every second call."""
    cert = _check(CHEATS.HONEST_CONTROL, {"rows": 2, "n": 1025}, cases=("random",))
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "tolerance"


def test_our_reference_kernels_match_at_the_gate_s_sizes(request):
    """Each at the gate's first drawn size; with --slow at every size of the gate."""
    from vjpcert.triton_kernels.registry import discover
    for name in ("vjpcert_softmax_bwd", "vjpcert_gelu_tanh_fwd"):
        kernel = discover()[0][name]
        sizes = _gate_only(kernel)
        for dims in sizes if request.config.getoption("--slow") else sizes[-gate.DRAWN_SIZES:][:1]:
            cert = _check(kernel, dims)
            assert cert.verdict == "kernel-match", (name, dims, cert.evidence.get("witness"))


def _sequential_layernorm(x, gamma, beta, eps):
    """LayerNorm in float32 with one running sum for the mean and one for the variance: the formula's
    own steps, in the order that rounds worst (a kernel's order is its own)."""
    n = x.shape[-1]
    s = np.zeros(x.shape[:-1], np.float32)
    for j in range(n):
        s = (s + x[..., j]).astype(np.float32)
    d = x - (s / np.float32(n))[..., None]
    v = np.zeros(x.shape[:-1], np.float32)
    for j in range(n):
        v = (v + d[..., j] * d[..., j]).astype(np.float32)
    rstd = np.float32(1) / np.sqrt(v / np.float32(n) + np.float32(eps))
    return (d * rstd[..., None] * gamma + beta).astype(np.float32)


def test_an_honest_kernel_on_ill_conditioned_inputs_is_inconclusive_not_failed(monkeypatch):
    """Outside the model-free rule at a large offset (numpy's pairwise order is luckier), inside k x the
    rounding bound that holds for every summation order: inconclusive, saying where and with the
    condition number; without that step it would fail. Its control, 1% off, fails with the bound."""
    from vjpcert.triton_kernels import check
    honest = TritonKernel("sequential_layernorm", "layernorm", "forward", ("y",), _sequential_layernorm)
    cert = _check(honest, {"rows": 5, "n": 33})
    assert cert.verdict == "inconclusive" and "ill-conditioned" in cert.evidence["reason"]
    where = {e["case"]: e for e in cert.evidence["ill_conditioned"]}
    assert "large_offset" in where and all(e["error"] > e["bound"] and e["error_over_allowed"] <= 1
                                           for e in where.values())
    assert all(e["condition_number"] == "inf" or e["condition_number"] > 1 for e in where.values())
    monkeypatch.setattr(check._Bounds, "spec", lambda self: None)
    assert _check(honest, {"rows": 5, "n": 33}).evidence["witness"]["check"] == "tolerance"
    monkeypatch.undo()
    off = TritonKernel("layernorm_one_percent_off", "layernorm", "forward", ("y",),
                       lambda x, gamma, beta, eps: (_sequential_layernorm(x, gamma, beta, eps) * 1.01).astype(np.float32))
    cert = _check(off, {"rows": 5, "n": 33})
    assert cert.verdict == "failed" and cert.evidence["witness"]["check"] == "tolerance"
    beyond = cert.evidence["witness"]["outside_any_order_bound"]
    assert beyond["error"] > beyond["factor"] * beyond["bound_any_order"]


# --- the gate's sizes, without Triton ---------------------------------------------------------------

def _module_kernel(tmp_path, text: str, name="k"):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    module = optional.from_file(path, f"gate_{name}")

    def launcher(x):
        return module.f(x)
    launcher.__module__ = f"gate_{name}"
    module.f  # noqa: B018  (import it: the digest reads the module's source)
    return TritonKernel(name, "softmax", "forward", ("y",), launcher)


def test_the_drawn_sizes_follow_the_kernel_s_code_and_replay(tmp_path):
    op = resolve_op("softmax")
    a = _module_kernel(tmp_path, "def f(x):\n    return x\n", "a")
    b = _module_kernel(tmp_path, "def f(x):\n    return x + 0\n", "b")
    sizes_a, sizes_b = gate.gate_sizes(a, op), gate.gate_sizes(b, op)
    assert sizes_a == gate.gate_sizes(a, op)                      # a rerun draws the same: replayable
    assert sizes_a[:len(INTERPRETER_SIZES)] == list(INTERPRETER_SIZES)
    assert sizes_a[len(INTERPRETER_SIZES):][:2] == [{"rows": 2, "n": 64}, {"rows": 3, "n": 96}]
    assert sizes_a[-2:] != sizes_b[-2:]                            # other code, other sizes
    assert sizes_a[-2:] != gate.gate_sizes(a, op, seed=1)[-2:]     # and another seed
    for d in sizes_a[-2:]:
        assert gate.DRAWN_NARROW[0] <= d["rows"] <= gate.DRAWN_NARROW[1]
        assert gate.DRAWN_WIDE[0] <= d["n"] <= gate.DRAWN_WIDE[1]


def test_the_drawn_sizes_keep_to_the_op_s_constraints():
    op = types.SimpleNamespace(constraints=lambda d: "d must be even" if d["d"] % 2 else None)
    kernel = TritonKernel("rope", "rope_half", "forward", ("y",), np.negative,
                          sizes=({"rows": 1, "d": 2}, {"rows": 2, "d": 130}))
    sizes = gate.gate_sizes(kernel, op)
    assert len(sizes) == 2 + 2 + gate.DRAWN_SIZES and all(d["d"] % 2 == 0 for d in sizes)


def test_the_offset_sweep_spans_the_moderate_regime():
    from vjpcert.core.kernel_checks import OFFSET_SWEEP, kernel_case_values
    x = kernel_case_values(OFFSET_SWEEP, np.random.default_rng(0), (400, 64))
    ratio = np.abs(x.mean(1)) / x.std(1)
    assert ratio.min() < 1 and ratio.max() > 100 and ((ratio > 3) & (ratio < 100)).mean() > 0.3


def test_the_huge_value_sits_in_every_row_s_last_block():
    from vjpcert.core.kernel_checks import HUGE_IN_LAST_BLOCK, HUGE_VALUE, kernel_case_values
    x = kernel_case_values(HUGE_IN_LAST_BLOCK, np.random.default_rng(0), (3, 33))
    assert (np.abs(x[:, -1] - HUGE_VALUE) < 10).all() and np.abs(x[:, :-1]).max() < 10
    assert len(set(x[:, -1])) == 3 and np.isinf(np.exp(np.float32(x[:, -1].min())))   # no ties; exp overflows


def test_the_activations_case_has_heavy_tails_and_outlier_channels():
    """Not a normal draw a kernel could recognise: excess kurtosis far above 0 in the ordinary channels,
    and the outlier channels (the same in every row) 20-60 times their scale; a row of one still draws."""
    from vjpcert.core.kernel_checks import ACTIVATIONS, OUTLIER_EVERY, kernel_case_values
    x = kernel_case_values(ACTIVATIONS, np.random.default_rng(0), (512, 256))
    scale = np.median(np.abs(x), axis=0)
    outliers = scale > 10 * np.median(scale)
    assert outliers.sum() == 256 // OUTLIER_EVERY
    ordinary = x[:, ~outliers].ravel()
    assert ((ordinary - ordinary.mean()) ** 4).mean() / ordinary.var() ** 2 - 3 > 3      # t(3): heavy tails
    assert 15 < scale[outliers].min() / np.median(scale) and scale[outliers].max() / np.median(scale) < 80
    assert kernel_case_values(ACTIVATIONS, np.random.default_rng(0), (1, 1)).shape == (1, 1)


def test_the_committed_adversarial_report_catches_every_cheat_and_passes_the_honest_kernel():
    """reports/adversarial/ (regenerate: `vjpcert triton tests/triton/cheats.py --out reports/adversarial`):
    every kernel of the file at its sizes and the gate's, from the current checker."""
    import json
    _needs_triton()
    from vjpcert.triton_kernels.check import CHECKER_SHA256
    data = json.loads((ROOT / "reports" / "adversarial" / "triton.json").read_text())
    verdicts: dict = {}
    for r in data["rows"]:
        verdicts.setdefault(r["kernel"], []).append(r["verdict"])
    names = [f"cheat_{n}" for n in _cheat_names()] + ["honest_softmax_random_block_order",
                                                      "control_softmax_random_order_then_off"]
    assert list(verdicts) == names
    for name, vs in verdicts.items():
        assert ("failed" in vs) != name.startswith("honest_"), (name, vs)
        assert set(vs) <= {"kernel-match", "failed"} and len(vs) == 8
    certs = sorted((ROOT / "reports" / "adversarial" / "certificates").glob("*.json"))
    assert len(certs) == len(data["rows"])
    assert all(json.loads(c.read_text())["checker_sha256"] == CHECKER_SHA256 for c in certs), \
        "stale: regenerate the adversarial report"


def test_a_fresh_seed_draws_other_sizes_and_is_recorded(tmp_path, capsys):
    """`vjpcert triton FILE --seed fresh`: a seed from the OS, printed, in every certificate, and the
    sizes replayed from it; its drawn sizes differ from seed 0's (the same kernel code). The kernel
    declares only a row of 2: the row's length is wide all the same."""
    _needs_triton()
    from vjpcert.cli import main
    f = tmp_path / "k.py"
    f.write_text(Path(CHEATS_FILE).read_text().split("# name -> (kernel")[0]
                 + "TRITON_KERNELS = [_k('gelu', 'gelu_tanh', 'forward', ref.gelu_tanh_fwd, role='honest', "
                   "sizes=({'rows': 1, 'n': 2},))]\n")
    code = main(["triton", str(f), "--out", str(tmp_path / "o"), "--seed", "fresh"])
    seed = int(capsys.readouterr().out.split("seed ")[1].split()[0])
    import json
    rows = json.loads((tmp_path / "o" / "triton.json").read_text())["rows"]
    # an honest kernel is never failed; at some seeds a row is outside the rule and inside the any-order
    # bound (seed 1: near-constant rows, 1.15 x the rule's bound): inconclusive, exit 1
    assert {r["verdict"] for r in rows} <= {"kernel-match", "inconclusive"}, (seed, rows)
    assert code == (0 if all(r["verdict"] == "kernel-match" for r in rows) else 1)
    certs = [json.loads(c.read_text()) for c in (tmp_path / "o" / "certificates").glob("*.json")]
    assert {c["evidence"]["seed"] for c in certs} == {seed}
    from vjpcert.triton_report import load_user_kernels
    from vjpcert.triton_kernels.check import triton_dims
    (kernel,) = load_user_kernels(str(f))
    assert [r["dims"] for r in rows] == triton_dims(kernel, "interpreter", seed)     # replayed from the seed
    assert triton_dims(kernel, "interpreter", seed)[-2:] != triton_dims(kernel, "interpreter", 0)[-2:]
    assert {64, 96} <= {d["n"] for d in triton_dims(kernel, "interpreter", seed)}      # declared tiny, met long
    with pytest.raises(SystemExit) as bad:           # argparse's exit: status 2, the message on stderr
        main(["triton", str(f), "--out", str(tmp_path / "o"), "--seed", "soon"])
    assert bad.value.code == 2 and "an integer or 'fresh'" in capsys.readouterr().err
