"""State that spec code keeps between its calls: a counter in its module, a list a default argument
holds, a random generator it draws from.

A certificate is about a function of the op's arguments. Spec code that changes something it reads on
its next call computes one function for the calls a tier makes and may compute another later (``k = 2
while CALLS[0] <= 40, else 3``): the symbolic tier would prove the first. No finite number of calls can
tell, so what is checked is the state itself: everything a user's spec module holds is fingerprinted
when a watch opens (``vjpcert.unhashed.watch``, around planning and around each claim's run) and again
when it closes, and a change refuses the op (``unhashed.unhashed`` says which name changed).

What is fingerprinted, from the globals of every user module the op's certificates hash (its own names
too: ``__file__``, ``__package__``, ``__spec__`` and ``__loader__`` with what is set on them, less the import
system's bookkeeping -- a loader shared by many modules by identity, as a library's object -- and the
module's class where spec code set one) and from the op's own functions:
numbers, strings and the containers that hold them (lists, dicts, sets, tuples, deques), numpy arrays and torch tensors by their bytes, functions defined in user code (defaults, closure cells, their
attributes), user classes and their instances, bound methods and partials, generators (where they
stopped, their locals), random generators (``random.Random``, numpy's ``Generator`` and
``RandomState``) by their state, and the op objects themselves (what a user may store on them; not the
caches vjpcert keeps there). ``B`` holds nothing: a spec reads only the backend's operations from it.
The process's shared random streams (``random``'s, numpy's legacy one) are shared with every thread,
so a change there cannot be put down to spec code: ``unhashed`` sees spec code draw from them instead,
as it sees it read an environment variable. Any other object is compared by its type, its ``repr``
(``itertools.count(5)`` names its count), its ``__dict__``, what pickling would keep of it (an
iterator's position) and the objects it refers to (``gc.get_referents``). A ``functools`` cache of a
module is read entry by entry: it may fill with what nothing can change in place (a number, a tuple, a
read-only array: a pure function's memo), while an entry that can be changed (a list it hands out, any
entry of a bounded cache, whose results only C code reads) counts from the moment it appears. Modules
are roots of their own, never walked through.

A library module the spec module names is read for what its names are bound to (``math.calls = 1``
binds one), name by name, and a library's function or class for the attributes it binds
(``json.dumps.calls = 1``), by identity; what an import rebinds there while spec code runs is the
library loading (``unhashed`` expects it). Not seen: what a library module's objects hold, changed in place (its caches
change under vjpcert too) -- ``sys.argv`` appended to, a namespace or module spec code puts into
``sys.modules`` and reaches only through it --, the names of a library module the spec module does not
name (``sys.modules["__main__"].calls``), and state a library keeps that no object reachable from the
spec module refers to; what changes only in a forked child (a strategy run under its budget), which is gone
when the child ends; and what vjpcert's own objects hold (an op built from a framework module keeps
the module instances it builds, whose buffers -- BatchNorm's running statistics -- change in training
by design): those are compared by identity. Built-in ops are the project's code, reviewed with it:
only user code is fingerprinted.
"""
from __future__ import annotations

import builtins
import collections
import functools
import gc
import hashlib
import importlib.machinery
import random
import sys
import types
import warnings

# what vjpcert itself caches on an op object while it plans and checks, by the class that keeps the
# cache (not state of the spec's: a graph traced once, the hash of a file)
_CACHES = {"vjpcert.core.registry.Op": frozenset({"_features_seen", "_features_key"}),
           "vjpcert.frontends.op.FrontendOp": frozenset({"_graphs", "_traced", "_uncompared", "_sha", "_output"})}

_ATOMS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), type(NotImplemented), range, slice)
# What the import system writes on a module's spec after the import, not the module's state: the flag
# it sets while the module runs, the cached-file path ``spec.cached`` computes on its first read, and
# the submodules being imported. Every other attribute of the spec and of the loader, and the module's
# own ``__file__``, ``__name__``, ``__package__`` ..., are spec code's to change: walked like its globals
# (``__spec__.calls += 1`` keeps a counter there as well as anywhere).
_IMPORT_BOOKKEEPING = frozenset({"_initializing", "_cached", "_uninitialized_submodules"})
_PER_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader,
                     importlib.machinery.ExtensionFileLoader)


_CLOSE = object()      # the end of an object's parts, in the walk's stack


