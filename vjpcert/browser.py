"""A real browser's view of the HTML report: headless Chromium takes a screenshot of a page, so a
test can assert on what a reader sees (colours drawn, nothing blank) rather than on the file's text.
Chromium is not a dependency: ``find_chromium`` returns None where it is not installed (Debian:
``apt-get install chromium``), and the tests that need it skip."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(page: Path, flags: list[str], timeout: float) -> subprocess.CompletedProcess:
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("no Chromium found (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:       # a fresh profile: no state from other runs
        return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
                               *flags, Path(page).resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout)


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 1600, timeout: float = 120) -> Path:
    """Render ``page`` (a local HTML file) in headless Chromium and write a ``width`` x ``height``
    screenshot to ``png``. No network is used: the report is self-contained."""
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(page, [f"--window-size={width},{height}", f"--screenshot={png}"], timeout)
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return png


def dump_dom(page: Path, *, width: int = 1280, height: int = 800, timeout: float = 120) -> str:
    """The DOM of ``page`` after Chromium loaded it and its scripts ran (their load handlers too), as
    HTML: what a reader's browser holds, not the file's text."""
    proc = _run(page, [f"--window-size={width},{height}", "--dump-dom"], timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout
