"""Tensors a Triton kernel is checked with: every buffer fenced by guard regions, every output poisoned.

  guarded inputs     ``device_tensor(a)`` copies a numpy array into the middle of a larger buffer whose
                     GUARD elements before and after (the fences) hold one of two patterns: "nan" (float32:
                     the NaN with payload GUARD_BITS; other floats NaN; integers their minimum) or
                     "large" (floats FENCE_LARGE, integers their maximum). A load past the end of a tensor
                     (a mask that is too wide, or none) reads the fence: NaN poisons sums and products,
                     and a kernel whose result does not depend on what it read past the end gives the
                     same bits under both patterns, so the checker runs the first case under each and
                     any difference is a read outside the tensors (NaN alone would be forgiven by
                     ``tl.maximum``, which ignores NaN: a row max that reads past the end). On a GPU the
                     same read is silent garbage from a neighbouring allocation. Triton's interpreter
                     copies whole storages to the host, so the fences travel with the tensors there too.
  poisoned outputs   within ``poisoned_allocations()``, ``torch.empty`` / ``torch.empty_like`` /
                     ``torch.empty_strided`` of a floating dtype return NaN-filled, fenced tensors, so an
                     element a kernel never writes is NaN, not the zero a fresh page happens to hold
                     (Liger allocates its outputs inside its own functions: this is how they are
                     poisoned). ``torch.zeros`` is left alone: a kernel may rely on it.
  fences checked     after a run, ``Arena.violations()`` lists every fence whose bits changed: a store
                     past the end of a tensor.
  cloned inputs      every call gets fresh copies of the inputs: kernels that write gradients into their
                     inputs (Liger's SwiGLU, GeGLU, cross-entropy) cannot corrupt the checker's arrays.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from vjpcert.core import low_precision

GUARD = 256                     # elements fenced before and after every buffer
GUARD_BITS = 0x7FC0DEAD         # a float32 quiet NaN with a payload no arithmetic produces by chance
FENCE_LARGE = 3.0e38            # near float32's largest: a row max that reads it makes exp(x - max) = 0
PATTERNS = ("nan", "large")

_ARENA: contextvars.ContextVar = contextvars.ContextVar("vjpcert_triton_arena", default=None)


def torch():
    import torch as _torch
    return _torch


def device() -> str:
    """Where kernels run: "cuda" on a GPU, else "cpu" (Triton's interpreter)."""
    t = torch()
    return "cuda" if t.cuda.is_available() else "cpu"


class Arena:
    """The fenced buffers of one run: every tensor ``device_tensor`` or a poisoned allocation made."""

    def __init__(self, pattern: str = "nan"):
        if pattern not in PATTERNS:
            raise ValueError(f"fence pattern {pattern!r}; patterns: {PATTERNS}")
        self.pattern = pattern
        self.fences = []        # (buffer, size of the payload, what, its bits when made)
        self.raw_empty = torch().empty      # torch's own, even while poisoned_allocations patches it

    def _fenced(self, numel: int, dtype, fill, what: str, dev):
        t = torch()
        buf = self.raw_empty(numel + 2 * GUARD, dtype=dtype, device=dev)
        if self.pattern == "large":
            if dtype.is_floating_point:
                buf.fill_(FENCE_LARGE)
            elif dtype == t.bool:
                buf.fill_(True)
            else:
                buf.fill_(t.iinfo(dtype).max)
        elif dtype == t.float32:
            buf.view(t.int32).fill_(np.int32(np.uint32(GUARD_BITS).view(np.int32)).item())
        elif dtype.is_floating_point:
            buf.fill_(float("nan"))
        elif dtype == t.bool:
            buf.fill_(False)
        else:
            buf.fill_(t.iinfo(dtype).min)
        body = buf[GUARD:GUARD + numel]
        if fill is not None:
            body.fill_(fill)
        self.fences.append((buf, numel, what, buf.clone()))
        return body

    def tensor(self, a, what: str = "input", dtype=None):
        t = torch()
        src = low_precision.from_numpy(a)        # 0-d stays 0-d (a loss's cotangent); bfloat16 through its bits
        if dtype is not None:
            src = src.to(dtype)
        body = self._fenced(src.numel(), src.dtype, None, what, device())
        body.copy_(src.reshape(-1).to(body.device))
        return body.view(src.shape)

    def empty(self, shape, dtype, dev, what: str = "output"):
        numel = int(np.prod(shape)) if len(shape) else 1
        fill = float("nan") if dtype.is_floating_point else None
        return self._fenced(numel, dtype, fill, what, dev).view(tuple(shape))

    def violations(self) -> list[str]:
        """Every fence whose bits changed since it was made: a store past the end (or before the start)."""
        t = torch()
        out = []
        for buf, numel, what, original in self.fences:
            for side, sl in (("before", slice(0, GUARD)), ("after", slice(GUARD + numel, None))):
                a, b = buf[sl], original[sl]
                if a.dtype.is_floating_point:
                    a, b = a.view(t.int32) if a.dtype == t.float32 else a, b.view(t.int32) if b.dtype == t.float32 else b
                changed = (a != b) & ~(t.isnan(a) & t.isnan(b)) if a.dtype.is_floating_point else (a != b)
                if bool(changed.any()):
                    first = int(t.nonzero(changed)[0, 0])
                    offset = (first - GUARD) if side == "before" else first
                    out.append(f"a store {side} the {what} tensor ({numel} elements): {int(changed.sum())} "
                               f"fenced element(s) overwritten, the first at offset "
                               f"{offset if side == 'before' else numel + offset}")
        return out


def current() -> Arena | None:
    return _ARENA.get()


def device_tensor(a, what: str = "input", dtype=None):
    """A fresh, fenced copy of numpy array ``a`` on the kernels' device (a plain copy outside a run)."""
    arena = current()
    if arena is None:
        arena = Arena()
    return arena.tensor(a, what, dtype)


def empty(shape, dtype=None, what: str = "output"):
    """A NaN-poisoned, fenced output tensor (what a launcher allocates its outputs with)."""
    t = torch()
    arena = current() or Arena()
    return arena.empty(tuple(shape), dtype or t.float32, device(), what)


def to_numpy(x) -> np.ndarray:
    return low_precision.to_numpy(x)


@contextlib.contextmanager
def run_context(pattern: str = "nan"):
    """One run of a launcher: a fresh Arena (fences of ``pattern``), and torch's empty allocations
    poisoned and fenced."""
    arena = Arena(pattern)
    token = _ARENA.set(arena)
    try:
        with poisoned_allocations(arena):
            yield arena
    finally:
        _ARENA.reset(token)


@contextlib.contextmanager
def poisoned_allocations(arena: Arena):
    t = torch()
    originals = {name: getattr(t, name) for name in ("empty", "empty_like", "empty_strided")}

    def _shape(size):
        if len(size) == 1 and isinstance(size[0], (tuple, list, t.Size)):
            return tuple(size[0])
        return tuple(size)

    def empty(*size, dtype=None, device=None, **kw):
        ref = originals["empty"](*size, dtype=dtype, device=device, **kw)
        if not ref.dtype.is_floating_point or kw.get("out") is not None:
            return ref
        return arena.empty(_shape(size), ref.dtype, ref.device, "output").requires_grad_(bool(kw.get("requires_grad")))

    def empty_like(x, *, dtype=None, device=None, **kw):
        ref = originals["empty_like"](x, dtype=dtype, device=device, **kw)
        if not ref.dtype.is_floating_point or not ref.is_contiguous():
            return ref
        return arena.empty(tuple(ref.shape), ref.dtype, ref.device, "output").requires_grad_(bool(kw.get("requires_grad")))

    def empty_strided(size, stride, *, dtype=None, device=None, **kw):
        ref = originals["empty_strided"](size, stride, dtype=dtype, device=device, **kw)
        if not ref.dtype.is_floating_point or not ref.is_contiguous():
            return ref
        return arena.empty(tuple(ref.shape), ref.dtype, ref.device, "output")

    for name, fn in (("empty", empty), ("empty_like", empty_like), ("empty_strided", empty_strided)):
        setattr(t, name, fn)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(t, name, fn)
