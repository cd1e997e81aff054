"""Certificates: one JSON record per (op, claim, tier, method, dims).

Records carry no timestamps and no timings -- how long a claim took lives in the run's
``timings.json`` beside the reports (not committed) -- so a rerun of unchanged code writes the same
bytes and a report diffs cleanly; ``spec_sha256`` and ``checker_sha256`` let ``vjpcert verify`` tell a
current certificate from a stale one.
"""
from __future__ import annotations

import functools

import hashlib
import json
import os
import platform
import tempfile
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

SCHEMA_VERSION = 2

# Verdicts, strongest first. Only `proved*` claim more than "agrees where we looked".
VERDICTS = {
    "proved": "exact: an exact normalisation of backward - J^T dy (or of the law) returned 0, "
              "for all inputs at the stated dims",
    "proved-general": "exact for every size: the statement, derived from the spec's own code by a "
                      "shape-polymorphic trace, was proved with symbolic dimensions under the stated "
                      "assumptions",
    "proved-compositional": "exact by composition: every node proved, and the assembly of node "
                            "Jacobians proved equal to the transpose of the chain",
    "checked-probabilistic": "a randomised exact identity test (Schwartz-Zippel) passed; the "
                             "probability of a false pass is stated",
    "checked": "numeric agreement at the stated precision and points; not a proof",
    "kernel-match": "a kernel matched the spec within the stated tolerance rule",
    "inconclusive": "no strategy could decide within its budget",
    "failed": "the claim is false: the evidence holds a witness",
}
PASSING = {"proved", "proved-general", "proved-compositional", "checked-probabilistic", "checked",
           "kernel-match"}
TRUST = {  # how much a reader may rely on a verdict, in words
    "proved": "exact proof at these dims",
    "proved-general": "exact proof for every size, derived from the spec's code",
    "proved-compositional": "exact proof by composition",
    "checked-probabilistic": "randomised exact test",
    "checked": "numeric evidence",
    "kernel-match": "numeric evidence (kernel vs spec)",
    "inconclusive": "no evidence either way",
    "failed": "disproved, with a witness",
}


def dims_slug(dims: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in sorted(dims.items())) or "scalar"


def claim_slug(claim: str) -> str:
    return claim.replace("[", "-").replace("]", "").replace("/", "-").replace(":", "-")


def cert_relpath(op: str, variant: str, claim: str, dims: dict) -> Path:
    """Where the certificate of (op, variant, claim, dims) lives under a report directory."""
    return Path("certificates") / op / f"{variant}__{claim_slug(claim)}__{dims_slug(dims)}.json"


@dataclass
class Certificate:
    op: str
    claim: str
    tier: str                       # "symbolic" | "numeric" | "kernel" | "triton" | "implementation"
    verdict: str
    method: str
    dims: dict
    assumptions: list
    evidence: dict
    spec_sha256: str
    checker_sha256: str
    versions: dict
    schema: int = SCHEMA_VERSION
    trust: str = field(default="")
    options: dict = field(default_factory=dict)   # what the run was asked for: seed, dps, budget, ...
    # the files spec_sha256 covers: spec code, then the data that code read ("data:<path> sha256=<hash>",
    # "listing:<folder> sha256=<hash>", relative to the op's spec folder; see core.sources)
    sources: list = field(default_factory=list)
    digest: str = ""                              # sha256 of the record itself: hand edits show
    seconds: float = field(default=0.0, compare=False)   # this run's time: shown, never recorded

    @classmethod
    def issue(cls, op, **fields) -> "Certificate":
        """A certificate about ``op``: its name (a mutant's is its op's), the hash of every file of
        its code and of every data file that code read, their names (``core.sources.covered``), and
        the versions in use filled in."""
        from vjpcert.core.code_hash import covers
        from vjpcert.core.sources import covered
        fields.setdefault("versions", versions())
        said = covers(fields.get("checker_sha256", ""))
        if said:                         # what the checker hash covers, in words
            fields["evidence"] = {**fields.get("evidence", {}), "checker_covers": said}
        spec_sha256, sources = covered(op)
        return cls(op=op.base_name, spec_sha256=spec_sha256, sources=sources, **fields)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")
        if self.verdict == "failed" and "witness" not in self.evidence:
            raise ValueError("a failed certificate must carry a witness")
        self.trust = TRUST[self.verdict]
        self.seconds = round(float(self.seconds), 4)

    @property
    def passed(self) -> bool:
        return self.verdict in PASSING

    @property
    def key(self) -> tuple:
        return (self.op, self.variant, self.claim, dims_slug(self.dims))

    @property
    def variant(self) -> str:
        """The tier, refined by how a symbolic claim was decided as a whole (monolithic, by
        composition, for every size), and a numeric check at a given point kept apart from the
        sampled ones, so the certificates of one claim can stand side by side."""
        if self.tier == "symbolic" and self.method in ("compositional", "general"):
            return f"{self.tier}-{self.method}"
        if self.tier == "symbolic" and (self.options or {}).get("method") == "modular":
            return f"{self.tier}-modular"
        return f"{self.tier}-point" if (self.options or {}).get("point") else self.tier

    def relpath(self) -> Path:
        return cert_relpath(self.op, self.variant, self.claim, self.dims)

    # ---- how a certificate shows itself in Python: one line, one small table (the record is in to_json)
    def __repr__(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items())) or "every size"
        more = "; its witness: .evidence['witness']" if self.verdict == "failed" else ""
        return f"<certificate {self.op} {self.claim} {self.tier} [{dims}]: {self.verdict} ({self.method}){more}>"

    def _repr_html_(self) -> str:
        from html import escape
        dims = ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items())) or "every size"
        rows = [("op", self.op), ("claim", self.claim), ("tier", self.tier), ("dims", dims),
                ("verdict", self.verdict), ("trust", self.trust), ("method", self.method)]
        rows += [("assumes", a) for a in self.assumptions]
        return ("<table>" + "".join(f"<tr><th style='text-align:left'>{escape(k)}</th><td style='text-align:left'>"
                                    f"{'<b>' + escape(str(v)) + '</b>' if k == 'verdict' else escape(str(v))}</td></tr>"
                                    for k, v in rows) + "</table>")

    def to_json(self) -> str:
        record = json.loads(json.dumps(asdict(self), default=str))
        record.pop("seconds")
        record["evidence"] = _without_timings(record["evidence"])
        record.pop("digest")
        record["digest"] = record_digest(record)
        self.digest = record["digest"]
        return json.dumps(record, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict) -> "Certificate":
        d = dict(d)
        d.pop("trust", None)
        return cls(**d)

    def _repr_markdown_(self) -> str:
        ev = ", ".join(f"{k}={v}" for k, v in self.evidence.items() if k != "witness")
        return (f"**{self.op}** · `{self.claim}` at {self.dims}: **{self.verdict}** ({self.trust}) "
                f"by *{self.method}*" + (f" in {self.seconds:.3g} s" if self.seconds else "")
                + (f"<br>{ev}" if ev else ""))


