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
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import sysconfig
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
    """Forget the snapshots of these files (they are being loaded again)."""
    for p in paths:
        _SNAPSHOT.pop(str(Path(p).resolve()), None)
        for key in [k for k in _IMPORTS if k[0] == str(Path(p).resolve())]:
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


