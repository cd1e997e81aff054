"""A user's module as an op, whatever framework it is written in: its parameters are differentiable
inputs, its other float arrays (buffers, frozen parameters) non-differentiable ones, and its forward is
called with those replaced by the op's inputs. ``frontends.torch_module`` (``nn.Module``) and
``frontends.jax_module`` (Equinox) say how a module of theirs is built, which arrays it holds and how
it is called with others; everything else is here, once.

A module *class* is built at each dims with ``init`` (constructor keyword arguments; a string naming one
of the op's first dims is that dim's size, anything else is passed as it is); a module *instance* is
taken as it is, at the dims its arrays have. Each array ``a.b.weight`` is the input ``a_b_weight``, whose
shape is the array's at those dims.

The graph of an op is keyed by its inputs' shapes (``FrontendOp.graph``), so the module is found from
them: among the modules built for the dims asked about (each input's shape is read from one), the one
whose arrays have those shapes. Two dims whose modules differ but whose arrays have the same shapes (a
head count that changes no array's shape) would share one graph, so building the second is refused,
before anything is evaluated with the wrong module.
"""
from __future__ import annotations

import inspect
import re
from typing import Mapping

from vjpcert.core.registry import SpecError


# Called with (target, module, twin) as each module is built or an instance is first taken, before
# anything runs it: the check of kept state (``vjpcert.unhashed``) reads what it holds then, to compare
# later, and compares a class's module with its twin, built from another seed (None for an instance).
BUILT: list = []


