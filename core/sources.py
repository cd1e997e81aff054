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

What that code *reads* is part of the claim too: a data file it opens and a folder it lists, at import
time or while the op's functions run, as the audit hook of ``core.reads`` records them (installed when
this module is imported). A certificate lists them beside its code files (``data:<path> sha256=...``,
``listing:<path> sha256=...``, paths relative to the op's spec folder) and its ``spec_sha256`` covers
them; whether it is current is decided by hashing those files again (``current_sha256``).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path

from vjpcert.core.reads import (CHANGED, PACKAGE, UNRECORDED, forget_reads, generation, hash_now, hook_errors,
                                is_spec_code, reads_of, resolved)

_SNAPSHOT: dict[str, str] = {}
_IMPORTS: dict[tuple, set] = {}              # (file, module name) -> files it imports
_FILE_MODULES: dict[Path, str] = {}          # resolved file -> a module loaded from it
_FILE_MODULES_KEY: tuple | None = None
# code_files answers, kept while nothing they depend on can have changed: the files' import statements
# (cleared by ``forget``, which counts _EPOCH up) and which modules are loaded (sys.modules' size)
_CODE_FILES: dict[tuple, list] = {}
_EPOCH = 0


def _beside(name: str, folder: Path | None) -> Path | None:
    """The file of module ``name`` in ``folder``, where a script in that folder imports it from (its own
    folder comes first on the path), whatever another folder's module of that name left in sys.modules."""
    if folder is None:
        return None
    base = folder.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f.resolve()
    return None


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
    # a spec's folder is first on the path while it loads (add_to_path): its own modules are the ones
    # its absolute imports find there, whatever another folder left in sys.modules under the same name
    near = path.parent if str(path.parent) in sys.path else None
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
            f = (None if n.startswith(".") else _beside(absolute, near)) or _module_file(absolute)
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
                    _FILE_MODULES.setdefault(resolved(f), name)
            _FILE_MODULES_KEY = key
        name = _FILE_MODULES.get(path)
        f = getattr(sys.modules.get(name), "__file__", None) if name is not None else None
        if f is not None and resolved(f) == path:
            return name
        if name is None and not attempt and key == _FILE_MODULES_KEY:
            continue
    return None


def code_files(modules=(), functions=()) -> list[Path]:
    """Every spec-code file reachable from these modules and functions (see the module docstring)."""
    start: set[Path] = set()
    for m in modules:
        f = getattr(m, "__file__", None)
        if f:
            start.add(resolved(f))
    for fn in functions:
        f = getattr(sys.modules.get(getattr(fn, "__module__", None) or ""), "__file__", None)
        if f:
            start.add(resolved(f))
    key = (frozenset(start), _EPOCH, len(sys.modules))
    if key not in _CODE_FILES:
        _CODE_FILES[key] = _reachable(start)
    return list(_CODE_FILES[key])


def _reachable(start: set[Path]) -> list[Path]:
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
            f = _defining_file(value)
            if f:
                found.add(resolved(f))
        todo.extend(p for p in found if p not in seen and is_spec_code(p))
    return sorted(seen)


def _defining_file(value) -> str | None:
    """The file a name bound in a spec module was defined in. A function says so itself (through any
    functools.wraps layers) where that is a file on disk; anything else by its ``__module__``, trusted
    only when that module holds this very object, because two spec folders may each have a ``helpers``
    module and ``sys.modules`` names only the one loaded last; failing that, a class by the file of one
    of its own methods. Code made from a string (a dataclass's ``__init__``, ``exec``) names no file."""
    if isinstance(value, type(sys)):                     # import helpers
        return getattr(value, "__file__", None)
    try:
        code = getattr(inspect.unwrap(value), "__code__", None)
    except ValueError:                                   # a __wrapped__ cycle
        code = None
    f = getattr(code, "co_filename", None)
    if isinstance(f, str) and os.path.isfile(f):
        return f
    owner, name = getattr(value, "__module__", None), getattr(value, "__name__", None)
    mod = sys.modules.get(owner) if isinstance(owner, str) else None
    if mod is not None and isinstance(name, str) and getattr(mod, name, None) is value:
        return getattr(mod, "__file__", None)
    if isinstance(value, type):
        for member in vars(value).values():
            f = getattr(getattr(getattr(member, "__func__", member), "__code__", None), "co_filename", None)
            if isinstance(f, str) and os.path.isfile(f):
                return f
    return None


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
    global _EPOCH
    resolved_paths = [Path(p).resolve() for p in paths]
    _EPOCH += 1
    _CODE_FILES.clear()
    forget_reads(resolved_paths)
    for rp in resolved_paths:
        _SNAPSHOT.pop(str(rp), None)
        for key in [k for k in _IMPORTS if k[0] == str(rp)]:
            del _IMPORTS[key]


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
    for root in (PACKAGE, Path.cwd().resolve()):
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
    here: dict[str, bool] = {}                           # top-level names with a module in the spec's folder
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f or name.startswith("vjpcert"):
            continue
        f = resolved(f)
        top = name.partition(".")[0]
        if top not in here:
            here[top] = (path.parent / f"{top}.py").is_file() or (path.parent / top / "__init__.py").is_file()
        if f in seen and f != path:
            del sys.modules[name]
        elif here[top] and _beside(name, path.parent) not in (None, f):   # another folder's module of that name
            del sys.modules[name]


def add_to_path(directory: Path) -> None:
    """A spec file may import modules beside it (``import helpers``), as a script would."""
    d = str(Path(directory).resolve())
    if d in sys.path:                   # first, as a script's own folder is: another spec folder added
        sys.path.remove(d)              # since must not lend it a module of the same name
    sys.path.insert(0, d)





# ------------------------------------------------------------------------------ data entries of a certificate
_ENTRY = re.compile(r"^(data|listing):(.*) sha256=(\S+)$")


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
    for (kind, path), hashes in sorted(reads_of(files).items()):
        one = "|".join(sorted(hashes)) if versions else (next(iter(hashes)) if len(hashes) == 1 else CHANGED)
        out.append(entry(kind, _label(path, base), one))
    if hook_errors():
        out.append(entry("data", "?", f"{UNRECORDED}({hook_errors()})"))
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
    marks = [f"generation:{shown(f)}={generation(f)}" for f in files if generation(f)]
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
    for (kind, path), hashes in sorted(reads_of(op.source_files).items()):
        label = _label(path, base)
        if len(hashes) > 1:
            return f"this process read {label} in {len(hashes)} versions (it changed while the process ran)"
        (h,) = hashes
        if planned.get(f"{kind}:{label}", h) != h:
            return f"{label} is not what the run was planned with: it changed on disk since"
        if hash_now(kind, path) != h:
            return f"{label} changed on disk since this process read it"
    return None
