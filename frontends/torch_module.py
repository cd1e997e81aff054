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

    def construct(self, kwargs: dict):
        import torch
        with torch.random.fork_rng():
            torch.manual_seed(0)                 # values do not matter: parameters are inputs
            mod = self.cls(**kwargs)
        return mod

    def build(self, dims):
        mod = super().build(dims)
        mod.train(self.train)
        return mod

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


def is_module(obj) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.nn.Module) or (inspect.isclass(obj) and issubclass(obj, torch.nn.Module))