class ModuleTarget:
    """How a module class (or instance) is built at given dims, and its arrays named as inputs. A
    framework's subclass gives ``module_types``, ``construct``, ``arrays`` and ``call``."""

    kind = "module"

    def __init__(self, target, init: Mapping | None, name: str, train: bool):
        self.instance = target if isinstance(target, self.module_types()) else None
        self.cls = type(target) if self.instance is not None else target
        if self.instance is not None and init:
            raise SpecError(name, "init= builds a module class; this is an instance, already built: pass its class")
        self.init = dict(init or {})
        self.name = name
        self.train = train
        # named as the class is, for refusals and for the op's source files (``core.sources``)
        self.__name__, self.__qualname__ = self.cls.__name__, self.cls.__qualname__
        self.__module__ = self.cls.__module__
        self.__doc__ = inspect.cleandoc(self.cls.__doc__ or "")        # its own, not the base class's
        self._built: dict = {}            # resolved constructor arguments -> module
        self.user_inputs: list[str] = []
        self.user_nondiff: list[str] = []
        self.tensors = None
        self.reads: tuple[str, ...] = ()

    # ---------------------------------------------------------------- what a framework says
    @staticmethod
    def module_types() -> tuple:
        raise NotImplementedError

    def construct(self, kwargs: dict, seed: int = 0):
        """A module of the class, built with these keyword arguments (and the framework's mode), the
        framework's random state seeded with ``seed``."""
        raise NotImplementedError

    def arrays(self, mod) -> list[tuple[str, object, bool]]:
        """(own name, array, differentiable) for every float array the module holds."""
        raise NotImplementedError

    def call(self, mod, swap: dict, args: tuple, kwargs: dict):
        """The module's forward on ``args``, its arrays replaced by ``swap`` (own name -> array)."""
        raise NotImplementedError

    def prepare(self, mod) -> None:
        """Put a module just built (or an instance just taken) in the mode it is proved in."""

    def own_state(self, mod) -> list[tuple[str, dict]]:
        """(path, attributes) of what the module and its submodules hold besides their arrays: Python
        state its forward could change (a call counter on ``self``). None for an immutable module."""
        return []

    def structure(self, mod) -> list[tuple[str, object]]:
        """(label, object) of what a module holds that is not an input of the op (its Python state and
        its integer arrays), to compare two modules built from different seeds."""
        return self.kept_objects(mod)

    def kept_objects(self, mod) -> list[tuple[str, object]]:
        """(label, object) of what a module holds besides its arrays, for the check of state kept between
        calls (``vjpcert.unhashed``, which reads it as each module is built -- ``BUILT`` -- and after each
        claim): a module is built once per dims and then called by every tier, so a forward that counts
        its calls on ``self`` computes one function for the first calls and another later. Its arrays
        are not state: parameters are inputs, and a module's running statistics in training change by
        design."""
        import types
        return [(f"the module {type(mod).__name__}{'.' + path if path else ''}", types.SimpleNamespace(**attrs))
                for path, attrs in self.own_state(mod)]

    def modules(self) -> list:
        return list(self._built.values())

    # ---------------------------------------------------------------- building
    def resolved(self, dims: Mapping) -> tuple:
        """The constructor's keyword arguments at these dims (a dim's name is its size)."""
        out = {}
        for k, v in self.init.items():
            if isinstance(v, str) and v in self.reads:
                if v not in dims:
                    raise SpecError(self.name, f"dims {dict(dims)} lack {v!r}, which init= passes as {k}")
                v = int(dims[v])
            out[k] = v
        return tuple(sorted(out.items(), key=lambda kv: kv[0]))

    def build(self, dims: Mapping):
        key = self.resolved(dims)
        mod = self._built.get(key)
        if mod is None:
            if self.instance is not None:
                mod, twin = self.instance, None
            else:
                # and once more from another seed: what it draws besides its parameters (a permutation
                # of its channels) is then seen to differ, and the class is not one function
                mod, twin = self._construct(key, 0), self._construct(key, 1) if BUILT else None
                if twin is not None:
                    self.prepare(twin)
            self.prepare(mod)
            for look in BUILT:
                look(self, mod, twin)
            shapes = self._shapes(mod)
            for other, built in self._built.items():
                if self._shapes(built) == shapes:
                    # the op's graph is keyed by its inputs' shapes: the two would share one graph
                    raise SpecError(self.name, f"{self.cls.__name__}(**{dict(other)}) and (**{dict(key)}) have "
                                               f"tensors of the same shapes: dims that differ only in what changes "
                                               f"no tensor's shape (a head count) are two ops; declare one per value "
                                               f"(init={{...: value}})")
            self._built[key] = mod
        return mod

    def _construct(self, key: tuple, seed: int):
        try:
            return self.construct(dict(key), seed)
        except SpecError:
            raise
        except Exception as exc:        # noqa: BLE001  (the user's constructor: its error, in words)
            raise SpecError(self.name, f"building {self.cls.__name__}(**{dict(key)}) raised "
                                       f"{type(exc).__name__}: {exc}") from None

    def _shapes(self, mod) -> tuple:
        return tuple((own, tuple(a.shape)) for own, a, _ in self.arrays(mod))

    def _array(self, mod, own: str):
        return next(a for name, a, _ in self.arrays(mod) if name == own)

    def _named(self, mod) -> tuple[dict, dict]:
        """(parameters, other float arrays) of a module: input name -> the module's own name. The
        first are differentiable inputs, the others not."""
        params, buffers = {}, {}
        for own, _, differentiable in self.arrays(mod):
            (params if differentiable else buffers)[input_name(own)] = own
        names = [*params, *buffers]
        if len(set(names)) != len(names):
            raise SpecError(self.name, f"two of the module's tensors have one input name: {sorted(names)}")
        return params, buffers

    def declare(self, dims: Mapping, user_inputs: Mapping, user_nondiff: Mapping) -> tuple[dict, dict]:
        """(inputs, nondiff): the user's, then the module's parameters and other float arrays, each with
        a shape read from the module built at the dims asked (its first dims label the axes)."""
        # a string of init= is a dim's name when the first dims give it a size (else passed as it is)
        self.reads = tuple(sorted({v for v in self.init.values() if isinstance(v, str) and v in dims}))
        mod = self.build(dims)
        params, buffers = self.tensors = self._named(mod)
        clash = sorted((set(params) | set(buffers)) & (set(user_inputs) | set(user_nondiff)))
        if clash:
            raise SpecError(self.name, f"the module's tensors {clash} have the names of declared inputs: rename those")
        self.user_inputs = [*user_inputs]
        self.user_nondiff = [*user_nondiff]
        label = {}
        for k, v in dims.items():
            label.setdefault(int(v), []).append(k)

        def decl(own):
            return tuple(_ArraySize(self, own, axis, (label.get(int(n)) or [None])[0]
                                    if len(label.get(int(n), [])) == 1 else None)
                         for axis, n in enumerate(self._array(mod, own).shape))
        inputs = {**user_inputs, **{k: decl(own) for k, own in params.items()}}
        nondiff = {**user_nondiff, **{k: decl(own) for k, own in buffers.items()}}
        return inputs, nondiff

    def shape_of(self, own: str, dims: Mapping) -> tuple:
        return tuple(self._array(self.build(dims), own).shape)

    # ---------------------------------------------------------------- calling
    def __call__(self, *arrays, **params):
        """The module's forward on arrays in the op's input order, its own arrays replaced."""
        params_, buffers = self.tensors
        n_user, n_par = len(self.user_inputs), len(params_)
        user = arrays[:n_user]
        mine = arrays[n_user:n_user + n_par]
        user_nd = arrays[n_user + n_par:n_user + n_par + len(self.user_nondiff)]
        bufs = arrays[n_user + n_par + len(self.user_nondiff):]
        shapes = tuple(tuple(int(s) for s in a.shape) for a in arrays)
        mod = self._module_for(shapes)
        swap = {own: a for own, a in zip(params_.values(), mine)}
        swap.update({own: a for own, a in zip(buffers.values(), bufs)})
        return self.call(mod, swap, (*user, *user_nd), params)

    def _module_for(self, shapes: tuple):
        """The module whose arrays have these shapes, among those built for the dims asked about
        (every shape of an input is read from a module built at its dims; no two have the same)."""
        if self.instance is not None:
            return self.instance
        params, buffers = self.tensors
        n_user = len(self.user_inputs)
        wanted = shapes[n_user:n_user + len(params)] + shapes[n_user + len(params) + len(self.user_nondiff):]
        owns = [*params.values(), *buffers.values()]
        for mod in self._built.values():
            if tuple(tuple(self._array(mod, own).shape) for own in owns) == wanted:
                return mod
        raise SpecError(self.name, f"no module built for the op's dims has tensors of shapes {list(wanted)}")


