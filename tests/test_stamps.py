"""A no-op run skips the by-products whose inputs did not change (vjpcert/stamps.py), and makes
them again when an input changed or an output went missing."""
import json

from vjpcert.cli import main
from vjpcert.stamps import STAMPS, Stamps, plot_inputs

USER_OP = ('from vjpcert.core.registry import op\n'
           '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
           'def cube(B, x):\n    """x cubed."""\n    return x * x * x\n'
           '@cube.defvjp\ndef _(B, x, dy):\n    return (3 * x * x * dy,)\n')


def test_a_noop_check_does_not_redraw_the_plot_and_a_change_does(tmp_path):
    spec = tmp_path / "mine.py"
    spec.write_text(USER_OP)
    reports = tmp_path / "reports"
    # at the op's own n (the long rows the default adds cost seconds per run and change no stamp)
    check = ["check", str(spec), "--reports", str(reports), "--quiet", "--dims", "n=3"]
    assert main(check) == 0
    png = reports / "plots" / "cube-fd.png"
    stamps = json.loads((reports / STAMPS).read_text())
    assert png.is_file() and set(stamps["plots"]) == {"cube"}
    drawn = png.stat().st_mtime_ns
    assert main(check) == 0
    assert png.stat().st_mtime_ns == drawn, "a no-op run redrew the plot"
    png.unlink()                                                    # an output went missing
    assert main(check) == 0 and png.is_file()
    drawn = png.stat().st_mtime_ns
    spec.write_text(USER_OP.replace('"""x cubed."""', '"""x cubed (edited)."""'))   # the op's code changed
    assert main(check) == 0
    assert png.stat().st_mtime_ns != drawn


def test_the_plot_stamp_covers_code_mutants_and_seed():
    from vjpcert.specs import builtin_ops
    softmax = builtin_ops()["softmax"]
    assert plot_inputs(softmax, 0) == plot_inputs(softmax, 0)
    assert plot_inputs(softmax, 0) != plot_inputs(softmax, 1)
    assert plot_inputs(softmax, 0) != plot_inputs(builtin_ops()["log_softmax"], 0)


def test_stamps_need_the_same_inputs_and_every_output(tmp_path):
    out = tmp_path / "made.txt"
    stamps = Stamps(tmp_path)
    assert not stamps.current("resources", "h1", [out])
    stamps.record("resources", "h1")
    assert not Stamps(tmp_path).current("resources", "h1", [out])       # the output is missing
    out.write_text("x")
    assert Stamps(tmp_path).current("resources", "h1", [out])
    assert not Stamps(tmp_path).current("resources", "h2", [out])       # other inputs
    Stamps(tmp_path).record("resources", None)                          # made with an error: forgotten
    assert not Stamps(tmp_path).current("resources", "h1", [out])
    (tmp_path / STAMPS).write_text("not json")                          # a damaged stamp file: remake all
    assert not Stamps(tmp_path).current("resources", "h1", [out])
