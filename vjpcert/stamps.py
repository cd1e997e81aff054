"""Skip the slow by-products of a run when their inputs did not change.

A no-op ``vjpcert all`` used to spend most of its time redrawing every finite-difference plot and
recompiling every kernel for the resource table. Each of those is a pure function of code, versions
and the seed, so it is stamped: ``reports/stamps.json`` holds the sha256 of its inputs when it was
last made, and it is made again only when that hash differs or its output is missing. Nothing here
decides a verdict: a wrong stamp can cost a stale picture or resource table, never a certificate
(``vjpcert verify`` never reads stamps)."""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from vjpcert.core.certificate import atomic_write
from vjpcert.core.code_hash import code_sha256

STAMPS = "stamps.json"


@lru_cache(maxsize=None)
def _version(dist: str) -> str | None:      # once per process: the library it loaded
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@lru_cache(maxsize=1)
def _plots_code_sha256() -> str:
    return code_sha256("vjpcert.numeric.plots")


def plot_inputs(op, seed: int) -> str:
    """Everything an op's finite-difference plot is drawn from: the op's code and its mutants' (the
    dashed lines), the numeric tier's code (numeric/plots.py included), the seed, and the versions of
    the libraries that compute and draw it."""
    from vjpcert.core.sources import code_files, files_sha256
    mutants = sorted(code_files(functions=[m.fn for m in getattr(op, "mutants", ()) if getattr(m, "fn", None)]))
    return _sha({"op": op.base_name, "spec": op.spec_sha256, "mutants": files_sha256(mutants),
                 "mutant_names": sorted(m.name for m in getattr(op, "mutants", ())),
                 "numeric": _plots_code_sha256(), "seed": seed,
                 "versions": {d: _version(d) for d in ("numpy", "mpmath", "scipy", "matplotlib", "vjpcert")}})


def resources_inputs() -> str:
    """Everything the kernel resource table is compiled from: the kernels' code and the compiler's
    versions."""
    return _sha({"kernels": code_sha256("vjpcert.cuda_kernels.resources", discovered="vjpcert.cuda_kernels"),
                 "versions": {d: _version(d) for d in ("numba", "numba-cuda", "cuda-core", "vjpcert")}})


class Stamps:
    """``reports/stamps.json``: {"plots": {op: hash}, "resources": hash, "pages": {"inputs": hash,
    "files": {page: hash}}}."""

    def __init__(self, root: Path):
        self.path = Path(root) / STAMPS
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            data = {}
        self.data = data if isinstance(data, dict) else {}

    def current(self, key: str, inputs: str, outputs: list[Path]) -> bool:
        """Whether ``key`` was last made from ``inputs`` and every one of its ``outputs`` is there."""
        section, _, name = key.partition("/")
        recorded = self.data.get(section, {}).get(name) if name else self.data.get(section)
        return recorded == inputs and all(Path(p).is_file() for p in outputs)

    def pages_current(self, inputs: str) -> bool:
        """Whether the pages were last rendered from ``inputs`` and each is on disk as rendered then."""
        pages = self.data.get("pages")
        if not isinstance(pages, dict) or pages.get("inputs") != inputs or not pages.get("files"):
            return False
        root = self.path.parent
        try:
            return all(hashlib.sha256((root / rel).read_bytes()).hexdigest() == h
                       for rel, h in pages["files"].items())
        except OSError:
            return False

    def record_pages(self, inputs: str, files: dict) -> None:
        """The pages were rendered from ``inputs``: {page: sha256 of its text}."""
        if self.data.get("pages") != {"inputs": inputs, "files": files}:
            self.data["pages"] = {"inputs": inputs, "files": files}
            atomic_write(self.path, json.dumps(self.data, indent=1, sort_keys=True) + "\n")

    def record(self, key: str, inputs: str | None) -> None:
        """Remember ``inputs`` for ``key`` (None forgets it: made with an error, make it again)."""
        section, _, name = key.partition("/")
        if name:
            group = self.data.setdefault(section, {})
            group.pop(name, None) if inputs is None else group.__setitem__(name, inputs)
        elif inputs is None:
            self.data.pop(section, None)
        else:
            self.data[section] = inputs
        atomic_write(self.path, json.dumps(self.data, indent=1, sort_keys=True) + "\n")