class _Walk:
    """One fingerprint: a blake2b over the objects reached, in a fixed order, an object met again
    written as a reference to its first visit (cycles end, sharing is part of the shape)."""

    def __init__(self, is_user):
        self.is_user = is_user          # whether a code file or a module name is user code
        self.visited: dict[int, int] = {}
        self.alive: list = []           # keeps every visited object alive, so no id is reused meanwhile

    def digest(self, obj) -> str:
        """Iterative (a nested structure of any depth is walked whole): each object writes its type, then
        its parts, then a closing mark."""
        h = hashlib.blake2b(digest_size=16)
        todo = [obj]
        while todo:
            item = todo.pop()
            if item is _CLOSE:
                h.update(b">")
                continue
            t = type(item)
            if t in _ATOMS:
                h.update(item if t is bytes else
                         f"{t.__name__}:{float.hex(item) if t is float else repr(item)};".encode())
                continue
            key = id(item)
            if key in self.visited:
                h.update(f"@{self.visited[key]};".encode())
                continue
            self.visited[key] = len(self.visited)
            self.alive.append(item)
            h.update(f"<{t.__module__}.{t.__qualname__}".encode())
            todo.append(_CLOSE)
            todo.extend(reversed(tuple(self._parts(item))))
        return h.hexdigest()

    def _parts(self, obj):
        """What ``obj`` holds that can change, as a sequence of objects to walk."""
        t = type(obj)
        if isinstance(obj, types.ModuleType):
            return (obj.__name__,)                       # a root of its own, or a library's
        if t in (list, tuple, collections.deque) or isinstance(obj, (list, tuple)):
            return (len(obj), *obj)
        if isinstance(obj, dict):
            extra = (obj.default_factory,) if isinstance(obj, collections.defaultdict) else ()
            return (*extra, len(obj), *(x for kv in obj.items() for x in kv))
        if isinstance(obj, (set, frozenset)):
            return tuple(sorted(_Walk(self.is_user).digest(x) for x in obj))
        if isinstance(obj, types.FunctionType):
            if not self.is_user(obj.__code__.co_filename):
                return (obj.__module__, obj.__qualname__, _attribute_ids(obj))
            cells = tuple(c.cell_contents if _filled(c) else "<empty cell>" for c in obj.__closure__ or ())
            return (id(obj.__code__), obj.__defaults__, obj.__kwdefaults__, cells, obj.__dict__)
        if isinstance(obj, (types.MethodType, types.BuiltinMethodType)) and getattr(obj, "__self__", None) \
                is not None and not isinstance(obj.__self__, types.ModuleType):
            return (getattr(obj, "__func__", obj.__name__), obj.__self__)
        if isinstance(obj, functools.partial):
            return (obj.func, obj.args, obj.keywords)
        if isinstance(obj, (staticmethod, classmethod)):
            return (obj.__func__,)
        if isinstance(obj, property):
            return (obj.fget, obj.fset, obj.fdel)
        if isinstance(obj, type):
            if not self.is_user(obj.__module__):
                return (obj.__module__, obj.__qualname__, _attribute_ids(obj))
            return tuple(x for k, v in _class_vars(obj).items() if k not in ("__dict__", "__weakref__", "__doc__")
                         for x in (k, v))
        if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
            frame = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
            return ("done",) if frame is None else (frame.f_lasti, dict(frame.f_locals))
        if isinstance(obj, random.Random):
            return (obj.getstate(), getattr(obj, "__dict__", {}))
        state = _generator_state(obj)
        if state is not None:
            return (state,)
        if t.__module__ == "numpy" and t.__name__ == "ndarray":
            return _array_parts(obj)
        if t.__module__.split(".")[0] == "torch" and hasattr(obj, "detach") and hasattr(obj, "dtype"):
            return _tensor_parts(obj)
        if _is_op(obj) or self.is_user(t.__module__):
            return tuple(x for kv in _own_attributes(obj) for x in kv)
        if t.__module__.split(".")[0] == "vjpcert":
            return ()      # the machinery's (a module class's builder, a dim's expression): its caches are its own
        # a library's object: what it says of itself, its attributes and what it refers to
        try:
            text = repr(obj) if type(obj).__repr__ is not object.__repr__ else ""
        except Exception as exc:         # a repr that fails says nothing; its type is still written
            text = f"<repr failed: {type(exc).__name__}>"
        return (text[:4096], getattr(obj, "__dict__", None), _reduced(obj), *gc.get_referents(obj))


