"""What the terminal says when a claim fails: the witness in a few lines, the dims, the certificate's
path, and names printed literally (``vjp[x]`` and ``[n=3]`` are not rich markup)."""
import json
import re

import pytest

from vjpcert.cli import main
from vjpcert.witness import elide_vector, short, witness_rows

WRONG_CUBE = ('from vjpcert.core.registry import op\n'
              '@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])\n'
              'def cube(B, x):\n    return x * x * x\n'
              '@cube.defvjp\ndef _(B, x, dy):\n    return (2 * x * x * dy,)\n')   # should be 3 x^2 dy
RIGHT_CUBE = WRONG_CUBE.replace("2 * x * x * dy", "3 * x * x * dy")


def _spec(tmp_path, text=WRONG_CUBE):
    path = tmp_path / "mine.py"
    path.write_text(text)
    return path


def _block(err: str, cert: str) -> str:
    """The lines printed from the failed claim's line to its certificate line."""
    lines = err.splitlines()
    end = next(i for i, line in enumerate(lines) if line.strip().endswith(cert))
    start = max(i for i in range(end) if "failed" in lines[i])
    return "\n".join(lines[start:end + 1])


@pytest.mark.parametrize("command,variant,sides", [
    ("prove", "symbolic", "backward vs J^T dy"),
    ("check", "numeric", "from_backward vs from_forward"),
])
def test_a_failed_user_op_prints_its_witness_dims_and_certificate(tmp_path, capsys, command, variant, sides):
    reports = tmp_path / "reports"
    args = [command, str(_spec(tmp_path)), "--reports", str(reports)] + (["--no-plots"] if command == "check" else [])
    assert main(args) == 1
    err = capsys.readouterr().err
    cert = f"certificates/cube/{variant}__vjp-x__n3.json"
    assert (reports / cert).is_file()
    block = _block(err, cert)
    assert "cube vjp[x] [n=3]" in block, f"the claim name or its dims were eaten as markup:\n{block}"
    assert sides in block and re.search(r"dims\s+n=3", block)
    assert str(reports / cert) in block, "the certificate's path is printed whole, on one line"
    assert "np.int64" not in err and len(block.splitlines()) <= 10
    # the witness on the terminal is the certificate's
    witness = json.loads((reports / cert).read_text())["evidence"]["witness"]
    if variant == "symbolic":
        assert f"{witness['backward']} vs {witness['J^T dy']}" in block
    # the input point it failed at, as the certificate holds it (a rerun needs nothing else)
    at_x = re.search(r"at x\s+(.+)", block)
    assert at_x, block
    shown = at_x.group(1)
    if variant == "symbolic":                 # one exact rational per entry, x[0], x[1], x[2]
        assert all(f"{k[1:]}={v}" in shown for k, v in witness["point"].items() if k.startswith("x[")), shown
    else:                                     # the float64 vector, to 6 digits
        assert shown.strip() == "[" + ", ".join(f"{v:.6g}" for v in witness["point"]["x"]) + "]", shown


def test_quiet_still_shows_failures_and_nothing_else(tmp_path, capsys):
    reports = tmp_path / "reports"
    assert main(["prove", str(_spec(tmp_path)), "--reports", str(reports), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "symbolic__vjp-x__n3.json" in err and "backward vs J^T dy" in err
    assert "proved" not in err


def test_a_rerun_that_skips_a_current_failure_still_shows_its_witness(tmp_path, capsys):
    reports = tmp_path / "reports"
    spec = _spec(tmp_path)
    assert main(["prove", str(spec), "--reports", str(reports)]) == 1
    capsys.readouterr()
    assert main(["prove", str(spec), "--reports", str(reports)]) == 1
    err = capsys.readouterr().err
    assert "1 of 1 certificates are current" in err and "backward vs J^T dy" in err
    assert str(reports / "certificates/cube/symbolic__vjp-x__n3.json") in err


def test_a_passing_run_prints_literal_names_with_dims_and_no_witness(tmp_path, capsys):
    reports = tmp_path / "reports"
    assert main(["prove", str(_spec(tmp_path, RIGHT_CUBE)), "--reports", str(reports)]) == 0
    err = capsys.readouterr().err
    assert "cube vjp[x] [n=3]" in err and "certificate " not in err


def test_witness_rows_read_every_tiers_fields():
    kernel = {"check": "tolerance", "case": "random", "output": "dx", "index": [0, 7], "kernel": 1.5,
              "spec_f64": 1.25, "error": 0.25, "bound": 1e-6, "seed": 0, "inputs": {"x": [[1.0] * 50]}}
    rows = dict(witness_rows(kernel))
    assert rows["where"] == "check tolerance, case random, output dx, index [0, 7]"
    assert rows["kernel vs spec_f64"] == "1.5 vs 1.25" and rows["size"] == "error 0.25, bound 1e-06"
    assert "inputs" not in rows and "seed" not in rows          # raw data stays in the certificate
    impl = {"case": "random", "cotangent": "x", "index": [2], "implementation": 0.1,
            "spec (50 digits)": 0.2, "error": 0.1, "bound": 1e-12, "point": {"x": list(range(2000))}}
    rows = dict(witness_rows(impl))
    assert rows["implementation vs spec (50 digits)"] == "0.1 vs 0.2" and "point" not in rows
    race = dict(witness_rows({"check": "race detector", "violations": [{"slot": 3}, {"slot": 4}]}))
    assert race["violations"].startswith("2: ")


def test_values_print_plainly_and_long_vectors_are_elided():
    import numpy as np
    assert short(np.int64(3)) == "3" and short(np.float64(0.5)) == "0.5"
    assert short("d y(np.int64(1),) / d x(np.int64(0),)") == "d y(1,) / d x(0,)"
    assert short(list(range(1025))) == "[0, 1, 2, ... 1025 entries]"
    cut = elide_vector(list(range(1025)), keep=700)
    assert cut == [0, 1, 2, "...", 700, "...", 1022, 1023, 1024]
    assert elide_vector([1, 2, 3]) == [1, 2, 3]
