"""What every kernel file shares: the launch configuration, the ``kernel`` decorator, block
reductions, deterministic column sums, and NaN-poisoned output buffers.

Rules every kernel here follows, because the simulator does not enforce them and a GPU does:
  * no Python lists, dicts or f-strings inside kernels; shapes of shared/local arrays are
    compile-time constants (closure variables of a factory keyed by the configuration);
  * float32 constants are written ``float32(...)`` and ints are converted before they meet a
    float32 (``float32(1) / n`` with an int ``n`` is a float64 division): a float32 kernel must not
    contain one ``.f64`` instruction, which ``cuda_kernels.resources`` checks in the PTX;
  * transcendental results are wrapped in ``float32(...)``: on a GPU ``math.exp`` of a float32 is
    ``expf`` already, but in the simulator it returns a Python (double) float;
  * no float atomics: each output element is reduced in a fixed order by one block, so results are
    bitwise reproducible (the checker runs every kernel twice and compares bits);
  * every ``syncthreads`` is reached by all threads of the block (no early ``return``).
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from vjpcert.cuda_kernels.env import cuda as _get_cuda
from vjpcert.cuda_kernels.env import detect_mode

MODE = detect_mode()
cuda = _get_cuda()
from numba import float32, int32  # noqa: E402  (after the mode is chosen: see env.py)

NEG_INF = np.float32(-np.inf)


@dataclass(frozen=True)
class Config:
    """Compile-time launch parameters. The simulator runs one Python thread per CUDA thread, so its
    blocks are small; sizes in the tests are chosen to cross these block sizes."""

    block: int        # threads per block of the row and elementwise kernels (a power of two)
    tile: int         # matmul tile edge (block of tile x tile threads)
    attn_tile: int    # FlashAttention query/key tile edge (block of attn_tile x attn_tile threads)
    grid_cap: int     # at most this many blocks for row kernels (they loop over rows)
    col_x: int        # column-sum kernel: columns per block (block = col_x x block // col_x)


SIM_CONFIG = Config(block=32, tile=8, attn_tile=8, grid_cap=4, col_x=8)
GPU_CONFIG = Config(block=256, tile=16, attn_tile=16, grid_cap=65535, col_x=32)


_OVERRIDE: list = []          # the innermost use_config() wins


@contextmanager
def use_config(cfg: Config):
    """Launch with ``cfg`` inside this block: the checker runs the GPU's own configuration in the
    simulator this way (blocks of 256 threads, 16 x 16 tiles)."""
    _OVERRIDE.append(cfg)
    try:
        yield cfg
    finally:
        _OVERRIDE.pop()


def config() -> Config:
    """The configuration of this process; ``VJPCERT_BLOCK`` overrides the row-kernel block size."""
    if _OVERRIDE:
        return _OVERRIDE[-1]
    cfg = GPU_CONFIG if MODE in ("gpu", "compile") else SIM_CONFIG
    if os.environ.get("VJPCERT_BLOCK"):
        b = int(os.environ["VJPCERT_BLOCK"])
        if b < 32 or b > 1024 or b & (b - 1):
            raise ValueError(f"VJPCERT_BLOCK={b}: must be a power of two from 32 (a warp: the block "
                             f"reductions shuffle within warps) to 1024")
        cfg = replace(cfg, block=b, col_x=min(cfg.col_x, b))
    return cfg


# ------------------------------------------------------------------------------ the decorator
@dataclass
class PtxKernel:
    """In compile mode a kernel is not jitted (no driver); ``resources`` compiles it to PTX."""

    name: str
    py_func: object
    sig: str
    max_registers: int | None = None     # a ptxas cap (only the negative controls set one)
    threads: int = 256                   # threads per block it is launched with (for occupancy)
    launch_bounds: tuple | None = None   # (max threads per block, min blocks per SM) for ptxas


# Launch bounds: ptxas allocates registers for a kernel without knowing how many threads will share
# an SM; 74-128 registers per thread left 2-3 blocks of 256 threads resident (25-37.5% occupancy on
# sm_90). Asking for RESIDENT_THREADS resident threads per SM caps the registers so that many fit --
# where the compile shows no spill at that cap (every kernel is checked for spills in CI).
RESIDENT_THREADS = 1024          # 4 blocks of 256: 50% occupancy, 64 registers per thread
RESIDENT_THREADS_HEAVY = 768     # the norms' backwards (5 arrays live per element): 80 registers


def min_blocks(threads: int, resident: int = RESIDENT_THREADS) -> int:
    """Blocks of ``threads`` that launch bounds ask ptxas to fit on one SM."""
    return max(1, resident // threads)


def kernel(sig: str, threads: int | None = None, min_blocks: int | None = None):
    """``cuda.jit(sig)`` with an explicit signature (compiled eagerly on a GPU; the simulator
    ignores it); in compile mode, the function and signature for ``cuda.compile_ptx``.
    ``threads``: the block size it is launched with. ``min_blocks``: launch bounds asking ptxas to
    keep registers low enough for that many blocks of ``threads`` per SM (used only where the
    compile shows no spill at that bound: tests/test_kernels.py checks every kernel for spills)."""
    bounds = (threads, min_blocks) if threads and min_blocks else None

    def deco(fn):
        if MODE == "compile":
            return PtxKernel(fn.__name__, fn, sig, threads=threads or GPU_CONFIG.block, launch_bounds=bounds)
        if MODE == "gpu" and bounds:
            return cuda.jit(sig, launch_bounds=bounds)(fn)
        return cuda.jit(sig)(fn)
    return deco


# ------------------------------------------------------------------------------ device helpers
WARP = 32
FULL_MASK = 0xFFFFFFFF


@cuda.jit(device=True)
def warp_sum(v):
    """Sum of ``v`` over the 32 lanes of the warp, every lane gets it: a butterfly of shuffles (no
    shared memory, no barrier). Lane l adds lane l ^ m for m = 16, 8, 4, 2, 1; a + b = b + a
    exactly, so every lane ends with the same bits."""
    m = 16
    while m > 0:
        v += cuda.shfl_xor_sync(FULL_MASK, v, m)
        m //= 2
    return v


@cuda.jit(device=True)
def warp_max(v):
    m = 16
    while m > 0:
        other = cuda.shfl_xor_sync(FULL_MASK, v, m)
        if other > v:
            v = other
        m //= 2
    return v


@cuda.jit(device=True)
def block_sum(sm, t, v):
    """Sum of ``v`` over the block, every thread gets it. Each warp reduces by shuffles, lane 0 of
    each warp writes its total to ``sm`` (one slot per warp), and after one barrier every warp
    reduces the totals again by shuffles. Two barriers for any block size (a shared-memory tree
    over 256 threads takes nine); the second keeps a following reduction from overwriting ``sm``
    while a warp still reads it."""
    v = warp_sum(v)
    if t % WARP == 0:
        sm[t // WARP] = v
    cuda.syncthreads()
    lane = t % WARP
    r = sm[lane] if lane < sm.shape[0] else float32(0)
    r = warp_sum(r)
    cuda.syncthreads()
    return r


@cuda.jit(device=True)
def block_max(sm, t, v):
    """Maximum of ``v`` over the block, as ``block_sum``."""
    v = warp_max(v)
    if t % WARP == 0:
        sm[t // WARP] = v
    cuda.syncthreads()
    lane = t % WARP
    r = sm[lane] if lane < sm.shape[0] else NEG_INF
    r = warp_max(r)
    cuda.syncthreads()
    return r


def warps(block: int) -> int:
    """Slots of the shared array block_sum/block_max need: one per warp."""
    return max(1, block // WARP)


# ------------------------------------------------------------------------------ column sums
_COLSUM = {}


def _colsum_kernels(cfg: Config):
    key = (cfg.col_x, cfg.block)
    if key in _COLSUM:
        return _COLSUM[key]
    CX = cfg.col_x
    RY = cfg.block // cfg.col_x

    @kernel("void(float32[:, ::1], float32[::1])", threads=cfg.block)
    def colsum(a, out):
        """out[j] = sum_r a[r, j]: thread (cx, ry) sums rows ry, ry + RY, ... of one column, then
        the RY partial sums of a column meet in a shared-memory tree (a fixed order: deterministic,
        unlike atomics). Column tiles are grid-strided so every thread loops the same count."""
        sm = cuda.shared.array((RY, CX), float32)
        cx = cuda.threadIdx.x
        ry = cuda.threadIdx.y
        rows = a.shape[0]
        n = a.shape[1]
        for j0 in range(cuda.blockIdx.x * CX, n, cuda.gridDim.x * CX):
            j = j0 + cx
            acc = float32(0)
            if j < n:
                for r in range(ry, rows, RY):
                    acc += a[r, j]
            sm[ry, cx] = acc
            cuda.syncthreads()
            s = RY // 2
            while s > 0:
                if ry < s:
                    sm[ry, cx] += sm[ry + s, cx]
                cuda.syncthreads()
                s //= 2
            if ry == 0 and j < n:
                out[j] = sm[0, cx]
            cuda.syncthreads()

    _COLSUM[key] = colsum
    return colsum


def colsum(d_a, cfg: Config, *, poison: bool = True):
    """Column sums of a 2-D device array (rows, n) -> (n,), deterministic."""
    n = d_a.shape[1]
    out = empty((n,), poison)
    k = _colsum_kernels(cfg)
    grid = max(1, min(math.ceil(n / cfg.col_x), cfg.grid_cap))
    launch(k, grid, (cfg.col_x, cfg.block // cfg.col_x), d_a, out)
    return out


# ------------------------------------------------------------------------------ buffers
_FILL = {}


def _fill_kernel():
    if "fill" not in _FILL:
        @kernel("void(float32[::1], float32)")
        def fill(a, v):
            for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
                a[i] = v
        _FILL["fill"] = fill
    return _FILL["fill"]


class Workspace:
    """Output buffers reused across repeated calls of one launcher (what a benchmark times): the first
    call allocates them, and after ``rewind()`` every later call receives the same buffers in the same
    order. Within ``preallocated(ws)`` nothing is allocated and nothing is NaN-poisoned once warm."""

    def __init__(self):
        self.buffers: list = []
        self.next = 0

    def rewind(self) -> None:
        self.next = 0

    def take(self, shape):
        if self.next < len(self.buffers):
            buf = self.buffers[self.next]
            if tuple(buf.shape) != shape:
                raise ValueError(f"workspace: call asked for {shape} where the first call had {tuple(buf.shape)}")
        else:
            buf = cuda.device_array(shape, dtype=np.float32) if MODE != "simulator" else \
                cuda.to_device(np.zeros(shape, np.float32))
            self.buffers.append(buf)
        self.next += 1
        return buf


_WORKSPACES: list = []
_ASYNC: list = []


@contextmanager
def preallocated(ws: Workspace):
    """Launchers inside take their outputs from ``ws`` (see Workspace)."""
    _WORKSPACES.append(ws)
    try:
        yield ws
    finally:
        _WORKSPACES.pop()


@contextmanager
def async_launches():
    """Launches inside do not synchronise after each kernel (a benchmark times many back to back
    with CUDA events); outside, every launch synchronises so an error surfaces where it happened."""
    _ASYNC.append(True)
    try:
        yield
    finally:
        _ASYNC.pop()


def empty(shape, poison: bool = True, dtype=np.float32):
    """A device buffer (float32, or a kernel's ``dtype``: float16); with ``poison`` (the default, and
    what the checker relies on) every element is NaN, so an element a kernel forgets to write shows as
    NaN in its output. Inside ``preallocated(ws)``: the workspace's buffer (never poisoned: a
    benchmark, not a check)."""
    shape = tuple(int(s) for s in shape)
    if _WORKSPACES and np.dtype(dtype) == np.float32:
        return _WORKSPACES[-1].take(shape)
    if MODE == "simulator":
        return cuda.to_device(np.full(shape, np.nan if poison else 0, dtype=dtype))
    d = cuda.device_array(shape, dtype=dtype)
    if poison and d.size:
        if np.dtype(dtype) != np.float32:
            d.copy_to_device(np.full(shape, np.nan, dtype=dtype))
            return d
        flat = d.reshape(d.size)
        launch(_fill_kernel(), min(1024, math.ceil(d.size / 256)), 256, flat, np.float32(np.nan))
    return d


def is_device(a) -> bool:
    return cuda.is_cuda_array(a) if MODE == "gpu" else hasattr(a, "copy_to_host")


_CONSTANTS: dict = {}


def device_constant(key, make):
    """A small read-only device array made once per process (a zero bias, RoPE's inverse frequencies):
    a launcher must not copy from the host at every call."""
    if key not in _CONSTANTS:
        _CONSTANTS[key] = to_device(make())
    return _CONSTANTS[key]


def to_device(a):
    """A float32 C-contiguous device array from a numpy array (device arrays pass through)."""
    if is_device(a):
        return a
    return cuda.to_device(np.ascontiguousarray(np.asarray(a, dtype=np.float32)))


def call(dev_fn, row_args, other_args=(), dtype=np.float32, **kw):
    """Run a device-array launcher on numpy or device arrays. numpy: the ``row_args`` have the op's
    row layout (..., n) and leading batch dims are folded into rows; outputs come back as numpy, row
    outputs in the input's shape. Device arrays: passed through, device arrays returned. ``dtype``:
    what the arrays are handed to the device in (a float16 kernel's)."""
    if is_device(row_args[0]):
        return dev_fn(*row_args, *other_args, **kw)
    shape = np.shape(row_args[0])
    rows = [to_device(np.asarray(a, dtype).reshape(-1, shape[-1])) for a in row_args]
    others = [to_device(np.asarray(a, dtype)) for a in other_args]
    out = dev_fn(*rows, *others, **kw)
    outs = out if isinstance(out, tuple) else (out,)
    lead, rows_n = shape[:-1], int(np.prod(shape[:-1]))
    res = tuple(o.copy_to_host().reshape(lead + (tuple(o.shape)[-1],)) if o.ndim == 2 and o.shape[0] == rows_n
                else o.copy_to_host() for o in outs)
    return res if isinstance(out, tuple) else res[0]


def launch(k, grid, block, *args):
    """Launch ``k[grid, block](*args)`` (the simulator's scheduler patch is installed first)."""
    if MODE == "simulator":
        from vjpcert.cuda_kernels.simulator import install
        install()
    with np.errstate(all="ignore"):   # the simulator's numpy scalars warn; a GPU does not
        k[grid, block](*args)
    if MODE == "gpu" and not _ASYNC:
        cuda.synchronize()


def row_grid(rows: int, cfg: Config) -> int:
    """Blocks for a kernel with one block per row at a time: the kernel loops over rows, so the
    simulator runs a few blocks (thread creation dominates there) and a GPU one per row."""
    return max(1, min(rows, cfg.grid_cap))


def elem_grid(n: int, cfg: Config) -> int:
    return max(1, min(math.ceil(n / cfg.block), cfg.grid_cap))


__all__ = ["MODE", "cuda", "float32", "int32", "NEG_INF", "Config", "config", "use_config", "kernel", "block_sum",
           "block_max", "warp_sum", "warp_max", "warps", "WARP", "FULL_MASK", "colsum", "empty", "to_device", "call",
           "is_device", "launch", "row_grid", "elem_grid", "SIM_CONFIG", "GPU_CONFIG", "Workspace", "preallocated",
           "async_launches", "device_constant", "min_blocks"]
