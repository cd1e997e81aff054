"""A command with nothing to do, decided from file contents alone: ``vjpcert all`` run again.

Planning ``vjpcert all`` on reports that are all current imports every spec, hashes every op's code and
reads every certificate, to find that nothing is to run: about a second. A run from the command line
that ran no claim, refused no op and left every file under its report folder as it found it is a fixed
point: the same command on the same files decides the same again and prints the same. So what it
printed (a ``Transcript``) and its exit code are kept under ``cache_dir()``, with one sha256 of
everything its decisions were made from (``Fingerprint``); the same command line, whose files hash the
same, prints that again and exits as it did, without planning. It is a build tool's no-op (make,
ninja), but keyed by content, as every cache here is (``core.disk_cache``): no clock is trusted.

The fingerprint covers deliberately more than planning reads -- a change it need not have seen costs
one full plan, never the replay of a stale answer:
- the parsed command line, the working directory, the interpreter, ``sys.path``, and the environment
  variables vjpcert and the libraries under it read (``ENVIRONMENT``);
- every file of vjpcert's own code (the checkers, the built-in specs, the planner, this module);
- the entry names of every folder on ``sys.path`` (a package installed, removed or upgraded);
- every file of the ops' code from outside vjpcert (``Op.source_files``: a spec file and the user
  modules it imports), each command-line target, and the entry names of their folders (a module that
  would now shadow one they import);
- every data file and folder listing a certificate lists (hashed as ``plan.is_current`` hashes them);
- every file under the report folder, by content.
A run replays only from the command line's entry point (``cli.main()`` with no argv): a Python caller
(a test, a notebook) may hold code that differs from its files -- a module edited after its import, a
patched checker -- which no file can tell. A torch:/jax: target is always planned (what it traces is a
framework's behaviour, not only files), as is any run with --force, --point or --scheduler.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from vjpcert.core.disk_cache import cache_dir
from vjpcert.core.reads import hash_now     # files and listings hashed as a certificate's data files are

FORMAT = "1"                     # of the kept runs: a new format starts from an empty memory
KEPT = 256                       # runs kept (one per command line); the least recently kept go first
ENVIRONMENT = ("VJPCERT_", "NUMBA_", "TRITON_", "CUDA_", "PYTHON", "SYMPY_", "MPMATH_", "JAX_", "XLA_",
               "TORCH", "XDG_CACHE_HOME", "HOME")
# vjpcert's floors as installed (pyproject's package-dir): every file in them is its own code
PACKAGES = ("vjpcert", "vjpcert.core", "vjpcert.specs", "vjpcert.frontends", "vjpcert.symbolic",
            "vjpcert.numeric", "vjpcert.cuda_kernels", "vjpcert.triton_kernels")


# ------------------------------------------------------------------------------ what a run printed
class Transcript:
    """The console of a tier command, keeping what it printed: text (rich markup, with the keyword
    arguments it was printed with) and the summary table as data, so a replay prints it again at the
    terminal's width then. Anything else printed (a renderable) makes it unreplayable."""

    def __init__(self, console):
        self.console = console
        self.items: list = []
        self.replayable = True
        self.ran = 0                   # claims run by the command
        self.complete = False          # it printed its table: not stopped (interrupted) before the end
        self.records: list = []        # (op, record) of every current certificate it read

    def print(self, *objects, **kwargs) -> None:
        self.console.print(*objects, **kwargs)
        if all(isinstance(o, str) for o in objects) and all(isinstance(v, (bool, str, type(None)))
                                                            for v in kwargs.values()):
            self.items.append(["text", list(objects), kwargs])
        else:
            self.replayable = False

    def table(self, title: str, columns: list[str], rows: list[list[str]]) -> None:
        self.console.print(_table(title, columns, rows))
        self.items.append(["table", title, columns, rows])
        self.complete = True


def _table(title, columns, rows):
    from rich.table import Table
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for row in rows:
        table.add_row(*row)
    return table


def replay_items(console, items: list) -> None:
    for item in items:
        if item[0] == "table":
            console.print(_table(*item[1:]))
        else:
            console.print(*item[1], **item[2])


# ------------------------------------------------------------------------------ the fingerprint
def _tree(h, root: Path, label: str) -> None:
    """Every file under ``root`` (but Python's bytecode caches), by path and content; a linked folder is
    followed (what it holds is read as if it were here), once."""
    seen = set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:                     # a link back up the tree
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(folder, root)
        for name in sorted(files):
            h.update(f"\0{label}:{rel}/{name}\0".encode("utf-8", "surrogateescape"))
            h.update(hash_now("data", Path(folder) / name).encode())


def package_roots() -> list[Path]:
    """The folder of each floor's ``__init__.py`` (not its whole search path: run from a source tree,
    ``vjpcert``'s also names the repository, to find the floors beside it)."""
    out = set()
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            out.add(Path(spec.origin).resolve().parent)
    return sorted(out)


