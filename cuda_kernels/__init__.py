"""The kernel tier: Numba CUDA forward/backward kernels, one file per op, checked against the specs.

    from vjpcert.cuda_kernels import KERNELS                  # the registry (imports numba.cuda)
    from vjpcert.cuda_kernels.check import check_kernel_claim, kernel_claims, kernel_dims, detect_mode

Importing a kernel module picks the mode first (``cuda_kernels.env``): a real GPU when a driver and
a device are present, else Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` is set before numba.cuda
is imported). This package imports from ``specs`` only.
"""


def __getattr__(name):
    if name == "KERNELS":
        from vjpcert.cuda_kernels.registry import KERNELS
        return KERNELS
    raise AttributeError(name)
