"""User code that spec code imports while it runs, which no certificate would hash.

A certificate hashes an op's code as the files its spec module imports, read from their source
(``core.sources.code_files``: import statements anywhere in those files, inside functions too). An
import the source does not spell -- ``importlib.import_module(name)``, ``__import__(name)`` inside a
forward, a backward or a law -- runs code that is in no certificate's identity: an edit of that module
would leave the certificates current, a wrong backward still ``proved``. So the planner and the runner
watch every import made while spec code runs (the import statement, ``__import__`` and
``importlib.import_module``, whether the module is new or already loaded), and a user module among
them that the op's code files do not list makes the op refused at planning, or its certificate
``inconclusive`` with the reason (never current, so every rerun asks again).

User code: a file ``core.reads`` counts as spec code, outside the built-in specs (whose identity is
the project's, reviewed with the project). The watcher wraps ``builtins.__import__`` and
``importlib.import_module`` once per process (an import of a module already loaded runs no code, yet
uses it), and adds an audit hook for the "exec" event (a module body run without an import: a
loader's ``exec_module``, ``runpy.run_path``); each watch is a set these add to while it is open, so
watches nest and threads share them. Imports made only in a forked child (a strategy run
under its budget) are not seen here: spec code runs in the parent first (tracing, planning).
"""
from __future__ import annotations

import builtins
import contextlib
import importlib
import os
import sys
import threading
from pathlib import Path

from vjpcert.core.reads import PACKAGE, is_spec_code, resolved

_WATCHES: list[set] = []
_LOCK = threading.Lock()
_REAL: dict = {}
_BUILTIN_SPECS = PACKAGE / "specs"


def _note(fullname: str | None) -> None:
    module = sys.modules.get(fullname) if fullname else None
    f = getattr(module, "__file__", None)
    if not f or not _WATCHES:
        return
    path = resolved(f)
    for watch in list(_WATCHES):
        watch.add(path)


def _absolute(name: str, globals_, level: int) -> str | None:
    if not level:
        return name
    package = (globals_ or {}).get("__package__") or ((globals_ or {}).get("__name__", "").rpartition(".")[0])
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError):
        return None


def _install() -> None:
    with _LOCK:
        if _REAL:
            return
        _REAL["import"], _REAL["import_module"] = builtins.__import__, importlib.import_module

        def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
            module = _REAL["import"](name, globals, locals, fromlist, level)
            if _WATCHES:
                full = _absolute(name, globals, level)
                _note(full)
                for item in fromlist or ():
                    if full and isinstance(item, str) and item != "*":
                        _note(f"{full}.{item}")
            return module

        def watched_import_module(name, package=None):
            module = _REAL["import_module"](name, package)
            if _WATCHES:
                _note(getattr(module, "__name__", None))
            return module

        builtins.__import__ = watched_import
        importlib.import_module = watched_import_module
        sys.addaudithook(_audit)         # for the life of the process: Python has no way to remove one


def _audit(event, args) -> None:
    """A module body run without an import (a loader's ``exec_module``, ``runpy.run_path``, ``exec``
    of a compiled file): the "exec" event carries the code object, and its file."""
    if event != "exec" or not _WATCHES or not args:
        return
    f = getattr(args[0], "co_filename", None)
    if isinstance(f, str) and f.endswith(".py") and os.path.isabs(f):
        path = resolved(f)
        for watch in list(_WATCHES):
            watch.add(path)


@contextlib.contextmanager
def imports_while_running():
    """The set of files of the modules imported while the block runs (it fills as they are)."""
    import importlib.util  # noqa: F401  (resolve_name, before any watch: not an import of spec code)
    _install()
    seen: set[Path] = set()
    _WATCHES.append(seen)
    try:
        yield seen
    finally:
        _WATCHES.remove(seen)


def is_user_code(path: Path) -> bool:
    """A file whose code counts for a user's op and is theirs: spec code outside the built-in specs."""
    path = Path(path)
    return is_spec_code(path) and _BUILTIN_SPECS not in path.parents


def undeclared_imports(op, imported) -> list[Path]:
    """The user modules imported while ``op``'s code ran that its code files do not list."""
    listed = set(op.source_files)
    return sorted(p for p in imported if p not in listed and is_user_code(p))


def undeclared_message(op, files) -> str:
    return (f"its code imported {', '.join(p.name for p in files)} while it ran (importlib.import_module, "
            f"__import__, a loader's exec_module, runpy, or the like), which is not among the files its certificates hash (the spec module "
            f"and what its source imports): an edit there would leave them current. Import it with an "
            f"import statement in a file the spec imports")
