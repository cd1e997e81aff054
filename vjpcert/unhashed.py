"""What spec code uses while it runs that no certificate would hash: user code its files do not import,
environment variables, other programs and the network.

A certificate hashes an op's code as the files its spec module imports, read from their source
(``core.sources.code_files``: import statements anywhere in those files, inside functions too), and
the data files that code reads (``core.reads``). Three other inputs can change what the code computes
and stay outside that identity, so a wrong backward would keep a ``proved`` certificate current:
- code that runs without an import statement the source spells: a module loaded by
  ``importlib.import_module(name)``, ``__import__(name)``, a loader's ``exec_module`` or
  ``runpy.run_path``, or one another spec loaded earlier in the same process and reached through
  ``sys.modules``, that spec's globals, ``gc`` or any other object graph;
- environment variables (``os.environ[...]``, ``os.getenv``): a certificate cannot say which value it
  was proved for;
- another program's output or the network's answer (a subprocess, a socket): the audit events
  ``subprocess.Popen``, ``os.system``, ``socket.connect``, ``urllib.Request`` and the like.
So the planner and the runner watch while spec code runs: every import (the import statement,
``__import__`` and ``importlib.import_module``, whether the module is new or already loaded), every
module body run (the audit hook's "exec" event), every function of a user's file that is called
(however the code was reached, what runs is what counts: ``sys.monitoring`` on Python 3.12+, a
profile hook before; on only where there is such code to reach, ``foreign_code``), every read of ``os.environ``
made from spec code, and every process or connection spec code starts. A user file the op's code files
do not list, or any of the others, makes the op refused
at planning (its forward and backward run there), or its certificate ``inconclusive`` with the reason
(a law: never current, so every rerun asks again).

Two more inputs are not files at all: what differs from one call or one run to the next -- a draw from
the process's shared random streams (``random``'s module functions and numpy's legacy ones), the clock,
the process's id, the OS's entropy and a generator seeded from it; their functions are wrapped, and a
call from spec code is noted, in a watch or in a module body as it loads (``_AT_LOAD``) -- and the
state spec code keeps between its calls, fingerprinted when a watch opens and when it closes
(``vjpcert.kept_state``). Not seen: what differs between processes inside Python itself (a string's
``hash``, and so a set's order; ``id``), the clock read through ``datetime``'s C types, the command
line (``sys.argv``), and a module body that ran before vjpcert first loaded a spec file or opened a
watch (an op declared in a running program whose module read the clock as it loaded).

User code: a file ``core.reads`` counts as spec code, outside vjpcert's own tree (its machinery, and
the built-in specs, whose identity is the project's, reviewed with the project). The wrappers are
installed once per process (an audit hook cannot be removed); each watch is a ``Seen`` they add to
while it is open, so watches nest and threads share them. What only a forked child does (a strategy
run under its budget; a small claim's strategies run in this process, and are seen) is not seen here:
spec code runs in the parent first (tracing, planning). Nor is code whose file name is not a user's file on
disk (code built from ``marshal`` bytes under a made-up name): there is no file for a certificate to
hash. On Python 3.11 a thread started before the watch opened (a pool a module made when imported) is
not profiled; threads spec code starts are, and on 3.12 every thread is.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import gc
import importlib
import importlib.util
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

from vjpcert.core.reads import PACKAGE, is_spec_code, resolved
from vjpcert.core.reads import _frame_kind as frame_kind      # the classification of core.reads' hook
from vjpcert.frontends.modules import BUILT
from vjpcert.kept_state import changed, fingerprint



@dataclass
class Seen:
    modules: set = field(default_factory=set)      # user files imported, or whose code ran
    environ: set = field(default_factory=set)      # environment variables spec code read
    outside: set = field(default_factory=set)      # what spec code asked of the world: a process, a socket
    drew: set = field(default_factory=set)         # the shared random streams' functions spec code called
    varied: set = field(default_factory=set)       # the clock, the process's id, the OS's entropy it read
    kept: list = field(default_factory=list)       # state it keeps between calls that changed (``kept_state``)
    seeded: list = field(default_factory=list)     # what a module op's class draws from the seed it is built in


# audit events through which spec code gets an answer from outside its files: another program's, or
# the network's (what ``outside`` names them)
_OUTSIDE = {"subprocess.Popen": "a subprocess", "os.system": "a shell command", "os.posix_spawn": "a process",
            "os.spawn": "a process", "os.exec": "a program", "socket.connect": "the network",
            "socket.getaddrinfo": "the network", "urllib.Request": "the network"}
_LOADS = frozenset({"exec", "compile", "code.__new__"})      # events that make code objects, or run them
_EVENTS = frozenset({*_LOADS, *_OUTSIDE})


_WATCHES: list[Seen] = []
_LOCK = threading.Lock()
_REAL: dict = {}


@functools.lru_cache(maxsize=None)
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
    return _spec_frame(sys._getframe(depth), through_stdlib=True) is not None


def _spec_frame(frame, *, through_stdlib: bool):
    """``frame`` if it is a user's spec code -- or, ``through_stdlib``, the first frame above the
    standard library's from it, if that one is -- else None."""
    while through_stdlib and frame is not None and frame_kind(frame.f_code.co_filename) in ("stdlib", "import"):
        frame = frame.f_back
    if frame is None:
        return None
    f = frame.f_code.co_filename
    return frame if frame_kind(f) == "spec" and is_user_code(resolved(f)) else None


