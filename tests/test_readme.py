"""The README's walk-through is real: its code is run here."""
import re
from pathlib import Path

from vjpcert.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_quick_start_has_exactly_two_commands():
    block = re.search(r"## Quick start\n\n```sh\n(.*?)```", README, re.S).group(1)
    lines = [l for l in block.splitlines() if l.strip()]
    assert len(lines) == 2 and "vjpcert" in lines[0] and "pytest" in lines[1]


def test_certify_your_own_op_walkthrough_runs(tmp_path):
    section = README.split("## Certify your own op in one file")[1].split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    path = tmp_path / "my_ops.py"
    path.write_text(blocks[0] + "\n" + blocks[1])
    assert main(["prove", "--quiet", "--reports", str(tmp_path / "r"), str(path)]) == 0
    assert len(list((tmp_path / "r" / "certificates" / "square_scale").glob("*.json"))) == 3
