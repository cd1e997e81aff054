"""Which CUDA this process runs kernels on: a real GPU, Numba's CUDA simulator, or none.

``cuda.is_available()`` is True inside the simulator, so the mode is chosen by probing for a real
driver (libcuda, ``cuInit``, at least one device) *before* numba.cuda is imported: the simulator is
selected by ``NUMBA_ENABLE_CUDASIM=1``, which numba reads when it first loads its config, and cannot
be switched on once ``numba.cuda`` has been imported.

``VJPCERT_KERNEL_MODE`` overrides the probe:
  ``simulator``  run in the simulator even where a GPU is present (the race detector needs it);
  ``compile``    no execution at all: kernels are only compiled to PTX (``cuda_kernels.resources``
                 runs this way in a subprocess, because the simulator has no ``compile_ptx``).
"""
from __future__ import annotations

import os
import sys
from functools import lru_cache

from vjpcert.core import devices as _devices

MODE_ENV = "VJPCERT_KERNEL_MODE"
MODES = ("gpu", "simulator", "compile", "none")


driver_present = _devices.driver_present       # shared with the Triton tier (core/devices.py)


def _numba_cuda_installed() -> bool:
    """numba with a CUDA target: the numba-cuda package, or an older numba's bundled numba/cuda
    (found without importing numba, whose import would read the simulator switch too early)."""
    from importlib.util import find_spec
    try:
        numba = find_spec("numba")
        if numba is None:
            return False
        if find_spec("numba_cuda") is not None:
            return True
        return any(os.path.isdir(os.path.join(p, "cuda")) for p in (numba.submodule_search_locations or []))
    except (ImportError, ValueError):
        return False


def _enable_simulator() -> None:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba" in sys.modules:            # numba read its config at import: make it read again
        from numba.core import config
        config.reload_config()


@lru_cache(maxsize=None)
def detect_mode() -> str:
    """"gpu" | "simulator" | "compile" | "none"; decided once per process."""
    if not _numba_cuda_installed():
        return "none"
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced and forced not in ("gpu", "simulator", "compile", "auto"):
        raise ValueError(f"{MODE_ENV}={forced!r}: choose gpu, simulator, compile or auto")
    if "numba.cuda" in sys.modules:       # someone imported it already: report what it is
        if _config_says_sim():
            return "simulator"
        if forced == "compile":
            return "compile"
        return "gpu" if driver_present() else "none"
    if forced == "compile":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
        return "compile"
    if forced == "simulator" or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
        _enable_simulator()
        return "simulator"
    if forced == "gpu" or driver_present():
        return "gpu" if driver_present() else "none"
    _enable_simulator()
    return "simulator"


def _config_says_sim() -> bool:
    try:
        from numba.cuda.core import config
        return bool(config.ENABLE_CUDASIM)
    except Exception:
        return False


def cuda():
    """The numba.cuda module for this process's mode (imports it after the mode is set)."""
    mode = detect_mode()
    if mode == "none":
        raise RuntimeError("no CUDA: numba-cuda is missing, or numba.cuda was imported without a "
                           "driver before cuda_kernels could select the simulator")
    from numba import cuda as _cuda
    return _cuda


def versions() -> dict:
    """Versions a kernel certificate depends on (the simulator patches rely on numba-cuda's)."""
    from importlib import metadata
    out = {}
    for dist in ("numba", "numba-cuda", "cuda-core", "nvidia-nvjitlink", "llvmlite"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
