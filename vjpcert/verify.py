"""`vjpcert verify`: are the certificates in a report directory still true of the code?

Each certificate is checked for being well-formed (JSON Schema), intact (its digest), current (the
spec source, every data file it lists and the checker code that issued it are unchanged, same schema
and vjpcert version), and
the plan of `vjpcert all` is checked for certificates that are missing. Every problem is named.

What the digest detects, and what it does not: it is an unkeyed sha256 of the record, so it catches
*accidental* edits (a hand-edited verdict, a merge that mixed two runs, a truncated file). Anyone can
recompute it, so it cannot catch a deliberate forgery -- a `failed` rewritten as `proved` with a fresh
digest. Only ``--replay`` catches that: it re-derives the verdict of each (or a sample of the)
certificates by running the claim again and compares.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from vjpcert.core.certificate import CERTIFICATE_SCHEMA, SCHEMA_VERSION, Certificate, record_digest
from vjpcert.core.registry import Op


@dataclass
class Problem:
    kind: str          # malformed | edited | stale | orphan | mismatched | missing | extra | replay | page
    path: str
    why: str

    def __str__(self):
        return f"{self.kind:9} {self.path}: {self.why}"


class NotAReportDir(Exception):
    pass


def _validator():
    """The schema compiled to Python code once per process (fastjsonschema): the reference validator
    (jsonschema) walked ~3,300 records in 0.87 CPU s, this in 0.05. The schema's keywords (type, enum,
    const, required, additionalProperties, items, minLength) read the same in every draft since 07;
    tests/test_reports.py holds the two validators to the same verdict on valid and broken records.
    Returns a function: the first error's (where, message) for a record, or None when it is valid."""
    import fastjsonschema
    check = fastjsonschema.compile(CERTIFICATE_SCHEMA)

    def first_error(record):
        try:
            check(record)
        except fastjsonschema.JsonSchemaValueException as exc:
            where = "/".join(map(str, exc.path[1:])) or "record"      # path[0] is fastjsonschema's "data"
            return where, exc.message.replace(exc.name, "the " + where, 1)
        return None
    return first_error


def verify(root: Path, ops: dict[str, Op], expected: list[Path] | None = None,
           skip_prefix: str | None = None) -> list[Problem]:
    """Every problem in a report directory; certificates of ops named ``skip_prefix...`` are not
    looked at (a framework that is not installed here)."""
    from vjpcert.tiers import checker_sha256
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
    # an op's identity is the same for each of its certificates: computed once per op (the files
    # cannot change under one call); checker hashes are once per process (vjpcert.plan)
    identities: dict[str, str] = {}
    for path in sorted((root / "certificates").rglob("*.json")):
        rel = path.relative_to(root)
        if skip_prefix and rel.parts[1].startswith(skip_prefix):
            continue                   # not looked at: neither checked nor counted as extra
        seen.add(rel)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(Problem("malformed", str(rel), f"not JSON ({exc.__class__.__name__}: {exc})"))
            continue
        error = validator(record)
        if error is not None:
            where, message = error
            problems.append(Problem("malformed", str(rel), f"{where}: {message}"))
            continue
        if record["digest"] != record_digest(record):
            problems.append(Problem("edited", str(rel), "its content no longer matches its digest"))
            continue
        op = ops.get(record["op"])
        if op is None:
            problems.append(Problem("orphan", str(rel), f"no op {record['op']!r} in the registry"))
            continue
        try:
            own = Certificate.from_dict(record).relpath()
        except (TypeError, ValueError) as exc:
            problems.append(Problem("malformed", str(rel), f"{type(exc).__name__}: {exc}"))
            continue
        if Path(own) != rel:
            problems.append(Problem("mismatched", str(rel), f"it is the certificate of {record['op']} "
                                                            f"{record['claim']} at {record['dims']}, whose "
                                                            f"file is {own}"))
            continue
        why = []
        from vjpcert.core.sources import current_sha256, recorded_sha256
        if op.name not in identities:
            identities[op.name] = op.identity_sha256
        code = identities[op.name]
        now, changed = current_sha256(code, op, record["sources"])
        if record["spec_sha256"] != now:
            if recorded_sha256(code, record["sources"]) != record["spec_sha256"]:
                why.append("spec changed (" + ", ".join(p.name for p in op.source_files) + ")")
            if changed:
                why.append("data changed (" + ", ".join(changed) + ")")
        try:
            if record["checker_sha256"] != checker_sha256(record["tier"], (record.get("options") or {}).get("method"),
                                                          record["claim"]):
                why.append(f"{record['tier']} checker code changed")
        except ImportError:
            why.append(f"the {record['tier']} checker cannot be imported here")
        if record["schema"] != SCHEMA_VERSION:
            why.append(f"schema {record['schema']} != {SCHEMA_VERSION}")
        if ours and record["versions"].get("vjpcert") != ours:
            why.append(f"issued by vjpcert {record['versions'].get('vjpcert')}, this is {ours}")
        if why:
            problems.append(Problem("stale", str(rel), "; ".join(why)))
    if expected is not None:
        planned = {Path(r) for r in expected}
        for rel in sorted(planned - seen):
            problems.append(Problem("missing", str(rel), "planned by `vjpcert all` but not in the reports"))
        for rel in sorted(seen - planned):
            if rel.name.startswith("symbolic-modular__"):
                continue            # planned by `--modular` only: checked above when present, never required
            problems.append(Problem("extra", str(rel), "not planned by `vjpcert all` (an old claim or dims, "
                                                       "a hand-made file): remove it or rerun"))
    return problems


def replay(root: Path, refs: dict, paths: list[Path], on_result=None) -> list[Problem]:
    """Re-derive the verdict of each certificate in ``paths`` (relative to ``root``) by running its
    claim again; a verdict or method that differs is a problem. ``refs`` maps op names to OpRefs."""
    from vjpcert.runner import execute, make_task
    problems = []
    for rel in paths:
        try:
            record = json.loads((root / rel).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue                      # malformed: already named by verify()
        ref = refs.get(record.get("op"))
        if ref is None:
            continue                      # orphan: already named by verify()
        options = dict(record.get("options") or {})
        if record["tier"] == "symbolic" and record["method"] in ("compositional", "general"):
            options["method"] = record["method"]
        if "point" in options:                 # identified by its hash; the values are in the evidence
            given = record.get("evidence", {}).get("given_point", {})
            options["point"] = tuple(sorted((k, _freeze(v)) for k, v in given.items()))
        dims = record["dims"] if record["method"] != "general" else {}
        fresh = execute(make_task(record["tier"], ref, record["claim"], dims, **options))
        same = fresh.verdict == record["verdict"] and fresh.method == record["method"]
        if on_result:
            on_result(rel, record, fresh)
        if not same:
            problems.append(Problem("replay", str(rel), f"recorded {record['verdict']} ({record['method']}), "
                                                        f"replayed {fresh.verdict} ({fresh.method})"))
    return problems


def sample_paths(root: Path, k: int | None, seed: int, keep=None) -> list[Path]:
    """Every certificate, or ``k`` of them drawn with ``seed`` (at least one per tier when possible);
    only those whose path ``keep`` accepts, when given."""
    import random
    paths = sorted(p.relative_to(root) for p in (root / "certificates").rglob("*.json")
                   if keep is None or keep(p.relative_to(root)))
    if k is None or k >= len(paths):
        return paths
    rng = random.Random(seed)
    by_tier: dict[str, list] = {}
    for p in paths:
        tier = p.name.split("__", 1)[0].split("-", 1)[0]
        by_tier.setdefault(tier, []).append(p)
    picked = [rng.choice(v) for _, v in sorted(by_tier.items())][:k]
    rest = [p for p in paths if p not in picked]
    return sorted(picked + rng.sample(rest, k - len(picked)))


# A kernel certificate is replayed in the CUDA simulator, every case of it, one Python thread per GPU
# thread: at a few dozen elements that is under a second, at the accumulation sizes (a 64-wide head,
# 33 rows) five to ten.
QUICK_KERNEL_ELEMENTS = 64


def quick_to_derive(ops: dict, root: Path):
    """A ``keep`` for ``sample_paths``: certificates of leaf ops (a whole block's proof takes a minute
    or more), not the modular test at production dims (minutes per trial), not the every-size proofs
    (seconds to minutes of normalisation each), of a recurrence not the numeric checks at its long
    length (a thousand steps in mpmath: half a minute or more per claim), and of a kernel only its sizes
    of at most ``QUICK_KERNEL_ELEMENTS`` elements (its dims, read from the certificate under ``root``)."""
    import json
    import math

    from vjpcert.core.certificate import dims_slug
    from vjpcert.numeric.check import numeric_dims
    long = {name: dims_slug(numeric_dims(op)[-1]) for name, op in ops.items() if getattr(op, "recurrence", None)}

    def small_kernel(rel: Path) -> bool:
        try:
            dims = json.loads((root / rel).read_text())["dims"]
            return math.prod(int(v) for v in dims.values()) <= QUICK_KERNEL_ELEMENTS
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False   # an unreadable certificate is verify's to name, not the sample's to draw

    def keep(rel: Path) -> bool:
        op = ops.get(rel.parent.name)
        if op is None or op.nodes or rel.name.startswith(("symbolic-modular__", "symbolic-general__")):
            return False
        if rel.name.startswith("kernel__"):
            return small_kernel(rel)
        return not (rel.name.startswith("numeric__") and rel.stem.endswith("__" + long.get(op.name, "")))
    return keep


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v
