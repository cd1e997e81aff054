"""Which files a claim's code comes from, and their hashes as they were *loaded*.

A certificate is current only while nothing that made it has changed. Besides vjpcert's own checker
code (each tier hashes its own), that is every file of the op's code from outside vjpcert's machinery:
the spec file, every module it imports -- transitively, also imports written inside functions -- the
spec files of a composite's nodes, and the mutant's file for a mutant. They are found from the
modules' source (every ``import`` statement) and their live namespaces (every imported function's
module), and kept if they are neither the standard library, nor an installed package, nor vjpcert's
machinery (``vjpcert.specs`` is not machinery: built-in specs are specs).

Each file is hashed when it is first seen *in this process* (at import time, in practice), so a
long-lived worker that still runs old code reports the old hash: ``vjpcert.runner`` compares it with
the planner's and reloads or refuses, instead of certifying code that is no longer on disk.

What that code *reads* is part of the claim too: a data file it opens (``open``, ``json.load``,
``Path.read_text``, ``np.load``, ``np.loadtxt``, ``os.open`` ...) and a folder it lists (``os.listdir``,
``os.scandir``, ``Path.glob``), at import time or while the op's functions run. One process-wide audit
hook (``sys.addaudithook``, the "open", "os.listdir" and "os.scandir" events) sees every such access
and credits it to the spec-code files on the stack (up to the first frame of vjpcert's machinery), with
the content's hash as read; a forked child (a strategy under its budget) sends its reads to its
parents through a log file. A certificate lists them beside its code files (``data:<path> sha256=...``,
``listing:<path> sha256=...``, paths relative to the op's spec folder) and its ``spec_sha256`` covers
them; whether it is current is decided by hashing those files again (``current_sha256``). Not data:
files of the Python installation and of installed packages, vjpcert's own machinery, /proc, /sys and
/dev, and the import system's own reads of modules (their code is hashed as code).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import stat
import sys
import sysconfig
import threading
import time
from pathlib import Path

_SNAPSHOT: dict[str, str] = {}
_IMPORTS: dict[tuple, set] = {}              # (file, module name) -> files it imports
_FILE_MODULES: dict[Path, str] = {}          # resolved file -> a module loaded from it
_FILE_MODULES_KEY: tuple | None = None
_RESOLVED: dict[str, Path] = {}

_PACKAGE = Path(__file__).resolve().parents[1]           # the repository root, or vjpcert's install root
_MACHINERY = {"core", "symbolic", "numeric", "cuda_kernels", "vjpcert", "frontends"}


def _installed_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            roots.add(str(Path(sysconfig.get_paths()[key]).resolve()))
        except (KeyError, OSError):
            pass
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix):
        roots.add(str((Path(p) / "lib").resolve()))
    return tuple(sorted(roots))


_INSTALLED = _installed_roots()


def is_spec_code(path: Path) -> bool:
    """A file whose code can decide a verdict and is not hashed by a tier's checker hash."""
    path = Path(path).resolve()
    text = str(path)
    if not text.endswith(".py") or text.startswith(_INSTALLED):
        return False
    try:
        rel = path.relative_to(_PACKAGE)
    except ValueError:
        return True                                        # the user's own code
    return rel.parts[0] not in _MACHINERY                  # specs/ (and anything else of the project)


def _module_file(name: str, package: str | None = None) -> Path | None:
    mod = sys.modules.get(name)
    f = getattr(mod, "__file__", None) if mod is not None else None
    if f is None:
        try:
            spec = importlib.util.find_spec(name, package)
        except (ImportError, ValueError, AttributeError):
            return None
        f = getattr(spec, "origin", None) if spec is not None else None
    return Path(f).resolve() if f and f.endswith(".py") else None


def _imports_of(path: Path, modname: str | None) -> set[Path]:
    """Files of the modules a source file imports, anywhere in it (function bodies included). Cached
    per file until ``forget`` (a file reloaded from disk is parsed again)."""
    key = (str(path), modname)
    if key not in _IMPORTS:
        _IMPORTS[key] = _parse_imports(path, modname)
    return set(_IMPORTS[key])


def _parse_imports(path: Path, modname: str | None) -> set[Path]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    package = modname.rpartition(".")[0] if modname else None
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            names = [base] + [f"{base}.{a.name}" if base.strip(".") else base + a.name for a in node.names]
        for n in names:
            try:
                absolute = importlib.util.resolve_name(n, package) if n.startswith(".") else n
            except (ImportError, ValueError):
                continue
            f = _module_file(absolute)
            if f is not None:
                out.add(f)
    return out


