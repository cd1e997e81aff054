"""What spec code uses while it runs that no certificate would hash: user modules imported without an
import statement, and environment variables.

A certificate hashes an op's code as the files its spec module imports, read from their source
(``core.sources.code_files``: import statements anywhere in those files, inside functions too), and
the data files that code reads (``core.reads``). Two other inputs can change what the code computes
and stay outside that identity, so a wrong backward would keep a ``proved`` certificate current:
- code loaded while it runs without an import statement the source spells:
  ``importlib.import_module(name)``, ``__import__(name)``, a loader's ``exec_module``,
  ``runpy.run_path``;
- environment variables (``os.environ[...]``, ``os.getenv``): a certificate cannot say which value it
  was proved for;
- another program's output or the network's answer (a subprocess, a socket): the audit events
  ``subprocess.Popen``, ``os.system``, ``socket.connect``, ``urllib.Request`` and the like.
So the planner and the runner watch while spec code runs: every import (the import statement,
``__import__`` and ``importlib.import_module``, whether the module is new or already loaded), every
module body run (the audit hook's "exec" event), every read of ``os.environ`` made from spec code, and
every process or connection spec code starts. A user module the op's code files do not list, or any of
the others, makes the op refused
at planning (its forward and backward run there), or its certificate ``inconclusive`` with the reason
(a law: never current, so every rerun asks again).

User code: a file ``core.reads`` counts as spec code, outside vjpcert's own tree (its machinery, and
the built-in specs, whose identity is the project's, reviewed with the project). The wrappers are installed once per process (an audit hook
cannot be removed); each watch is a ``Seen`` they add to while it is open, so watches nest and threads
share them. What only a forked child does (a strategy run under its budget) is not seen here: spec
code runs in the parent first (tracing, planning).
"""
from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from vjpcert.core.reads import PACKAGE, is_spec_code, resolved
from vjpcert.core.reads import _frame_kind as frame_kind      # the classification of core.reads' hook



@dataclass
class Seen:
    modules: set = field(default_factory=set)      # files of the modules imported or run
    environ: set = field(default_factory=set)      # environment variables spec code read
    outside: set = field(default_factory=set)      # what spec code asked of the world: a process, a socket


# audit events through which spec code gets an answer from outside its files: another program's, or
# the network's (what ``outside`` names them)
_OUTSIDE = {"subprocess.Popen": "a subprocess", "os.system": "a shell command", "os.posix_spawn": "a process",
            "os.spawn": "a process", "os.exec": "a program", "socket.connect": "the network",
            "socket.getaddrinfo": "the network", "urllib.Request": "the network"}
_EVENTS = frozenset({"exec", *_OUTSIDE})


_WATCHES: list[Seen] = []
_LOCK = threading.Lock()
_REAL: dict = {}


def is_user_code(path: Path) -> bool:
    """A file whose code counts for a user's op and is theirs: spec code outside vjpcert's own tree (its
    machinery, and the built-in specs, whose identity is the project's)."""
    path = Path(path)
    return is_spec_code(path) and PACKAGE not in path.parents


# (name, level, package) of an import whose module is a library's -> (its full name, that module object):
# the same object in sys.modules again means the same library module (a user module of that name would
# be another object)
_LIBRARY: dict = {}
_USER_FILE: dict = {}        # module object -> its file when that is user code, else None (kept alive: no id reuse)


def _user_file(module) -> Path | None:
    try:
        return _USER_FILE[module]
    except KeyError:
        f = getattr(module, "__file__", None)
        path = resolved(f) if isinstance(f, str) else None
        _USER_FILE[module] = path if path is not None and is_user_code(path) else None
        return _USER_FILE[module]
    except TypeError:                 # a module-like object that cannot be a key
        return None


def _note_module(fullname: str | None) -> bool:
    """Note the module ``fullname`` names if it is user code; whether it is."""
    module = sys.modules.get(fullname) if fullname else None
    path = _user_file(module) if module is not None else None
    if path is None:
        return False
    _add("modules", path)
    return True


def _add(what: str, value) -> None:
    for seen in list(_WATCHES):
        getattr(seen, what).add(value)


