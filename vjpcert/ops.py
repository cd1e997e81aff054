"""Naming ops on the command line and across processes: built-in names, user files, mutants."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from vjpcert.specs import builtin_ops
from vjpcert.core.registry import Op, SpecError, load_file


@dataclass(frozen=True)
class OpRef:
    """A picklable handle on an op: a worker process (or a Dask worker) resolves it again. An op
    declared in a running program (a test, a notebook) is held directly (``obj``): it runs in this
    process only."""

    name: str
    file: str | None = None        # a user's spec file, or None for a built-in op
    mutant: str | None = None
    obj: object = field(default=None, compare=False, repr=False)

    def resolve(self) -> Op:
        if self.obj is not None:
            return self.obj
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


def ref_for(op: Op) -> OpRef:
    """The handle of an op object: a built-in's name, a user file's path, or the object itself."""
    module = getattr(op.module, "__name__", "")
    if module.startswith("vjpcert.specs.") and op.base_name in builtin_ops():
        return OpRef(op.base_name)
    if module.startswith("vjpcert_user_") and getattr(op.module, "__file__", None):
        return OpRef(op.base_name, str(Path(op.module.__file__).resolve()))
    return OpRef(op.name, obj=op)
