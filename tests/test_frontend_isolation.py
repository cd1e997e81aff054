"""Ops of a user's file are traced when they are planned, one by one: a refused op refuses itself
(named with the user's file and line), and its neighbours are certified."""
from __future__ import annotations

import json
import textwrap

import pytest

import optional

torch = optional.importorskip("torch")

from vjpcert.cli import main  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402

TWO_OPS = '''
import torch
import torch.nn.functional as F
from vjpcert import torch_op


@torch_op(inputs={"x": ("n",)}, dims=[{"n": 2}])
def good(x):
    return torch.tanh(x) * x


@torch_op(inputs={"x": ("n",)}, dims=[{"n": 2}])
def sorted_(x):
    y = x * 2
    return torch.sort(y).values


@torch_op(inputs={"x": ("n",)}, dims=[{"n": 2}])
def bessel(x):
    return torch.special.bessel_j0(x * 3)
'''
SORT_LINE = 14           # the line of `torch.sort(y)` above
BESSEL_LINE = 19


@pytest.fixture
def two_ops(tmp_path, monkeypatch):
    path = tmp_path / "two_ops.py"
    path.write_text(TWO_OPS.lstrip("\n"))
    monkeypatch.chdir(tmp_path)
    return path


def _verdicts(reports, op):
    return sorted(json.loads(p.read_text())["verdict"] for p in (reports / "certificates" / op).glob("*.json"))


def test_making_a_framework_op_traces_nothing():
    calls = []

    def f(x):
        calls.append(1)
        raise RuntimeError("not traceable")
    op = from_torch(f, name="f", inputs={"x": ("n",)}, dims=[{"n": 2}])
    assert calls == [] and op.name == "f"
    with pytest.raises(SpecError, match="not traceable"):
        op.output
    assert calls


def test_a_refused_op_refuses_itself_and_its_neighbour_is_certified(two_ops, capsys):
    reports = two_ops.parent / "r"
    assert main(["prove", str(two_ops), "--quiet", "--reports", str(reports)]) == 2
    assert _verdicts(reports, "good") == ["proved"]
    assert not (reports / "certificates" / "sorted_").exists()
    err = capsys.readouterr().err
    # the user's file and line, not vjpcert's
    assert f"two_ops.py:{SORT_LINE}: aten.sort" in err and f"two_ops.py:{BESSEL_LINE}: prims.bessel_j0" in err
    assert "frontends" not in err and "2 op(s) refused (bessel, sorted_)" in err


def test_one_op_of_the_file_by_name(two_ops, capsys):
    reports = two_ops.parent / "r"
    assert main(["prove", f"{two_ops}::good", "--quiet", "--reports", str(reports)]) == 0
    assert _verdicts(reports, "good") == ["proved"]
    assert main(["prove", f"{two_ops}::sorted_", "--quiet", "--reports", str(reports)]) == 2
    assert f"two_ops.py:{SORT_LINE}" in capsys.readouterr().err
    assert not (reports / "certificates" / "sorted_").exists()


def test_a_failure_beside_a_refusal_is_exit_1(two_ops):
    two_ops.write_text(two_ops.read_text() + textwrap.dedent('''

        class Wrong(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, dy):
                (x,) = ctx.saved_tensors
                return dy * x


        @torch_op(inputs={"x": ("n",)}, dims=[{"n": 2}])
        def wrong(x):
            return Wrong.apply(x)
        '''))
    reports = two_ops.parent / "r"
    assert main(["prove", str(two_ops), "--quiet", "--reports", str(reports)]) == 1
    assert _verdicts(reports, "wrong") == ["failed"] and _verdicts(reports, "good") == ["proved"]


def test_every_op_refused_is_bad_input(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad_ops.py"
    path.write_text(TWO_OPS.replace("return torch.tanh(x) * x", "return torch.sort(x).values"))
    monkeypatch.chdir(tmp_path)
    assert main(["prove", str(path), "--quiet", "--reports", str(tmp_path / "r")]) == 2
    assert "every op was refused" in capsys.readouterr().err
    assert not (tmp_path / "r" / "certificates").exists()
