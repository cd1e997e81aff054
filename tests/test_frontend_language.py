"""Framework graphs meet the spec language's table: the arrays an ATen graph's traced values live in
are the ones a spec's do (``core.spec_array.SpecArray`` in the exact and float tiers, the modular
tier's ``ModArray``), so every numpy construct a frontend rule applies to a traced value is a row of
``core.language.PRIMITIVES``, checked by ``check_call`` as it is for a spec; a rule that strays
outside the table is refused with the table's own message, in every tier."""
from __future__ import annotations

import numpy as np
import pytest

import optional

torch = optional.importorskip("torch")

from vjpcert.core import language  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.frontends import torch_rules  # noqa: E402
from vjpcert.frontends.pytorch import torch_op  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402
check_modular = optional.imported("vjpcert.symbolic.modular.check", "check_modular")   # its Numba loops: at first use

DIMS = {"n": 2, "d": 3}


def _graph(x, w):
    return torch.tanh(x @ w).sum(-1, keepdim=True) * x


def _op(name):
    return torch_op(_graph, inputs={"x": ("n", "d"), "w": ("d", "d")}, output=("n", "d"), dims=[DIMS], name=name)


def _run(tier, op):
    if tier == "exact":
        return prove_claim(op, "vjp[x]", DIMS)
    return check_modular(op, "vjp[x]", {"n": 4, "d": 8})


@pytest.mark.parametrize("tier", ["exact", "modular"])
def test_the_numpy_a_framework_graph_becomes_is_checked_against_the_table(tier, monkeypatch):
    rows = []
    real = language.check_call

    def record(name, kwargs=None, *args, **kw):
        rows.append(name)
        return real(name, kwargs, *args, **kw)
    monkeypatch.setattr(language, "check_call", record)
    cert = _run(tier, _op(f"fl_table_{tier}"))
    assert cert.verdict in ("proved", "checked-probabilistic"), cert.evidence
    assert {"matmul", "sum"} <= set(rows), sorted(set(rows))
    assert set(rows) <= set(language.PRIMITIVES), set(rows) - set(language.PRIMITIVES)


@pytest.mark.parametrize("tier", ["exact", "modular"])
def test_a_frontend_rule_outside_the_table_is_refused_with_the_table_s_words(tier, monkeypatch):
    """The control: a sum lowered with a keyword the language does not take (numpy's dtype=) is
    refused by the table in both tiers, with the message a spec writing the same gets."""
    def stray_sum(c, x, dim=None, keepdim=False, dtype=None):
        return torch_rules.Val(np.sum(x.a, axis=tuple(dim), keepdims=keepdim, dtype=object), x.static)
    monkeypatch.setitem(torch_rules.RULES, "aten.sum.dim_IntList", stray_sum)
    expected = None
    try:
        language.check_call("sum", {"axis": (1,), "keepdims": True, "dtype": object})
    except SpecError as exc:
        expected = exc.problem
    assert expected is not None
    op = _op(f"fl_stray_{tier}")
    try:
        cert = _run(tier, op)
    except SpecError as exc:
        assert expected in str(exc)
        return
    assert cert.verdict == "inconclusive" and expected in str(cert.evidence), cert.evidence
