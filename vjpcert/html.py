"""The HTML report (no network needed to view it): ``index.html`` and one page per op under ``ops/``,
each self-contained. At the top of the index what a reader acts on: the totals per verdict, then every
failed claim with its witness shown, then the verdict matrix with a small inline filter (op, verdict,
tier), each op linking to its page. An op's page holds its formulas rendered from SymPy (as MathML,
which browsers draw natively), the finite-difference plot (embedded), its assumptions stated once, and
every claim with its trust level. The index stays small however many claims and plots there are.
``render_html`` renders the same as one page (an op's section in a closed ``<details>``), for a caller
that wants a single file."""
from __future__ import annotations

import base64
import html
import re
from collections import defaultdict
from pathlib import Path

from vjpcert.core.certificate import TRUST, VERDICTS, Certificate
from vjpcert.report_data import HTML_OP_PAGES, SEVERITY, evidence_brief, load_resources, summary, tiers_present
from vjpcert.tiers import TIERS

CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;word-break:normal;overflow-wrap:normal}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.nw{white-space:nowrap;word-break:normal;overflow-wrap:normal}.scroll{overflow-x:auto;max-width:100%}
.v-proved,.v-proved-general,.v-proved-compositional{background:#d9f2d9}
.v-checked-probabilistic,.v-checked,.v-kernel-match{background:#e3eefc}.v-inconclusive{background:#fff3c4}
.v-failed{background:#f9d0d0;font-weight:bold}pre{background:#f7f7f7;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere}
math{font-size:1.05em}img{max-width:100%}details{margin:.3em 0}summary{cursor:pointer}
table.witness{font-size:.85em;font-weight:normal;background:#fff}table.witness th{white-space:nowrap}
.where{color:#555;font-size:.9em;font-weight:normal}.badge{display:inline-block;margin:.15em;padding:.2em .6em;border:1px solid #ccc;border-radius:3px}
.failure{border-left:4px solid #c33;background:#fffafa;margin:.8em 0;padding:.1em .8em}.failure h3{margin:.4em 0;font-size:1em}
.filter{background:#f7f7f7;padding:.4em .6em}.filter label{margin-right:1em;white-space:nowrap}
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


# what the filter does: show the matrix rows, failures, op sections and claim rows whose op name holds
# the typed text and that hold a claim of the chosen verdict in the chosen tier ("tier:verdict" pairs);
# a link to an op opens its folded claims
JS = """(function () {
  function $(id) { return document.getElementById(id); }
  function apply() {
    var q = $('f-op').value.trim().toLowerCase(), v = $('f-verdict').value, t = $('f-tier').value, n = 0;
    document.querySelectorAll('[data-pairs]').forEach(function (el) {
      var ok = el.getAttribute('data-op').toLowerCase().indexOf(q) >= 0 && (!(v || t) ||
        el.getAttribute('data-pairs').split(' ').some(function (p) {
          var s = p.split(':'); return (!t || s[0] === t) && (!v || s[1] === v); }));
      el.hidden = !ok;
      if (ok && el.parentNode.id === 'matrix') n++;
      if (ok && (v || t) && el.tagName === 'SECTION') el.querySelectorAll('details.claims').forEach(
        function (d) { d.open = true; });
    });
    $('f-count').textContent = n + ' of ' + $('matrix').rows.length + ' ops';
  }
  function openTarget() {
    var el = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el) el.querySelectorAll('details.claims').forEach(function (d) { d.open = true; });
  }
  ['f-op', 'f-verdict', 'f-tier'].forEach(function (id) {
    $(id).addEventListener('input', apply); $(id).addEventListener('change', apply); });
  addEventListener('hashchange', openTarget);
  openTarget(); apply();
})();"""

_ARRAY_HEAD = re.compile(r"<mrow><mi>(?:im)?mutable(?:dense|sparse)ndimarray</mi><mrow><mo>\(</mo><mrow><mo>\(</mo>")
_ARRAY_TAIL = re.compile(r"</mrow><mo>,</mo><mrow><mo>\(</mo>(?:<mn>\d+</mn>|<mo>,</mo>)*<mo>\)</mo></mrow>"
                         r"<mo>\)</mo></mrow></mrow>")
_TOKEN = re.compile(r"<[^>]*>|[^<]+")


def _node_end(text: str, at: int) -> int:
    """Where the balanced MathML element that starts at ``at`` ends."""
    depth = 0
    for m in _TOKEN.finditer(text, at):
        tok = m.group()
        if tok.startswith("</"):
            depth -= 1
        elif tok.startswith("<") and not tok.endswith("/>"):
            depth += 1
        if depth <= 0:
            return m.end()
    raise ValueError("unbalanced MathML")


def arrays_as_lists(mathml: str) -> str:
    """SymPy prints an N-dim array as its class name applied to (entries, shape); a reader wants the
    entries: ``[a, b, c]``. Anything not of that exact form is left as it is."""
    at = 0
    while (m := _ARRAY_HEAD.search(mathml, at)) is not None:
        parts, i = [], m.end()
        try:
            while not mathml.startswith("<mo>)</mo>", i):
                j = _node_end(mathml, i)
                parts.append(mathml[i:j])
                i = j
        except ValueError:
            return mathml
        tail = _ARRAY_TAIL.match(mathml, i + len("<mo>)</mo>"))
        if tail is None:
            at = m.end()
            continue
        mathml = mathml[:m.start()] + "<mrow><mo>[</mo>" + "".join(parts) + "<mo>]</mo></mrow>" + mathml[tail.end():]
        at = m.start()
    return mathml


def _path_link(rel: str, up: str = "") -> str:
    """A certificate's path as a link that may wrap after a slash, never inside a name; ``up`` is the
    way from the page back to the reports folder."""
    e = html.escape
    return f"<a href='{e(up + rel)}'>" + "/<wbr>".join(f"<span class='nw'>{e(p)}</span>" for p in rel.split("/")) + "</a>"


def _witness_table(c: Certificate, up: str = "") -> str:
    from vjpcert.witness import witness_rows
    e = html.escape
    rows = "".join(f"<tr><th>{e(label)}</th><td>{e(value)}</td></tr>" for label, value in witness_rows(c.evidence["witness"]))
    return (f"<table class='witness'>{rows}<tr><th>certificate</th><td>{_path_link(c.relpath().as_posix(), up)}"
            f"</td></tr></table>")


def _order(c: Certificate):
    """Failures first, then the worse verdicts, then the tier table's order."""
    tiers = list(TIERS)
    return (SEVERITY.index(c.verdict), tiers.index(c.tier) if c.tier in tiers else len(tiers), c.claim,
            str(sorted((k, str(v)) for k, v in c.dims.items())))


def _pairs(certs) -> str:
    return " ".join(sorted({f"{c.tier}:{c.verdict}" for c in certs}))


def _filter_attrs(op: str, certs) -> str:
    return f" data-op='{html.escape(op)}' data-pairs='{html.escape(_pairs(certs))}'"


def _dims(c: Certificate) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(c.dims.items()))


def _totals(certs, shown_tiers) -> str:
    e = html.escape
    counts = {v: sum(1 for c in certs if c.verdict == v) for v in VERDICTS}
    # "failed" is always counted (a zero is news too), drawn red only when it is not zero
    badges = "".join(f"<span class='badge nw{f' v-{v}' if counts[v] else ''}'>{v} {counts[v]}</span> "
                     for v in VERDICTS if counts[v] or v == "failed")
    per_tier = ", ".join(f"{e(t)} {sum(1 for c in certs if c.tier == t)}" for t in shown_tiers)
    ops = len({c.op for c in certs})
    return (f"<section id='totals'><h2>Totals</h2><p>{badges}</p><p class='where'>{len(certs)} claims over "
            f"{ops} ops; per tier: {per_tier or '-'}</p></section>")


def _in_page(name: str) -> str:
    return f"#op-{html.escape(name)}"


def _own_page(name: str) -> str:
    return f"{HTML_OP_PAGES}/{html.escape(name)}.html"


def _failures(certs, link=_in_page) -> str:
    e = html.escape
    failed = sorted((c for c in certs if c.verdict == "failed"), key=lambda c: (c.op, _order(c)))
    parts = [f"<section id='failures'><h2>Failures ({len(failed)})</h2>"]
    if not failed:
        parts.append("<p>No failed claims.</p>")
    for c in failed:
        parts.append(f"<div class='failure'{_filter_attrs(c.op, [c])}><h3><a href='{link(c.op)}'>{e(c.op)}</a> "
                     f"<code>{e(c.claim)}</code> <span class='nw'>{e(c.tier)}</span> "
                     f"<span class='where'>{e(_dims(c))}; {e(c.method)}</span></h3>"
                     f"<div class='scroll'>{_witness_table(c)}</div></div>")
    parts.append("</section>")
    return "".join(parts)


def _matrix(by_op, shown_tiers, link=_in_page) -> str:
    e = html.escape
    options = lambda values: "<option value=''>any</option>" + "".join(f"<option>{e(v)}</option>" for v in values)
    parts = ["<section id='ops'><h2>Verdict matrix</h2><p class='filter'>"
             "<label>op <input id='f-op' type='search' placeholder='name contains'></label>"
             f"<label>verdict <select id='f-verdict'>{options(VERDICTS)}</select></label>"
             f"<label>tier <select id='f-tier'>{options(shown_tiers)}</select></label>"
             "<span id='f-count' class='where'></span></p><div class='scroll'><table>"
             "<thead><tr><th>op</th>" + "".join(f"<th class='nw'>{e(t)}</th>" for t in shown_tiers) +
             "</tr></thead><tbody id='matrix'>"]
    for name in sorted(by_op):
        cells = []
        for t in shown_tiers:
            group = [c for c in by_op[name] if c.tier == t]
            worst = min((c.verdict for c in group), key=SEVERITY.index) if group else ""
            cells.append(f"<td class='v-{worst}'>{e(summary(group)).replace('**', '')}</td>")
        parts.append(f"<tr{_filter_attrs(name, by_op[name])}><td><a href='{link(name)}'>{e(name)}</a></td>"
                     f"{''.join(cells)}</tr>")
    parts.append("</tbody></table></div></section>")
    return "".join(parts)


def _formulas(name: str, group) -> list[str]:
    e = html.escape
    parts = []
    shown = [c for c in group if c.tier == "symbolic" and c.evidence.get("formulas")]
    if shown:                                   # written by the prover: rendering runs no SymPy
        f = shown[0].evidence["formulas"]
        at = ", ".join(f"{k}={v}" for k, v in sorted(f["dims"].items()))
        parts.append(f"<details open><summary>forward at {e(at)} (SymPy)</summary><div class='scroll'>"
                     f"{arrays_as_lists(f['forward_mathml'])}</div></details>")
        for c in sorted(shown, key=lambda c: c.claim):
            parts.append(f"<details><summary>backward {e(c.claim)} at {e(at)} (SymPy)</summary><div class='scroll'>"
                         f"{arrays_as_lists(c.evidence['formulas']['backward_mathml'])}</div></details>")
    for c in (c for c in group if c.method == "general" and c.evidence.get("formula")):
        shown_form = general_form_mathml(str(c.evidence["formula"]))
        title = f"General form ({e(c.claim)}, {e(c.verdict)}, every {', '.join(e(str(k)) for k in c.dims)})"
        if shown_form:
            parts.append(f"<details open><summary>{title}</summary><div class='scroll'>{''.join(shown_form)}</div></details>")
        else:
            parts.append(f"<p>{title}: <code>{e(str(c.evidence['formula']))}</code></p>")
    return parts


def _op_section(name: str, group, info: dict, root: Path, up: str = "") -> str:
    """One op; ``up`` is the way back to the reports folder ("" in index.html, "../" on an op's page,
    where nothing is folded: it is the page a reader opened)."""
    e = html.escape
    failed = any(c.verdict == "failed" for c in group) or bool(up)
    parts = [f"<section id='op-{e(name)}' class='op'{_filter_attrs(name, group)}><h2>{e(name)} "
             f"<span class='where'>{e(summary(group)).replace('**', '')}</span></h2>"]
    if info.get("doc"):                         # no docstring: no empty block
        parts.append(f"<pre>{e(info['doc'])}</pre>")
    if info.get("spec_file"):
        parts.append(f"<p class='where'>spec file: <code>{e(info['spec_file'])}</code></p>")
    # folded until opened: its formulas, plot and rows cost the first view of the page nothing
    parts.append(f"<details class='claims'{' open' if failed else ''}><summary>{len(group)} claims, "
                 "formulas and plots</summary>")
    parts += _formulas(name, group)
    plot = root / "plots" / f"{name}-fd.png"
    if plot.exists():
        data = base64.b64encode(plot.read_bytes()).decode()
        parts.append(f"<details><summary>finite-difference error vs step</summary>"
                     f"<img alt='fd plot' loading='lazy' src='data:image/png;base64,{data}'></details>")
    assumptions = sorted({a for c in group for a in c.assumptions})
    number = {a: i + 1 for i, a in enumerate(assumptions)}
    if assumptions:                              # said once here; a row names them by number
        parts.append("<h3>Assumptions</h3><ol>" + "".join(
            f"<li id='a-{e(name)}-{number[a]}'>{e(a)}</li>" for a in assumptions) + "</ol>")
    parts.append("<div class='scroll'><table><tr><th class='nw'>tier</th><th>claim</th><th>dims</th>"
                 "<th class='nw'>verdict</th><th>evidence</th><th>trust</th><th>method</th><th>assumptions</th></tr>")
    for c in sorted(group, key=_order):
        evidence = _witness_table(c, up) if c.verdict == "failed" else e(evidence_brief(c))
        refs = ", ".join(f"<a href='#a-{e(name)}-{number[a]}'>A{number[a]}</a>" for a in sorted(set(c.assumptions), key=number.get))
        parts.append(f"<tr{_filter_attrs(name, [c])}><td class='nw'>{e(c.tier)}</td><td><code>{e(c.claim)}</code></td>"
                     f"<td>{e(_dims(c))}</td><td class='v-{c.verdict} nw'>{c.verdict}</td><td>{evidence}</td>"
                     f"<td>{e(c.trust)}</td><td class='nw'>{e(c.method)}</td><td class='nw'>{refs}</td></tr>")
    parts.append("</table></div></details></section>")
    return "".join(parts)


def _head(title: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>")


def _top(certs, by_op, root: Path, link) -> list[str]:
    """Everything above the op sections: totals, failures, the matrix and its filter, the legend,
    the kernel resources."""
    shown_tiers = tiers_present(certs)           # the table order; the matrix shows the ones present
    e = html.escape
    parts = ["<h1>vjpcert report</h1>",
             f"<p>Rendered from {len(certs)} certificates. JSON certificates under "
             f"<code>certificates/</code> are the source of truth; <code>vjpcert verify</code> checks they are current.</p>",
             _totals(certs, shown_tiers), _failures(certs, link), _matrix(by_op, shown_tiers, link),
             "<h2>Verdicts and trust</h2><div class='scroll'><table><tr><th>verdict</th><th>trust</th><th>meaning</th></tr>"]
    parts += [f"<tr><td class='v-{v} nw'>{v}</td><td>{e(TRUST[v])}</td><td>{e(m)}</td></tr>" for v, m in VERDICTS.items()]
    parts.append("</table></div>")
    res = load_resources(root)
    if res:
        parts.append(f"<h2>Kernel resources ({e(res.get('arch', 'sm_90'))})</h2><div class='scroll'><table><tr><th>kernel</th>"
                     "<th>registers</th><th>spill bytes</th><th>static shared bytes</th><th>.f64</th></tr>")
        for kname, r in sorted(res.get("kernels", {}).items()):
            parts.append(f"<tr><td>{e(kname)}</td><td>{r.get('registers')}</td><td>{r.get('spill_bytes')}</td>"
                         f"<td>{r.get('shared_bytes')}</td><td>{r.get('f64_instructions')}</td></tr>")
        parts.append("</table></div>")
    return parts


def _by_op(certs) -> dict[str, list[Certificate]]:
    by_op = defaultdict(list)
    for c in certs:
        by_op[c.op].append(c)
    return by_op


def render_html(certs: list[Certificate], infos: dict[str, dict], root: Path) -> str:
    """The page, every op on it; ``infos`` maps op names to ``report_data.op_info`` (docstring,
    spec file)."""
    by_op = _by_op(certs)
    parts = [_head("vjpcert report"), *_top(certs, by_op, root, _in_page)]
    parts += [_op_section(name, by_op[name], infos.get(name) or {}, root) for name in sorted(by_op)]
    parts.append(f"<script>{JS}</script></body></html>")
    return "\n".join(parts)


def render_html_pages(certs: list[Certificate], infos: dict[str, dict], root: Path) -> dict[Path, str]:
    """The same report as pages: ``index.html`` (totals, failures, the filtered matrix) linking to
    ``ops/<op>.html``, one page per op with its formulas, plot and claims. Each page is
    self-contained; the index stays small however many claims and plots there are."""
    by_op = _by_op(certs)
    pages = {Path("index.html"): "\n".join([_head("vjpcert report"), *_top(certs, by_op, root, _own_page),
                                            f"<script>{JS}</script></body></html>"])}
    for name in sorted(by_op):
        pages[Path(HTML_OP_PAGES) / f"{name}.html"] = "\n".join([
            _head(f"{name}: vjpcert report"), "<p><a href='../index.html'>all ops</a></p>",
            _op_section(name, by_op[name], infos.get(name) or {}, root, up="../"), "</body></html>"])
    return pages
