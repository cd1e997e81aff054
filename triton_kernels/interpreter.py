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

It also chooses the order the programs of a launch run in (``faithful(order=...)``). The interpreter
runs a launch's programs one after another in grid order (``GridExecutor.__call__`` loops x, y, z and
calls ``interpreter_builder.set_grid_idx`` before each program); a GPU runs them at once, in any
order. A kernel whose program reads what another program of the same launch wrote, with nothing making
it wait (a row's last program combining the others' partial results), is right in grid order and
wrong in others. The patch wraps ``GridExecutor.__call__`` (one launch: its kernel's name) and
``set_grid_idx``, which maps the k-th program of the loop to the k-th program of the chosen order:
``grid``, ``reversed`` or ``shuffled <i>`` (a permutation drawn from ``order_seed``, ``i``, the launch's
index in the run and its number of programs). It records every launch (kernel, grid) and the float
atomic adds its programs made (``Record``): their rounding legitimately depends on the order.

And it makes bfloat16 blocks compute as compiled Triton's do (``triton_kernels/bfloat16.py``: the
interpreter computes on their raw bits and truncates conversions to them).

What it does not patch: anything else of the interpreter. Each program still runs whole before the
next starts, so orders are all it can vary, not interleavings (a lost update whose sums come out the
same in every order is not seen); blocks are numpy arrays; masked loads return ``other`` (0 by
default) and a load outside a tensor's memory raises (``tl.load`` checks the pointer against the
tensors it was given), which is what makes an out-of-bounds read visible on the CPU.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

import numpy as np

from vjpcert.triton_kernels import bfloat16

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


# the orders a checker runs: grid order (the interpreter's own), reversed, and seeded shuffles
SHUFFLES = 3
ORDERS = ("grid", "reversed", *(f"shuffled {i}" for i in range(1, SHUFFLES + 1)))


class OrderPatchBroken(RuntimeError):
    """The interpreter no longer runs a launch's programs the way the order patch assumes: which order
    ran cannot be said (the checker's problem, never the kernel's)."""


def program_sequence(order: str, order_seed: int, launch: int, programs: int) -> np.ndarray:
    """The linear program indices (x slowest, z fastest, as the interpreter loops) in the order they
    run: for launch number ``launch`` of a run, with ``programs`` programs."""
    if order == "grid":
        return np.arange(programs)
    if order == "reversed":
        return np.arange(programs)[::-1]
    if order.startswith("shuffled "):
        i = int(order.removeprefix("shuffled "))
        return np.random.default_rng([order_seed, i, launch, programs]).permutation(programs)
    raise ValueError(f"program order {order!r}; orders: grid, reversed, shuffled <i>")


class Record:
    """What one run launched: per launch its kernel, grid and float atomic adds, in launch order."""

    def __init__(self, order: str, order_seed: int):
        self.order, self.order_seed = order, order_seed
        self.launches: list[dict] = []
        self._current: dict | None = None

    @property
    def float_atomics(self) -> int:
        return sum(launch["float_atomics"] for launch in self.launches)

    def grids(self) -> list[int]:
        return [launch["programs"] for launch in self.launches]


_ACTIVE: list = []          # the Records of the enclosing faithful() blocks, innermost last


def _unwrapped(fn):
    # a faithful() with an order of its own inside another takes over for its block (wrapping the outer
    # wrappers would map each program through both orders); the outer's come back when it ends
    return getattr(fn, "vjpcert_original", fn)


