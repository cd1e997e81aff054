"""index.html as a reader meets it: totals first, then every failed claim with its witness shown (not
folded away), a filter over the ops, each op's assumptions stated once, SymPy arrays drawn as lists,
cells that never break a word, and a page that stays light at a thousand claims (what is not at the
top waits, folded, until it is opened). The browser checks run headless Chromium and skip without it."""
import html
import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from vjpcert.browser import dump_dom, find_chromium, screenshot
from conftest import REPORT_OPS as OPS
from vjpcert.cli import main
from vjpcert.core.certificate import Certificate
from vjpcert.html import render_html
from vjpcert.witness import witness_rows

RIGHT = OPS.replace("(2 * x * x * dy,)", "(3 * x * x * dy,)")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
FOLDING = {"details", "summary", "template", "script", "style", "section", "table", "tr"}


class _Page(HTMLParser):
    """The text a reader sees without opening anything (outside closed <details>, templates, scripts
    and styles), per top-level <section id>, and the order of those sections."""

    def __init__(self):
        super().__init__()
        self.stack, self.sections, self.text, self.hidden_text = [], [], {}, []
        self.visible_rows = 0

    def _hidden(self):
        for i, (tag, attrs) in enumerate(self.stack):
            if tag in ("template", "script", "style"):
                return True
            if tag == "details" and "open" not in attrs:
                inside_summary = i + 1 < len(self.stack) and self.stack[i + 1][0] == "summary"
                if not inside_summary:
                    return True
        return False

    def _section(self):
        ids = [a.get("id") for t, a in self.stack if t == "section"]
        return ids[0] if ids else None

    def handle_starttag(self, tag, attrs):
        if tag in VOID or tag not in FOLDING:
            return
        attrs = dict(attrs)
        if tag == "section" and not any(t == "section" for t, _ in self.stack):
            self.sections.append(attrs.get("id"))
        self.stack.append((tag, attrs))
        if tag == "tr" and not self._hidden():
            self.visible_rows += 1

    def handle_endtag(self, tag):
        if tag in FOLDING:
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i][0] == tag:
                    del self.stack[i:]
                    break

    def handle_data(self, data):
        if self._hidden():
            self.hidden_text.append(data)
        else:
            self.text[self._section()] = self.text.get(self._section(), "") + " " + data

    def visible(self, section):
        return " ".join(self.text.get(section, "").split())


def _reports(tmp_path, source, expect):
    spec = tmp_path / "mine.py"
    spec.write_text(source)
    reports = tmp_path / "reports"
    assert main(["prove", str(spec), "--reports", str(reports), "--quiet"]) == expect
    return reports


def _parsed(reports):
    page = _Page()
    page.feed((reports / "index.html").read_text(encoding="utf-8"))
    return page


def test_totals_then_the_failure_with_its_witness_shown(tmp_path):
    reports = _reports(tmp_path, OPS, expect=1)
    page = _parsed(reports)
    assert page.sections[:2] == ["totals", "failures"], page.sections
    totals = page.visible("totals")
    assert re.search(r"\bfailed 1\b", totals) and re.search(r"\bproved 1\b", totals), totals
    failures = page.visible("failures")
    cert = json.loads(next((reports / "certificates" / "cube").glob("*.json")).read_text())
    assert "cube" in failures and "vjp[x]" in failures
    for label, value in witness_rows(cert["evidence"]["witness"]):
        assert label in failures and " ".join(value.split()) in failures, (label, value, failures)
    assert "square" not in failures, "a proved op is listed as a failure"


def test_a_run_without_failures_says_so_and_shows_no_witness(tmp_path):
    page = _parsed(_reports(tmp_path, RIGHT, expect=0))
    assert page.sections[:2] == ["totals", "failures"]
    assert "No failed claims" in page.visible("failures") and "witness" not in page.visible("failures")
    assert re.search(r"\bfailed 0\b", page.visible("totals"))


def cert(op="toy", claim="vjp[x]", tier="numeric", verdict="checked", dims=None, assumptions=(), **evidence):
    return Certificate(op=op, claim=claim, tier=tier, verdict=verdict, method="mpmath-diff@50",
                       dims=dims or {"n": 3}, assumptions=list(assumptions), evidence=evidence,
                       spec_sha256="0" * 64, checker_sha256="0" * 64, versions={})