def _audit(event, args) -> None:
    """Code made or run without an import: a module body (a loader's ``exec_module``, ``runpy.run_path``)
    carries its file in the "exec" event's code object; ``compile`` and the code constructor name theirs.
    Every user file's is noted for the whole process (``_LOADED``); an "exec" in a watch is the watch's."""
    if event not in _EVENTS:
        return                          # the hot path: id() is audited, some 10^5 times a proof
    if event in _LOADS:
        if args:
            named = args[0] if event == "exec" else args[1] if len(args) > 1 else None
            f = getattr(named, "co_filename", named)
            path = _loaded(f) if isinstance(f, str) else None
            if path is not None and event == "exec" and _WATCHES:
                _add("modules", path)
        return
    if _WATCHES and _from_spec_code(2):
        _add("outside", f"{_OUTSIDE[event]} ({event})")


_CODE_FILE: dict = {}        # a code object's co_filename -> that file when it is a user's file on disk, else None
_LOADED: set = set()         # every user file whose code this process compiled or ran (since vjpcert's import)


def _code_file(filename: str) -> Path | None:
    if filename in _CODE_FILE:
        return _CODE_FILE[filename]
    path = None
    if os.path.isabs(filename) and filename.endswith(".py"):
        path = resolved(filename)
        # only a file on disk can be edited under a certificate (a notebook cell's code has none)
        path = path if is_user_code(path) and path.is_file() else None
    _CODE_FILE[filename] = path
    return path


def _loaded(filename: str) -> Path | None:
    path = _code_file(filename)
    if path is not None:
        _LOADED.add(path)
    return path


def record_loads() -> None:
    """Note, from now on, every user file whose code this process compiles or runs (the audit hook), and
    the modules it already holds. Called before vjpcert loads a spec file, and by the first watch."""
    _watch_varying()        # before a spec module runs: what its body reads when it loads counts too
    with _LOCK:
        if _REAL.get("audit"):
            return
        _REAL["audit"] = True
        sys.addaudithook(_audit)
    for module in list(sys.modules.values()):
        path = _user_file(module)
        if path is not None:
            _LOADED.add(path)


def _functions_from_before() -> None:
    """Once, when a user's op first asks: the files of every function this process holds, for code made
    before the audit hook was there whose module is gone from ``sys.modules`` (a module removed leaves
    its functions behind). Later code is noted as it is made."""
    if _REAL.get("scanned"):
        return
    _REAL["scanned"] = True
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType:      # not isinstance: a dead weakref.proxy raises
            _loaded(obj.__code__.co_filename)


def foreign_code(op) -> set:
    """User files whose code this process holds and ``op``'s certificates do not hash: what its code
    could reach without an import statement (a built-in op's code is the project's, reviewed with it)."""
    files = set(op.source_files)
    if not any(is_user_code(p) for p in files):
        return set()
    _functions_from_before()
    return _LOADED - files


def _ran(filename: str) -> None:
    path = _code_file(filename)
    if path is not None:
        _add("modules", path)


def _profile(frame, event, arg) -> None:
    """The profile hook (before Python 3.12): the file of every Python function called."""
    if event == "call":
        _ran(frame.f_code.co_filename)
    chained = _RUNS["before"]
    if chained is not None:
        chained(frame, event, arg)


