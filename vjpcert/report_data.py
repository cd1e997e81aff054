"""What the report renderers share: reading certificates and resources back, and summarising them.
Both renderers (``reports`` for Markdown, ``html``) import this; neither imports the other's internals."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from vjpcert.core.certificate import Certificate
from vjpcert.tiers import TIERS

SEVERITY = ["failed", "inconclusive", "checked", "checked-probabilistic", "kernel-match",
            "proved-compositional", "proved", "proved-general"]


def tiers_present(certs) -> list[str]:
    """The tiers, in table order, that have certificates here."""
    present = {c.tier for c in certs}
    return [t for t in TIERS if t in present]


class ReportError(Exception):
    pass


def load_certificates(root: Path, *, strict: bool = True) -> list[Certificate]:
    """Every certificate under root/certificates. A malformed file raises ReportError naming it."""
    root = Path(root)
    out = []
    for path in sorted((root / "certificates").rglob("*.json")):
        try:
            out.append(Certificate.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        except (json.JSONDecodeError, TypeError, ValueError, UnicodeDecodeError) as exc:
            if strict:
                raise ReportError(f"{path}: not a valid certificate ({type(exc).__name__}: {exc})") from None
    return out


def dims_text(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items())) or "-"


def summary(certs: list[Certificate]) -> str:
    if not certs:
        return "-"
    counts = defaultdict(int)
    for c in certs:
        counts[c.verdict] += 1
    worst = min(counts, key=SEVERITY.index)
    if worst in ("failed", "inconclusive"):
        return f"**{worst}** {counts[worst]}/{len(certs)}"
    return ", ".join(f"{v} ({counts[v]})" for v in sorted(counts, key=SEVERITY.index, reverse=True))


def load_resources(root: Path) -> dict | None:
    try:
        return json.loads((Path(root) / "kernels" / "resources.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


# ------------------------------------------------------------------------------ what pages say of ops
OPS_FILE = "ops.json"     # the docstring and spec file of each user op the reports hold (built-ins: specs/)


def op_info(op) -> dict:
    """What a page shows of an op besides its certificates: its docstring and its spec file."""
    spec_file = None
    if op.module is not None and getattr(op.module, "__file__", None):
        name = Path(op.module.__file__).name
        spec_file = f"specs/{name}" if op.module.__name__.startswith("vjpcert.specs.") else name
    return {"doc": (op.doc or "").strip(), "spec_file": spec_file}


def read_ops_file(root: Path) -> dict:
    try:
        data = json.loads((Path(root) / OPS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def page_ops(root: Path, ops: dict | None = None) -> dict[str, dict]:
    """name -> op_info for every op a page may show: the built-in ops, the user ops recorded in
    ``OPS_FILE`` by earlier runs, and ``ops`` (this run's). A run over a subset of ops therefore
    renders every other op's page exactly as a full run would: the pages depend on what is on disk,
    never on which command wrote it."""
    from vjpcert.specs import builtin_ops
    info = read_ops_file(root)
    info.update({name: op_info(op) for name, op in builtin_ops().items()})
    info.update({name: op_info(op) for name, op in (ops or {}).items()})
    return info


def user_ops_record(root: Path, ops: dict) -> str | None:
    """The new text of ``OPS_FILE`` after a run over ``ops``: the user ops (not built-in) that earlier
    runs and this one rendered; None when there are none, or nothing changed."""
    from vjpcert.specs import builtin_ops
    builtins = builtin_ops()
    before = read_ops_file(root)
    after = dict(before)
    after.update({name: op_info(op) for name, op in ops.items() if name not in builtins})
    if not after or after == before:
        return None
    return json.dumps(after, indent=1, sort_keys=True) + "\n"
