"""A user's ``torch.nn.Module`` as an op: its parameters are differentiable inputs, its float buffers
non-differentiable ones, and its forward is traced with ``torch.func.functional_call``.

    from vjpcert.frontends.pytorch import from_torch

    op = from_torch(LlamaMLP, init={"dim": "D", "hidden": "F"}, inputs={"x": ("rows", "D")},
                    dims=[{"rows": 2, "D": 4, "F": 6}], large_dims=[{"rows": 64, "D": 256, "F": 688}])

A module *class* is built at each dims with ``init`` (constructor keyword arguments; a string naming one
of the op's first dims is that dim's size, anything else is passed as it is); a module *instance* is
taken as it is, at the dims its parameters have. The module is put in eval mode (dropout off, BatchNorm
on its running statistics) unless ``train=True``. Each parameter ``a.b.weight`` is the input
``a_b_weight``, whose shape is the parameter's at those dims; its cotangent is the gradient PyTorch
computes for it. Float buffers and frozen parameters (``requires_grad=False``) are non-differentiable
inputs; integer buffers stay the module's own.

The graph of an op is keyed by its inputs' shapes (``FrontendOp.graph``), so the module is found from
them: among the modules built for the dims asked about (each input's shape is read from one), the one
whose tensors have those shapes. Two dims whose modules differ but whose tensors have the same shapes
(a head count that changes no tensor's shape) would share one graph, so building the second is
refused, before anything is evaluated with the wrong module.
"""
from __future__ import annotations

import inspect
from typing import Mapping

from vjpcert.core.registry import SpecError