def code_digest(search_path: list[str]) -> str:
    """vjpcert's own code and what is installed beside it: every file of its packages, the names in
    every folder of ``search_path`` (``sys.path`` as the process started: loading a spec adds its
    folder), and the interpreter."""
    h = hashlib.sha256(json.dumps([sys.executable, sys.version, search_path]).encode("utf-8", "surrogateescape"))
    for root in package_roots():
        _tree(h, root, str(root))
    for entry in search_path:
        if entry and os.path.isdir(entry):
            h.update(f"\0path:{entry}={hash_now('listing', Path(entry))}".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def reports_digest(root: Path) -> str:
    h = hashlib.sha256()
    if root.is_dir():
        _tree(h, root, "reports")
    else:
        h.update(b"absent" if not root.exists() else b"not a folder")
    return h.hexdigest()


def user_digest(files: list[str], folders: list[str], data: list[list[str]], known: dict | None = None) -> str:
    """The ops' own files and their folders' names, and the data their certificates list: as on disk
    now, or, for a path in ``known``, with the hash given there (what the run loaded or recorded)."""
    known = known or {}
    h = hashlib.sha256()
    for f in files:
        h.update(f"\0file:{f}={known.get(f) or hash_now('data', Path(f))}".encode("utf-8", "surrogateescape"))
    for d in folders:
        h.update(f"\0folder:{d}={hash_now('listing', Path(d))}".encode("utf-8", "surrogateescape"))
    for kind, path in data:
        now = known.get(f"{kind}:{path}") or hash_now(kind, Path(path))
        h.update(f"\0{kind}:{path}={now}".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def command_key(args, command: str) -> str:
    """The command line as parsed, where it runs, and the environment it reads."""
    env = {k: v for k, v in os.environ.items() if k.startswith(ENVIRONMENT)}
    options = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    return hashlib.sha256(json.dumps([FORMAT, command, options, os.getcwd(), env], sort_keys=True,
                                     default=repr).encode("utf-8", "surrogateescape")).hexdigest()


def replayable_command(args) -> bool:
    from vjpcert.ops import is_frontend_target
    return not (getattr(args, "force", False) or getattr(args, "point", None) or getattr(args, "impl", None)
                or getattr(args, "scheduler", None) or any(is_frontend_target(t) for t in args.targets))


# ------------------------------------------------------------------------------ the memory
class Memo:
    """One command line's last fixed point: ``replay()`` before planning, ``record()`` after the run."""

    def __init__(self, args, command: str):
        self.key = command_key(args, command)
        self.root = Path(args.reports).resolve()
        self.path = cache_dir() / "up-to-date" / f"{self.key}.json"
        self.search_path = list(sys.path)
        self.before = (code_digest(self.search_path), reports_digest(self.root))

    def _load(self) -> dict | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("format") == FORMAT else None

    def _digest(self, before: tuple[str, str], user: str) -> str:
        return hashlib.sha256("\0".join((self.key, *before, user)).encode()).hexdigest()

    def replay(self) -> int | None:
        """Print what the kept run printed and return its exit code, if every file it was decided from
        hashes as it did then; else None (plan)."""
        kept = self._load()
        if kept is None:
            return None
        try:
            user = user_digest(kept["files"], kept["folders"], kept["data"])
            if kept["digest"] != self._digest(self.before, user):
                return None
            notes, items, code = kept["notes"], kept["items"], int(kept["code"])
        except (KeyError, TypeError, ValueError):
            return None
        from rich.console import Console
        for note in notes:
            print(note, file=sys.stderr)
        replay_items(Console(stderr=True, soft_wrap=True), items)
        return code

    def record(self, out: Transcript, code: int, ops: dict, targets, notes: list[str], refused: dict) -> bool:
        """Keep this run if it is a fixed point: it finished, ran nothing, refused nothing, printed only
        text and the table, and left its report folder's files and vjpcert's code as they were before it
        planned; kept with the hashes of the op files as they were loaded and of the data as its
        certificates list it, and only if the disk still holds those. True if kept."""
        if not out.complete or out.ran or refused or not out.replayable:
            return False
        try:
            return self._record(out, code, ops, targets, notes)
        except (OSError, ValueError):          # a file gone since it was read: not a fixed point
            return False

    def _record(self, out: Transcript, code: int, ops: dict, targets, notes: list[str]) -> bool:
        if (code_digest(self.search_path), reports_digest(self.root)) != self.before:
            return False
        from vjpcert.core.sources import base_dir, parse_entry, snapshot
        packages = package_roots()
        known: dict[str, str] = {}
        for t in targets:
            if Path(t).is_file():
                known.setdefault(str(Path(t).resolve()), hash_now("data", Path(t)))
        for op in ops.values():
            for f in map(Path, op.source_files):
                if not any(f == r or r in f.parents for r in packages):     # vjpcert's own are hashed whole
                    known[str(f)] = snapshot(f)                              # as this run loaded it
        files = sorted(known)
        data = set()
        for op, record in out.records:
            for text in record.get("sources") or ():
                parsed = parse_entry(text)
                if parsed is None:
                    continue
                kind, label, h = parsed
                if label == "?":
                    return False                   # a read that was not recorded
                path = str(base_dir(op) / label)
                known[f"{kind}:{path}"] = h        # as the certificate lists it
                data.add((kind, path))
        data = sorted(map(list, data))
        folders = sorted({str(Path(f).parent) for f in files})
        loaded = user_digest(files, folders, data, known)
        if loaded != user_digest(files, folders, data):
            return False                           # edited since it was loaded or recorded: the run used the old
        kept = {"format": FORMAT, "files": files, "folders": folders, "data": data, "notes": notes,
                "items": out.items, "code": code, "digest": self._digest(self.before, loaded)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(kept), encoding="utf-8")
        os.replace(tmp, self.path)
        _forget_old(self.path.parent)
        return True


def _forget_old(folder: Path) -> None:
    """Keep the ``KEPT`` runs kept last (by the time they were written: only which to drop depends on it)."""
    runs = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns if p.exists() else 0)
    for old in runs[:-KEPT]:
        old.unlink(missing_ok=True)
