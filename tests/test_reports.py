"""The reports people read: Markdown per op, the index, the published schema, and one
self-contained HTML page (no network needed to view it)."""
import json
import re
from html.parser import HTMLParser

import jsonschema

from vjpcert.cli import main


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.urls = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]


def test_html_report_is_self_contained_with_formulas_plots_and_trust(tmp_path):
    reports = tmp_path / "reports"
    assert main(["all", "softmax", "--reports", str(reports), "--quiet"]) == 0
    page = (reports / "index.html").read_text()
    p = _Collect()
    p.feed(page)
    assert "math" in p.tags, "formulas are rendered as MathML"
    assert any(u.startswith("data:image/png;base64,") for u in p.urls), "the plot is embedded"
    external = [u for u in p.urls if re.match(r"^(https?:)?//", u)]
    assert not external, f"the page fetches {external}"
    for words in ("Verdict matrix", "exact proof at these dims", "numeric evidence", "inputs are real"):
        assert words in page


def test_every_certificate_validates_against_the_published_schema(tmp_path):
    reports = tmp_path / "reports"
    assert main(["prove", "layernorm", "--reports", str(reports), "--quiet"]) == 0
    from vjpcert.core.certificate import SCHEMA_VERSION
    schema = json.loads((reports / "schema" / f"certificate-v{SCHEMA_VERSION}.schema.json").read_text())
    for path in (reports / "certificates").rglob("*.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)
    bad = json.loads(next((reports / "certificates").rglob("*.json")).read_text())
    bad["verdict"] = "failed"                                   # a failure needs a witness
    try:
        jsonschema.validate(bad, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the schema accepted a failed certificate without a witness")