class ModuleTarget:
    """How a module class (or instance) is built at given dims, and its tensors named as inputs."""

    def __init__(self, target, init: Mapping | None, name: str, train: bool):
        import torch
        self.torch = torch
        self.instance = target if isinstance(target, torch.nn.Module) else None
        self.cls = type(target) if self.instance is not None else target
        if self.instance is not None and init:
            raise SpecError(name, "init= builds a module class; this is an instance, already built: pass its class")
        self.init = dict(init or {})
        self.name = name
        self.train = train
        # named as the class is, for refusals and for the op's source files (``core.sources``)
        self.__name__, self.__qualname__ = self.cls.__name__, self.cls.__qualname__
        self.__module__ = self.cls.__module__
        self.__doc__ = inspect.cleandoc(self.cls.__doc__ or "")        # its own, not nn.Module's
        self._built: dict = {}            # resolved constructor arguments -> module
        self.user_inputs: list[str] = []
        self.tensors = None
        self.reads: tuple[str, ...] = ()

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
                mod = self.instance
            else:
                try:
                    with self.torch.random.fork_rng():
                        self.torch.manual_seed(0)        # values do not matter: parameters are inputs
                        mod = self.cls(**dict(key))
                except Exception as exc:        # noqa: BLE001  (the user's constructor: its error, in words)
                    raise SpecError(self.name, f"building {self.cls.__name__}(**{dict(key)}) raised "
                                               f"{type(exc).__name__}: {exc}") from None
            mod.train(self.train)
            shapes = _shapes(mod)
            for other, built in self._built.items():
                if _shapes(built) == shapes:
                    # the op's graph is keyed by its inputs' shapes: the two would share one graph
                    raise SpecError(self.name, f"{self.cls.__name__}(**{dict(other)}) and (**{dict(key)}) have "
                                               f"tensors of the same shapes: dims that differ only in what changes "
                                               f"no tensor's shape (a head count) are two ops; declare one per value "
                                               f"(init={{...: value}})")
            self._built[key] = mod
        return mod

    def _named(self, mod) -> tuple[dict, dict]:
        """(parameters, float buffers and frozen parameters) of a module: input name -> the module's own
        name. The first are differentiable inputs, the others not."""
        params, buffers = {}, {}
        for own, p in mod.named_parameters():
            (params if p.requires_grad else buffers)[_input_name(own)] = own
        for own, b in mod.named_buffers():
            if b.is_floating_point():
                buffers[_input_name(own)] = own
        names = [*params, *buffers]
        if len(set(names)) != len(names):
            raise SpecError(self.name, f"two of the module's tensors have one input name: {sorted(names)}")
        return params, buffers

    def declare(self, dims: Mapping, user_inputs: Mapping, user_nondiff: Mapping) -> tuple[dict, dict]:
        """(inputs, nondiff): the user's, then the module's parameters and float buffers, each with a
        shape read from the module built at the dims asked (its first dims label the axes)."""
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
            return tuple(_TensorSize(self, own, axis, (label.get(int(n)) or [None])[0]
                                     if len(label.get(int(n), [])) == 1 else None)
                         for axis, n in enumerate(_tensor(mod, own).shape))
        inputs = {**user_inputs, **{k: decl(own) for k, own in params.items()}}
        nondiff = {**user_nondiff, **{k: decl(own) for k, own in buffers.items()}}
        return inputs, nondiff

    def shape_of(self, own: str, dims: Mapping) -> tuple:
        return tuple(_tensor(self.build(dims), own).shape)

    # ---------------------------------------------------------------- calling
    def __call__(self, *tensors, **params):
        """The module's forward on tensors in the op's input order, its own tensors replaced."""
        params_, buffers = self.tensors
        n_user, n_par = len(self.user_inputs), len(params_)
        user = tensors[:n_user]
        mine = tensors[n_user:n_user + n_par]
        user_nd = tensors[n_user + n_par:n_user + n_par + len(self.user_nondiff)]
        bufs = tensors[n_user + n_par + len(self.user_nondiff):]
        shapes = tuple(tuple(int(s) for s in t.shape) for t in tensors)
        mod = self._module_for(shapes)
        swap = {own: t for own, t in zip(params_.values(), mine)}
        swap.update({own: t for own, t in zip(buffers.values(), bufs)})
        from torch.func import functional_call
        return functional_call(mod, swap, args=(*user, *user_nd), kwargs=params)

    def _module_for(self, shapes: tuple):
        """The module whose tensors have these shapes, among those built for the dims asked about
        (every shape of an input is read from a module built at its dims; no two have the same)."""
        if self.instance is not None:
            return self.instance
        params, buffers = self.tensors
        n_user = len(self.user_inputs)
        wanted = shapes[n_user:n_user + len(params)] + shapes[n_user + len(params) + len(self.user_nondiff):]
        owns = [*params.values(), *buffers.values()]
        for mod in self._built.values():
            if tuple(tuple(_tensor(mod, own).shape) for own in owns) == wanted:
                return mod
        raise SpecError(self.name, f"no module built for the op's dims has tensors of shapes {list(wanted)}")


def _shapes(mod) -> tuple:
    return tuple((own, tuple(t.shape)) for own, t in [*mod.named_parameters(), *mod.named_buffers()])


def _tensor(mod, own: str):
    t = dict(mod.named_parameters()).get(own)
    return t if t is not None else dict(mod.named_buffers())[own]


class _TensorSize:
    """One axis of a module tensor's shape, read from the module built at the dims asked for."""

    def __init__(self, target: ModuleTarget, own: str, axis: int, label: str | None):
        self.target, self.own, self.axis, self.label = target, own, axis, label
        self.reads = target.reads        # the dims the module is built from (``core.registry.dim_names``)

    def __call__(self, dims):
        return self.target.shape_of(self.own, dims)[self.axis]

    def __str__(self):
        return self.label or f"{self.own}[{self.axis}]"

    __repr__ = __str__


def _input_name(own: str) -> str:
    return own.replace(".", "_")


def is_module(obj) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.nn.Module) or (inspect.isclass(obj) and issubclass(obj, torch.nn.Module))


def identity(target: ModuleTarget) -> dict:
    """What the op's identity records of the module beyond its source: how it is built."""
    return {"module": f"{target.cls.__module__}.{target.cls.__qualname__}", "init": dict(target.init),
            "train": target.train, "instance": target.instance is not None}
