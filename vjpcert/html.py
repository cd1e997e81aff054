"""One self-contained HTML report (no network needed to view it): the verdict matrix, each op's
formulas rendered from SymPy (as MathML, which browsers draw natively), the finite-difference plots
(embedded), the kernel resource tables, and every claim with its trust level and assumptions."""
from __future__ import annotations

import base64
import html
from collections import defaultdict
from pathlib import Path

from vjpcert.core.certificate import TRUST, VERDICTS, Certificate
from vjpcert.report_data import SEVERITY, load_resources, summary, tiers_present
from vjpcert.tiers import TIERS

CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.v-proved,.v-proved-general,.v-proved-compositional{background:#d9f2d9}
.v-checked-probabilistic,.v-checked,.v-kernel-match{background:#e3eefc}.v-inconclusive{background:#fff3c4}
.v-failed{background:#f9d0d0;font-weight:bold}pre{background:#f7f7f7;padding:.6em;overflow-x:auto}
math{font-size:1.05em}img{max-width:100%}details{margin:.3em 0}
"""


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
            parts.append(f"<p>General form ({e(c.claim)}, {e(c.verdict)}): <code>{e(str(c.evidence['formula']))}</code></p>")
        plot = root / "plots" / f"{name}-fd.png"
        if plot.exists():
            data = base64.b64encode(plot.read_bytes()).decode()
            parts.append(f"<details><summary>finite-difference error vs step</summary>"
                         f"<img alt='fd plot' src='data:image/png;base64,{data}'></details>")
        parts.append("<table><tr><th>tier</th><th>claim</th><th>dims</th><th>verdict</th><th>trust</th><th>method</th><th>assumptions</th></tr>")
        for c in sorted(by_op[name], key=lambda c: (tiers.index(c.tier), c.claim, str(sorted((k, str(v)) for k, v in c.dims.items())))):
            dims = ", ".join(f"{k}={v}" for k, v in sorted(c.dims.items()))
            witness = ""
            if c.verdict == "failed":
                witness = f"<details><summary>witness</summary><pre>{e(str(c.evidence['witness'])[:3000])}</pre></details>"
            parts.append(f"<tr><td>{c.tier}</td><td><code>{e(c.claim)}</code></td><td>{e(dims)}</td>"
                         f"<td class='v-{c.verdict}'>{c.verdict}{witness}</td><td>{e(c.trust)}</td><td>{e(c.method)}</td>"
                         f"<td>{'<br>'.join(e(a) for a in c.assumptions)}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
