"""A JSON file of entries vjpcert can compute again, kept under ``cache_dir()``: read once per process,
this process's new entries merged into it when saved (best effort: a cache that cannot be read or
written only costs the work again). Keys must name their content (a sha256 of everything an entry
was computed from), so an edit is never served an old answer, whatever the clocks and file systems say.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def cache_dir() -> Path:
    """Where vjpcert keeps what it can compute again (``VJPCERT_CACHE_DIR``, else the user's cache)."""
    return Path(os.environ.get("VJPCERT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vjpcert"))


class DiskCache:
    def __init__(self, filename: str, version: str, *, limit: int = 20000):
        self.filename, self.version, self.limit = filename, version, limit
        self._read: dict | None = None
        self._new: dict = {}

    def _path(self) -> Path:
        return cache_dir() / self.filename

    def _entries(self, path: Path) -> dict:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = data["entries"] if data.get("version") == self.version else {}
            return entries if isinstance(entries, dict) else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def get(self, key: str):
        if key in self._new:
            return self._new[key]
        if self._read is None:
            self._read = self._entries(self._path())
        return self._read.get(key)

    def put(self, key: str, value) -> None:
        self._new[key] = value

    def save(self) -> None:
        if not self._new:
            return
        path = self._path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            entries = self._entries(path)
            entries.update(self._new)
            if len(entries) > self.limit:            # old versions of files pile up: start again
                entries = dict(self._new)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": self.version, "entries": entries}), encoding="utf-8")
            os.replace(tmp, path)
            self._new.clear()
        except OSError:
            pass