def _started(code, offset):
    """sys.monitoring's PY_START (Python 3.12+): each code object is reported once a watch, then its
    event is disabled, so the watch costs next to nothing."""
    _ran(code.co_filename)
    return sys.monitoring.DISABLE


def _monitoring_tool() -> int | None:
    monitoring = getattr(sys, "monitoring", None)
    for tool in (3, 4) if monitoring is not None else ():     # the ids no standard tool takes
        try:
            monitoring.use_tool_id(tool, "vjpcert")
        except ValueError:
            continue
        monitoring.register_callback(tool, monitoring.events.PY_START, _started)
        return tool
    return None


# how many open watches ask what runs; the profile functions their hook replaced, put back after; a
# C profiler (cProfile's) paused meanwhile
_RUNS: dict = {"open": 0, "before": None, "threads": None, "paused": None}


def _runs_on() -> None:
    with _LOCK:
        _RUNS["open"] += 1
        if _RUNS["open"] > 1:
            return
        if "tool" not in _RUNS:
            _RUNS["tool"] = _monitoring_tool()
        if _RUNS["tool"] is not None:
            sys.monitoring.restart_events()              # what the last watch disabled is seen again
            sys.monitoring.set_events(_RUNS["tool"], sys.monitoring.events.PY_START)
        else:
            before = sys.getprofile()
            if before is not None and not callable(before) and hasattr(before, "disable"):
                # a profiler of C code (cProfile) is not a function the hook can pass events on to:
                # paused while the watch is open, and resumed after (its figures skip the watched code)
                before.disable()
                _RUNS["paused"], before = before, None
            _RUNS["before"], _RUNS["threads"] = before, threading.getprofile()
            sys.setprofile(_profile)
            threading.setprofile(_profile)


def _runs_off() -> None:
    with _LOCK:
        _RUNS["open"] -= 1
        if _RUNS["open"]:
            return
        if _RUNS["tool"] is not None:
            sys.monitoring.set_events(_RUNS["tool"], 0)
        else:
            paused = _unhook()
            if paused is not None:
                paused.enable()


def _unhook():
    """Put back the profile functions the hook replaced; the paused C profiler, for the caller to resume."""
    sys.setprofile(_RUNS["before"])
    threading.setprofile(_RUNS["threads"])
    paused = _RUNS["paused"]
    _RUNS["before"] = _RUNS["threads"] = _RUNS["paused"] = None
    return paused


def _stop_in_child() -> None:
    """In a forked child (a strategy run under its budget): nothing it sees reaches the watches of the
    process it was forked from (the docstring above), so it stops watching at once. Its hooks would
    only cost time -- the profile hook doubles the time of the code it watches, SymPy's included.
    Lock-free: a lock another thread held at the fork stays held in the child."""
    global _LOCK
    _LOCK = threading.Lock()
    _WATCHES.clear()
    if _RUNS["open"]:
        _RUNS["open"] = 0
        if _RUNS.get("tool") is not None:
            sys.monitoring.set_events(_RUNS["tool"], 0)
        else:
            _unhook()               # a paused profiler stays paused: the child's figures go nowhere


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_stop_in_child)


def _install() -> None:
    with _LOCK:
        if "import" in _REAL:
            return
        _REAL["import"], _REAL["import_module"] = builtins.__import__, importlib.import_module
        _REAL["getitem"] = os._Environ.__getitem__

        def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
            if _TRACKED and _loads_a_module(_absolute(name, globals, level), fromlist):
                module = _import_between_states(_REAL["import"], name, globals, locals, fromlist, level)
            else:
                module = _REAL["import"](name, globals, locals, fromlist, level)
            if not _WATCHES:
                return module
            key = (name, level, globals.get("__package__") if level and globals else None)
            known = _LIBRARY.get(key)
            if known is not None and sys.modules.get(known[0]) is known[1]:
                return module           # the hot path: SymPy's imports inside its own functions
            full = _absolute(name, globals, level)
            if full == "__main__" and not _from_spec_code():
                return module           # a library's `import __main__` (rlcompleter's) runs no code of it
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
            if _TRACKED and _loads_a_module(_absolute(name.lstrip("."), {"__package__": package},
                                                      len(name) - len(name.lstrip("."))), ()):
                module = _import_between_states(_REAL["import_module"], name, package)
            else:
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
    record_loads()        # and the shared random streams, the clock, the OS's entropy (_watch_varying)


