"""Low-precision storage dtypes, in one place: their numpy dtypes (bfloat16 is ``ml_dtypes``'), rounding
to them, and the same arrays as torch tensors.

A low-precision kernel or implementation stores its inputs and outputs in bfloat16 or float16 and
computes in float32 (or says otherwise: ``core.kernel_bounds.Casting``). Its checks draw the inputs in
that dtype first and compute the float64 truth from those very values; the baseline of the tolerance
rule is the spec in float32 rounded to the dtype (``rounded``), the rule's u is the dtype's.
"""
from __future__ import annotations

import numpy as np

STORAGE_DTYPES = ("float32", "bfloat16", "float16")


def storage_dtype(name) -> np.dtype:
    """The numpy dtype of a storage dtype name ("float32", "float16", "bfloat16": ml_dtypes')."""
    if str(name) == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_low(dtype) -> bool:
    return np.dtype(storage_dtype(dtype)).itemsize < 4


def unit_roundoff(dtype) -> float:
    return float(np.finfo(storage_dtype(dtype)).eps) / 2


def precision_problem(storage, arithmetic, what: str) -> str | None:
    """Why an arithmetic (a kernel's accumulation, a casting's) less precise than its storage dtype is
    refused: it would loosen the bound a claim is held to (a float32 kernel that says it sums in
    bfloat16 would be judged as a bfloat16 one), or None."""
    if unit_roundoff(arithmetic) > unit_roundoff(storage):
        return (f"{what} {arithmetic} is less precise than its dtype {storage}: a claim in {storage} is held to "
                f"{storage} arithmetic or better")
    return None


def rounded(a, dtype) -> np.ndarray:
    """``a`` rounded (to nearest even) to ``dtype``, as float64 numbers."""
    return np.asarray(a, np.float64).astype(np.float32).astype(storage_dtype(dtype)).astype(np.float64)


def torch_dtype(dtype):
    """The torch dtype of a numpy float dtype (``ml_dtypes.bfloat16`` included)."""
    import torch
    dtype = storage_dtype(dtype)
    if dtype == storage_dtype("bfloat16"):
        return torch.bfloat16
    return torch.from_numpy(np.zeros(0, dtype)).dtype


def from_numpy(a: np.ndarray):
    """A torch tensor of the numpy array ``a`` (a copy; bfloat16 through its bits)."""
    import torch
    a = np.array(a, order="C", copy=True)
    if a.dtype == storage_dtype("bfloat16"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(t) -> np.ndarray:
    """A numpy copy of a torch tensor (bfloat16 as ``ml_dtypes.bfloat16``)."""
    import torch
    t = t.detach().to("cpu")
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().copy().view(storage_dtype("bfloat16"))
    return t.numpy().copy()
