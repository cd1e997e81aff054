"""Is there a CUDA GPU here? Asked without importing numba, torch or triton, because both kernel tiers
must choose their mode (a GPU, or the CUDA simulator / Triton's interpreter) before those libraries
are imported: ``NUMBA_ENABLE_CUDASIM`` and ``TRITON_INTERPRET`` are read when they load.
"""
from __future__ import annotations

import ctypes
import sys


def driver_present() -> bool:
    """A real CUDA driver with at least one device (never raises)."""
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            if lib.cuInit(0) != 0:
                return False
            count = ctypes.c_int(0)
            return lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
        except (AttributeError, OSError):
            return False
    return False