def _watch_draws() -> None:
    """Spec code that draws from the process's shared random streams computes a function of the
    stream's state, which every thread changes: the module functions of ``random`` and numpy's legacy
    ones (``np.random.rand``) are wrapped, and a call from spec code is noted (``Seen.drew``), as a read
    of ``os.environ`` is. A generator the spec module holds is fingerprinted instead (``kept_state``)."""
    import numpy.random
    import random
    for module, stream in ((random, random._inst), (numpy.random, numpy.random.mtrand._rand)):
        for name, fn in list(vars(module).items()):
            if getattr(fn, "__self__", None) is stream and callable(fn):
                setattr(module, name, _drawn(f"{module.__name__}.{name}", fn))


def _drawn(label: str, fn):
    @functools.wraps(fn)
    def draw(*args, **kwargs):
        caller = sys._getframe(1)
        if _WATCHES or caller.f_code.co_name == "<module>":      # outside a watch only a module body counts
            _note(label, _spec_frame(caller, through_stdlib=True), "drew")
        return fn(*args, **kwargs)
    return draw


# What differs from one call, or one run, to the next and is none of an op's arguments: the clock, the
# process's id, the folder, host and machine it runs on, the OS's entropy and a generator seeded from
# it. A certificate is for a function of the arguments; spec code that reads one of these (``k = 2 if
# time.time() < 1.9e9 else 3``, or ``if os.urandom(1)[0] < 253``, at a call or when its module loads)
# computes another function at another time or in another process. The clock and the process's id count only where spec code calls
# them itself (a library the spec calls -- logging -- stamps its records with them); the OS's entropy
# also through the standard library (``secrets``, ``uuid.uuid4``, ``random.SystemRandom``, an unseeded
# ``random.Random()``), which has no other use for it in a computation.
_CLOCK = ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
          "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns", "localtime",
          "gmtime", "ctime", "asctime", "strftime")
_AT_LOAD: dict = {}          # user file -> what its module body read of these when it loaded (this process)


def _watch_varying() -> None:
    """Wrap, once per process, the clock's functions, the process's id, folder, host and machine
    (``os.getpid``, ``os.getcwd``, ``socket.gethostname``, ``os.cpu_count``), the OS's entropy (``os.urandom``,
    and the copy ``random`` keeps), ``random.SystemRandom``'s draws, an unseeded ``random.Random`` and an
    unseeded ``numpy.random.default_rng``: a read from spec code is noted (``Seen.varied``, and
    ``_AT_LOAD`` for a module body)."""
    with _LOCK:
        if _REAL.get("varying"):
            return
        _REAL["varying"] = True
    _watch_draws()
    import numpy.random
    import random
    import time
    for name in _CLOCK:
        if hasattr(time, name):
            setattr(time, name, _varying(f"time.{name}", getattr(time, name), through_stdlib=False))
    # where and as whom the command runs: one folder, host or machine today, another tomorrow
    for name in ("getpid", "getppid", "getcwd", "getcwdb", "cpu_count", "getlogin", "getuid"):
        if hasattr(os, name):
            setattr(os, name, _varying(f"os.{name}", getattr(os, name), through_stdlib=False))
    import pathlib
    import socket
    pathlib.Path.cwd = classmethod(_varying("Path.cwd", pathlib.Path.cwd.__func__, through_stdlib=False))
    socket.gethostname = _varying("socket.gethostname", socket.gethostname, through_stdlib=False)
    for name in ("urandom", "getrandom"):
        if hasattr(os, name):
            setattr(os, name, _varying(f"os.{name}", getattr(os, name), through_stdlib=True))
    random._urandom = _varying("os.urandom", random._urandom, through_stdlib=True)
    for name in ("random", "getrandbits", "randbytes"):
        if name in vars(random.SystemRandom):
            setattr(random.SystemRandom, name, _varying(f"random.SystemRandom.{name}", vars(random.SystemRandom)[name],
                                                        through_stdlib=True))
    unseeded = lambda args, kwargs: (args[1] if len(args) > 1 else kwargs.get("a")) is None    # noqa: E731
    random.Random.seed = _varying("random.Random() unseeded", random.Random.seed, through_stdlib=True,
                                  when=unseeded)
    numpy.random.default_rng = _varying(
        "numpy.random.default_rng() unseeded", numpy.random.default_rng, through_stdlib=True,
        when=lambda args, kwargs: (args[0] if args else kwargs.get("seed")) is None)


