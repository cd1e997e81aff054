"""Specs: each op's forward, hand-written backward and laws, written once over a backend ``B``.

``builtin_ops()`` imports the built-in spec files; a user's file registers its ops the same way
(``specs.registry.load_file``).
"""
import importlib

from specs.registry import REGISTRY, Law, Mutant, Op, Param, SpecError, load_file, op

BUILTIN_MODULES = ("softmax", "log_softmax", "rope", "rmsnorm", "layernorm", "gelu", "linear", "scaled_dot",
                   "attention", "attention_tape", "mhsa", "mlp", "vit")


def builtin_ops() -> dict[str, Op]:
    """The built-in ops by name, in the order of their spec files."""
    out: dict[str, Op] = {}
    for mod in BUILTIN_MODULES:
        module = importlib.import_module(f"specs.{mod}")
        out.update({v.name: v for v in vars(module).values() if isinstance(v, Op) and v.module is module})
    importlib.import_module("specs.mutants")
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


__all__ = ["REGISTRY", "Law", "Mutant", "Op", "Param", "SpecError", "builtin_ops", "load_file", "op", "resolve_op"]
