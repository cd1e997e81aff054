"""Naming ops on the command line and across processes: built-in names, user files, mutants."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

from vjpcert.specs import builtin_ops, resolve_op
from vjpcert.core.registry import Op, SpecError
from vjpcert.core.registry import load_file as _load_file


def load_file(path) -> list[Op]:
    """The ops of a user's spec file, loaded from the source on disk now (``core.registry.load_file``),
    with the bytecode Python cached for it and for the user modules it imports dropped first. Python
    trusts a cached ``.pyc`` while the source's modification time, in whole seconds, and its size are
    unchanged: a file edited in the second it was imported, to the same length (``2 * x`` to
    ``3 * x``), would run its old code under a certificate that hashes the new one."""
    from vjpcert.unhashed import record_loads
    record_loads()          # from here on, every user file whose code runs here is known (vjpcert.unhashed)
    _drop_cached_bytecode(Path(path))
    return _load_file(path)


def _drop_cached_bytecode(path: Path) -> None:
    """Remove the cached bytecode of a spec file and of every user module it imports, transitively
    (the files ``core.sources`` counts as the op's code): importing them compiles what is on disk."""
    from importlib.util import cache_from_source

    from vjpcert.core.reads import is_spec_code
    from vjpcert.core.sources import _module_of_file, _parse_imports, add_to_path
    add_to_path(path.parent)       # the folder loading puts first, so its imports name the files it will load
    seen, todo = set(), [path.resolve()]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            Path(cache_from_source(str(p))).unlink(missing_ok=True)
        except (OSError, NotImplementedError, ValueError):
            pass                       # a cache that cannot be removed was not written here either
        todo.extend(q for q in _parse_imports(p, _module_of_file(p)) if is_spec_code(q) and q not in seen)

FRAMEWORKS = ("torch", "jax")


@dataclass(frozen=True)
class OpRef:
    """A picklable handle on an op: a worker process (or a Dask worker) resolves it again. An op
    declared in a running program (a test, a notebook) is held directly (``obj``): it runs in this
    process only."""

    name: str
    file: str | None = None        # a user's spec file, or None for a built-in op
    mutant: str | None = None
    frontend: str | None = None    # a torch:/jax: target and its declaration (JSON), built again
    collection: str | None = None  # "module:function" taking names=[...], returning {name: op} (the framework report)
    obj: object = field(default=None, compare=False, repr=False)

    def resolve(self) -> Op:
        if self.obj is not None:
            return self.obj
        if self.frontend:
            decl = json.loads(self.frontend)
            for key in ("inputs", "nondiff"):       # kept as pairs: their order is the call order
                if key in decl:
                    decl[key] = {k: tuple(v) for k, v in decl[key]}
            return frontend_op(decl.pop("target"), decl)
        if self.collection:
            ops = import_object(self.collection, "collection")(names=[self.name])
        else:
            ops = {o.name: o for o in load_file(self.file)} if self.file else builtin_ops()
        op = ops[self.name]
        if self.mutant:
            op = op.with_mutant(next(m for m in op.mutants if m.name == self.mutant))
        return op

    def __str__(self):
        return self.name + (f"~{self.mutant}" if self.mutant else "")


def is_frontend_target(target: str) -> bool:
    return target.split(":", 1)[0] in FRAMEWORKS and target.count(":") >= 2


def _parse_decl(items, flag) -> dict:
    """``["x=rows,n", "gamma=n"]`` -> {"x": ("rows", "n"), "gamma": ("n",)} (in call order)."""
    out = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise SpecError(None, f"{flag} expects name=dim,dim such as x=rows,n; got {item!r}")
        entries = [d.strip() for d in dims.split(",") if d.strip()]
        out[name.strip()] = tuple(int(d) if d.isdigit() else d for d in entries)
    return out


def frontend_declaration(args) -> dict:
    """The declaration a torch:/jax: target takes from the command line (empty when none is given)."""
    decl = {}
    if getattr(args, "input", None):
        decl["inputs"] = _parse_decl(args.input, "--input")
    if getattr(args, "nondiff", None):
        decl["nondiff"] = _parse_decl(args.nondiff, "--nondiff")
    if getattr(args, "param", None) and not getattr(args, "impl", None):
        decl["params"] = parse_params(args.param)
    if getattr(args, "init", None):
        decl["init"] = parse_params(args.init, option="--init", names=True)
    if getattr(args, "train", False):
        decl["train"] = True
    if getattr(args, "modular_dims", None):
        decl["modular_dims"] = [parse_dims(d, option="--modular-dims") for d in args.modular_dims]
    if getattr(args, "like", None):
        decl["spec"] = args.like
    if getattr(args, "constants", "named") != "named":
        decl["constants"] = args.constants
    if getattr(args, "trace_dtype", None):
        decl["dtype"] = args.trace_dtype
    dims = parse_dims(getattr(args, "dims", None) or getattr(args, "dims_alias", None))
    if dims and decl:
        decl["dims"] = dims
    return decl


def frontend_op(target: str, decl: dict) -> Op:
    """The op of a ``torch:module:function`` / ``jax:module:function`` target. A function already
    declared with ``@torch_op`` / ``@jax_op`` is taken as it is; a plain one needs its inputs and dims
    (``--input``, ``--dims``) or a spec to take them from (``--spec``)."""
    framework, _, where = target.partition(":")
    obj = import_object(where, target)
    if isinstance(obj, Op):
        extra = sorted(k for k in decl if k != "dims")
        if extra:
            raise SpecError(obj.name, f"{target} is declared in its module already; drop "
                                      + ", ".join("--" + {"inputs": "input", "spec": "spec", "params": "param",
                                                                "modular_dims": "modular-dims"}.get(k, k)
                                                  for k in extra))
        return obj
    spec = resolve_op(decl["spec"]) if decl.get("spec") else None
    dims = decl.get("dims")
    if spec is None and (not decl.get("inputs") or not dims):
        raise SpecError(None, f"{target}: declare its inputs and dims (--input x=rows,n --dims rows=2,n=3) "
                              f"or name the spec it implements (--spec rmsnorm)")
    kwargs = dict(name=where.replace(":", "."), inputs=decl.get("inputs"), nondiff=decl.get("nondiff"),
                  params=decl.get("params"), spec=spec, constants=decl.get("constants", "named"),
                  dims=[dims] if dims and spec is None else None, dtype=decl.get("dtype"),
                  modular_dims=decl.get("modular_dims"))
    if framework == "torch":
        from vjpcert.frontends.pytorch import from_torch
        return from_torch(obj, **kwargs, init=decl.get("init"), train=decl.get("train", False))
    if decl.get("train"):
        raise SpecError(None, f"{target}: --train traces a torch nn.Module in training mode; this is a jax: "
                              f"target (an Equinox module takes a flag such as inference= with --init)")
    from vjpcert.frontends.jaxpr import from_jax
    return from_jax(obj, **kwargs, init=decl.get("init"))


def select_ops(targets: list[str], frontend: dict | None = None) -> list[tuple[OpRef, Op]]:
    """Built-in op names, paths of user spec files and torch:/jax: targets; all built-in ops when
    none is given. ``frontend`` is the command line's declaration for torch:/jax: targets."""
    builtins = builtin_ops()
    frontend = dict(frontend or {})
    if frontend and not any(is_frontend_target(t) for t in targets):
        raise SpecError(None, "--input, --nondiff, --param, --init, --train, --spec, --constants and --dtype "
                              "declare a torch:/jax: target (--param also goes with --impl); no such target was given")
    if not targets:
        return [(OpRef(n), o) for n, o in builtins.items()]
    out: list[tuple[OpRef, Op]] = []
    for target in targets:
        if is_frontend_target(target):
            op = frontend_op(target, frontend)
            decl = {"target": target, **frontend}
            for key in ("inputs", "nondiff"):
                if key in decl:
                    decl[key] = [[k, list(v)] for k, v in decl[key].items()]
            ref = json.dumps(decl)
            op.declared = ref           # recorded with the reports: `vjpcert verify` builds the op again
            out.append((OpRef(op.name, frontend=ref), op))
        elif "::" in target:                # one op of a user file, as the pytest fixture takes it
            path, _, name = target.partition("::")
            ops = {o.name: o for o in load_file(path)}
            if name not in ops:
                raise SpecError(None, f"{path} defines no op {name!r}; it defines {sorted(ops)}")
            out.append((OpRef(name, str(Path(path).resolve())), ops[name]))
        elif target.endswith(".py") or Path(target).is_file():
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


def parse_params(items, option: str = "--param", names: bool = False) -> dict:
    """``["eps=1e-6", "causal=True"]`` -> {"eps": 1e-06, "causal": True}: Python literals (numbers,
    booleans, tuples, strings); with ``names``, a bare name (``dim=D``) is that string."""
    import ast
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SpecError(None, f"{option} expects name=value such as eps=1e-6; got {item!r}")
        if names and value.strip().isidentifier() and value.strip() not in ("True", "False", "None"):
            out[key.strip()] = value.strip()
            continue
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise SpecError(None, f"{option} {item}: {value.strip()!r} is not a Python literal "
                                  f"(a number, True/False, a tuple, a quoted string)") from None
    return out


def parse_dims(text: str | None, option: str = "--dims") -> dict[str, int]:
    """``"n=128,rows=2"`` -> {"n": 128, "rows": 2}."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier() or not value.strip().lstrip("-").isdigit():
            raise SpecError(None, f"{option} expects name=int pairs such as n=128,rows=2; got {part!r}")
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
