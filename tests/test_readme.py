"""The README's walk-through is real: its code is run here."""
import re
from pathlib import Path

import pytest

from vjpcert.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SPEC_LANGUAGE = (ROOT / "docs" / "spec-language.md").read_text()
FRAMEWORKS = (ROOT / "docs" / "frameworks.md").read_text()


def test_quick_start_has_exactly_two_commands():
    block = re.search(r"## Quick start\n\n```sh\n(.*?)```", README, re.S).group(1)
    lines = [l for l in block.splitlines() if l.strip()]
    assert len(lines) == 2 and "vjpcert" in lines[0] and "pytest" in lines[1]


def test_certify_your_own_op_walkthrough_runs(tmp_path):
    """The README's op, with the law docs/spec-language.md adds to it."""
    section = README.split("## Certify your own op in one file")[1].split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    laws = re.findall(r"```python\n(@square_scale.law.*?)```", SPEC_LANGUAGE, re.S)
    assert len(blocks) == 1 and len(laws) == 1
    path = tmp_path / "my_ops.py"
    path.write_text(blocks[0] + "\n" + laws[0])
    assert main(["prove", "--quiet", "--reports", str(tmp_path / "r"), str(path)]) == 0
    assert len(list((tmp_path / "r" / "certificates" / "square_scale").glob("*.json"))) == 3


@pytest.mark.slow      # the walkthrough end to end (twenty seconds); its torch frontend is tested by the
def test_prove_your_pytorch_backward_walkthrough_runs(tmp_path, monkeypatch):  # frontend tests by default
    """The RMSNorm Function is proved from its torch code alone; the one-term typo fails with a
    witness; the two commands shown run as shown."""
    import json
    import sys

    pytest.importorskip("torch")
    section = FRAMEWORKS
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    path = tmp_path / "my_torch_ops.py"
    path.write_text(blocks[0] + "\n" + blocks[1])
    reports = tmp_path / "r"
    assert main(["prove", "--quiet", "--reports", str(reports), str(path)]) == 1       # the typo fails
    verdicts = {}
    for p in (reports / "certificates").rglob("*.json"):
        rec = json.loads(p.read_text())
        verdicts[(rec["op"], rec["claim"], tuple(sorted(rec["dims"].items())))] = rec
    mine = {k: r["verdict"] for k, r in verdicts.items() if k[0] == "my_rmsnorm"}
    assert len(mine) == 9 and set(mine.values()) == {"proved"}          # 3 claims x the spec's 3 dims
    typo = {k: r for k, r in verdicts.items() if k[0] == "my_rmsnorm_typo"}
    assert {k[1] for k, r in typo.items() if r["verdict"] == "failed"} == {"vjp[x]"}
    assert all(r["evidence"]["witness"]["point"] for r in typo.values() if r["verdict"] == "failed")

    commands = re.findall(r"```sh\n(.*?)```", section, re.S)[0].strip().splitlines()
    (tmp_path / "my_module.py").write_text(blocks[0].split("@torch_op")[0]
                                           + "\ndef rmsnorm(x, gamma, eps):\n    return RMSNorm.apply(x, gamma, eps)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        for command in commands:
            argv = command.split()[1:] + ["--quiet", "--reports", str(tmp_path / "r2"), "--no-plots"] \
                if command.split()[1] == "check" else command.split()[1:] + ["--quiet", "--reports", str(tmp_path / "r2")]
            assert main(argv) == 0, command
    finally:
        sys.modules.pop("my_module", None)


def language_table() -> str:
    """What a spec may use, from ``core.language.PRIMITIVES``: the README's table must be this one."""
    from vjpcert.core import language as L
    lines = ["| family | primitive | keywords | meaning |", "|---|---|---|---|"]
    for kind, prims in L.primitives_by_kind().items():
        if not prims:
            lines.append(f"| {L.KINDS[kind]} | | | |")
        for k, prim in enumerate(prims):
            kws = ", ".join(kw + (f" ({' or '.join(map(repr, prim.values[kw]))})" if kw in prim.values else "")
                            for kw in sorted(prim.keywords))
            lines.append(f"| {L.KINDS[kind] if k == 0 else ''} | `{prim.name}` | {kws} | {prim.doc} |")
    return "\n".join(lines)


def test_the_documented_spec_language_is_the_checked_one():
    """The table of primitives in docs/spec-language.md is generated from core.language (a row added, dropped or
    changed there and not here is red), and the table can fail: one row dropped is noticed."""
    section = SPEC_LANGUAGE.split("<!-- spec language: begin -->\n")[1].split("\n<!-- spec language: end -->")[0]
    assert section == language_table(), "regenerate with: python -c 'import tests.test_readme as t; print(t.language_table())'"
    assert "\n".join(l for l in section.splitlines() if "`pad`" not in l) != language_table()


def test_the_documented_default_budgets_are_the_ones_a_claim_gets():
    """The default budget per claim is written in three places besides its constant (README, the CLI's
    help, and the every-size one beside it): each says what the code does."""
    from vjpcert.cli_parser import build_parser
    from vjpcert.symbolic.every_size.general import GENERAL_BUDGET_S
    from vjpcert.symbolic.settings import DEFAULT_CLAIM_BUDGET_S
    said = f"{DEFAULT_CLAIM_BUDGET_S:g} s without it, {GENERAL_BUDGET_S:g} s if it is"
    assert said in " ".join(README.split()), said
    helps = [a.help for sub in build_parser()._subparsers._group_actions[0].choices.values()
             for a in sub._actions if "--timeout" in a.option_strings]
    assert helps and all(f"default {DEFAULT_CLAIM_BUDGET_S:g}; {GENERAL_BUDGET_S:g} for" in h for h in helps)