def _varying(label: str, fn, *, through_stdlib: bool, when=None):
    @functools.wraps(fn)
    def read(*args, **kwargs):
        if when is None or when(args, kwargs):
            caller = sys._getframe(1)
            # the cheap test first: outside a watch only a module body counts (the clock is read often)
            if _WATCHES or through_stdlib or caller.f_code.co_name == "<module>":
                _note(label, _spec_frame(caller, through_stdlib=through_stdlib), "varied")
        return fn(*args, **kwargs)
    return read


def _note(label: str, frame, what: str) -> None:
    """Note a read of ``label`` by spec code at ``frame`` (None: not spec code's) in the open watches'
    ``what``, and for the file whose module body made it, when its module loaded."""
    if frame is None:
        return
    _add(what, label)
    if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") != "__main__":
        _AT_LOAD.setdefault(resolved(frame.f_code.co_filename), set()).add(label)


@contextlib.contextmanager
def watch(op=None):
    """A ``Seen`` that fills with what runs while the block runs. For ``op``, with user files in the
    process its certificates do not hash (``foreign_code``), it also notes every user file whose
    functions run: on Python 3.11 that costs some 2x on the code it watches, so a user op alone in its
    process (or a built-in op) goes without it, having nothing it could reach that way."""
    _install()
    seen = Seen()
    state = _state_of(op)
    tracked = _Tracked(state) if state is not None else None
    _WATCHES.append(seen)
    if tracked is not None:
        _TRACKED.append(tracked)
    runs = op is not None and bool(foreign_code(op))
    if runs:
        _runs_on()
    try:
        yield seen
    finally:
        _WATCHES.remove(seen)
        if tracked is not None:
            _TRACKED.remove(tracked)
            seen.kept = changed(tracked.expected, state())
        if op is not None:
            kept, seen.seeded = _module_state(op)
            seen.kept += [k for k in kept if k not in seen.kept]
        if runs:
            _runs_off()


class _Tracked:
    """The state of one open watch's op (``kept_state``): what it is expected to be when the watch
    closes -- its fingerprint when the watch opened, with what each import that loaded a module changed."""

    def __init__(self, state):
        self.state, self.expected = state, state()


# Open watches of a user's op, whose state is fingerprinted around every import that loads a module: a
# library's module run for the first time may rebind what its package holds (importing torch._dynamo
# rebinds torch.manual_seed). What the import itself changed is the library loading: the names it changed
# are expected as it left them. Every other name is compared, when the watch closes, with what it was
# when the watch opened -- only then: in between, vjpcert's own code may hold a library's class patched
# (the device probe answers `x.is_cuda`), as it does during an import the probe's trace makes. So a
# counter kept in a library's bindings is seen however many modules load in between.
_TRACKED: list = []
_IMPORTING = threading.local()       # depth 1 while this thread is in such an import (the outermost counts)


def _import_between_states(real, *args):
    if getattr(_IMPORTING, "depth", 0) or not _TRACKED:
        return real(*args)
    before = [(tracked, tracked.state()) for tracked in list(_TRACKED)]
    _IMPORTING.depth = 1
    try:
        return real(*args)
    finally:
        _IMPORTING.depth = 0
        for tracked, pre in before:
            post = tracked.state()
            for name in pre.keys() | post.keys():
                if pre.get(name) != post.get(name):
                    if name in post:
                        tracked.expected[name] = post[name]
                    else:
                        tracked.expected.pop(name, None)


def _loads_a_module(full: str | None, fromlist) -> bool:
    """Whether importing ``full`` (and the names of ``fromlist`` from it) may load a module: it is not
    loaded yet, or a name of the fromlist is neither bound in it nor a loaded submodule (read from its
    ``__dict__``: a package's ``__getattr__`` would import it)."""
    module = sys.modules.get(full) if full else None
    if module is None:
        return True
    names = getattr(module, "__dict__", {})
    return any(isinstance(item, str) and item != "*" and item not in names and f"{full}.{item}" not in sys.modules
               for item in fromlist or ())


def _is_user(name: str) -> bool:
    """Whether a code file (a path) or a module (a dotted name) is user code."""
    if name.endswith(".py") and os.path.isabs(name):
        return is_user_code(resolved(name))
    module = sys.modules.get(name)
    return module is not None and _user_file(module) is not None