def _absolute(name: str, globals_, level: int) -> str | None:
    if not level:
        return name
    g = globals_ or {}
    package = g.get("__package__") or g.get("__name__", "").rpartition(".")[0]
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError):
        return None


def _from_spec_code(depth: int = 2) -> bool:
    """Whether the access comes from a user's spec code: the first frame above the standard library's
    (``os.getenv``, ``Mapping.get``, ``subprocess.run``) is theirs. A library the spec calls may read
    its own settings, start its own workers."""
    frame = sys._getframe(depth)
    while frame is not None and frame_kind(frame.f_code.co_filename) in ("stdlib", "import"):
        frame = frame.f_back
    if frame is None:
        return False
    f = frame.f_code.co_filename
    return frame_kind(f) == "spec" and is_user_code(resolved(f))


def _audit(event, args) -> None:
    """A module body run without an import (a loader's ``exec_module``, ``runpy.run_path``): the
    "exec" event carries the code object, and its file."""
    if event not in _EVENTS or not _WATCHES:
        return                          # the hot path: id() is audited, some 10^5 times a proof
    if event in _OUTSIDE:
        if _from_spec_code(2):
            _add("outside", f"{_OUTSIDE[event]} ({event})")
        return
    if event != "exec" or not args:
        return
    f = getattr(args[0], "co_filename", None)
    if isinstance(f, str) and f.endswith(".py") and os.path.isabs(f):
        _add("modules", resolved(f))


def _install() -> None:
    with _LOCK:
        if _REAL:
            return
        _REAL["import"], _REAL["import_module"] = builtins.__import__, importlib.import_module
        _REAL["getitem"] = os._Environ.__getitem__

        def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
            module = _REAL["import"](name, globals, locals, fromlist, level)
            if not _WATCHES:
                return module
            key = (name, level, globals.get("__package__") if level and globals else None)
            known = _LIBRARY.get(key)
            if known is not None and sys.modules.get(known[0]) is known[1]:
                return module           # the hot path: SymPy's imports inside its own functions
            full = _absolute(name, globals, level)
            # a library's module is not user code, nor are its submodules: the fromlist is read only
            # below a user's package
            if _note_module(full):
                for item in fromlist or ():
                    if isinstance(item, str) and item != "*":
                        _note_module(f"{full}.{item}")
            elif full is not None and full in sys.modules:
                _LIBRARY[key] = (full, sys.modules[full])
            return module

        def watched_import_module(name, package=None):
            module = _REAL["import_module"](name, package)
            if _WATCHES:
                _note_module(getattr(module, "__name__", None))
            return module

        def watched_getitem(self, key):
            if _WATCHES and self is os.environ and _from_spec_code():
                _add("environ", str(key))
            return _REAL["getitem"](self, key)

        builtins.__import__ = watched_import
        importlib.import_module = watched_import_module
        os._Environ.__getitem__ = watched_getitem      # os.environ[k], .get, os.getenv, `in`
        sys.addaudithook(_audit)


@contextlib.contextmanager
def watch():
    """A ``Seen`` that fills with what runs while the block runs."""
    _install()
    seen = Seen()
    _WATCHES.append(seen)
    try:
        yield seen
    finally:
        _WATCHES.remove(seen)


def unhashed(op, seen: Seen) -> str | None:
    """Why ``op``'s certificates would not cover what its code used in ``seen``, or None."""
    listed = set(op.source_files)
    modules = sorted(p for p in seen.modules if p not in listed and is_user_code(p))
    parts = []
    if modules:
        parts.append(f"imported {', '.join(p.name for p in modules)} while it ran (importlib.import_module, "
                     f"__import__, a loader's exec_module, runpy, or the like), which is not among the files its "
                     f"certificates hash (the spec module and what its source imports): an edit there would leave "
                     f"them current. Import it with an import statement in a file the spec imports")
    if seen.environ:
        parts.append(f"read the environment variable(s) {', '.join(sorted(seen.environ))}: a certificate cannot "
                     f"say which value it was proved for. Make it a param of the op or a constant")
    if seen.outside:
        parts.append(f"asked {', '.join(sorted(seen.outside))} while it ran: what came back is in no certificate's "
                     f"hash. Write it to a file the spec reads (data files are hashed)")
    return ("its code " + "; and it ".join(parts)) if parts else None
