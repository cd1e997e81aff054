"""What spec code reads: the data files it opens and the folders it lists, recorded as it runs.

A certificate's claim depends on the data its code reads as much as on the code (``core.sources``
lists both). One process-wide audit hook (``sys.addaudithook``, the "open", "os.listdir" and
"os.scandir" events) sees every such access -- ``open``, ``json.load``, ``Path.read_text``, ``np.load``,
``np.loadtxt``, ``os.open``, ``os.listdir``, ``os.scandir``, ``Path.glob`` -- at import time or while the
op's functions run, and credits it to the spec-code files on the stack (up to the first frame of
vjpcert's machinery), with the content's hash as read; a forked child (a strategy under its budget)
sends its reads to its parents through a log file. Not data: files of the Python installation and of
installed packages, vjpcert's own machinery, /proc, /sys and /dev, and the import system's own reads of
modules (their code is hashed as code).

Which files are spec code (``is_spec_code``) is decided here, below ``core.sources``, because the hook
classifies every frame of every access by it.
"""
from __future__ import annotations

import functools

import hashlib
import json
import os
import site
import stat
import sys
import sysconfig
import threading
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]           # the repository root, or vjpcert's install root
MACHINERY = {"core", "symbolic", "numeric", "cuda_kernels", "vjpcert", "frontends"}


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


INSTALLED = _installed_roots()


def is_spec_code(path: Path) -> bool:
    """A file whose code can decide a verdict and is not hashed by a tier's checker hash."""
    return _is_spec_code(Path(path))


@functools.lru_cache(maxsize=None)
def _is_spec_code(path: Path) -> bool:
    path = path.resolve()
    text = str(path)
    if not text.endswith(".py") or text.startswith(INSTALLED):
        return False
    try:
        rel = path.relative_to(PACKAGE)
    except ValueError:
        return True                                        # the user's own code
    return rel.parts[0] not in MACHINERY                   # specs/ (and anything else of the project)


_RESOLVED: dict[str, Path] = {}


def resolved(f: str) -> Path:
    if f not in _RESOLVED:
        _RESOLVED[f] = Path(f).resolve()
    return _RESOLVED[f]


# ------------------------------------------------------------------------------ the audit hook
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
_MACHINERY_DIRS = tuple(str(PACKAGE / m) + os.sep for m in sorted(MACHINERY))
_LOG = {"dir": "", "own": "", "ancestors": (), "offset": 0, "fds": {}}


_STDLIB = tuple(sorted({str(Path(sysconfig.get_paths()[k]).resolve()) + os.sep for k in ("stdlib", "platstdlib")
                        if k in sysconfig.get_paths()}))
# installed packages: in a virtual environment "platstdlib" is the environment's lib/pythonX.Y, which
# holds its site-packages, so a library's frame would read as the standard library's without this
_SITE_PACKAGES = tuple(sorted({str(Path(sysconfig.get_paths()[k]).resolve()) + os.sep for k in ("purelib", "platlib")
                               if k in sysconfig.get_paths()}
                              | {str(Path(d).resolve()) + os.sep for d in site.getsitepackages()}))


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
        elif str(Path(filename).resolve()).startswith(_SITE_PACKAGES):
            kind = "other"
        elif str(Path(filename).resolve()).startswith(_STDLIB):
            kind = "stdlib"
        else:
            kind = "other"
        if os.path.isabs(filename):
            _FRAME_KINDS[filename] = kind
    return kind


def _is_machinery(path: Path) -> bool:
    try:
        rel = path.relative_to(PACKAGE)
    except ValueError:
        return False
    # from a source tree the machinery is its folders; installed, also the package's own modules
    return rel.parts[0] in MACHINERY or (PACKAGE.name == "vjpcert" and len(rel.parts) == 1)


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
    if path.startswith(_SYSTEM) or path.startswith(INSTALLED) or path.startswith(_MACHINERY_DIRS) \
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
            owners.add(resolved(frame.f_code.co_filename))
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


def reads_of(files) -> dict[tuple[str, Path], set[str]]:
    _merge_children()
    out: dict[tuple[str, Path], set[str]] = {}
    for f in files:
        for key, versions in _READS.get(Path(f).resolve(), {}).items():
            out.setdefault(key, set()).update(versions)
    return out


def forget_reads(paths) -> None:
    """Forget what these (resolved) code files read: they are being loaded again, and a module loaded
    again reads again. Its generation counts up (``generation``)."""
    _merge_children()
    for rp in paths:
        if _READS.pop(rp, None):
            _GENERATION[rp] = _GENERATION.get(rp, 0) + 1


def generation(path: Path) -> int:
    """How often this code file was loaded again after it had read data."""
    return _GENERATION.get(Path(path).resolve(), 0)


def hook_errors() -> int:
    """How often the audit hook itself failed in this process (then nothing it read is certain)."""
    return len(_HOOK_ERRORS)


install()
