"""Naming ops on the command line and across processes: built-in names, user files, mutants."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from vjpcert.specs import builtin_ops
from vjpcert.core.registry import Op, SpecError, load_file


@dataclass(frozen=True)
class OpRef:
    """A picklable handle on an op: a worker process (or a Dask worker) resolves it again."""

    name: str
    file: str | None = None        # a user's spec file, or None for a built-in op
    mutant: str | None = None

    def resolve(self) -> Op:
        ops = {o.name: o for o in load_file(self.file)} if self.file else builtin_ops()
        op = ops[self.name]
        if self.mutant:
            op = op.with_mutant(next(m for m in op.mutants if m.name == self.mutant))
        return op

    def __str__(self):
        return self.name + (f"~{self.mutant}" if self.mutant else "")


def select_ops(targets: list[str]) -> list[tuple[OpRef, Op]]:
    """Built-in op names and paths of user spec files; all built-in ops when none is given."""
    builtins = builtin_ops()
    if not targets:
        return [(OpRef(n), o) for n, o in builtins.items()]
    out: list[tuple[OpRef, Op]] = []
    for target in targets:
        if target.endswith(".py") or Path(target).is_file():
            path = str(Path(target).resolve())
            out.extend((OpRef(o.name, path), o) for o in load_file(target))
        elif target in builtins:
            out.append((OpRef(target), builtins[target]))
        else:
            close = difflib.get_close_matches(target, builtins, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise SpecError(None, f"unknown op '{target}'{hint}; built-in ops: {', '.join(builtins)}")
    unique: dict[str, tuple[OpRef, Op]] = {}
    for ref, op in out:
        prev = unique.get(ref.name)
        if prev is not None and prev[0].file != ref.file:
            raise SpecError(ref.name, f"is defined in both {prev[0].file or 'specs/'} and {ref.file}; "
                                      f"their reports would collide")
        unique[ref.name] = (ref, op)
    return list(unique.values())


def import_object(spec: str, flag: str):
    """``module:attr`` (attr may be dotted) imported the way ``python -m`` would: the current
    directory is on the path."""
    import importlib
    import os
    import sys
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SpecError(None, f"{flag} expects module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except SpecError:
        raise
    except Exception as exc:      # ImportError, AttributeError, or the module raising on import
        raise SpecError(None, f"{flag} {spec}: cannot load it ({type(exc).__name__}: {exc})") from None
    return obj


def parse_params(items) -> dict:
    """``["eps=1e-6", "causal=True"]`` -> {"eps": 1e-06, "causal": True}: Python literals (numbers,
    booleans, tuples, strings)."""
    import ast
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SpecError(None, f"--param expects name=value such as eps=1e-6; got {item!r}")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise SpecError(None, f"--param {item}: {value.strip()!r} is not a Python literal "
                                  f"(a number, True/False, a tuple, a quoted string)") from None
    return out


def parse_dims(text: str | None) -> dict[str, int]:
    """``"n=128,rows=2"`` -> {"n": 128, "rows": 2}."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier() or not value.strip().lstrip("-").isdigit():
            raise SpecError(None, f"--dims expects name=int pairs such as n=128,rows=2; got {part!r}")
        out[key.strip()] = int(value)
    return out


def dims_ladder(op: Op, overrides: dict[str, int], large: bool) -> list[dict]:
    """The dims an op is checked at: its ladder, its large ladder, or its largest default with the
    user's overrides applied (only the dims the op has)."""
    if overrides:
        mine = {k: v for k, v in overrides.items() if k in op.dim_names()}
        base = dict((op.large_dims or op.dims)[-1] if large else op.dims[-1])
        return [op.resolve_dims({**base, **mine})]
    return [op.resolve_dims(d) for d in ((op.large_dims or op.dims[-1:]) if large else op.dims)]