REAL = "inputs are real; the spec's denominators are nonzero at the input"
SAMPLED = "evaluated at sampled points (random, large_magnitude, near_constant)"


def test_each_assumption_is_stated_once_per_op(tmp_path):
    certs = [cert(dims={"n": n}, assumptions=[REAL, SAMPLED]) for n in (1, 2, 3, 4)]
    certs.append(cert(tier="symbolic", verdict="proved", assumptions=[REAL]))
    page = render_html(certs, {}, Path(tmp_path))
    assert page.count(html.escape(REAL)) == 1 and page.count(html.escape(SAMPLED)) == 1


def test_a_sympy_array_is_drawn_as_a_list_not_by_its_class_name(tmp_path):
    import sympy

    from vjpcert.symbolic.fixed.formulas import mathml
    x0, x1 = sympy.symbols("x0 x1")
    array, matrix = sympy.ImmutableDenseNDimArray([x0 * x1, x1]), sympy.Matrix([[x0, x1]])
    formulas = {"dims": {"n": 2}, "forward": str(array), "forward_mathml": mathml(array),
                "backward": str(matrix), "backward_mathml": mathml(matrix)}
    assert "ndimarray" in formulas["forward_mathml"]            # what SymPy prints: the class name
    page = render_html([cert(tier="symbolic", verdict="proved", formulas=formulas)], {}, Path(tmp_path))
    assert "ndimarray" not in page.lower()
    assert "<mo>[</mo><mrow><msub><mi>x</mi><mi>0</mi></msub>" in page and "<mtable>" in page
    one = sympy.ImmutableDenseNDimArray([x0 * x1])
    page = render_html([cert(tier="symbolic", verdict="proved", formulas=dict(formulas, forward_mathml=mathml(one)))],
                       {}, Path(tmp_path))
    assert "ndimarray" not in page.lower() and "<mn>1</mn>" not in page, "the shape was drawn as an entry"


def test_a_thousand_claims_render_quickly_and_wait_folded(tmp_path):
    certs = [cert(op=f"op{i:02d}", dims={"n": n}, assumptions=[REAL, SAMPLED]) for i in range(40) for n in range(30)]
    certs[7] = cert(op="op00", dims={"n": 7}, verdict="failed", digits=0.5,
                    witness={"backward": "1.5", "J^T dy": "2.5", "relative": 0.4})
    start = time.perf_counter()
    text = render_html(certs, {}, Path(tmp_path))
    assert time.perf_counter() - start < 10
    page = _Page()
    page.feed(text)
    assert page.visible_rows < 150, f"{page.visible_rows} table rows drawn before anything is opened"
    assert "1.5 vs 2.5" in page.visible("failures")
    assert len(text) < 1200 * 1000, "about a kilobyte a claim at most"


def test_the_filter_is_inline_and_knows_every_verdict_tier_and_op(tmp_path):
    certs = [cert(op="alpha"), cert(op="beta", tier="symbolic", verdict="proved")]
    text = render_html(certs, {}, Path(tmp_path))
    assert re.search(r"<script>[^<]*\bfunction\b", text) and "<script src" not in text
    assert re.search(r"<select id='f-verdict'.*<option[^>]*>failed</option>", text, re.S)
    assert re.search(r"<select id='f-tier'.*<option[^>]*>symbolic</option>", text, re.S)
    assert "<input id='f-op'" in text
    assert re.search(r"<tr[^>]* data-op='beta'[^>]* data-pairs='[^']*:proved", text)
    assert not re.findall(r"(?:src|href)=['\"](?:https?:)?//", text), "the page fetches something"


def test_cells_never_break_a_word(tmp_path):
    text = render_html([cert()], {}, Path(tmp_path))
    css = text.split("<style>")[1].split("</style>")[0]
    assert not re.search(r"(?:^|[}\s])td\{[^}]*overflow-wrap:anywhere", css), "any table cell may break a word"
    assert re.search(r"\.nw\{[^}]*white-space:nowrap", css) and "word-break:normal" in css
    assert re.search(r"<td class='[^']*\bnw\b[^']*'>numeric</td>", text)


# ------------------------------------------------------------------------------------ in Chromium
browser = pytest.mark.skipif(find_chromium() is None, reason="no Chromium (apt-get install chromium)")

