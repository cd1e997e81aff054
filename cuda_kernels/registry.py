"""The kernel registry: every kernel, the spec op it implements, what it outputs, its launcher, its
tolerance kind, its rounding-error model, the laws checked on its outputs at run time and its sizes.

Each kernel file registers itself (see ARCHITECTURE.md, "Adding an op"): ``cuda_kernels/<op>.py``
ends with ``KERNELS = [...]`` (``fwd_bwd`` makes a forward/backward pair) and ``SIZES = {key:
Sizes(...)}`` (key: the op, or one kernel's name where it needs other sizes). This module finds
every file of the package that assigns ``KERNELS`` at top level; there is no list to extend. A file
may define ``ptx_kernels(cfg)`` for the sm_90 resource table (else its ``build(cfg)`` is read).

A launcher takes the spec's argument names (inputs, non-differentiable inputs, ``dy`` for a
backward, the op's params such as ``eps``/``base``/``offset``) as numpy arrays and returns numpy
arrays: the forward output, or the cotangents in the order of the spec's differentiable inputs.

Laws are named by the spec (``specs/<op>.py``: evaluated with this kernel as the op's forward or
backward, so the spec stays the one statement of what must hold) or are kernel laws defined in the
kernel's own file (facts about outputs the spec's laws do not state, e.g. softmax rows sum to 1).
A law that calls ``backward`` is checked with the backward kernel; one that calls only ``forward``
with the forward kernel. ``forward`` names the forward kernel a backward kernel's laws use.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from vjpcert.core.registry import Law


def kernel_law(fn, params=None) -> Law:
    """A law defined next to a kernel (same conventions as a spec law)."""
    return Law(fn.__name__, fn, inspect.getdoc(fn) or "", dict(params or {}),
               "dy" in inspect.signature(fn).parameters)


@dataclass(frozen=True)
class KernelSpec:
    name: str                       # the claim is "kernel:<name>"
    op: str                         # the spec op it implements
    kind: str                       # "forward" or "backward"
    outputs: tuple                  # ("y",) or the cotangents ("dx", "dgamma", ...) in spec order
    launcher: Callable
    laws: tuple = ()                # spec law names and kernel Law objects
    forward: str | None = None      # for a backward kernel: the forward kernel its laws use
    doc: str = ""
    extra: dict = field(default_factory=dict)
    # The kernel's rounding-error model (cuda_kernels/error_model.py): model(cfg, <the launcher's
    # arguments>) -> one Tracked per output, restating the kernel's arithmetic in its own order.
    model: Callable | None = None
    # the dtype of its inputs and outputs: "float32", or "float16" (its sums accumulated in ``accumulate``).
    # A float16 kernel without an error model is held to the model-free rule of core/tolerance.py in
    # float16 and to the any-order rounding bound (core/kernel_bounds.py), as a Triton kernel is.
    dtype: str = "float32"
    accumulate: str = "float32"

    @property
    def claim(self) -> str:
        return f"kernel:{self.name}"


@dataclass(frozen=True)
class Sizes:
    """Where a kernel is checked. ``simulator``: at the simulator's launch configuration (32 threads
    per row block, 8 x 8 tiles), sizes that cross its blocks and tiles; ``gpu``: on a GPU, large
    sizes; ``gpu_launch``: in the simulator at the GPU's own launch configuration (blocks of 256,
    16 x 16 tiles), one or two affordable sizes that cross those; ``orders``: in either mode, at this
    process's configuration, with the summation-order case only (``settings.ORDER_CASES``): sums long
    enough that an order other than the error model's outgrows the model's bound."""
    simulator: tuple
    gpu: tuple
    gpu_launch: tuple = ()
    orders: tuple = ()


def fwd_bwd(op, fwd, bwd, *, models, fwd_laws=(), bwd_laws=(), cots=("dx",), prefix=None, doc=""):
    """A forward kernel ``<prefix>_fwd`` and its backward ``<prefix>_bwd`` (prefix: the op's name)."""
    prefix = prefix or op
    return [KernelSpec(f"{prefix}_fwd", op, "forward", ("y",), fwd, tuple(fwd_laws), doc=doc, model=models[0]),
            KernelSpec(f"{prefix}_bwd", op, "backward", tuple(cots), bwd, tuple(bwd_laws),
                       forward=f"{prefix}_fwd", doc=doc, model=models[1])]


def causal(model):
    """An attention model with the causal mask on."""
    return functools.partial(model, causal=1)


# Size ladders several kernel files share. Rows and widths 1, 7, 33 and 1025 cross the simulator's
# block sizes (a planted reduction bug that dropped half the partial sums showed only at 1025);
# rows of 4097 are 16 full strides of 256 threads and one more; 17 queries are two tiles of 16.
ROWS = Sizes(simulator=({"rows": 1, "n": 1}, {"rows": 7, "n": 33}, {"rows": 33, "n": 7}, {"rows": 3, "n": 1025}),
             gpu=({"rows": 1, "n": 1}, {"rows": 33, "n": 1025}, {"rows": 2048, "n": 4097}),
             gpu_launch=({"rows": 2, "n": 4097},))


def kernel_modules() -> list[str]:
    """The package's kernel files: every module that assigns ``KERNELS`` at top level."""
    here = Path(__file__).parent
    out = []
    for path in sorted(here.glob("*.py")):
        if path.name == Path(__file__).name or path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, (ast.Assign, ast.AnnAssign)) and "KERNELS" in _targets(node) for node in tree.body):
            out.append(path.stem)
    return out


def _targets(node) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


@functools.cache
def _discover() -> tuple[dict, dict]:
    kernels: dict[str, KernelSpec] = {}
    dims: dict[str, dict] = {"simulator": {}, "gpu": {}, "simulator_gpu_launch": {}, "orders": {}}
    for name in kernel_modules():
        module = importlib.import_module(f"vjpcert.cuda_kernels.{name}")
        for k in module.KERNELS:
            if k.name in kernels:
                raise ValueError(f"kernel {k.name!r} is registered twice (cuda_kernels/{name}.py)")
            kernels[k.name] = k
        for key, sizes in getattr(module, "SIZES", {}).items():
            for mode, table in (("simulator", sizes.simulator), ("gpu", sizes.gpu),
                                ("simulator_gpu_launch", sizes.gpu_launch), ("orders", sizes.orders)):
                if table:
                    dims[mode][key] = [dict(d) for d in table]
    return kernels, dims


def __getattr__(name):
    # KERNELS and DIMS are found on first use: kernel files import this module for KernelSpec
    if name == "KERNELS":
        return _discover()[0]
    if name == "DIMS":
        return _discover()[1]
    raise AttributeError(name)


def kernels_for(op_name: str) -> list[KernelSpec]:
    return [k for k in _discover()[0].values() if k.op == op_name]
