"""Optional frameworks (torch, JAX, Triton, Liger-Kernel, dask) imported when a test first uses them,
not when pytest collects the file that names them; and so are the modules of ours that compile machine
code when imported (``compiled``).

Every pytest worker imports every test file to collect it. A file that imported torch at its top made
every worker a process of half a gigabyte from the start: collection took 11 s, and each strategy the
checkers run in a forked child paid for the parent's size (the symbolic tests ran a third slower in
such a worker). ``importorskip`` skips the file when the framework is not installed, as pytest's does,
but hands back the module unimported: its first attribute access imports it, inside a test (an import
that fails there skips that test, with pytest's reason). The conftest reads the call like pytest's
(a test needing torch is marked ``torch``) and runs the tests that need a framework last in each
worker, so a worker stays light for as long as it can.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest


class _Deferred:
    """A module that is imported at its first attribute access (from ``path`` when given)."""

    def __init__(self, name: str, reason: str | None, path=None):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_reason", reason)
        object.__setattr__(self, "_path", path)

    def __getattr__(self, attr):
        if attr.startswith("_") and attr not in ("__version__", "__file__"):
            # what pytest's collection asks of every module-level name (__test__, __wrapped__, ...): not
            # a reason to import; a test uses a framework's public names
            raise AttributeError(attr)
        try:
            module = sys.modules.get(self._name) or (importlib.import_module(self._name) if self._path is None
                                                     else _load(self._name, self._path))
        except ImportError as exc:
            pytest.skip(self._reason or f"could not import {self._name!r}: {exc}")
        return getattr(module, attr)

    def __repr__(self):
        return f"<{self._name}, imported at first use>"


def _load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def installed(name: str) -> bool:
    """Whether the top-level package of ``name`` is installed, without importing it."""
    return importlib.util.find_spec(name.partition(".")[0]) is not None


def importorskip(name: str, reason: str | None = None) -> _Deferred:
    """``pytest.importorskip`` at module level, but the import waits for the module's first use."""
    if not installed(name):
        pytest.skip(reason or f"{name!r} is not installed", allow_module_level=True)
    return _Deferred(name, reason)


def from_file(path, name: str) -> _Deferred:
    """The module of a file that is not on the path (a folder of kernels), loaded at its first use."""
    return _Deferred(name, None, path)


def imported(name: str, attr: str):
    """``from name import attr`` at first call: a function of a module that imports a framework."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(name), attr)(*args, **kwargs)
    call.__name__ = call.__qualname__ = attr
    call.__doc__ = f"{name}.{attr}, imported at its first call"
    return call


# Set by the conftest when this worker's collection ends: until then a private name asked of a module
# imported at first use is pytest's probe of a module-level name (``_mock_name``), not a test's use.
COLLECTION = {"done": False}


class _Compiled(_Deferred):
    """One of vjpcert's own modules, imported at its first use inside a test: it is always installed, so
    an ImportError fails the test, never skips it. A name set on it would be set on the stand-in, not
    on the module the code under test reads: refused, so a patch cannot silently miss (patch the
    module by its path: ``monkeypatch.setattr("vjpcert.symbolic.modular.arith.BLOCK", 4)``)."""

    def __getattr__(self, attr):
        if attr.startswith("__") or (attr.startswith("_") and not COLLECTION["done"]):
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __setattr__(self, attr, value):
        raise TypeError(f"{attr} would be set on the stand-in for {self._name}, not on the module: "
                        f"monkeypatch.setattr(\"{self._name}.{attr}\", value)")

    def __delattr__(self, attr):
        self.__setattr__(attr, None)


# The modules whose import compiles the modular tier's Numba loops (``symbolic.modular.kernels``: some
# 14 CPU s in a fresh clone, before Numba's cache holds them; 0.7 s to load them after). Every worker
# imports every test file to collect it, so a file that imported them at its top made each worker
# compile them while collecting: 18 s of collection in a fresh clone, against 5 with them deferred.
def compiled(name: str) -> _Deferred:
    """``import name`` at its first use inside a test (``symbolic.modular.check``, ``.backend``,
    ``.arith``: what imports the modular tier's compiled loops)."""
    return _Compiled(name, None)


def needs_triton():
    """Skip the calling test unless torch and Triton import."""
    reason = "the Triton tier needs torch and triton: pip install -e '.[triton]'"
    importorskip("torch", reason=reason).__version__          # named here, so the conftest reads the need
    importorskip("triton", reason=reason).__version__


def check_triton(kernel, dims, cases=None):
    """The Triton tier's certificate of ``kernel`` (a TritonKernel) at ``dims`` (skipped without Triton)."""
    needs_triton()
    from vjpcert.triton_kernels.check import check_triton_claim
    return check_triton_claim(kernel.op, kernel.claim, dims, kernel=kernel, cases=cases)