def _tensor_parts(t):
    """A torch tensor by its dtype, shape and bytes (a model's weights: its repr would print them, and
    pickling it reaches its whole storage); one with no data to read (meta, fake) by its repr."""
    try:
        data = t.detach().cpu()
        if data.is_floating_point() and data.element_size() < 4:     # no numpy dtype for bfloat16
            data = data.float()
        raw = data.contiguous().numpy().tobytes()
    except Exception:              # no data on this machine, or a kind numpy cannot hold: its repr
        return (repr(t)[:4096],)
    return (str(t.dtype), tuple(t.shape), hashlib.blake2b(raw, digest_size=16).hexdigest())


def _own_attributes(obj):
    """(name, value) of what an object of a user class, or an op, holds: its ``__dict__`` and slots, less
    the caches vjpcert keeps on an op."""
    caches = set().union(*(_CACHES.get(f"{c.__module__}.{c.__qualname__}", ()) for c in type(obj).__mro__))
    d = getattr(obj, "__dict__", None) or {}
    slots = [(s, getattr(obj, s, None)) for c in type(obj).__mro__ for s in getattr(c, "__slots__", ()) or ()
             if isinstance(s, str) and s not in ("__dict__", "__weakref__")]
    return [(k, v) for k, v in d.items() if k not in caches] + slots


def _reduced(obj):
    """What pickling would keep of ``obj`` (an iterator's position, for one), without its constructor;
    None where it cannot be pickled."""
    try:
        reduced = obj.__reduce_ex__(4)
    except Exception:             # not picklable: its repr, attributes and referents still count
        return None
    return reduced[1:] if isinstance(reduced, tuple) else None


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _is_op(obj) -> bool:
    from vjpcert.core.registry import Op
    return isinstance(obj, Op)


def _generator_state(obj):
    """The state of numpy's random generators, else None."""
    mod = type(obj).__module__ or ""
    if not mod.startswith("numpy.random"):
        return None
    if hasattr(obj, "bit_generator"):                 # Generator
        return obj.bit_generator.state
    if hasattr(obj, "get_state") and callable(obj.get_state):   # RandomState
        return obj.get_state(legacy=False)
    state = getattr(obj, "state", None)                # a bit generator
    return state if isinstance(state, dict) else None


def _array_parts(a):
    if a.dtype.hasobject:
        return (a.dtype.str, a.shape, *a.ravel().tolist())
    import numpy as np
    return (a.dtype.str, a.shape, hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest())


def fingerprint(modules, objects, is_user) -> dict[str, str]:
    """name -> digest of each global of ``modules`` (user modules) and of each attribute of ``objects``
    (named pairs)."""
    with warnings.catch_warnings():     # a library's repr or reduction may warn (torch's storages do)
        warnings.simplefilter("ignore")
        return _fingerprint(modules, objects, is_user)


def _fingerprint(modules, objects, is_user) -> dict[str, str]:
    # each name walked on its own (an object two names share is walked twice): a change under one name
    # does not renumber the references met under the next
    prints = {}
    for module in modules:
        label = getattr(module, "__file__", None) or module.__name__
        if type(module) is not types.ModuleType:     # a module class of the spec's own (set on __class__)
            prints[f"the class of {label.rsplit('/', 1)[-1]}"] = _Walk(is_user).digest(type(module))
        for name, value in list(vars(module).items()):
            if name == "__builtins__" or isinstance(value, types.ModuleType) and not is_user(value.__name__):
                library = builtins if name == "__builtins__" else value
                for attribute, bound in _bindings(library).items():
                    prints[f"the attributes of {library.__name__} (as {name}): {attribute}"] = bound
                continue
            where = f"{name} ({label.rsplit('/', 1)[-1]})"
            if name in ("__spec__", "__loader__") and value is not None:
                prints[where] = _import_object(value, is_user)
                continue
            entries = _cache_entries(value)
            if entries is None:
                prints[where] = _Walk(is_user).digest(value)
                continue
            # a functools cache may fill with what cannot change (a pure function's memo); an entry that
            # can be changed in place (a list it hands out) counts from the moment it appears
            prints[where] = _Walk(is_user).digest(value.__wrapped__)
            for key, result in entries:
                mark = _CACHED if _immutable(result) else ""
                prints[f"{mark}{where}[{key!r}]"] = _Walk(is_user).digest(result)
    for name, value in objects:      # an object's attributes one by one: the change is named to the attribute
        for attr, v in _own_attributes(value):
            prints[f"{name}.{attr}"] = _Walk(is_user).digest(v)
    return prints


