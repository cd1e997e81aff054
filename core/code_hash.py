"""A checker's code hash: what makes its certificates stale, and only that.

A certificate is stale once the code that issued it behaves differently. The hash covers the checker's
entry module and every vjpcert module it imports, at any depth, anywhere in its files (imports inside
functions included), plus, for a checker that discovers files at run time instead of importing them
(the kernel tiers' registries find every kernel file of their package), every file of its package.
Each file counts as its syntax tree without docstrings (``ast.dump``): comments, docstrings, blank
lines and formatting are not behaviour, so editing them stales nothing, while any change to code does.
A change in one prover stales that prover's certificates only: the every-size prover's modules are not
in the modular test's closure, and the other way round.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

_PACKAGE = "vjpcert"
_COVERS: dict[str, str] = {}       # hash -> the sentence that says what it covers


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    return Path(origin).resolve() if origin and origin.endswith(".py") else None


def _imported(tree: ast.AST, modname: str, is_package: bool) -> set[str]:
    """Names of the vjpcert modules a module imports, anywhere in its code."""
    package = modname if is_package else modname.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else (node.module or "")
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name == _PACKAGE or name.startswith(_PACKAGE + "."):
                if _module_file(name) is not None:
                    out.add(name)
    return out


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=None)
def _parsed(path: Path, modname: str) -> tuple[str, frozenset]:
    """(normalised code, imported vjpcert modules) of one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imports = frozenset(_imported(tree, modname, path.name == "__init__.py"))
    return ast.dump(_without_docstrings(tree), include_attributes=False), imports


def closure(entry: str) -> dict[str, Path]:
    """Module name -> file for the entry module and every vjpcert module it imports, transitively."""
    out: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        path = _module_file(name)
        if path is None:
            continue
        out[name] = path
        parent = name.rpartition(".")[0]
        if parent.startswith(_PACKAGE) and parent not in out:
            todo.append(parent)             # a submodule's import runs its package's __init__
        todo.extend(_parsed(path, name)[1])
    return out


def checker_code_sha256(entry: str, *, discovered: str | None = None) -> str:
    """The hash of the normalised code of ``entry``'s closure (and of every module of the package
    ``discovered``, for a checker whose registry finds files there at run time)."""
    modules = closure(entry)
    if discovered is not None:
        pkg_file = _module_file(discovered)
        for path in sorted(Path(pkg_file).parent.glob("*.py")) if pkg_file else []:
            name = f"{discovered}.{path.stem}" if path.stem != "__init__" else discovered
            for sub, sub_path in closure(name).items():
                modules.setdefault(sub, sub_path)
    h = hashlib.sha256()
    for name in sorted(modules):
        h.update(name.encode() + b"\0" + _parsed(modules[name], name)[0].encode() + b"\0")
    digest = h.hexdigest()
    _COVERS[digest] = (f"the code of {entry} and the {len(modules) - 1} vjpcert modules it imports"
                       + (f" (and every module of {discovered}, whose files are found at run time)"
                          if discovered else "")
                       + ", as syntax trees: comments, docstrings and formatting do not count")
    return digest


def covers(digest: str) -> str | None:
    """What a checker hash computed in this process covers, in words."""
    return _COVERS.get(digest)
