"""The reports people read: Markdown per op, the index, the published schema, and one
self-contained HTML page (no network needed to view it)."""
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import jsonschema

from vjpcert.cli import main

ROOT = Path(__file__).resolve().parents[1]


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.urls = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]


def test_html_report_is_self_contained_with_formulas_plots_and_trust():
    """The committed pages (test_the_committed_reports_are_current holds them to what the certificates
    render to): an index that links to a page per op, each page self-contained."""
    index = (ROOT / "reports" / "index.html").read_text(encoding="utf-8")
    links = _Collect()
    links.feed(index)
    assert "ops/softmax.html" in links.urls, "the index links to the op's page"
    assert "Verdict matrix" in index and "data:image/png" not in index, "the index stays small: no plots"
    page = (ROOT / "reports" / "ops" / "softmax.html").read_text(encoding="utf-8")
    p = _Collect()
    p.feed(page)
    assert "math" in p.tags, "formulas are rendered as MathML"
    assert any(u.startswith("data:image/png;base64,") for u in p.urls), "the plot is embedded"
    for text in (index, page):
        c = _Collect()
        c.feed(text)
        external = [u for u in c.urls if re.match(r"^(https?:)?//", u)]
        assert not external, f"the page fetches {external}"
    for words in ("exact proof at these dims", "numeric evidence", "inputs are real"):
        assert words in page


def test_every_certificate_validates_against_the_published_schema():
    """Every committed certificate (every tier, the framework report's too) against the committed
    schema file, read as a stranger would, with jsonschema alone."""
    from vjpcert.core.certificate import SCHEMA_VERSION
    reports = ROOT / "reports"
    schema = json.loads((reports / "schema" / f"certificate-v{SCHEMA_VERSION}.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    paths = [*(reports / "certificates").rglob("*.json"), *(reports / "frameworks" / "certificates").rglob("*.json")]
    assert len({p.parent.name for p in paths}) > 20 and {json.loads(p.read_text())["tier"] for p in paths} >= {
        "symbolic", "numeric", "kernel"}
    for path in paths:
        validator.validate(json.loads(path.read_text()))
    bad = json.loads(next((reports / "certificates").rglob("*.json")).read_text())
    bad["verdict"] = "failed"                                   # a failure needs a witness
    try:
        jsonschema.validate(bad, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the schema accepted a failed certificate without a witness")


def _broken(record):
    """Records one edit away from a valid one: each field removed, or given a value of each other
    JSON type; a verdict outside the list; a failure without its witness; a field too many; a
    wrong entry inside each list and object field."""
    for key in record:
        yield {k: v for k, v in record.items() if k != key}
        for value in (None, 1, 1.5, "x", "", [], {}, [1], {"a": 1}, True):
            yield {**record, key: value}
    yield {**record, "verdict": "proved!"}
    yield {**record, "verdict": "failed", "evidence": {k: v for k, v in record["evidence"].items() if k != "witness"}}
    yield {**record, "unexpected": 1}
    for key, value in record.items():
        if isinstance(value, list) and value:
            yield {**record, key: [*value, 1]}
            yield {**record, key: [None]}
        if isinstance(value, dict):
            yield {**record, key: {**value, "x": None}}


def test_verify_s_compiled_validator_agrees_with_the_reference_validator():
    """`vjpcert verify` validates with the schema compiled to code (fastjsonschema); on every committed
    certificate and on each record one edit away from one per tier, it says valid exactly where the
    reference validator (jsonschema, the committed schema file) does, and names the field it rejects."""
    from vjpcert.core.certificate import SCHEMA_VERSION
    from vjpcert.verify import _validator
    reports = ROOT / "reports"
    schema = json.loads((reports / "schema" / f"certificate-v{SCHEMA_VERSION}.schema.json").read_text())
    reference = jsonschema.Draft202012Validator(schema)
    fast = _validator()
    records = [json.loads(p.read_text()) for p in (reports / "certificates").rglob("*.json")]
    assert all(fast(r) is None for r in records)
    one_per_tier = {}
    for r in records:
        one_per_tier.setdefault(r["tier"], r)
    assert len(one_per_tier) >= 3
    r = records[0]          # and a failure, whose evidence must hold a witness
    failure = {**r, "verdict": "failed", "trust": "disproved, with a witness",
               "evidence": {**r["evidence"], "witness": {"x": 1}}}
    assert fast(failure) is None and reference.is_valid(failure)
    rejected = 0
    for record in [*one_per_tier.values(), failure]:
        for bad in _broken(record):
            error = fast(bad)
            assert (error is None) == reference.is_valid(bad), (bad, error)
            if error is not None:
                rejected += 1
                where, message = error
                assert where == "record" or where.split("/")[0] in bad, (where, message)
    assert rejected > 100


def test_written_files_are_readable_by_others_under_the_usual_umask(tmp_path):
    """Certificates and pages are written through a temporary file (mkstemp: mode 0600) and renamed;
    they get the mode a plain open would give (0644 under umask 022, 0640 under 027), and a file
    that exists keeps its own mode."""
    import os
    import stat

    from vjpcert.core.certificate import atomic_write
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "page.html", "<p>1</p>")
        assert stat.S_IMODE((tmp_path / "page.html").stat().st_mode) == 0o644
        os.umask(0o027)
        atomic_write(tmp_path / "other.json", "{}")
        assert stat.S_IMODE((tmp_path / "other.json").stat().st_mode) == 0o640
        os.chmod(tmp_path / "page.html", 0o600)                   # the user's choice is kept
        atomic_write(tmp_path / "page.html", "<p>2</p>")
        assert stat.S_IMODE((tmp_path / "page.html").stat().st_mode) == 0o600
    finally:
        os.umask(old)
