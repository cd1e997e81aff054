"""A user's ``torch.nn.Module`` as an op (``frontends.modules``): its parameters are differentiable
inputs, its float buffers and frozen parameters (``requires_grad=False``) non-differentiable ones
(integer buffers stay the module's own), and its forward is traced with ``torch.func.functional_call``.

    from vjpcert.frontends.pytorch import from_torch

    op = from_torch(LlamaMLP, init={"dim": "D", "hidden": "F"}, inputs={"x": ("rows", "D")},
                    dims=[{"rows": 2, "D": 4, "F": 6}], modular_dims=[{"rows": 64, "D": 256, "F": 688}])

The module is put in eval mode (dropout off, BatchNorm on its running statistics) unless ``train=True``;
its parameters' values do not matter (they are inputs), so a class is built under a fixed seed.
"""
from __future__ import annotations

import inspect

from vjpcert.frontends.modules import ModuleTarget


class TorchModule(ModuleTarget):

    @staticmethod
    def module_types() -> tuple:
        import torch
        return (torch.nn.Module,)

    def construct(self, kwargs: dict, seed: int = 0):
        import torch
        with torch.random.fork_rng():
            torch.manual_seed(seed)              # values do not matter: parameters are inputs
            mod = self.cls(**kwargs)
        return mod

    def prepare(self, mod) -> None:
        mod.train(self.train)

    def arrays(self, mod) -> list[tuple[str, object, bool]]:
        out = [(own, p, bool(p.requires_grad)) for own, p in mod.named_parameters()]
        out += [(own, b, False) for own, b in mod.named_buffers() if b.is_floating_point()]
        return out

    def _shapes(self, mod) -> tuple:
        # every tensor, integer buffers included (they change the module as much as its floats do)
        return tuple((own, tuple(t.shape)) for own, t in [*mod.named_parameters(), *mod.named_buffers()])

    def call(self, mod, swap: dict, args: tuple, kwargs: dict):
        from torch.func import functional_call
        return functional_call(mod, swap, args=args, kwargs=kwargs)

    def own_state(self, mod) -> list[tuple[str, dict]]:
        return [(path, {k: v for k, v in vars(m).items() if k not in _ARRAYS}) for path, m in mod.named_modules()]

    def structure(self, mod) -> list[tuple[str, object]]:
        # integer buffers are the module's own (indices, a permutation), not inputs; a hook table is keyed
        # by a handle's process-wide count, so two builds differ in its keys: its hooks are what counts
        import types
        own = [(label, types.SimpleNamespace(**{k: list(v.values()) if k.endswith(_HOOK_TABLE) else v
                                                 for k, v in vars(attrs).items()}))
               for label, attrs in self.kept_objects(mod)]
        return own + [(f"the module {type(mod).__name__}", types.SimpleNamespace(**{name: b}))
                      for name, b in mod.named_buffers() if not b.is_floating_point()]


# what an nn.Module holds that is not Python state of its own: its tensors and its submodules (each read
# on its own by ``named_modules``)
_ARRAYS = frozenset({"_parameters", "_buffers", "_modules"})
_HOOK_TABLE = ("hooks", "hooks_with_kwargs", "hooks_always_called")


def is_module(obj) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.nn.Module) or (inspect.isclass(obj) and issubclass(obj, torch.nn.Module))