def _module_of_file(path: Path) -> str | None:
    """The name of the loaded module whose file this is. The map from files to names is rebuilt when
    sys.modules changed or the answer is no longer loaded (resolving every module's path per question
    was most of a certificate's cost)."""
    global _FILE_MODULES_KEY
    for attempt in (0, 1):
        key = (len(sys.modules), id(next(reversed(sys.modules.values()), None)))
        if key != _FILE_MODULES_KEY or attempt:
            _FILE_MODULES.clear()
            for name, mod in list(sys.modules.items()):
                f = getattr(mod, "__file__", None)
                if f:
                    _FILE_MODULES.setdefault(_resolved(f), name)
            _FILE_MODULES_KEY = key
        name = _FILE_MODULES.get(path)
        f = getattr(sys.modules.get(name), "__file__", None) if name is not None else None
        if f is not None and _resolved(f) == path:
            return name
        if name is None and not attempt and key == _FILE_MODULES_KEY:
            continue
    return None


def _resolved(f: str) -> Path:
    if f not in _RESOLVED:
        _RESOLVED[f] = Path(f).resolve()
    return _RESOLVED[f]


def code_files(modules=(), functions=()) -> list[Path]:
    """Every spec-code file reachable from these modules and functions (see the module docstring)."""
    start: set[Path] = set()
    for m in modules:
        f = getattr(m, "__file__", None)
        if f:
            start.add(Path(f).resolve())
    for fn in functions:
        f = getattr(sys.modules.get(getattr(fn, "__module__", None) or ""), "__file__", None)
        if f:
            start.add(Path(f).resolve())
    seen: set[Path] = set()
    todo = [p for p in start if is_spec_code(p)]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        modname = _module_of_file(path)
        found = _imports_of(path, modname)
        mod = sys.modules.get(modname) if modname else None
        for value in (vars(mod).values() if mod is not None else ()):   # from helpers import f
            owner = getattr(value, "__module__", None)
            if isinstance(owner, str):
                f = getattr(sys.modules.get(owner), "__file__", None)
                if f:
                    found.add(Path(f).resolve())
        todo.extend(p for p in found if p not in seen and is_spec_code(p))
    return sorted(seen)


def snapshot(path: Path) -> str:
    """sha256 of the file as first seen by this process."""
    key = str(Path(path).resolve())
    if key not in _SNAPSHOT:
        _SNAPSHOT[key] = hashlib.sha256(Path(key).read_bytes()).hexdigest()
    return _SNAPSHOT[key]


def forget(paths) -> None:
    """Forget the snapshots of these files (they are being loaded again), and what they read: a module
    loaded again reads again. Its generation counts up, so an in-process cache keyed by
    ``Op.spec_sha256`` never serves a result computed by the module loaded before."""
    _merge_children()
    for p in paths:
        rp = Path(p).resolve()
        _SNAPSHOT.pop(str(rp), None)
        for key in [k for k in _IMPORTS if k[0] == str(rp)]:
            del _IMPORTS[key]
        if _READS.pop(rp, None):
            _GENERATION[rp] = _GENERATION.get(rp, 0) + 1


