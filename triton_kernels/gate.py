"""What the Triton tier draws for itself, so that a kernel cannot choose what it is checked on (its
input cases, the kernel cases among them, are those of ``core/kernel_checks.py``).

A kernel declares sizes (``TritonKernel.sizes``) and may declare samplers; both are *added* to what
the gate draws here, never replacing it:

  sizes      the kernel's own, then fixed edge sizes (every wide dim a power of two, GATE_POWER, and
             an exact multiple of 32 that is not one, GATE_MULTIPLE: a kernel that drops its last block
             only when the block divides the size is wrong at both), then DRAWN_SIZES sizes drawn from
             a seed that hashes the kernel's own code with the checker's seed. The drawn sizes change
             whenever the kernel's code changes, so a kernel cannot be written to be right at them
             alone; they are recorded in the certificate's dims, so a run replays.
  samplers   a kernel's sampler for a non-differentiable input (integer labels for a cross-entropy
             kernel that takes nothing else) is a stated restriction of the claim, used in every case;
             one for a differentiable input is one more case (``kernel_samplers``), after the gate's.

A dim is *wide* when it is the length of the op's first input's rows (its last axis), or when the
kernel's sizes reach WIDE_FROM in it (a head dim); other dims (rows) stay small, where the
interpreter is slow and a row is a program.
"""
from __future__ import annotations

import hashlib
import inspect
import sys

import numpy as np

WIDE_FROM = 16
GATE_POWER = 64             # a power of two: a loop over blocks of 16, 32 or 64 has no partial block
GATE_MULTIPLE = 96          # 3 x 32: a multiple of a 32-wide block, not of 64
DRAWN_SIZES = 2
DRAWN_WIDE = (2, 300)       # inclusive bounds of a drawn wide dim: past several blocks of 32 and 64
DRAWN_NARROW = (1, 6)
KERNEL_SAMPLERS = "kernel_samplers"


def kernel_code_digest(kernel) -> str:
    """A digest of the kernel's own code: its launcher's module (a user's file, our wrapper of a
    library with the library's version), else the launcher itself."""
    fn = kernel.launcher
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    try:
        text = inspect.getsource(module) if module is not None else inspect.getsource(fn)
    except (OSError, TypeError):
        text = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
    return hashlib.sha256(f"{kernel.name}\n{kernel.source}\n{text}".encode()).hexdigest()


def gate_sizes(kernel, op, seed: int = 0, declared=None) -> list[dict]:
    """The kernel's sizes (``declared``, default its interpreter sizes), then the gate's: the fixed
    edge sizes and DRAWN_SIZES drawn ones, each allowed by the op's constraints (a drawn size the op
    refuses, an odd rotary width, is drawn again)."""
    declared = [dict(d) for d in (kernel.sizes if declared is None else declared)]
    if not declared:
        return declared
    names = list(declared[0])
    wide = {n for n in names if max(d.get(n, 0) for d in declared) >= WIDE_FROM} | _row_length(op, names)
    extra = [{n: GATE_POWER if n in wide else 2 for n in names},
             {n: GATE_MULTIPLE if n in wide else 3 for n in names}]
    rng = np.random.default_rng([seed, int(kernel_code_digest(kernel)[:8], 16)])
    drawn, tries = [], 0
    while len(drawn) < DRAWN_SIZES and tries < 1000:
        tries += 1
        lo_hi = {n: DRAWN_WIDE if n in wide else DRAWN_NARROW for n in names}
        d = {n: int(rng.integers(lo, hi + 1)) for n, (lo, hi) in lo_hi.items()}
        if _allowed(op, d):
            drawn.append(d)
    out = list(declared)
    for d in [e for e in extra if _allowed(op, e)] + drawn:
        if d not in out:
            out.append(d)
    return out


def _row_length(op, names) -> set:
    """The dim of the op's first input's last axis (a row's length: where blocks are): wide whatever
    sizes the kernel declares, so a kernel declaring only tiny sizes still meets long rows."""
    shape = next(iter(getattr(op, "inputs", {}).values()), ())
    last = shape[-1] if shape else None
    return {last} if isinstance(last, str) and last in names else set()


def _allowed(op, dims: dict) -> bool:
    if op is None or op.constraints is None:
        return True
    try:
        return not op.constraints(dims)
    except Exception:       # a constraint that raises rejects the size
        return False