class _ArraySize:
    """One axis of a module array's shape, read from the module built at the dims asked for."""

    def __init__(self, target: ModuleTarget, own: str, axis: int, label: str | None):
        self.target, self.own, self.axis, self.label = target, own, axis, label
        self.reads = target.reads        # the dims the module is built from (``core.registry.dim_names``)

    def __call__(self, dims):
        return self.target.shape_of(self.own, dims)[self.axis]

    def __str__(self):
        return self.label or f"{self.own}[{self.axis}]"

    __repr__ = __str__


def input_name(own: str) -> str:
    """The input an array of the module is: ``a.b.weight`` as ``a_b_weight``, a pytree path
    ``.layers[0].weight`` as ``layers_0_weight``."""
    own = re.sub(r"\[['\"]?([^\]'\"]+)['\"]?\]", r".\1", own)
    return (own[1:] if own.startswith(".") else own).replace(".", "_")


def module_op(kind: type, fn, init: Mapping | None, name: str | None, dims, inputs, nondiff, doc: str,
              train: bool = False) -> tuple:
    """(callable, name, inputs, nondiff, doc, identity) of an op made from a module class or instance
    ``fn`` (``kind``: the framework's ``ModuleTarget``), its arrays declared at the first dims."""
    if not dims:
        raise SpecError(name, "a module op needs dims: the sizes its inputs (and init) are given at")
    target = kind(fn, init, name or getattr(fn, "__name__", type(fn).__name__), train)
    inputs, nondiff = target.declare(dims[0], inputs or {}, nondiff or {})
    return target, name or target.__name__, inputs, nondiff, doc or target.__doc__, identity(target)


def identity(target: ModuleTarget) -> dict:
    """What the op's identity records of the module beyond its source: how it is built."""
    return {"module": f"{target.cls.__module__}.{target.cls.__qualname__}", "init": dict(target.init),
            "train": target.train, "instance": target.instance is not None}
