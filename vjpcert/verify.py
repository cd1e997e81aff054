"""`vjpcert verify`: are the certificates in a report directory still true of the code?

Each certificate is checked for being well-formed (JSON Schema), intact (its digest), current (the
spec source and the checker code that issued it are unchanged, same schema and vjpcert version), and
the plan of `vjpcert all` is checked for certificates that are missing. Every problem is named.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from vjpcert.core.certificate import CERTIFICATE_SCHEMA, SCHEMA_VERSION, record_digest
from vjpcert.core.registry import Op


@dataclass
class Problem:
    kind: str          # malformed | edited | stale | orphan | missing
    path: str
    why: str

    def __str__(self):
        return f"{self.kind:9} {self.path}: {self.why}"


class NotAReportDir(Exception):
    pass


def _validator():
    import jsonschema
    return jsonschema.Draft202012Validator(CERTIFICATE_SCHEMA)


def verify(root: Path, ops: dict[str, Op], expected: list[Path] | None = None,
           skip_prefix: str | None = None) -> list[Problem]:
    """Every problem in a report directory; certificates of ops named ``skip_prefix...`` are not
    looked at (a framework that is not installed here)."""
    from vjpcert.plan import checker_sha256
    root = Path(root)
    if not root.is_dir() or not (root / "certificates").is_dir():
        raise NotAReportDir(f"{root} is not a report directory (it has no certificates/ folder)")
    validator = _validator()
    try:
        ours = metadata.version("vjpcert")
    except metadata.PackageNotFoundError:
        ours = None
    problems: list[Problem] = []
    seen = set()
    for path in sorted((root / "certificates").rglob("*.json")):
        rel = path.relative_to(root)
        seen.add(rel)
        if skip_prefix and rel.parts[1].startswith(skip_prefix):
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(Problem("malformed", str(rel), f"not JSON ({exc.__class__.__name__}: {exc})"))
            continue
        errors = sorted(validator.iter_errors(record), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            where = "/".join(map(str, e.path)) or "record"
            problems.append(Problem("malformed", str(rel), f"{where}: {e.message}"))
            continue
        if record["digest"] != record_digest(record):
            problems.append(Problem("edited", str(rel), "its content no longer matches its digest"))
            continue
        op = ops.get(record["op"])
        if op is None:
            problems.append(Problem("orphan", str(rel), f"no op {record['op']!r} in the registry"))
            continue
        why = []
        if record["spec_sha256"] != op.spec_sha256:
            why.append("spec changed (" + ", ".join(p.name for p in op.source_files) + ")")
        try:
            if record["checker_sha256"] != checker_sha256(record["tier"]):
                why.append(f"{record['tier']} checker code changed")
        except ImportError:
            why.append(f"the {record['tier']} checker cannot be imported here")
        if record["schema"] != SCHEMA_VERSION:
            why.append(f"schema {record['schema']} != {SCHEMA_VERSION}")
        if ours and record["versions"].get("vjpcert") != ours:
            why.append(f"issued by vjpcert {record['versions'].get('vjpcert')}, this is {ours}")
        if why:
            problems.append(Problem("stale", str(rel), "; ".join(why)))
    for rel in expected or []:
        if rel not in seen:
            problems.append(Problem("missing", str(rel), "planned by `vjpcert all` but not in the reports"))
    return problems
