"""The Triton kernel registry: every Triton kernel the tier checks, the spec op it implements, its
launcher, its laws and its sizes.

A kernel file registers itself as in ``cuda_kernels/`` (ARCHITECTURE.md, "Adding an op"): it assigns
``TRITON_KERNELS = [...]`` at top level; ``kernel_modules()`` finds every such file of this package.
A user's own file does the same (``vjpcert triton my_kernels.py``, or ``vjpcert.triton_matches`` in
the pytest fixture).

A launcher takes the spec's argument names (inputs, non-differentiable inputs, ``dy`` for a backward,
the op's params) as numpy arrays and returns numpy arrays: the forward output, or the cotangents in
the order of the spec's differentiable inputs (or those the kernel's ``outputs`` name, ``d<input>``).
The spec is a built-in op's name or an ``Op`` (a user's file may define its own with ``@op``). It makes its device tensors with
``triton_kernels.harness`` (fenced, and its outputs NaN-poisoned) and launches the kernel.
"""
from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Sizes that cross a block: rows of 1 (one program), 7 and 33 (non-powers of two), 1025 (one more than
# a power of two: a loop over blocks of 32, 64, ..., 1024 runs its last, nearly empty block).
INTERPRETER_SIZES = ({"rows": 1, "n": 1}, {"rows": 3, "n": 7}, {"rows": 5, "n": 33}, {"rows": 2, "n": 1025})
GPU_SIZES = ({"rows": 1, "n": 1}, {"rows": 33, "n": 1025}, {"rows": 2048, "n": 4097})


@dataclass(frozen=True)
class TritonKernel:
    name: str                       # the claim is "triton:<name>"
    op: object                      # the spec op it implements: its name, or the Op (one of the file's own)
    kind: str                       # "forward" or "backward"
    # ("y",), or the cotangents in spec order; a backward that returns some of them (dx only, for frozen
    # weights) names each "d<input>" and is checked on those
    outputs: tuple
    launcher: Callable
    laws: tuple = ()                # spec law names and Law objects (cuda_kernels.registry.kernel_law style)
    forward: str | None = None      # for a backward kernel: the forward kernel its laws use
    doc: str = ""
    source: str = "vjpcert"         # who wrote the kernel: "vjpcert", "liger-kernel 0.8.5", a user's file
    params: dict = field(default_factory=dict)     # op params at which it is checked (Gemma's offset = 1)
    samplers: dict = field(default_factory=dict)   # input name -> (rng, shape) -> values, over the spec's
    sizes: tuple = INTERPRETER_SIZES               # dims in the interpreter
    gpu_sizes: tuple = GPU_SIZES                   # dims on a GPU
    modules: tuple = ()             # modules whose libdevice imports the interpreter must patch
    # the dtype of its inputs and outputs: "float32", "bfloat16" or "float16" (arithmetic in float32
    # unless its casting says otherwise)
    dtype: str = "float32"
    accumulate: str = "float32"     # the dtype its sums accumulate in (its arithmetic's, unless a casting says)
    casting: object = None          # where it rounds, as documented (core.kernel_bounds.Casting), or None

    @property
    def claim(self) -> str:
        return f"triton:{self.name}"

    @property
    def op_name(self) -> str:
        return self.op if isinstance(self.op, str) else self.op.name


def fwd_bwd(op, fwd, bwd, *, prefix=None, cots=("dx",), fwd_laws=(), bwd_laws=(), **common):
    """A forward kernel ``<prefix>_fwd`` and its backward ``<prefix>_bwd``."""
    prefix = prefix or op
    return [TritonKernel(f"{prefix}_fwd", op, "forward", ("y",), fwd, tuple(fwd_laws), **common),
            TritonKernel(f"{prefix}_bwd", op, "backward", tuple(cots), bwd, tuple(bwd_laws),
                         forward=f"{prefix}_fwd", **common)]


def kernel_modules() -> list[str]:
    """The package's kernel files: every module that assigns ``TRITON_KERNELS`` at top level."""
    here = Path(__file__).parent
    out = []
    for path in sorted(here.glob("*.py")):
        if path.name.startswith("_") or path.name == Path(__file__).name:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == "TRITON_KERNELS" for t in targets):
                out.append(path.stem)
    return out


@functools.cache
def discover() -> tuple[dict, dict]:
    """(name -> TritonKernel, module -> why it did not load). A kernel file whose library is missing
    (liger.py without liger-kernel) is reported, not fatal: the other kernels still run."""
    kernels: dict[str, TritonKernel] = {}
    missing: dict[str, str] = {}
    for name in kernel_modules():
        try:
            module = importlib.import_module(f"vjpcert.triton_kernels.{name}")
        except ImportError as exc:
            missing[name] = f"{type(exc).__name__}: {exc}"
            continue
        for k in module.TRITON_KERNELS:
            if k.name in kernels:
                raise ValueError(f"Triton kernel {k.name!r} is registered twice (triton_kernels/{name}.py)")
            kernels[k.name] = k
    return kernels, missing


def kernels_for(op_name: str) -> list[TritonKernel]:
    return [k for k in discover()[0].values() if k.op_name == op_name]