def _patch_order(interp, record: Record, undo: list):
    builder = interp.interpreter_builder
    executor = interp.GridExecutor
    original_call = _unwrapped(executor.__call__)
    set_grid_dim, set_grid_idx, atomic_rmw = (_unwrapped(getattr(builder, name)) for name in
                                              ("set_grid_dim", "set_grid_idx", "create_atomic_rmw"))
    fadd, add = interp._ir.ATOMIC_OP.FADD, interp._ir.ATOMIC_OP.ADD

    def call(self, *args, **kwargs):
        record._current = {"kernel": getattr(self.fn, "__name__", "?"), "grid": None, "programs": 0,
                           "float_atomics": 0, "next": 0, "sequence": None}
        try:
            result = original_call(self, *args, **kwargs)
        finally:
            launch, record._current = record._current, None
        if launch["grid"] is None or launch["next"] != launch["programs"]:
            raise OrderPatchBroken(f"{launch['next']} of the {launch['programs']} programs of {launch['kernel']} "
                                   "ran through set_grid_idx")
        record.launches.append({k: launch[k] for k in ("kernel", "grid", "programs", "float_atomics")})
        return result

    def grid_dim(nx, ny, nz):
        launch = record._current
        if launch is not None:
            programs = int(nx) * int(ny) * int(nz)
            launch.update(grid=[int(nx), int(ny), int(nz)], programs=programs, next=0,
                          sequence=program_sequence(record.order, record.order_seed, len(record.launches), programs))
        return set_grid_dim(nx, ny, nz)

    def grid_idx(x, y, z):
        launch = record._current
        if launch is None or launch["sequence"] is None:
            return set_grid_idx(x, y, z)
        _, ny, nz = launch["grid"]
        k = (x * ny + y) * nz + z
        if k != launch["next"]:
            # the loop no longer visits the grid in order: "reversed" would not be reversed
            raise OrderPatchBroken(f"program {k} of {launch['kernel']} came where program {launch['next']} "
                                   "was expected")
        launch["next"] += 1
        j = int(launch["sequence"][k])
        return set_grid_idx(j // (ny * nz), (j // nz) % ny, j % nz)

    def create_atomic_rmw(rmw_op, ptr, val, mask, sem, scope):
        # a float add rounds differently in each order; max, min and exchange of floats do not round
        launch = record._current
        if launch is not None and (rmw_op == fadd or (rmw_op == add and val.dtype.scalar.is_floating())):
            launch["float_atomics"] += 1
        return atomic_rmw(rmw_op, ptr, val, mask, sem, scope)

    call.vjpcert_original, grid_dim.vjpcert_original = original_call, set_grid_dim
    grid_idx.vjpcert_original, create_atomic_rmw.vjpcert_original = set_grid_idx, atomic_rmw
    before_call = executor.__call__
    executor.__call__ = call
    undo.append(lambda: setattr(executor, "__call__", before_call))
    for name, fn in (("set_grid_dim", grid_dim), ("set_grid_idx", grid_idx), ("create_atomic_rmw", create_atomic_rmw)):
        had = name in vars(builder)
        before = vars(builder).get(name)
        setattr(builder, name, fn)
        undo.append(lambda name=name, had=had, before=before:
                    setattr(builder, name, before) if had else delattr(builder, name))


@contextlib.contextmanager
def faithful(modules=(), *, order: str | None = None, order_seed: int = 0):
    """Within the block: float arguments are fp32 scalars, the libdevice stubs imported by name into
    ``modules`` (kernel modules, or their names) are interpreted functions, and every launch runs its
    programs in ``order`` (``ORDERS``; shuffles drawn from ``order_seed``). Yields the run's
    ``Record``. Without an order, a block inside another keeps the enclosing block's order and Record
    (a launcher that makes itself faithful, as Liger's do, runs in the checker's order), and an
    outermost one runs grid order. Outside the interpreter this patches nothing (compiled Triton needs
    neither patch, and a GPU chooses its own order) and yields None."""
    if not interpreting():
        yield None
        return
    import triton.runtime.interpreter as interp
    program_sequence(order or "grid", order_seed, 0, 1)     # an unknown order is refused before anything runs
    with _LOCK:
        undo = []
        original = interp._implicit_cvt
        if not getattr(original, "vjpcert_patch", False):
            interp._implicit_cvt = _float_as_fp32(original)
            undo.append(lambda: setattr(interp, "_implicit_cvt", original))
        bfloat16.patch(interp, undo)
        stubs = _libdevice_stubs()
        for m in modules:
            mod = sys.modules[m] if isinstance(m, str) else m
            for attr, value in list(vars(mod).items()):
                name = stubs.get(id(value))
                if name is not None:
                    setattr(mod, attr, _interpreted(name, LIBDEVICE[name]))
                    undo.append(lambda mod=mod, attr=attr, value=value: setattr(mod, attr, value))
        inherit = order is None and bool(_ACTIVE)
        record = _ACTIVE[-1] if inherit else Record(order or "grid", order_seed)
        try:
            if not inherit:
                _patch_order(interp, record, undo)
            _ACTIVE.append(record)
            undo.append(_ACTIVE.pop)
            yield record
        finally:
            for u in reversed(undo):
                u()
