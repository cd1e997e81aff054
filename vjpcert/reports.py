"""Reports: the JSON certificates are the source of truth; Markdown per op and an index are rendered
from them. Every file is written atomically."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from vjpcert.core.certificate import CERTIFICATE_SCHEMA, SCHEMA_VERSION, TRUST, Certificate, atomic_write
from vjpcert.core.registry import Op

from vjpcert.report_data import (SEVERITY, ReportError, dims_text, load_certificates, load_resources,  # noqa: F401
                                 summary, tiers_present)
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








def _evidence_brief(c: Certificate) -> str:
    ev = c.evidence
    if c.verdict == "failed":
        w = ev["witness"]
        return f"witness at {w.get('component', '?')}: residual {w.get('residual', '?')}"
    if "digits" in ev and "error" not in ev:
        return f"{ev['digits']} digits"
    if "false_pass_probability" in ev:
        return f"P(false pass) <= {ev['false_pass_probability']}"
    if "residual_terms" in ev:
        return f"{ev.get('variables', '?')} vars, {ev.get('lhs_terms', '?')} terms"
    if "error" in ev:
        return ev["error"][:80]
    return ev.get("reason", "")


def render_op(name: str, certs: list[Certificate], op: Op | None, plots: list[str] = ()) -> str:
    lines = [f"# {name}", ""]
    if op is not None:
        lines += ["```text", op.doc.strip(), "```", ""]
        if op.module is not None and getattr(op.module, "__file__", None):
            lines += [f"Spec file: `specs/{Path(op.module.__file__).name}`" if op.module.__name__.startswith("vjpcert.specs.")
                      else f"Spec file: `{Path(op.module.__file__).name}`", ""]
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
                         f"{c.method} | {_evidence_brief(c)} |")
        lines.append("")
    general = [c for c in certs if c.method == "general" and c.evidence.get("formula")]
    if general:
        lines += ["## General formulas (every size)", ""]
        for c in general:
            lines += [f"- `{c.claim}` ({c.verdict}, dims {', '.join(f'{k}: {v}' for k, v in c.dims.items())}):",
                      "", "  ```text", f"  {c.evidence['formula']}", "  ```", ""]
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
            lines += [f"### `{c.claim}` ({c.tier}, {dims_text(c.dims)})", "", "```json",
                      json.dumps(c.evidence["witness"], indent=2)[:4000], "```", ""]
    return "\n".join(lines)




def render_resources(res: dict) -> str:
    lines = [f"# Kernel resources ({res.get('arch', 'sm_90')})", "",
             "Every kernel compiled for the target without a GPU (`numba.cuda.compile_ptx`, linked with "
             "`cuda.core`); the tests fail on any spill, on more than 48 KiB of static shared memory and on "
             "any `.f64` instruction in a float32 kernel. Occupancy: resident warps / 64 per SM for blocks of "
             "the threads shown (registers, threads and shared memory; `cuda_kernels.resources.occupancy`). "
             "Before and after the kernel work of issue 17: [occupancy.md](occupancy.md).", "",
             "| kernel | registers | spill bytes | static shared bytes | .f64 instructions | threads | blocks / SM "
             "| occupancy |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in sorted(res.get("kernels", {}).items()):
        occ = r.get("occupancy")
        lines.append(f"| `{name}` | {r.get('registers')} | {r.get('spill_bytes')} | {r.get('shared_bytes')} | "
                     f"{r.get('f64_instructions')} | {r.get('threads', '')} | {r.get('blocks_per_sm', '')} | "
                     f"{f'{occ:.1%}' if occ is not None else ''} |")
    return "\n".join(lines) + "\n"


def render_index(certs: list[Certificate], command: str, has_resources: bool = False) -> str:
    by_op = defaultdict(list)
    for c in certs:
        by_op[c.op].append(c)
    lines = ["# vjpcert reports", "",
             f"Made by `{command}`. The JSON certificates under `certificates/` are the source of truth",
             f"(schema: `schema/certificate-v{SCHEMA_VERSION}.schema.json`); this page, the per-op pages and",
             "`index.html` (self-contained) are rendered from them. `vjpcert verify` checks that every",
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


def write_reports(root: Path, ops: dict[str, Op], command: str = "vjpcert", html: bool = True) -> None:
    """Re-render every per-op page, the index, the JSON Schema and the HTML report from the
    certificates on disk."""
    root = Path(root)
    certs = load_certificates(root, strict=False)
    by_op = defaultdict(list)
    for c in certs:
        by_op[c.op].append(c)
    for name, group in by_op.items():
        plots = [f"plots/{name}-fd.png"] if (root / "plots" / f"{name}-fd.png").exists() else []
        atomic_write(root / f"{name}.md", render_op(name, group, ops.get(name), plots))
    resources = load_resources(root)
    if resources:
        atomic_write(root / "kernels" / "resources.md", render_resources(resources))
    atomic_write(root / "README.md", render_index(certs, command, has_resources=bool(resources)))
    atomic_write(root / "schema" / f"certificate-v{SCHEMA_VERSION}.schema.json",
                 json.dumps(CERTIFICATE_SCHEMA, indent=2) + "\n")
    if html:
        from vjpcert.html import render_html
        atomic_write(root / "index.html", render_html(certs, ops, root, command))
