"""A spec as a ``torch.autograd.Function`` (float64, on the CPU): the forward and the hand-written
backward are the spec's own, evaluated on the float64 numpy backend. This is how the tool users
know (``torch.autograd.gradcheck``) is put side by side with ours, on the same ops, shapes and bugs.

PyTorch is optional: importing this module without it raises ImportError with the install line.
"""
from __future__ import annotations

import numpy as np

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only where torch is absent
    raise ImportError("PyTorch is not installed: pip install 'vjpcert[torch]' (or torch==2.13.0)") from exc

from vjpcert.core.backends import F64
from vjpcert.core.registry import Op


def as_function(op: Op, fixed: dict):
    """A callable f(*diff_inputs) -> output for torch, whose backward is ``op.vjp``. ``fixed`` holds
    the non-differentiable inputs (numpy arrays); parameters take their defaults."""
    names = list(op.inputs)
    params = {k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()}
    fixed = {k: np.asarray(v, dtype=np.float64) for k, v in fixed.items()}

    class SpecFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            ctx.save_for_backward(*tensors)
            values = {**fixed, **params, **{n: t.detach().numpy() for n, t in zip(names, tensors)}}
            return torch.from_numpy(np.ascontiguousarray(op.bind(op.forward, F64, values), dtype=np.float64))

        @staticmethod
        def backward(ctx, grad):
            tensors = ctx.saved_tensors
            values = {**fixed, **params, **{n: t.detach().numpy() for n, t in zip(names, tensors)},
                      "dy": grad.detach().numpy()}
            cots = op.bind(op.vjp, F64, values)
            return tuple(torch.from_numpy(np.ascontiguousarray(c, dtype=np.float64)) for c in cots)

    SpecFunction.__name__ = f"{op.name}Function"
    return SpecFunction.apply


def gradcheck(op: Op, point: dict, **kwargs) -> bool:
    """``torch.autograd.gradcheck`` with its default settings (float64) at a point."""
    f = as_function(op, {k: v for k, v in point.items() if k not in op.inputs})
    inputs = tuple(torch.tensor(np.asarray(point[n], dtype=np.float64), requires_grad=True) for n in op.inputs)
    return torch.autograd.gradcheck(f, inputs, raise_exception=False, **kwargs)
