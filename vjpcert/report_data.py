"""What the report renderers share: reading certificates and resources back, and summarising them.
Both renderers (``reports`` for Markdown, ``html``) import this; neither imports the other's internals."""
from __future__ import annotations

import json
import os
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
HTML_OP_PAGES = "ops"     # the folder of the per-op HTML pages (index.html links to them)
OPS_FILE = "ops.json"     # the docstring and spec file of each user op the reports hold (built-ins: specs/)


def op_info(op) -> dict:
    """What a page shows of an op besides its certificates: its docstring and its spec file."""
    spec_file = None
    if op.module is not None and getattr(op.module, "__file__", None):
        name = Path(op.module.__file__).name
        spec_file = f"specs/{name}" if op.module.__name__.startswith("vjpcert.specs.") else name
    return {"doc": (op.doc or "").strip(), "spec_file": spec_file}


def _spec_path(op, root: Path) -> str | None:
    """Where the op's spec file lies, relative to the report folder: what ``vjpcert verify`` loads by
    default, so it checks a user project's certificates from its own folder, wherever that is moved."""
    f = getattr(op.module, "__file__", None) if op.module is not None else None
    return Path(os.path.relpath(Path(f).resolve(), Path(root).resolve())).as_posix() if f else None


def recorded_declarations(root: Path) -> dict[str, str]:
    """name -> declaration of the torch:/jax: targets declared on the command line that ``OPS_FILE``
    records (their files define no op: the declaration is the op, as ``ops.OpRef`` holds it)."""
    return {name: info["declared"] for name, info in sorted(read_ops_file(root).items())
            if isinstance(info.get("declared"), str)}


def recorded_spec_files(root: Path) -> tuple[list[Path], list[str]]:
    """The spec files of the user ops ``OPS_FILE`` records (existing ones, deduplicated), and the
    names of the ops whose recorded spec file is gone; ops declared on the command line aside
    (``recorded_declarations``)."""
    files, gone = {}, []
    for name, info in sorted(read_ops_file(root).items()):
        if "declared" in info:
            continue
        rel = info.get("spec_path")
        if not isinstance(rel, str):
            continue
        path = (Path(root) / rel).resolve()
        if path.is_file():
            files.setdefault(path, None)
        else:
            gone.append(name)
    return list(files), gone


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
    # what the pages show of an op, whether it comes from the file or from this run (the file's
    # spec_path is for `verify`, not for the pages)
    info = {name: {k: v for k, v in entry.items() if k not in ("spec_path", "declared")}
            for name, entry in read_ops_file(root).items()}
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
    after.update({name: {**op_info(op), "spec_path": _spec_path(op, root),
                         **({"declared": op.declared} if getattr(op, "declared", None) else {})}
                  for name, op in ops.items() if name not in builtins})
    if not after or after == before:
        return None
    return json.dumps(after, indent=1, sort_keys=True) + "\n"


# ------------------------------------------------------------------------------ evidence in one cell
def _kernel_brief(ev: dict) -> str:
    """A kernel check's error against its bound (the worst over cases and outputs) and the race
    detector's result."""
    ratios = [o.get("worst_error_over_bound") for case in (ev.get("per_case") or {}).values()
              if isinstance(case, dict) for o in (case.get("outputs") or {}).values()
              if isinstance(o, dict) and o.get("worst_error_over_bound") is not None]
    parts = []
    if ratios:
        parts.append(f"error/bound <= {max(ratios):.3g}")
    race = ev.get("race_detector")
    if isinstance(race, dict):
        parts.append(("race detector clean" if race.get("clean") else "race detector: RACE")
                     + (f" ({race['accesses']} shared accesses)" if race.get("accesses") is not None else "")
                     if race.get("ran", True) else "race detector not run")
    elif race:
        parts.append(f"race detector: {race}")
    return "; ".join(parts)


def _reference_brief(ev: dict) -> str:
    """The float reference claim: the largest error, as a fraction of its bound, over cases and dtypes."""
    worst = None
    for case in (ev.get("cases") or {}).values():
        for per_dtype in (case.values() if isinstance(case, dict) else ()):
            for entry in (per_dtype.values() if isinstance(per_dtype, dict) else ()):
                text = str(entry.get("error_at_most", "")) if isinstance(entry, dict) else ""
                try:
                    value = float(text.split()[0])
                except (ValueError, IndexError):
                    continue
                worst = value if worst is None else max(worst, value)
    return f"float64 and float32 errors <= {worst:g} of their bounds" if worst is not None else ""


def evidence_brief(c) -> str:
    """The evidence of one certificate in one table cell: a witness for a failure, digits for a
    numeric check, error/bound and the race detector for a kernel, terms for a proof."""
    from vjpcert.witness import witness_rows
    ev = c.evidence
    if c.verdict == "failed":
        rows = [r for r in witness_rows(ev.get("witness") or {}) if r[0] != "where"][:2]
        where = dict(witness_rows(ev.get("witness") or {})).get("where")
        return "; ".join(([f"at {where}"] if where else []) + [f"{k}: {v}" for k, v in rows])
    if "error" in ev:
        return str(ev["error"])[:120]
    if c.tier == "kernel":
        return _kernel_brief(ev) or ev.get("reason", "")
    if "digits" in ev:
        need = ev.get("required_digits")
        return f"{ev['digits']} digits" + (f" (needs {need})" if need is not None else "")
    if "min_digits" in ev:
        return f"{ev['min_digits']} digits (worst cotangent)"
    if c.claim == "reference" and ev.get("cases"):
        return _reference_brief(ev)
    if "false_pass_probability" in ev:
        return f"P(false pass) <= {ev['false_pass_probability']}"
    if "residual_terms" in ev:
        return f"{ev.get('variables', '?')} vars, {ev.get('lhs_terms', '?')} terms"
    if c.method == "general" and "cross_check" in ev:
        return f"every size; cross-checked at {len(ev['cross_check'].get('at', []))} sizes"
    return str(ev.get("reason", ""))[:200]
