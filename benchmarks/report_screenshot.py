"""Screenshots of the HTML report as headless Chromium draws it: CI installs only Python
packages, so the browser test (tests/test_report_browser.py) skips there; this script makes the
committed screenshots instead.

It renders a throwaway copy of REPORTS (default: reports/) with `vjpcert render` (no check runs), so
the screenshot shows the current rendering of the committed certificates, and writes
reports/screenshots/index.png (the top of the page: the verdict matrix, the legend, the kernel
resources).
Needs Chromium (Debian: apt-get install chromium).

Run: python benchmarks/report_screenshot.py [REPORTS]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main():
    from vjpcert.browser import find_chromium, screenshot
    from vjpcert.cli import main as vjpcert
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "reports"
    if find_chromium() is None:
        sys.exit("no Chromium found (Debian: apt-get install chromium)")
    out = ROOT / "reports" / "screenshots"
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "reports"
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("screenshots", "benchmarks", "mutation"))
        assert vjpcert(["render", str(copy)]) == 0
        path = screenshot(copy / "index.html", out / "index.png", width=1280, height=1400)
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