# appended to a copy of the page: what the browser laid out, written into the DOM for --dump-dom
PROBE = r"""<script>addEventListener('load', function () {
  var out = {scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth,
             broken: []};
  // every word in a drawn table cell sits on one line: a cell may wrap between words or after a
  // hyphen (as prose does), never inside a run of letters ("symb olic")
  var walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (var node = walk.nextNode(); node; node = walk.nextNode()) {
    var cell = node.parentElement.closest('td, th');
    if (!cell || cell.offsetParent === null) continue;
    var re = /[^\s-]+-?/g, m;
    while ((m = re.exec(node.data))) {
      var r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
      var tops = new Set(Array.from(r.getClientRects()).map(function (q) { return Math.round(q.top); }));
      if (tops.size > 1) out.broken.push(m[0]);
    }
  }
  var v = document.getElementById('f-verdict');
  if (v) { v.value = 'failed'; v.dispatchEvent(new Event('input', {bubbles: true})); }
  out.shown = Array.from(document.querySelectorAll('#matrix tr[data-op]'))
    .filter(function (tr) { return tr.offsetParent !== null; }).map(function (tr) { return tr.dataset.op; });
  out.count = (document.getElementById('f-count') || {}).textContent;
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


@browser
def test_chromium_draws_the_failure_at_the_top(tmp_path):
    reports = _reports(tmp_path, OPS, expect=1)
    png = screenshot(reports / "index.html", tmp_path / "index.png", width=1280, height=800)
    assert png.stat().st_size > 10_000
    dom = dump_dom(reports / "index.html", width=1280, height=800)
    body = " ".join(re.sub(r"<[^>]+>", " ", html.unescape(dom.split("<body", 1)[1])).split())
    cert = json.loads(next((reports / "certificates" / "cube").glob("*.json")).read_text())
    value = " ".join(witness_rows(cert["evidence"]["witness"])[1][1].split())
    assert value in body and body.index(value) < body.index("Verdict matrix"), body[:2000]
    assert body.index(value) < 1500, "the witness is not near the top"


@browser
@pytest.mark.parametrize("width", [1280, 700])
def test_chromium_lays_out_without_broken_words_or_a_sideways_scroll_and_filters(tmp_path, width):
    reports = _reports(tmp_path, OPS, expect=1)
    probe = reports / "probe.html"
    probe.write_text((reports / "index.html").read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"))
    dom = dump_dom(probe, width=width, height=800)
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", dom)
    assert found, "the page's script did not run"
    out = json.loads(html.unescape(found.group(1)))
    assert out["scroll"] <= out["width"], f"a sideways scroll: {out}"
    assert not out["broken"], f"words broken across lines: {out['broken']}"
    assert out["shown"] == ["cube"] and out["count"] == "1 of 2 ops", out


# ------------------------------------------------------------------------------ one page per op
def test_as_pages_the_index_stays_small_and_every_link_lands(tmp_path):
    from vjpcert.html import render_html_pages
    reports = _reports(tmp_path, OPS, expect=1)
    (reports / "plots").mkdir()
    (reports / "plots" / "cube-fd.png").write_bytes(b"\x89PNG" + bytes(200_000))
    from vjpcert.report_data import load_certificates, page_ops
    certs = load_certificates(reports)
    pages = render_html_pages(certs, page_ops(reports), reports)
    assert set(pages) == {Path("index.html"), Path("ops/cube.html"), Path("ops/square.html")}
    for rel, text in pages.items():
        (reports / rel).parent.mkdir(parents=True, exist_ok=True)
        (reports / rel).write_text(text, encoding="utf-8")
    index, cube = pages[Path("index.html")], pages[Path("ops/cube.html")]
    assert len(index) < 40_000 and "data:image/png" not in index, "the index carries the plots"
    assert "data:image/png;base64," in cube and "x cubed" in cube
    page = _Page()
    page.feed(index)
    assert page.sections[:2] == ["totals", "failures"] and "447534/1953125" in page.visible("failures")
    links = set()
    for rel, text in pages.items():
        for href in re.findall(r"href='([^'#]+)", text):
            links.add(href)
            assert (reports / rel).parent.joinpath(html.unescape(href)).resolve().is_file(), (rel, href)
    assert {"ops/cube.html", "ops/square.html", "../index.html",
            "../certificates/cube/symbolic__vjp-x__n3.json"} <= links
    assert not any(re.match(r"(https?:)?//", u) for u in links)
