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