def _state_of(op):
    """For a user's op, the function that fingerprints the state its code keeps (``kept_state``): the
    globals of its user modules, the op object; None for a built-in op."""
    if op is None:
        return None
    files = {p for p in op.source_files if is_user_code(p)}
    if not files:
        return None
    modules = [m for m in list(sys.modules.values()) if _user_file(m) in files]

    return functools.partial(fingerprint, modules, [(f"the op {op.name}", op)], _is_user)


# A module op's modules (``frontends.modules``), each with what it held as it was built: a module is built
# once per dims and called by every claim, so it is held to that state after each claim -- not to the
# state when the claim began, which an earlier claim's calls may have changed already. A class's module
# is also built from a second seed (its twin): what differs between the two besides their parameters (a
# permutation drawn in __init__) makes the class no one function.
# id(module) -> (the module, kept alive; its fingerprint as built; what its twin differs in)
_AS_BUILT: dict[int, tuple] = {}


def _note_built(target, mod, twin) -> None:
    drawn = [] if twin is None else changed(fingerprint([], target.structure(mod), _is_user),
                                            fingerprint([], target.structure(twin), _is_user))
    _AS_BUILT[id(mod)] = (mod, fingerprint([], target.kept_objects(mod), _is_user), drawn)


BUILT.append(_note_built)


def _module_state(op) -> tuple[list[str], list[str]]:
    """(what a module op's modules changed since they were built, what they drew from the seed)."""
    kept, drawn = [], []
    for target, mod in op.built_modules() if hasattr(op, "built_modules") else ():
        built = _AS_BUILT.get(id(mod))
        if built is not None and built[0] is mod:
            kept += changed(built[1], fingerprint([], target.kept_objects(mod), _is_user))
            drawn += built[2]
    return kept, drawn


def unhashed(op, seen: Seen) -> str | None:
    """Why ``op``'s certificates would not cover what its code used in ``seen``, or None."""
    listed = set(op.source_files)
    modules = sorted(p for p in seen.modules if p not in listed and is_user_code(p))
    parts = []
    if modules:
        parts.append(f"ran code of {', '.join(p.name for p in modules)} while it ran, which is not among the files "
                     f"its certificates hash (the spec module and what its source imports): it was reached without "
                     f"an import statement in those files (importlib.import_module, __import__, a loader's "
                     f"exec_module, runpy, sys.modules, another module's globals, or the like), so an edit there "
                     f"would leave them current. Import it with an import statement in a file the spec imports")
    if seen.environ:
        parts.append(f"read the environment variable(s) {', '.join(sorted(seen.environ))}: a certificate cannot "
                     f"say which value it was proved for. Make it a param of the op or a constant")
    if seen.outside:
        parts.append(f"asked {', '.join(sorted(seen.outside))} while it ran: what came back is in no certificate's "
                     f"hash. Write it to a file the spec reads (data files are hashed)")
    if seen.drew:
        parts.append(f"drew random numbers from the process's shared stream ({', '.join(sorted(seen.drew))}): a "
                     f"certificate is for a function of the op's arguments. Make the draw a param, an input, or "
                     f"a constant drawn once from a seeded generator when the module loads")
    loaded = {f"{label} when {path.name} loaded" for path in set(op.source_files) if is_user_code(path)
              for label in _AT_LOAD.get(path, ())}
    if seen.varied or loaded:
        parts.append(f"read what differs from one call or one run to the next ({', '.join(sorted(seen.varied | loaded))}): "
                     f"a certificate is for a function of the op's arguments, and this computes another at "
                     f"another time or in another process. Make it a param, an input or a constant")
    if seen.kept:
        parts.append(f"changed, while it ran, state it reads again on its next call: {', '.join(seen.kept)}. A "
                     f"certificate is for a function of the op's arguments, and one that counts its calls (or "
                     f"draws random numbers) can compute another after the calls a tier makes. Compute such "
                     f"values from the arguments, or once when the module loads")
    if seen.seeded:
        parts.append(f"builds, from the random state it is built in, what is not a parameter "
                     f"({', '.join(seen.seeded)}): it differs between a module built after torch.manual_seed(0) "
                     f"(or jax.random.PRNGKey(0)) and one built after seed 1. A certificate for the class would be "
                     f"for one draw of it: draw it from a seed the constructor takes (an init= argument), or "
                     f"make it a parameter")
    return ("its code " + "; and it ".join(parts)) if parts else None
