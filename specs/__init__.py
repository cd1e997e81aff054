"""The claims: one file per op, each holding its forward, its hand-written backward and its laws,
written once over a backend ``B``; ``mutants/`` holds the deliberately wrong versions.

This package is also their index: ``builtin_ops()`` imports the spec files, ``resolve_op`` finds an
op by name or as ``"path/to/file.py::name"``. The machinery specs are written in lives one floor
down, in ``vjpcert.core`` (ARCHITECTURE.md).
"""
from __future__ import annotations

import importlib

from vjpcert.core.registry import Op, SpecError, load_file

BUILTIN_MODULES = ("softmax", "log_softmax", "rope", "rmsnorm", "layernorm", "gelu", "linear", "scaled_dot",
                   "attention", "attention_tape", "rotary_attention", "mhsa", "mlp", "vit")


def builtin_ops() -> dict[str, Op]:
    """The built-in ops by name, in the order of their spec files."""
    out: dict[str, Op] = {}
    for mod in BUILTIN_MODULES:
        module = importlib.import_module(f"{__name__}.{mod}")
        out.update({v.name: v for v in vars(module).values() if isinstance(v, Op) and v.module is module})
    importlib.import_module(f"{__name__}.mutants")
    return out


def resolve_op(op) -> Op:
    """An op given as an Op, a built-in op's name, or ``"path/to/file.py::name"``."""
    if isinstance(op, Op):
        return op
    if isinstance(op, str) and "::" in op:
        path, name = op.split("::", 1)
        ops = {o.name: o for o in load_file(path)}
        if name not in ops:
            raise SpecError(None, f"{path} defines no op {name!r}; it defines {sorted(ops)}")
        return ops[name]
    ops = builtin_ops()
    if op not in ops:
        raise SpecError(None, f"unknown op {op!r}; built-in ops: {', '.join(ops)}")
    return ops[op]
