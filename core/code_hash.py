"""A checker's code hash: what makes its certificates stale, and only that.

A certificate is stale once the code that issued it behaves differently. The hash covers the checker's
entry module and every vjpcert module it imports, at any depth, anywhere in its files (imports inside
functions included), plus, for a checker that discovers files at run time instead of importing them
(the kernel tiers' registries find every kernel file of their package), every file of its package.
Each file counts as its syntax tree without docstrings (``ast.dump``): comments, docstrings, blank
lines and formatting are not behaviour, so editing them stales nothing, while any change to code does.
A change in one prover stales that prover's certificates only: the every-size prover's modules are not
in the modular test's closure, and the other way round.

The framework frontends (``vjpcert.frontends``) are not a checker's code but an op's definition: they
turn a user's PyTorch or JAX code into the op a checker is handed, and a checker reaches them only
through such an op (the package's ``torch_op``/``jax_op`` import them when a user calls them). So they
are left out of every checker's closure and hashed into each framework op's identity instead
(``definition_sha256``, read by ``FrontendOp.spec_sha256``): an edit of a frontend stales the
framework certificates, and no certificate of a spec.

Bookkeeping (``BOOKKEEPING``) is left out of both: the modules that decide what a record holds and when
it is current, not what a checker decides -- writing and reading certificates, this hasher and its
cache, which files are an op's code and data, the planner's memory of an op's claims. A change in them
cannot change a verdict a certificate holds. One that changes which files count changes the hashes those
modules compute, so the certificates concerned go stale by themselves; one that changes what a record
says must raise the certificate schema (``core.certificate.SCHEMA_VERSION``), which stales every record.
They are not followed either: what a checker runs that they import, it imports itself (a test holds
every checker to that). The by-products of a run (pages, plots) are a function of all their code:
``code_sha256`` covers it whole.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

from vjpcert.core.disk_cache import DiskCache, cache_dir  # noqa: F401  (cache_dir re-exported)

_PACKAGE = "vjpcert"
# packages whose code defines ops rather than checks them: in an op's identity, not a checker's hash
OP_DEFINITIONS = ("vjpcert.frontends",)
_COVERS: dict[str, str] = {}       # hash -> the sentence that says what it covers
BOOKKEEPING = ("vjpcert.core.certificate", "vjpcert.core.code_hash", "vjpcert.core.disk_cache",
               "vjpcert.core.features", "vjpcert.core.reads", "vjpcert.core.sources")


@lru_cache(maxsize=None)
def _module_file(name: str) -> Path | None:
    """The file of a vjpcert module, or None when ``name`` names none. Only packages are imported to
    answer (a name under a plain module, such as a function's, is no module: asking importlib would
    import that module, and a checker's hash must not cost importing the checker)."""
    parent = name.rpartition(".")[0]
    if parent:
        parent_file = _module_file(parent)
        if parent_file is None or parent_file.name != "__init__.py":
            return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    return Path(origin).resolve() if origin and origin.endswith(".py") else None


def _candidates(tree: ast.AST, modname: str, is_package: bool) -> list[str]:
    """Names a module imports that may be vjpcert modules, anywhere in its code (``from m import f``
    gives m and m.f: which of them are modules is asked when the closure is built)."""
    package = modname if is_package else modname.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                    if node.level else (node.module or "")
            except ImportError:
                continue
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out.update(n for n in names if n == _PACKAGE or n.startswith(_PACKAGE + "."))
    return sorted(out)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


# What parsing a file gives, kept on disk by the sha256 of the file's bytes (and the module name,
# which decides what its relative imports name): parsing and normalising every checker module took
# seconds at each start of the command and of every test worker. A key is the content itself, so an
# edit is never served an old answer, whatever the clocks and file systems say.
_CACHE_VERSION = f"1 {sys.version_info[:2]}"       # ast.dump differs between Python versions


_CACHE = DiskCache("code-hash.json", _CACHE_VERSION)


@lru_cache(maxsize=None)
def _parsed(path: Path, modname: str) -> tuple[str, tuple]:
    """(sha256 of the normalised code, candidate vjpcert imports) of one file."""
    raw = path.read_bytes()
    key = hashlib.sha256(raw + b"\0" + modname.encode()).hexdigest()
    hit = _CACHE.get(key)
    if hit is None:
        tree = ast.parse(raw.decode("utf-8"), filename=str(path))
        imports = _candidates(tree, modname, path.name == "__init__.py")
        code = hashlib.sha256(ast.dump(_without_docstrings(tree), include_attributes=False).encode()).hexdigest()
        hit = [code, imports]
        _CACHE.put(key, hit)
    return hit[0], tuple(hit[1])


def _imported(path: Path, modname: str) -> list[str]:
    """The vjpcert modules a file imports (its candidates that name a module)."""
    return [n for n in _parsed(path, modname)[1] if _module_file(n) is not None]


def _defines_ops(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in OP_DEFINITIONS)


def closure(entry: str, *, definitions: bool = False, bookkeeping: bool = False) -> dict[str, Path]:
    """Module name -> file for the entry module and every vjpcert module it imports, transitively;
    without the op-defining packages (``OP_DEFINITIONS``) unless ``definitions``, and without the
    bookkeeping modules (``BOOKKEEPING``) unless ``bookkeeping``."""
    out: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in out or (name != entry and ((not definitions and _defines_ops(name))
                                              or (not bookkeeping and name in BOOKKEEPING))):
            continue
        path = _module_file(name)
        if path is None:
            continue
        out[name] = path
        parent = name.rpartition(".")[0]
        if parent.startswith(_PACKAGE) and parent not in out:
            todo.append(parent)             # a submodule's import runs its package's __init__
        todo.extend(_imported(path, name))
    return out


def checker_code_sha256(entry: str, *, discovered: str | None = None) -> str:
    """The hash of the normalised code of ``entry``'s closure (and of every module of the package
    ``discovered``, for a checker whose registry finds files there at run time)."""
    modules = closure(entry)
    if discovered is not None:
        modules.update({k: v for k, v in _package_closure(discovered).items() if k not in modules})
    digest = _digest(modules)
    _COVERS[digest] = (f"the code of {entry} and the {len(modules) - 1} vjpcert modules it imports"
                       + (f" (and every module of {discovered}, whose files are found at run time)"
                          if discovered else "")
                       + ", the framework frontends aside (they are in each framework op's identity)"
                       + ", and the bookkeeping (what a record holds and when it is current)"
                       + ", as syntax trees: comments, docstrings and formatting do not count")
    return digest


def code_sha256(entry: str, *, discovered: str | None = None) -> str:
    """The hash of the normalised code of ``entry``'s whole closure, bookkeeping included: for what a
    run makes from certificates (the pages, the plots), which is a function of all of its code."""
    modules = closure(entry, bookkeeping=True)
    if discovered is not None:
        modules.update({k: v for k, v in _package_closure(discovered, bookkeeping=True).items() if k not in modules})
    return _digest(modules)


def _package_closure(package: str, *, definitions: bool = False, bookkeeping: bool = False) -> dict[str, Path]:
    """The closure of every module of ``package`` (its files, found as a registry finds them)."""
    modules: dict[str, Path] = {}
    pkg_file = _module_file(package)
    for path in sorted(Path(pkg_file).parent.glob("*.py")) if pkg_file else []:
        name = f"{package}.{path.stem}" if path.stem != "__init__" else package
        for sub, sub_path in closure(name, definitions=definitions, bookkeeping=bookkeeping).items():
            modules.setdefault(sub, sub_path)
    return modules


def _digest(modules: dict[str, Path]) -> str:
    h = hashlib.sha256()
    for name in sorted(modules):
        h.update(name.encode() + b"\0" + _parsed(modules[name], name)[0].encode() + b"\0")
    _CACHE.save()
    return h.hexdigest()


@lru_cache(maxsize=None)
def definition_sha256(package: str) -> str:
    """The normalised code of an op-defining package and of everything it imports (the machinery it
    runs on included): part of the identity of every op it defines."""
    return _digest(_package_closure(package, definitions=True))


def covers(digest: str) -> str | None:
    """What a checker hash computed in this process covers, in words."""
    return _COVERS.get(digest)