# Evidence keys that hold how long something took: measured, not certified; they differ from run to
# run and machine to machine, so a certificate never records them.
TIMING_KEYS = frozenset({"seconds", "timings"})


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def record_digest(record: dict) -> str:
    """The digest a certificate carries: sha256 of its canonical JSON without the digest itself."""
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


CERTIFICATE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://vjpcert.invalid/schema/certificate-v2.json",
    "title": "vjpcert certificate",
    "description": "One record per (op, claim, tier/method, dims). JSON is the source of truth.",
    "type": "object",
    "required": ["op", "claim", "tier", "verdict", "method", "dims", "assumptions", "evidence",
                 "spec_sha256", "checker_sha256", "versions", "schema", "trust", "options", "sources",
                 "digest"],
    "additionalProperties": False,
    "properties": {
        "op": {"type": "string", "minLength": 1},
        "claim": {"type": "string", "minLength": 1},
        "tier": {"enum": ["symbolic", "numeric", "kernel", "triton", "implementation"]},
        "verdict": {"enum": list(VERDICTS)},
        "method": {"type": "string"},
        "dims": {"type": "object"},
        "assumptions": {"type": "array", "items": {"type": "string"}},
        "evidence": {"type": "object"},
        "spec_sha256": {"type": "string"},
        "checker_sha256": {"type": "string"},
        "versions": {"type": "object", "additionalProperties": {"type": "string"}},
        "schema": {"const": SCHEMA_VERSION},
        "trust": {"enum": sorted(set(TRUST.values()))},
        "options": {"type": "object"},
        "sources": {"type": "array", "items": {"type": "string"}},
        "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
    "allOf": [{"if": {"properties": {"verdict": {"const": "failed"}}},
               "then": {"properties": {"evidence": {"required": ["witness"]}}}}],
}


def versions() -> dict:
    return dict(_versions())


@functools.cache
def _versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("vjpcert", "sympy", "mpmath", "numpy", "python-flint"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def checker_code_sha256(entry: str, *, discovered: str | None = None) -> str:
    """A checker's hash: the normalised code of its entry module and of every vjpcert module that
    imports, so only a change in behaviour of the code that issued a certificate makes it stale
    (``core.code_hash``)."""
    from vjpcert.core.code_hash import checker_code_sha256 as of
    return of(entry, discovered=discovered)


def sources_sha256(paths) -> str:
    """Hash of a checker's own source: a certificate is stale once the code that issued it changes."""
    h = hashlib.sha256()
    for p in sorted(Path(x) for x in paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


TEMPORARY_PREFIX = ".tmp-"


def remove_orphaned_temporaries(root: Path) -> list[Path]:
    """Remove the temporary files of writers that no longer run (a process killed by SIGKILL between
    creating its temporary file and renaming it cannot clean up). A temporary file is named after its
    writer's process id; a live writer's files are left alone."""
    removed = []
    for tmp in Path(root).rglob(f"{TEMPORARY_PREFIX}*"):
        pid = tmp.name[len(TEMPORARY_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        try:
            tmp.unlink()
            removed.append(tmp)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _new_file_mode(path: Path) -> int:
    """The mode a file written here gets: the one it has, else what ``open`` would give a new file
    (0666 less the umask: 0644 under the usual 022), not mkstemp's private 0600, so a colleague or a
    web server can read the reports."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and rename: a crash leaves the old file, never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