def files_sha256(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(Path(x).resolve() for x in paths):
        h.update(shown(p).encode())
        h.update(snapshot(p).encode())
    return h.hexdigest()


def shown(path: Path) -> str:
    """A path for a certificate: relative to the repository (built-in specs) or the working directory,
    never a machine's absolute path when it can be helped."""
    path = Path(path).resolve()
    for root in (_PACKAGE, Path.cwd().resolve()):
        try:
            return str(path.relative_to(root))
        except ValueError:
            continue
    return path.name


def purge_user_modules(path: Path) -> None:
    """Drop from sys.modules the user modules a spec file imports (transitively, by its source on
    disk now), and their snapshots, so loading the file again imports what is on disk now."""
    path = Path(path).resolve()
    seen, todo = set(), [path]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(q for q in _imports_of(p, _module_of_file(p)) if is_spec_code(q) and q not in seen)
    forget(seen)
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f and Path(f).resolve() in seen and Path(f).resolve() != path \
                and not name.startswith("vjpcert."):
            del sys.modules[name]


def add_to_path(directory: Path) -> None:
    """A spec file may import modules beside it (``import helpers``), as a script would."""
    d = str(Path(directory).resolve())
    if d not in sys.path:
        sys.path.insert(0, d)




# ------------------------------------------------------------------------------ data files spec code reads
ABSENT = "absent"                    # opened, or listed, while it did not exist: its appearing matters too
UNREADABLE = "unreadable"
CHANGED = "changed-while-read"       # read in two versions by this process: no version can be certified
UNRECORDED = "unrecorded"            # the audit hook itself failed: nothing this process read is certain

# code file -> (kind, data file) -> the hashes of the versions it read; kind is "data" or "listing"
_READS: dict[Path, dict[tuple[str, Path], set[str]]] = {}
_GENERATION: dict[Path, int] = {}    # code file -> how often it was loaded again after it had read data
_HOOK_ERRORS: list[str] = []
_FRAME_KINDS: dict[str, str] = {}
_HASHED: dict[tuple, str] = {}       # (path, stat) -> sha256, for files unchanged long enough (see _file_hash)
_LOCAL = threading.local()
_SYSTEM = ("/proc/", "/sys/", "/dev/")
_SOURCE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd")
_MACHINERY_DIRS = tuple(str(_PACKAGE / m) + os.sep for m in sorted(_MACHINERY))
_LOG = {"dir": "", "own": "", "ancestors": (), "offset": 0, "fds": {}}
_ENTRY = re.compile(r"^(data|listing):(.*) sha256=(\S+)$")


_STDLIB = tuple(sorted({str(Path(sysconfig.get_paths()[k]).resolve()) + os.sep for k in ("stdlib", "platstdlib")
                        if k in sysconfig.get_paths()}))


def _frame_kind(filename: str) -> str:
    """"spec" (code a claim is made of), "machinery" (vjpcert's own), "import" (the import system),
    "stdlib" (the rest of the standard library) or "other" (installed packages, generated code)."""
    kind = _FRAME_KINDS.get(filename)
    if kind is None:
        if filename.startswith(("<frozen importlib", "<frozen zipimport")):
            kind = "import"
        elif filename.startswith("<frozen "):
            kind = "stdlib"
        elif filename.startswith("<"):
            kind = "other"
        elif _is_machinery(Path(filename).resolve()):
            kind = "machinery"
        elif is_spec_code(Path(filename)):
            kind = "spec"
        elif str(Path(filename).resolve()).startswith(_STDLIB):
            kind = "stdlib"
        else:
            kind = "other"
        if os.path.isabs(filename):
            _FRAME_KINDS[filename] = kind
    return kind


def _is_machinery(path: Path) -> bool:
    try:
        rel = path.relative_to(_PACKAGE)
    except ValueError:
        return False
    # from a source tree the machinery is its folders; installed, also the package's own modules
    return rel.parts[0] in _MACHINERY or (_PACKAGE.name == "vjpcert" and len(rel.parts) == 1)


def _file_hash(path: str) -> str | None:
    """sha256 of a regular file's bytes, ABSENT, UNREADABLE, or None for what is not a file (a folder,
    a device). A file whose stat is unchanged and was last modified well before it was hashed is not
    read again (the rule git's index uses against a change within one timestamp tick)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return ABSENT if isinstance(exc, FileNotFoundError) else UNREADABLE
    if not stat.S_ISREG(st.st_mode):
        return None
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _HASHED:
        return _HASHED[key]
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return ABSENT if isinstance(exc, FileNotFoundError) else UNREADABLE
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > 2_000_000_000:
        _HASHED[key] = h.hexdigest()
    return h.hexdigest()


def _listing_hash(path: str) -> str:
    try:
        names = sorted(n for n in os.listdir(path) if n != "__pycache__")   # derived bytecode, not content
    except OSError as exc:
        return ABSENT if isinstance(exc, FileNotFoundError) else UNREADABLE
    return hashlib.sha256("\n".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def hash_now(kind: str, path: Path) -> str:
    """The hash of a data file (or of a folder's listing) as it is on disk now."""
    if kind == "listing":
        return _listing_hash(str(path))
    return _file_hash(str(path)) or UNREADABLE


def _audit(event, args):
    if event != "open" and event != "os.listdir" and event != "os.scandir":
        return
    if getattr(_LOCAL, "busy", False):            # our own hashing and logging open files too
        return
    _LOCAL.busy = True
    try:
        _on_access(event, args, sys._getframe(1))
    except Exception as exc:  # never break the program's own open(); but never certify around a gap
        _HOOK_ERRORS.append(f"{type(exc).__name__}: {exc}")
    finally:
        _LOCAL.busy = False


def _on_access(event, args, frame) -> None:
    raw = args[0] if args else None
    if event == "open":
        flags = args[2] if len(args) > 2 else 0
        if raw is None or isinstance(raw, int):
            return                                 # an open file descriptor: its path was seen when opened
        if isinstance(flags, int) and flags & getattr(os, "O_ACCMODE", 3) == os.O_WRONLY:
            return                                 # written, not read
        kind = "data"
    else:
        if isinstance(raw, int):
            return
        kind, raw = "listing", "." if raw is None else raw
    try:
        path = os.path.abspath(os.fsdecode(raw))
    except (TypeError, ValueError):
        return
    if "\0" in path:
        return                                     # open() refuses it before reading anything
    if path.startswith(_SYSTEM) or path.startswith(_INSTALLED) or path.startswith(_MACHINERY_DIRS) \
            or (_LOG["dir"] and path.startswith(_LOG["dir"])):
        return
    source_like = kind == "data" and (path.endswith(_SOURCE_SUFFIXES) or "__pycache__" in path)
    owners, innermost, direct = set(), True, kind == "listing"
    while frame is not None:
        fk = _frame_kind(frame.f_code.co_filename)
        if innermost:
            # the import system reading a module or listing a folder of sys.path; linecache, inspect
            # or traceback reading source: code, hashed as code (a spec may still read a .py itself)
            if fk == "import" or (source_like and fk != "spec"):
                return
            innermost = False
        if direct and fk != "stdlib":
            # a folder counts when spec code lists it (os.listdir, Path.glob): not when a package
            # searches sys.path for its metadata on import (a file a package reads for the spec,
            # np.load, does count)
            if fk != "spec":
                return
            direct = False
        if fk == "machinery":
            break                                  # what called the spec code is not spec code
        if fk == "spec":
            owners.add(_resolved(frame.f_code.co_filename))
        frame = frame.f_back
    if not owners:
        return
    real = os.path.realpath(path)
    h = _listing_hash(real) if kind == "listing" else _file_hash(real)
    if h is None:
        return
    _credit(owners, kind, Path(real), h)
    if _LOG["ancestors"]:                          # a forked child: tell every parent, one may issue
        _tell_parents(owners, kind, real, h)


def _credit(owners, kind: str, path: Path, h: str) -> None:
    for owner in owners:
        _READS.setdefault(owner, {}).setdefault((kind, path), set()).add(h)


def _log_name(pid: int) -> str:
    return os.path.join(_LOG["dir"], f"reads-{pid}-{os.urandom(6).hex()}.jsonl")


def _tell_parents(owners, kind: str, real: str, h: str) -> None:
    line = (json.dumps([kind, real, h, sorted(map(str, owners))]) + "\n").encode("utf-8", "surrogateescape")
    for log in _LOG["ancestors"]:
        fd = _LOG["fds"].get(log)
        if fd is None:
            os.makedirs(_LOG["dir"], mode=0o700, exist_ok=True)
            fd = _LOG["fds"][log] = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, line)                         # one append per line: children never interleave


def _after_fork_in_child() -> None:
    _LOG["ancestors"] = (*_LOG["ancestors"], _LOG["own"])
    _LOG["own"], _LOG["offset"], _LOG["fds"] = _log_name(os.getpid()), 0, {}


def _merge_children() -> None:
    """Credit the reads that forked children logged for this process."""
    own = _LOG["own"]
    if not own:
        return
    _LOCAL.busy = True
    try:
        with open(own, "rb") as fh:
            fh.seek(_LOG["offset"])
            data = fh.read()
    except FileNotFoundError:
        return
    finally:
        _LOCAL.busy = False
    complete = data[:data.rfind(b"\n") + 1]
    _LOG["offset"] += len(complete)
    for line in complete.splitlines():
        try:
            kind, real, h, owners = json.loads(line)
        except ValueError:
            _HOOK_ERRORS.append("a child's read log was garbled")
            continue
        _credit({Path(o) for o in owners}, kind, Path(real), h)


def install() -> None:
    """Install the audit hook, once per process (an audit hook cannot be removed)."""
    if _LOG["dir"]:
        return
    import atexit
    import tempfile
    _LOCAL.busy = True
    try:                     # one folder per user, made when a child first writes to it
        _LOG["dir"] = os.path.join(os.path.realpath(tempfile.gettempdir()),
                                   f"vjpcert-reads-{os.getuid() if hasattr(os, 'getuid') else 0}") + os.sep
    finally:
        _LOCAL.busy = False
    _LOG["own"] = _log_name(os.getpid())
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    atexit.register(lambda: os.path.exists(_LOG["own"]) and os.unlink(_LOG["own"]))
    sys.addaudithook(_audit)


def _reads_of(files) -> dict[tuple[str, Path], set[str]]:
    _merge_children()
    out: dict[tuple[str, Path], set[str]] = {}
    for f in files:
        for key, versions in _READS.get(Path(f).resolve(), {}).items():
            out.setdefault(key, set()).update(versions)
    return out


def base_dir(op) -> Path:
    """Data paths in a certificate are relative to the op's spec folder: they move with the project."""
    f = getattr(getattr(op, "module", None), "__file__", None)
    return Path(f).resolve().parent if f else Path.cwd().resolve()


def _label(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def entry(kind: str, label: str, h: str) -> str:     # how a certificate lists a data file or a listing
    return f"{kind}:{label} sha256={h}"


def parse_entry(text: str):
    """(kind, label, hash) of a data entry of a certificate's ``sources``, or None for a code file."""
    m = _ENTRY.match(text)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def with_data(base: str, entries) -> str:
    """The hash of code (``base``) and data entries: ``base`` itself when the code read nothing, so the
    certificates of ops that read no data keep the hash they always had."""
    entries = sorted(entries)
    if not entries:
        return base
    h = hashlib.sha256(base.encode())
    for e in entries:
        h.update(b"\n" + e.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _entries(op, files, *, versions: bool) -> list[str]:
    base = base_dir(op)
    out = []
    for (kind, path), hashes in sorted(_reads_of(files).items()):
        one = "|".join(sorted(hashes)) if versions else (next(iter(hashes)) if len(hashes) == 1 else CHANGED)
        out.append(entry(kind, _label(path, base), one))
    if _HOOK_ERRORS:
        out.append(entry("data", "?", f"{UNRECORDED}({len(_HOOK_ERRORS)})"))
    return out


def covered(op) -> tuple[str, list[str]]:
    """What a certificate of ``op`` records: ``spec_sha256`` over its code (``identity_sha256``) and
    every data file its code read in this process, and the list of them (code files, then data)."""
    files = op.source_files
    data = _entries(op, files, versions=False)
    return with_data(op.identity_sha256, data), [shown(p) for p in files] + data


def loaded_sha256(op, code_sha256: str, files) -> str:
    """The identity of the op as this process holds it (``Op.spec_sha256``): its code, every version of
    every file its code read, and how often its modules were loaded again after reading -- what an
    in-process cache of results must key on."""
    marks = [f"generation:{shown(f)}={_GENERATION[Path(f).resolve()]}" for f in files
             if _GENERATION.get(Path(f).resolve())]
    return with_data(code_sha256, _entries(op, files, versions=True) + marks)


def planned_reads(op) -> tuple:
    """The data an op's code read in the planning process: ((kind:label, hash), ...), for the runner."""
    return tuple(sorted((f"{k}:{label}", h) for k, label, h in map(parse_entry, _entries(op, op.source_files,
                                                                                        versions=False))))


def current_sha256(base: str, op, recorded_sources) -> tuple[str, list[str]]:
    """The ``spec_sha256`` a certificate that lists ``recorded_sources`` would have now, given the op's
    code hash ``base``: each data file it lists hashed again on disk. Also the data files that changed."""
    where = base_dir(op)
    entries, changed = [], []
    for text in recorded_sources or ():
        parsed = parse_entry(text)
        if parsed is None:
            continue
        kind, label, h = parsed
        now = hash_now(kind, where / label) if label != "?" else UNRECORDED
        entries.append(entry(kind, label, now))
        if now != h:
            changed.append(label)
    return with_data(base, entries), changed


def recorded_sha256(base: str, recorded_sources) -> str:
    """The ``spec_sha256`` of code ``base`` with the data entries as a certificate recorded them."""
    return with_data(base, [t for t in recorded_sources or () if parse_entry(t)])


def stale_reads(op, planned: dict) -> str | None:
    """Why this process must not run ``op``'s claims with what its code read, or None: a data file read
    in two versions, one that differs from what the planner read, or one changed on disk since."""
    base = base_dir(op)
    for (kind, path), hashes in sorted(_reads_of(op.source_files).items()):
        label = _label(path, base)
        if len(hashes) > 1:
            return f"this process read {label} in {len(hashes)} versions (it changed while the process ran)"
        (h,) = hashes
        if planned.get(f"{kind}:{label}", h) != h:
            return f"{label} is not what the run was planned with: it changed on disk since"
        if hash_now(kind, path) != h:
            return f"{label} changed on disk since this process read it"
    return None


install()