def _import_object(obj, is_user) -> str:
    """The fingerprint of a user module's spec or loader. The spec is the module's own: every attribute
    walked, less the import system's bookkeeping. A loader made for one file (the import system's file
    loaders) or of a user's class is walked the same way; a shared one is a library's object (pytest's
    assertion-rewriting hook loads every test module and holds the session, its caches filling as
    anything imports), read for what its attributes are bound to, by identity."""
    if isinstance(obj, importlib.machinery.ModuleSpec):
        return _Walk(is_user).digest(tuple(
            x for k, v in vars(obj).items() if k not in _IMPORT_BOOKKEEPING
            for x in (k, _import_object(v, is_user) if k == "loader" and v is not None else v)))
    if type(obj) in _PER_FILE_LOADERS or is_user(type(obj).__module__):
        return _Walk(is_user).digest(tuple(x for kv in _own_attributes(obj) for x in kv))
    attributes = getattr(obj, "__dict__", None) or {}
    return f"{type(obj).__module__}.{type(obj).__qualname__}(" + ",".join(
        f"{k}={id(v)}" for k, v in sorted(attributes.items(), key=lambda kv: kv[0])) + ")"


def _bindings(module) -> dict[str, str]:
    """What each of a library module's names is bound to, by identity (``math.calls = math.calls + 1``
    rebinds one), less its submodules (an import binds them), with the attributes of a function or class
    it names, by identity too (``json.dumps.calls = 1``): its own caches, mutated in place, are its own.
    Name by name, so that what one import rebinds (importing torch._dynamo rebinds torch.manual_seed) is
    told from the rest (``unhashed`` expects it)."""
    return {k: f"{id(v)}{_attribute_ids(v)}" for k, v in list(vars(module).items())
            if not isinstance(v, types.ModuleType)}


def _attribute_ids(value) -> str:
    """The names a library's function or class binds, and to what (by identity), else ''."""
    if isinstance(value, type):
        d = _class_vars(value)
    elif isinstance(value, types.FunctionType):
        d = value.__dict__
    else:
        return ""
    return "(" + ",".join(f"{k}={id(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0])) + ")"


def _class_vars(cls) -> dict:
    """A class's own names, less ``__slotnames__`` where it holds what pickling computes and caches there
    from ``__slots__`` alone: the fingerprint's own ``__reduce_ex__`` (``_reduced``) writes it on the class
    of an object it reads, as ``copy`` and ``pickle`` do. Any other value of it counts, like any name."""
    d = vars(cls)
    cached = d.get("__slotnames__")
    if cached is not None and cached == _slot_names(cls):
        d = {k: v for k, v in d.items() if k != "__slotnames__"}
    return d


def _slot_names(cls) -> list[str]:
    """The names pickling lists for ``cls``'s slots (``copyreg``'s rule: every class of the MRO, private
    names mangled, ``__dict__`` and ``__weakref__`` left out)."""
    names = []
    for c in cls.__mro__:
        slots = c.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__") and c.__name__.lstrip("_"):
                name = f"_{c.__name__.lstrip('_')}{name}"
            names.append(name)
    return names


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The names whose fingerprint differs, or that appeared or went (a cache's entries may come and
    go; one that stayed must hold what it held)."""
    return sorted(k.removeprefix(_CACHED) for k in before.keys() | after.keys() if before.get(k) != after.get(k)
                  and not (k.startswith(_CACHED) and (k not in before or k not in after)))


_CACHED = "\0cached "      # the label of a functools cache's entry


def _immutable(value) -> bool:
    """Whether nothing can change ``value`` in place: an atom, a tuple or frozenset of such, a read-only
    numpy array of numbers."""
    if type(value) in _ATOMS:
        return True
    if type(value) in (tuple, frozenset):
        return all(_immutable(v) for v in value)
    return (type(value).__module__ == "numpy" and type(value).__name__ == "ndarray" and not value.dtype.hasobject
            and not value.flags.writeable)


def _cache_entries(value):
    """(key, result) of each entry of a ``functools.cache``/``lru_cache`` wrapper, else None. The cache
    is the dict the wrapper refers to (C code keeps it): an unbounded cache maps key -> result; a bounded
    one maps key -> a link whose result C code alone reads, so its entries are never known not to change
    (``_immutable`` is false of a link: a new one counts as a change)."""
    if not (callable(getattr(value, "cache_info", None)) and hasattr(value, "__wrapped__")):
        return None
    tables = [r for r in gc.get_referents(value) if type(r) is dict and r is not getattr(value, "__dict__", None)]
    if len(tables) != 1:
        return None                  # not the wrapper this reads: walked as any other object
    return list(tables[0].items())
