"""vjpcert: certificates for backward passes (VJPs).

What a spec file needs is importable from here::

    from vjpcert import op, Param

and what a file of framework code needs (PyTorch or JAX functions, proved as they are)::

    from vjpcert import torch_op, jax_op

The floors beneath the command (``vjpcert.cli``): ``vjpcert.specs`` (the claims),
``vjpcert.frontends`` (framework code as ops), ``vjpcert.symbolic`` / ``vjpcert.numeric`` /
``vjpcert.cuda_kernels`` (the three checkers) and ``vjpcert.core`` (the machinery). See ARCHITECTURE.md.
"""
from pathlib import Path as _Path

# Run from a source tree (not installed), the floors are the folders beside this one: make them this
# package's subpackages, as the installed wheel and the editable install do.
_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "core" / "registry.py").is_file() and str(_ROOT) not in __path__:
    __path__.append(str(_ROOT))

from vjpcert.core.registry import Param, SpecError, op  # noqa: E402


def _with_spec(declaration: dict) -> dict:
    """A spec named by a string (a built-in op, or "file.py::name") resolved to its op."""
    spec = declaration.get("spec")
    if isinstance(spec, str):
        from vjpcert.specs import resolve_op
        declaration = {**declaration, "spec": resolve_op(spec)}
    return declaration


def torch_op(fn=None, **declaration):
    """Declare a PyTorch function (or an ``autograd.Function``) as an op: its forward and the
    backward PyTorch computes for it are traced and proved as they are. Takes ``inputs``, ``dims``,
    ``params``, ``nondiff``, ``output``, ``spec`` (an op or its name: the forward must equal it),
    ``constants`` ("named", the default, or "decimal") and ``name``; see ``vjpcert.frontends.pytorch.from_torch``."""
    from vjpcert.frontends.pytorch import torch_op as make
    return make(fn, **_with_spec(declaration))


def jax_op(fn=None, **declaration):
    """Declare a JAX function (with ``jax.custom_vjp``, or JAX's own rules) as an op; the same
    declaration as ``torch_op`` (``vjpcert.frontends.jaxpr.from_jax``). Needs the ``[jax]`` extra."""
    from vjpcert.frontends.jaxpr import jax_op as make
    return make(fn, **_with_spec(declaration))


__all__ = ["Param", "SpecError", "jax_op", "op", "torch_op"]
