"""The Triton tier: Triton kernels (our own reference kernels, Liger-Kernel's, a user's) checked against
the specs, in Triton's interpreter on a CPU and natively on a GPU.

    from vjpcert.triton_kernels.check import check_triton_claim, triton_claims, detect_mode

Importing this package picks the mode first: without a CUDA device (``core.devices``: a driver probe
that imports neither torch nor triton), ``TRITON_INTERPRET=1`` is set before any kernel is decorated
(``triton.jit`` reads it when it decorates a kernel, so a kernel decorated earlier stays compiled: the
pytest plugin imports this package at start-up for that reason). This package imports from ``specs``
and ``core`` only.
"""
import os as _os

from vjpcert.core.devices import driver_present as _driver_present

if not _driver_present():
    _os.environ.setdefault("TRITON_INTERPRET", "1")
