"""Reports: the JSON certificates are the source of truth; Markdown per op and an index are rendered
from them. Every file is written atomically."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from vjpcert.core.certificate import CERTIFICATE_SCHEMA, SCHEMA_VERSION, TRUST, Certificate, atomic_write
from vjpcert.core.registry import Op

from vjpcert.report_data import (HTML_OP_PAGES, OPS_FILE, SEVERITY, ReportError, dims_text, evidence_brief,  # noqa: F401
                                 load_certificates, load_resources, page_ops, summary, tiers_present,
                                 user_ops_record)
from vjpcert.witness import witness_rows
from vjpcert.tiers import TIERS
# worst first: a tier's summary shows the worst verdict among its claims






def write_certificate(cert: Certificate, root: Path) -> Path:
    path = Path(root) / cert.relpath()
    atomic_write(path, cert.to_json())
    return path


TIMINGS = "timings.json"      # beside the reports, not committed: how long each claim took, last run


def record_timings(root: Path, certs: list[Certificate]) -> None:
    """Merge this run's times into ``timings.json`` (certificates do not carry them: see
    ``core.certificate``)."""
    if not certs:
        return
    path = Path(root) / TIMINGS
    try:
        times = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        times = {}
    times.update({str(c.relpath()): round(c.seconds, 3) for c in certs})
    atomic_write(path, json.dumps(times, indent=1, sort_keys=True) + "\n")








def render_op(name: str, certs: list[Certificate], info: dict | None, plots: list[str] = ()) -> str:
    """One op's page; ``info`` is ``report_data.op_info`` (docstring and spec file), None if unknown."""
    lines = [f"# {name}", ""]
    if info and info.get("doc"):                 # no docstring: no empty block
        lines += ["```text", info["doc"], "```", ""]
    if info and info.get("spec_file"):
        lines += [f"Spec file: `{info['spec_file']}`", ""]
    by_tier = defaultdict(list)
    for c in certs:
        by_tier[c.tier].append(c)
    for tier in TIERS:
        rows = sorted(by_tier.get(tier, []), key=lambda c: (c.claim, sorted((k, str(v)) for k, v in c.dims.items())))
        if not rows:
            continue
        lines += [f"## {tier.capitalize()} tier", "",
                  "| claim | dims | verdict | trust | method | evidence |",
                  "|---|---|---|---|---|---|"]
        for c in rows:
            lines.append(f"| `{c.claim}` | {dims_text(c.dims)} | **{c.verdict}** | {TRUST[c.verdict]} | "
                         f"{c.method} | {_cell(evidence_brief(c))} |")
        lines.append("")
    general = [c for c in certs if c.method == "general" and c.evidence.get("formula")]
    if general:
        lines += ["## General formulas (every size)", ""]
        for c in general:
            lines += [f"- `{c.claim}` ({c.verdict}, dims {', '.join(f'{k}: {v}' for k, v in c.dims.items())}):", ""]
            if c.evidence.get("formula_latex"):        # GitHub (and most Markdown viewers) render math blocks
                lines += ["  ```math", f"  {c.evidence['formula_latex']}", "  ```", ""]
            lines += ["  ```text", f"  {c.evidence['formula']}", "  ```", ""]
    for plot in plots:
        lines += ["## Finite differences vs step", "",
                  "Relative error of <v, J u> by central differences over the step h, in float64 and in "
                  "mpmath; dashed lines are the mutants' own errors. A mutant under the float64 floor is "
                  "invisible to any float64 finite-difference check.", "",
                  f"![finite-difference error against step for {name}]({plot})", ""]
    assumptions = sorted({a for c in certs for a in c.assumptions})
    if assumptions:
        lines += ["## Assumptions", ""] + [f"- {a}" for a in assumptions] + [""]
    failed = [c for c in certs if c.verdict == "failed"]
    if failed:
        lines += ["## Witnesses", ""]
        for c in failed:
            lines += [f"### `{c.claim}` ({c.tier}, {dims_text(c.dims)})", "", "| | |", "|---|---|"]
            lines += [f"| {label} | {_cell(value)} |" for label, value in witness_rows(c.evidence["witness"])]
            lines += ["", f"The whole witness (the point, dy, the seed): [{c.relpath()}]({c.relpath()}).", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text in a Markdown table cell: a `|` would end the cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")




def render_resources(res: dict) -> str:
    lines = [f"# Kernel resources ({res.get('arch', 'sm_90')})", "",
             "Every kernel compiled for the target without a GPU (`numba.cuda.compile_ptx`, linked with "
             "`cuda.core`); the tests fail on any spill, on more than 48 KiB of static shared memory and on "
             "any `.f64` instruction in a float32 kernel. Occupancy: resident warps / 64 per SM for blocks of "
             "the threads shown (registers, threads and shared memory; `cuda_kernels.resources.occupancy`). "
             "Before and after the kernel tuning: [occupancy.md](occupancy.md).", "",
             "| kernel | registers | spill bytes | static shared bytes | .f64 instructions | threads | blocks / SM "
             "| occupancy |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in sorted(res.get("kernels", {}).items()):
        occ = r.get("occupancy")
        lines.append(f"| `{name}` | {r.get('registers')} | {r.get('spill_bytes')} | {r.get('shared_bytes')} | "
                     f"{r.get('f64_instructions')} | {r.get('threads', '')} | {r.get('blocks_per_sm', '')} | "
                     f"{f'{occ:.1%}' if occ is not None else ''} |")
    return "\n".join(lines) + "\n"


def render_index(certs: list[Certificate], has_resources: bool = False) -> str:
    by_op = defaultdict(list)
    for c in certs:
        by_op[c.op].append(c)
    lines = ["# vjpcert reports", "",
             f"Rendered from {len(certs)} certificates. The JSON certificates under `certificates/` are the source of truth",
             f"(schema: `schema/certificate-v{SCHEMA_VERSION}.schema.json`); this page, the per-op pages and",
             "`index.html` with one page per op under `ops/` (each self-contained) are rendered from them.",
             "`vjpcert verify` checks that every",
             "certificate still matches the spec and checker code that issued it.", "",
             "| op | " + " | ".join(tiers_present(certs)) + " |", "|---|" + "---|" * len(tiers_present(certs))]
    for name in sorted(by_op):
        cells = [summary([c for c in by_op[name] if c.tier == t]) for t in tiers_present(certs)]
        lines.append(f"| [{name}]({name}.md) | " + " | ".join(cells) + " |")
    if has_resources:
        lines += ["", "Kernel resources on sm_90 (registers, spills, shared memory): [kernels/resources.md](kernels/resources.md)."]
    lines += ["", "## Verdicts", "", "| verdict | what it means |", "|---|---|"]
    from vjpcert.core.certificate import VERDICTS
    lines += [f"| {v} | {m} |" for v, m in VERDICTS.items()]
    return "\n".join(lines) + "\n"


def render_reports(root: Path, ops: dict[str, Op] | None = None, html: bool = True) -> dict[Path, str]:
    """Every page (path relative to ``root`` -> text), rendered from what is on disk: all the
    certificates, the plots, the kernel resources and the ops' docstrings (``report_data.page_ops``).
    It does not depend on the command that ran, so a run over a subset of ops or tiers renders every
    other page exactly as a full run does, and `vjpcert verify` can render to memory and compare."""
    root = Path(root)
    certs = load_certificates(root, strict=False)
    infos = page_ops(root, ops)
    by_op = defaultdict(list)
    for c in certs:
        by_op[c.op].append(c)
    pages: dict[Path, str] = {}
    for name, group in by_op.items():
        plots = [f"plots/{name}-fd.png"] if (root / "plots" / f"{name}-fd.png").exists() else []
        pages[Path(f"{name}.md")] = render_op(name, group, infos.get(name), plots)
    resources = load_resources(root)
    if resources:
        pages[Path("kernels") / "resources.md"] = render_resources(resources)
    pages[Path("README.md")] = render_index(certs, has_resources=bool(resources))
    pages[Path("schema") / f"certificate-v{SCHEMA_VERSION}.schema.json"] = json.dumps(CERTIFICATE_SCHEMA, indent=2) + "\n"
    if html:
        from vjpcert.html import render_html_pages
        pages.update(render_html_pages(certs, infos, root))
    return pages


def _orphan_html_pages(root: Path, pages) -> list[Path]:
    """Per-op HTML pages on disk that no certificate renders to any more (an op whose certificates
    were all removed): removed by a render, named by `verify`."""
    return sorted(p.relative_to(root) for p in (Path(root) / HTML_OP_PAGES).glob("*.html")
                  if p.relative_to(root) not in pages)


def pages_inputs(root: Path, ops: dict[str, Op] | None = None) -> str:
    """Everything the pages are rendered from (``render_reports``): every file under certificates/,
    the plots, the kernel resources, the ops' words (``page_ops``) and the renderers' code."""
    import hashlib

    from vjpcert.core.code_hash import code_sha256
    root = Path(root)
    h = hashlib.sha256(code_sha256("vjpcert.reports").encode())
    for folder in ("certificates", "plots", "kernels"):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file():
                h.update(f"\0{path.relative_to(root).as_posix()}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    h.update(json.dumps(page_ops(root, ops), sort_keys=True, default=str).encode())
    return h.hexdigest()


def write_reports(root: Path, ops: dict[str, Op] | None = None, command: str | None = None, html: bool = True,
                  reuse: bool = False) -> None:
    """Re-render every page from everything on disk (``render_reports``), after recording this
    run's user ops (their docstrings) for later runs. ``command`` is not shown: a page must not
    depend on which command wrote it. With ``reuse`` (a run that may have changed nothing), pages
    whose inputs (``pages_inputs``) are those they were last rendered from, and that are on disk as
    rendered then, are not rendered again (``reports/stamps.json``)."""
    import hashlib

    from vjpcert.stamps import Stamps
    root = Path(root)
    record = user_ops_record(root, ops or {})
    if record is not None:
        atomic_write(root / OPS_FILE, record)
    stamps = Stamps(root)
    inputs = pages_inputs(root, ops) if html else None
    if reuse and inputs is not None and stamps.pages_current(inputs):
        return
    pages = render_reports(root, ops, html=html)
    if html:
        for rel in _orphan_html_pages(root, pages):
            (root / rel).unlink(missing_ok=True)
    for rel, text in pages.items():
        path = root / rel
        try:
            if path.read_text(encoding="utf-8") == text:
                continue                 # unchanged: leave the file (and its mtime) alone
        except (OSError, UnicodeDecodeError):
            pass
        atomic_write(path, text)
    if inputs is not None:
        stamps.record_pages(inputs, {rel.as_posix(): hashlib.sha256(text.encode()).hexdigest()
                                     for rel, text in pages.items()})


def stale_pages(root: Path, ops: dict[str, Op] | None = None) -> list[tuple[Path, str]]:
    """(page, why) for every rendered page that is not what the certificates on disk render to.

    Where the pages' stamp says they were last rendered from exactly these inputs (``pages_inputs``:
    every certificate, plot and resource file, the ops' words and the renderers' code) and every page
    on disk still hashes as rendered then, rendering is deterministic in those inputs, so it would give
    the same text: nothing is rendered again (the general forms' MathML is most of a render). Any other
    page state -- an input changed, a page edited, removed or added -- is decided by rendering."""
    from vjpcert.stamps import Stamps
    stamps = Stamps(root)
    if stamps.pages_current(pages_inputs(root, ops)):
        recorded = {Path(rel) for rel in stamps.data["pages"]["files"]}
        return [(rel, "no certificate renders to it (re-rendering removes it)")
                for rel in _orphan_html_pages(root, recorded)]
    pages = render_reports(root, ops)
    out = [(rel, "no certificate renders to it (re-rendering removes it)") for rel in _orphan_html_pages(root, pages)]
    for rel, text in pages.items():
        try:
            current = (Path(root) / rel).read_text(encoding="utf-8")
        except FileNotFoundError:
            out.append((rel, "missing"))
            continue
        except (OSError, UnicodeDecodeError) as exc:
            out.append((rel, f"unreadable ({type(exc).__name__})"))
            continue
        if current != text:
            out.append((rel, "not what the certificates render to"))
    return out
