"""The Triton tier: Triton kernels (our own reference kernels, Liger-Kernel's, a user's) checked against
the specs, in Triton's interpreter on a CPU and natively on a GPU.

    from vjpcert.triton_kernels.check import check_triton_claim, triton_claims, detect_mode

Importing this package picks the mode first: without a CUDA device, ``TRITON_INTERPRET=1`` is set
before any kernel module is imported (``triton.jit`` reads it when it decorates a kernel, so it cannot
be switched on afterwards). This package imports from ``specs`` and ``core`` only.
"""
import os as _os


def _cuda_device() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:          # torch missing or broken: no GPU this tier could use
        return False


if not _cuda_device():
    _os.environ.setdefault("TRITON_INTERPRET", "1")
