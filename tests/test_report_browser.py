"""index.html in a real headless browser (Chromium): the screenshot shows the verdict matrix with
its colours, a failed op in red beside a proved one in green, and text. Skipped where Chromium is
not installed (`.ci/run` installs it where apt-get can); `python benchmarks/report_screenshot.py` makes the
committed screenshot, reports/screenshots/index.png."""
import pytest

from vjpcert.browser import find_chromium, screenshot
from conftest import REPORT_OPS as OPS
from vjpcert.cli import main

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="no Chromium (apt-get install chromium)")

PROVED, FAILED = (217, 242, 217), (249, 208, 208)        # .v-proved and .v-failed in vjpcert/html.py


def _pixels(png):
    from PIL import Image
    with Image.open(png) as image:
        rgb = image.convert("RGB")
        pixels = rgb.get_flattened_data() if hasattr(rgb, "get_flattened_data") else rgb.getdata()  # Pillow >= 12.1
        return rgb.size, list(pixels)


def test_the_report_as_a_browser_draws_it(tmp_path):
    spec = tmp_path / "mine.py"
    spec.write_text(OPS)
    reports = tmp_path / "reports"
    assert main(["prove", str(spec), "--reports", str(reports), "--quiet"]) == 1
    png = screenshot(reports / "index.html", tmp_path / "index.png", width=1000, height=900)
    (width, height), pixels = _pixels(png)
    assert (width, height) == (1000, 900)
    assert pixels.count(PROVED) > 500, "no proved (green) cell was drawn"
    assert pixels.count(FAILED) > 500, "no failed (red) cell was drawn"
    dark = sum(1 for p in pixels[: width * 120] if sum(p) < 150)
    assert dark > 1000, "the title band is blank: the page did not render"


def test_a_control_page_without_a_failure_draws_no_red(tmp_path):
    spec = tmp_path / "mine.py"
    spec.write_text(OPS.replace("(2 * x * x * dy,)", "(3 * x * x * dy,)"))
    reports = tmp_path / "reports"
    assert main(["prove", str(spec), "--reports", str(reports), "--quiet"]) == 0
    # the verdict legend has one red cell ("failed"); a failure adds its count in the totals, the
    # matrix's cell and the claim's (its op's claims are open when one failed)
    (_, _), ok = _pixels(screenshot(reports / "index.html", tmp_path / "ok.png", width=1000, height=900))
    spec.write_text(OPS)
    assert main(["prove", str(spec), "--reports", str(reports), "--quiet"]) == 1
    (_, _), bad = _pixels(screenshot(reports / "index.html", tmp_path / "bad.png", width=1000, height=900))
    assert bad.count(FAILED) > ok.count(FAILED) + 500
