"""One self-contained HTML report (no network needed to view it): the verdict matrix, each op's
formulas rendered from SymPy (as MathML, which browsers draw natively), the finite-difference plots
(embedded), the kernel resource tables, and every claim with its trust level and assumptions."""
from __future__ import annotations

import base64
import html
import re
from collections import defaultdict
from pathlib import Path

from vjpcert.core.certificate import TRUST, VERDICTS, Certificate
from vjpcert.report_data import SEVERITY, evidence_brief, load_resources, summary, tiers_present
from vjpcert.tiers import TIERS

CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.v-proved,.v-proved-general,.v-proved-compositional{background:#d9f2d9}
.v-checked-probabilistic,.v-checked,.v-kernel-match{background:#e3eefc}.v-inconclusive{background:#fff3c4}
.v-failed{background:#f9d0d0;font-weight:bold}pre{background:#f7f7f7;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere}
math{font-size:1.05em}img{max-width:100%}details{margin:.3em 0}td{overflow-wrap:anywhere}
table.witness{font-size:.85em;font-weight:normal;background:#fff;max-width:32em}table.witness th{white-space:nowrap}
.where{color:#555;font-size:.9em}
"""

# what a general form's text may hold before SymPy parses it (it comes from a certificate on disk:
# parse_expr evaluates it, so nothing but names, numbers, operators and brackets gets that far)
_FORMULA_CHARS = re.compile(r"^[\w\s()\[\],+\-*/.=;]*$")
_SAFE_NAME = re.compile(r"^(?!_)[A-Za-z]\w*$")


def general_form_mathml(text: str) -> list[str] | None:
    """A general form (``dx[s, j] = ... where rstd(r) = ...; ...``) as one MathML equation per
    statement, or None when its text is not the plain formula language (then it is shown as text)."""
    import builtins
    import keyword

    import sympy
    from sympy.printing.mathml import mathml
    names = set(re.findall(r"[A-Za-z_]\w*", text))
    if (not _FORMULA_CHARS.match(text) or "__" in text or re.search(r"\.\s*[A-Za-z_]", text)
            or any(not _SAFE_NAME.match(n) or keyword.iskeyword(n) or hasattr(builtins, n) for n in names)):
        return None
    local = {n: sympy.IndexedBase(n) for n in re.findall(r"([A-Za-z]\w*)\[", text)}
    main, _, where = text.partition(" where ")
    out = []
    try:
        for group in (main, where):
            for piece in re.split(r";\s+", group.strip()):
                if piece:
                    sides = [sympy.sympify(side, locals=local, evaluate=False) for side in piece.split(" = ")]
                    out.append("<math display='block'>" + "<mo>=</mo>".join(
                        mathml(side, printer="presentation") for side in sides) + "</math>")
    except Exception:          # a form SymPy cannot read back: shown as text, never a lost page
        return None
    return out or None


def _witness_table(c: Certificate) -> str:
    from vjpcert.witness import witness_rows
    e = html.escape
    rows = "".join(f"<tr><th>{e(label)}</th><td>{e(value)}</td></tr>" for label, value in witness_rows(c.evidence["witness"]))
    return (f"<details><summary>witness</summary><table class='witness'>{rows}"
            f"<tr><th>certificate</th><td><a href='{e(c.relpath().as_posix())}'>{e(c.relpath().as_posix())}</a>"
            f"</td></tr></table></details>")


def render_html(certs: list[Certificate], infos: dict[str, dict], root: Path) -> str:
    """The page; ``infos`` maps op names to ``report_data.op_info`` (docstring, spec file)."""
    by_op = defaultdict(list)
    for c in certs:
        by_op[c.op].append(c)
    tiers = list(TIERS)                      # the table order; the matrix shows the ones present
    shown_tiers = tiers_present(certs)
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>vjpcert report</title>"
             f"<style>{CSS}</style></head><body><h1>vjpcert report</h1>",
             f"<p>Rendered from {len(certs)} certificates. JSON certificates under "
             f"<code>certificates/</code> are the source of truth; <code>vjpcert verify</code> checks they are current.</p>",
             "<h2>Verdict matrix</h2><table><tr><th>op</th>" + "".join(f"<th>{t}</th>" for t in shown_tiers) + "</tr>"]
    for name in sorted(by_op):
        cells = []
        for t in shown_tiers:
            group = [c for c in by_op[name] if c.tier == t]
            worst = min((c.verdict for c in group), key=SEVERITY.index) if group else ""
            cells.append(f"<td class='v-{worst}'>{e(summary(group)).replace('**', '')}</td>")
        parts.append(f"<tr><td><a href='#op-{e(name)}'>{e(name)}</a></td>{''.join(cells)}</tr>")
    parts.append("</table><h2>Verdicts and trust</h2><table><tr><th>verdict</th><th>trust</th><th>meaning</th></tr>")
    parts += [f"<tr><td class='v-{v}'>{v}</td><td>{e(TRUST[v])}</td><td>{e(m)}</td></tr>" for v, m in VERDICTS.items()]
    parts.append("</table>")
    res = load_resources(root)
    if res:
        parts.append(f"<h2>Kernel resources ({e(res.get('arch', 'sm_90'))})</h2><table><tr><th>kernel</th>"
                     "<th>registers</th><th>spill bytes</th><th>static shared bytes</th><th>.f64</th></tr>")
        for kname, r in sorted(res.get("kernels", {}).items()):
            parts.append(f"<tr><td>{e(kname)}</td><td>{r.get('registers')}</td><td>{r.get('spill_bytes')}</td>"
                         f"<td>{r.get('shared_bytes')}</td><td>{r.get('f64_instructions')}</td></tr>")
        parts.append("</table>")
    for name in sorted(by_op):
        info = infos.get(name) or {}
        parts.append(f"<h2 id='op-{e(name)}'>{e(name)}</h2>")
        if info.get("doc"):                         # no docstring: no empty block
            parts.append(f"<pre>{e(info['doc'])}</pre>")
        shown = [c for c in by_op[name] if c.tier == "symbolic" and c.evidence.get("formulas")]
        if shown:                                   # written by the prover: rendering runs no SymPy
            f = shown[0].evidence["formulas"]
            parts.append(f"<details open><summary>forward at {e(str(f['dims']))} (SymPy)</summary>"
                         f"{f['forward_mathml']}</details>")
            for c in sorted(shown, key=lambda c: c.claim):
                parts.append(f"<details><summary>backward {e(c.claim)} at {e(str(f['dims']))} (SymPy)</summary>"
                             f"{c.evidence['formulas']['backward_mathml']}</details>")
        general = [c for c in by_op[name] if c.method == "general" and c.evidence.get("formula")]
        for c in general:
            shown_form = general_form_mathml(str(c.evidence["formula"]))
            title = f"General form ({e(c.claim)}, {e(c.verdict)}, every {', '.join(e(str(k)) for k in c.dims)})"
            if shown_form:
                parts.append(f"<details open><summary>{title}</summary>{''.join(shown_form)}</details>")
            else:
                parts.append(f"<p>{title}: <code>{e(str(c.evidence['formula']))}</code></p>")
        plot = root / "plots" / f"{name}-fd.png"
        if plot.exists():
            data = base64.b64encode(plot.read_bytes()).decode()
            parts.append(f"<details><summary>finite-difference error vs step</summary>"
                         f"<img alt='fd plot' src='data:image/png;base64,{data}'></details>")
        parts.append("<table><tr><th>tier</th><th>claim</th><th>dims</th><th>verdict</th><th>evidence</th><th>trust</th>"
                     "<th>method</th><th>assumptions</th></tr>")
        for c in sorted(by_op[name], key=lambda c: (tiers.index(c.tier), c.claim, str(sorted((k, str(v)) for k, v in c.dims.items())))):
            dims = ", ".join(f"{k}={v}" for k, v in sorted(c.dims.items()))
            witness = _witness_table(c) if c.verdict == "failed" else ""
            parts.append(f"<tr><td>{c.tier}</td><td><code>{e(c.claim)}</code></td><td>{e(dims)}</td>"
                         f"<td class='v-{c.verdict}'>{c.verdict}{witness}</td><td>{e(evidence_brief(c))}</td>"
                         f"<td>{e(c.trust)}</td><td>{e(c.method)}</td>"
                         f"<td>{'<br>'.join(e(a) for a in c.assumptions)}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
