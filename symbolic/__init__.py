"""The symbolic tier: exact proofs that backward = J^T dy and that each law holds.

Interactive use: ``from vjpcert.symbolic import jacobian, vjp, prove``. Those names load SymPy when
first asked for, not when a submodule is imported: planning a run reads the every-size dims
(``every_size.dims``) and the settings without it.
"""
import importlib

__all__ = ["forward", "jacobian", "prove", "symbols", "vjp"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("vjpcert.symbolic.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
