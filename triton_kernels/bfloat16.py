"""bfloat16 in Triton's interpreter, computed as compiled Triton computes it.

Measured with triton 3.9.0: the interpreter holds a bfloat16 block as its raw bits in a ``uint16``
numpy array (``interpreter._get_np_dtype``) and then runs numpy arithmetic on those bits: ``x * x``,
``tl.sum``, ``tl.maximum`` and every libdevice function of a bfloat16 block compute on integers (Liger's
RMSNorm in its "none" casting mode returns NaN rows), and its float32 -> bfloat16 conversion
(``_convert_float`` without a rounding mode, what ``.to(tl.bfloat16)`` and a store into a bfloat16
tensor use) truncates where compiled Triton rounds to nearest even. ``patch`` makes the interpreter
hold bfloat16 blocks as ``ml_dtypes.bfloat16`` arrays, whose numpy arithmetic rounds every result to
nearest even as a GPU's bfloat16 arithmetic does; the interpreter's C++ loads and stores, which know
``uint16`` only, get the same bits through views, and conversions to and from bfloat16 are
``ml_dtypes``' (round to nearest even; round toward zero where a kernel asks for it).

What it leaves as it is: a reduction of a bfloat16 block (``tl.sum`` keeps bfloat16 when a kernel
does not ask for another dtype) runs in numpy's order for the dtype, one bfloat16 rounding per
partial sum, where a GPU reduces in a tree; bfloat16 atomics.
"""
from __future__ import annotations

import numpy as np

from vjpcert.core.low_precision import storage_dtype


def patch(interp, undo: list) -> None:
    """Patch ``triton.runtime.interpreter`` (``interp``) for bfloat16; ``undo`` gets the restores."""
    if getattr(interp._get_np_dtype, "vjpcert_patch", False):
        return
    tl = interp.tl
    bf16 = storage_dtype("bfloat16")
    bits = np.dtype(np.uint16)
    get_np_dtype, convert_float = interp._get_np_dtype, interp._convert_float
    builder = interp.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store

    def np_dtype(tt_dtype):
        element = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        return bf16 if element == tl.bfloat16 else get_np_dtype(tt_dtype)

    def converted(data, src, dst, rounding_mode):
        if src != tl.bfloat16 and dst != tl.bfloat16:
            return convert_float(data, src, dst, rounding_mode)
        values = np.asarray(data).view(bf16) if src == tl.bfloat16 else np.asarray(data)
        if dst != tl.bfloat16:
            return values.astype(np_dtype(dst))
        wide = values.astype(np.float32)
        if rounding_mode == interp._ir.ROUNDING_MODE.RTZ:
            return (wide.view(np.uint32) >> 16).astype(np.uint16)
        return wide.astype(bf16).view(bits)

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        if ptrs.get_element_ty() != tl.bfloat16:
            return load(self, ptrs, mask, other, cache_policy, is_volatile)
        raw = np.zeros_like(ptrs.data, dtype=bits) if other is None else np.asarray(other.data).view(bits)
        data = interp._interpreter.load(ptrs.data, mask.data, np.broadcast_to(raw, ptrs.data.shape).copy(), bits)
        return interp.TensorHandle(data.view(bf16), ptrs.get_element_ty())

    def masked_store(self, ptrs, value, mask, cache_policy):
        if value.data.dtype == bf16:
            value = interp.TensorHandle(value.data.view(bits), tl.uint16)
        return store(self, ptrs, value, mask, cache_policy)

    np_dtype.vjpcert_patch = True
    interp._get_np_dtype, interp._convert_float = np_dtype, converted
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store

    def restore():
        interp._get_np_dtype, interp._convert_float = get_np_dtype, convert_float
        builder.create_masked_load, builder.create_masked_store = load, store
    undo.append(restore)
