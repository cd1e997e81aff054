"""Make Triton's interpreter (``TRITON_INTERPRET=1``) run kernels as compiled Triton would.

Measured with triton 3.9.0: the interpreter differs from compiled Triton in two ways that stop real
kernels (Liger-Kernel's RMSNorm, LayerNorm, SwiGLU, GeGLU, cross-entropy) before they compute
anything. ``faithful()`` patches both, for as long as the ``with`` block lasts, and restores them:

  scalar arguments   the interpreter's argument conversion (``interpreter._implicit_cvt``) has cases
                     for bool, int, pointers and tuples but none for float: a Python float reaches the
                     kernel as a plain float (``eps.to(tl.float32)`` raises "'float' object has no
                     attribute 'to'"). Compiled Triton specialises a float argument as an fp32 scalar;
                     the patch does the same (the value rounded once to float32, as the launcher does).
  libdevice          ``triton.language.extra.libdevice`` functions (``tanh``, ``rsqrt``, ...) are stubs
                     that compiled Triton resolves to CUDA's libdevice; the interpreter never patches
                     them, so ``tanh(x)`` returns None ("unsupported operand ... 'NoneType'"). The patch
                     replaces every such stub a kernel module imported by name with the function
                     evaluated in float64 and rounded once to the argument's dtype (0.5 ulp: libdevice is
                     within 1-2 ulp, so a kernel that passes here has not been helped past a GPU).

What it does not patch: anything else of the interpreter. Kernels run sequentially over the grid, one
program at a time, with numpy arrays for blocks; masked loads return ``other`` (0 by default) and a
load outside a tensor's memory raises (``tl.load`` checks the pointer against the tensors it was
given), which is what makes an out-of-bounds read visible on the CPU.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

import numpy as np

INTERPRET_VARIABLE = "TRITON_INTERPRET"
_LOCK = threading.RLock()


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (read when ``triton.jit`` decorates a kernel)."""
    return os.environ.get(INTERPRET_VARIABLE, "0") not in ("", "0")


def _scipy_erf(v):
    from scipy.special import erf
    return erf(v)


# libdevice name -> float64 function; the result is rounded once to the argument's dtype.
LIBDEVICE = {
    "tanh": np.tanh, "rsqrt": lambda v: 1.0 / np.sqrt(v), "exp": np.exp, "log": np.log,
    "sqrt": np.sqrt, "erf": _scipy_erf, "sin": np.sin, "cos": np.cos, "exp2": np.exp2,
    "log2": np.log2, "pow": np.power, "fast_expf": np.exp, "fast_logf": np.log,
}


def _interpreted(name, f):
    def fn(*args, **kwargs):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        first = next(a for a in args if isinstance(a, tl.tensor))
        np_dtype = first.handle.data.dtype
        values = [a.handle.data.astype(np.float64) if isinstance(a, tl.tensor) else np.float64(a) for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(f(*values)).astype(np_dtype)
        return tl.tensor(TensorHandle(out, first.handle.dtype.scalar), first.type)
    fn.__name__ = f"interpreted_libdevice_{name}"
    fn.vjpcert_libdevice = name
    return fn


def _libdevice_stubs() -> dict:
    """id(stub) -> name, for the libdevice modules of this Triton."""
    import importlib
    out = {}
    for mod_name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for name in LIBDEVICE:
            stub = getattr(mod, name, None)
            if stub is not None:
                out[id(stub)] = name
    return out


def _float_as_fp32(original):
    def convert(arg):
        if isinstance(arg, float):
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle
            return tl.tensor(TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)
    convert.vjpcert_patch = True
    return convert


@contextlib.contextmanager
def faithful(modules=()):
    """Within the block: float arguments are fp32 scalars, and the libdevice stubs imported by name
    into ``modules`` (kernel modules, or their names) are interpreted functions. Outside the
    interpreter this does nothing (compiled Triton needs neither patch)."""
    if not interpreting():
        yield
        return
    import triton.runtime.interpreter as interp
    with _LOCK:
        undo = []
        original = interp._implicit_cvt
        if not getattr(original, "vjpcert_patch", False):
            interp._implicit_cvt = _float_as_fp32(original)
            undo.append(lambda: setattr(interp, "_implicit_cvt", original))
        stubs = _libdevice_stubs()
        for m in modules:
            mod = sys.modules[m] if isinstance(m, str) else m
            for attr, value in list(vars(mod).items()):
                name = stubs.get(id(value))
                if name is not None:
                    setattr(mod, attr, _interpreted(name, LIBDEVICE[name]))
                    undo.append(lambda mod=mod, attr=attr, value=value: setattr(mod, attr, value))
        try:
            yield
        finally:
            for u in reversed(undo):
                u()
