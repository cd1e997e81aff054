"""Instrumentation of Numba's CUDA simulator: a barrier scheduler (whose thread order can be reversed),
device limits and a shared-memory race detector.

Why: the simulator runs kernel code as Python, one simulated thread per CUDA thread, in an order
that (measured here) rarely shows a missing ``syncthreads``. So the detector does not look at
values at all. It logs every shared-memory access by (block, barrier epoch, thread) and reports,
whatever order the threads happened to run in:
  * a write/write or read/write conflict on one element between two threads in one epoch (no
    barrier orders them, so on a GPU the result depends on scheduling),
  * a read of a shared element that no thread of this block wrote (shared memory is not zeroed on a
    GPU, and the simulator reuses one buffer for every block of a launch, so a block would silently
    read the previous block's values),
  * a barrier not reached by every thread of the block, or different threads meeting at different
    ``syncthreads`` calls in one epoch (undefined behaviour on a GPU; the stock simulator lets the
    other threads through when a thread exits early).
An epoch is the span between two barriers: a thread's epoch is the number of barriers it passed.

The scheduler: the stock ``BlockManager`` starts one OS thread per CUDA thread and busy-polls them;
a barrier then costs a wake-up of every thread through the GIL (~1.5 ms per barrier for 32 threads
here, ~13 ms for 256). Here every simulated thread is a greenlet (a coroutine with its own stack)
run round-robin in the launching OS thread: each runs until it parks at a barrier or returns, and
a barrier costs one switch per thread (microseconds). Same semantics as the stock simulator,
including letting threads through a barrier once the others returned. That is what makes the GPU's
own launch configuration (blocks of 256 threads) affordable in CI.

Device limits the stock simulator does not enforce are enforced here: at most 1024 threads per
block and 48 KiB of static shared memory per launch (a kernel over it does not link for a GPU).

These are patches of simulator internals, tested against numba-cuda ``PINNED_NUMBA_CUDA`` only:
``numba.cuda.simulator.kernel.BlockManager.run``, ``numba.cuda.simulator.kernelapi.FakeCUDAShared.array``,
and ``FakeCUDAModule``'s ``fma``, thread and block indices and barriers. On any other version (or
without greenlet) nothing is patched, the stock simulator runs, and ``race_detector()`` raises
``DetectorUnavailable``.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
import sys
from importlib import metadata

import numpy as np

try:
    import greenlet
except ImportError:          # install() says why and leaves the stock simulator in place
    greenlet = None

PINNED_NUMBA_CUDA = "0.30.4"
MAX_VIOLATIONS = 20          # keep the first few: one is enough to fail, more help to locate it
# Device limits the stock simulator does not enforce (every sm_70+ GPU; sm_90 included): a block of
# at most 1024 threads, and at most 48 KiB of *static* shared memory per block (more needs dynamic
# shared memory and an opt-in attribute; numba's static arrays cannot have it: ptxas refuses).
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SHARED_BYTES = 48 * 1024
_AT_BARRIER = object()       # what a simulated thread hands the block when it parks at a barrier
_AT_SHUFFLE = object()       # ... and at a warp shuffle (with its warp, mask, value and source lane)
WARP = 32


class _GpuMath:
    """``math`` as a GPU evaluates it in kernel code: exp overflows to inf, log(0) is -inf, log and
    sqrt of a negative number are NaN (Python's math raises instead, which would turn a kernel's
    inf/NaN -- caught by the NaN-poison check -- into an exception the GPU never throws)."""

    def __getattr__(self, name):
        return getattr(math, name)

    @staticmethod
    def exp(x):
        try:
            return math.exp(x)
        except OverflowError:
            return math.inf

    @staticmethod
    def log(x):
        if x == 0:
            return -math.inf
        return math.nan if x < 0 else math.log(x)

    @staticmethod
    def sqrt(x):
        return math.nan if x < 0 else math.sqrt(x)


_GPU_MATH = _GpuMath()


class _Received:
    """A shuffled value handed back to the parked thread (wrapped: the value may be None-like)."""
    __slots__ = ("_v",)

    def __init__(self, v):
        self._v = v


class _Abort(BaseException):
    """Thrown into the other threads of a block when one raised, so their ``with`` blocks exit."""

_installed = False
_unavailable_reason: str | None = None
_detect_depth = 0            # > 0 while a race_detector() context is open
# The order a launch's blocks and a block's threads are run in: "grid" (block 0 and thread 0 first,
# the stock order) or "reversed" (``thread_order``). A GPU guarantees no order between two threads'
# accesses to global memory before a barrier, nor any between blocks; a kernel whose outputs change
# when the order does is racing there.
THREAD_ORDERS = ("grid", "reversed")
_thread_order = contextvars.ContextVar("vjpcert_thread_order", default="grid")


class RaceError(AssertionError):
    """A kernel broke the shared-memory rules; ``violations`` lists what, where and who."""

    def __init__(self, violations):
        self.violations = list(violations)
        first = self.violations[0] if self.violations else {}
        super().__init__(f"{len(self.violations)} shared-memory violation(s); first: {first}")


class DetectorUnavailable(RuntimeError):
    pass


# ---------------------------------------------------------------------------------- bookkeeping
class _Tracker:
    """Shared-memory accesses of one block: per element, the last writer and the readers of the
    epoch in which they happened."""

    def __init__(self, grid_point):
        self.block = tuple(int(v) for v in grid_point)
        self.state: dict = {}            # (array id, flat index) -> [w_epoch, w_tid, r_epoch, readers]
        self.sites: dict = {}            # epoch -> {barrier call site: first thread}
        self.violations: list = []
        self.accesses = 0

    def _report(self, kind, arr, flat, threads, epoch):
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append({"kind": kind, "block": self.block, "array": arr.site,
                                    "index": [int(i) for i in np.unravel_index(flat, arr.shape)],
                                    "threads": [list(_tidx(t)) for t in threads], "epoch": epoch})

    def access(self, arr, flat: int, write: bool):
        th = greenlet.getcurrent()
        tid, epoch = th.thread_id, th._vj_epoch
        key = (id(arr), flat)
        self.accesses += 1
        st = self.state.get(key)
        if st is None:
            st = self.state[key] = [-1, -1, -1, set()]
        w_epoch, w_tid, r_epoch, readers = st
        if write:
            if w_epoch == epoch and w_tid != tid:
                self._report("race: write/write", arr, flat, (w_tid, tid), epoch)
            if r_epoch == epoch and (readers - {tid}):
                self._report("race: read/write", arr, flat, (min(readers - {tid}), tid), epoch)
            st[0], st[1] = epoch, tid
        else:
            if w_epoch < 0:
                self._report("uninitialised read", arr, flat, (tid,), epoch)
            elif w_epoch == epoch and w_tid != tid:
                self._report("race: read/write", arr, flat, (w_tid, tid), epoch)
            if r_epoch != epoch:
                st[2], st[3] = epoch, {tid}
            else:
                readers.add(tid)

    def barrier(self, th, site):
        self.sites.setdefault(th._vj_epoch, {}).setdefault(site, th.thread_id)

    def finish(self, threads):
        counts = {t.thread_id: t._vj_epoch for t in threads}
        if len(set(counts.values())) > 1:
            lo = min(counts, key=counts.get)
            hi = max(counts, key=counts.get)
            self.violations.append({"kind": "barrier not reached by all threads", "block": self.block,
                                    "barriers_passed": {str(list(_tidx(lo))): counts[lo],
                                                        str(list(_tidx(hi))): counts[hi]}})
        for epoch, sites in sorted(self.sites.items()):
            if len(sites) > 1:
                self.violations.append({"kind": "threads met at different barriers", "block": self.block,
                                        "epoch": epoch, "sites": sorted(sites)})
                break


class _BlockDim:
    dims = (1, 1, 1)          # of the block being run (one block runs at a time)


_BLOCK_DIM = _BlockDim()


def _tidx(flat_tid):
    """threadIdx (x, y, z) of a flattened thread id in the current block."""
    bx, by, _ = _BLOCK_DIM.dims
    return (flat_tid % bx, (flat_tid // bx) % by, flat_tid // (bx * by))


class TrackedShared:
    """A shared array as a kernel sees it in the simulator, with every element access logged.
    Kernels index shared memory element by element (as GPU code does); slices are refused."""

    __slots__ = ("_a", "site", "shape", "ndim", "dtype", "size")

    def __init__(self, a: np.ndarray, site: str):
        self._a, self.site = a, site
        self.shape, self.ndim, self.dtype, self.size = a.shape, a.ndim, a.dtype, a.size

    def _flat(self, key) -> int:
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) != self.ndim:
            raise IndexError(f"shared array {self.site}: index {key} for shape {self.shape} "
                             f"(slices and partial indexing are not supported by the detector)")
        flat = 0
        for k, n in zip(key, self.shape):
            k = int(k)
            if k < 0:
                k += n
            if not 0 <= k < n:
                raise IndexError(f"shared array {self.site}: index {key} out of bounds {self.shape}")
            flat = flat * n + k
        return flat

    def _tracker(self):
        return greenlet.getcurrent()._manager._vj_tracker

    def __getitem__(self, key):
        self._tracker().access(self, self._flat(key), False)
        return self._a[key]

    def __setitem__(self, key, value):
        self._tracker().access(self, self._flat(key), True)
        self._a[key] = value

    def __len__(self):
        return self.shape[0]


# ---------------------------------------------------------------------------------- the patches
def _call_site(depth: int = 2) -> str:
    """file:line of the kernel code that called into the simulator (skipping simulator frames)."""
    f = sys._getframe(depth)
    sim_dir = os.sep + "simulator" + os.sep
    while f is not None and (sim_dir in f.f_code.co_filename or f.f_code.co_filename == __file__):
        f = f.f_back
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f else "?"


def missing() -> str | None:
    """Why the patches cannot be installed, read off the installed packages without importing
    numba.cuda (planning asks it), or None."""
    try:
        version = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        version = "not installed"
    if version != PINNED_NUMBA_CUDA:
        return f"numba-cuda {version} is installed; the simulator patches are tested with {PINNED_NUMBA_CUDA} only"
    if greenlet is None:
        return "greenlet is not installed (pip install -e '.[cuda]')"
    return None


def install() -> bool:
    """Patch the simulator (once). False, with the reason kept, on an untested numba-cuda."""
    global _installed, _unavailable_reason
    if _installed:
        return True
    if _unavailable_reason is not None:
        return False
    _unavailable_reason = missing()
    if _unavailable_reason is not None:
        return False
    from numba.cuda.simulator import kernel as K
    from numba.cuda.simulator import kernelapi as KA
    from numba.cuda import types as nb_types
    from numba.cuda.np import numpy_support

    def current():
        """The simulated CUDA thread running now (a greenlet of the block being run)."""
        return greenlet.getcurrent()

    class SimThread(greenlet.greenlet):
        """One simulated CUDA thread: a greenlet that runs the kernel until its next barrier."""

        def __init__(self, manager, grid_point, block_point, run, context):
            super().__init__(run)
            bdim = manager._block_dim
            self.gr_context = context           # the launcher's numpy error state and other contextvars
            self._manager = manager
            self.blockIdx = KA.Dim3(*grid_point)
            self.threadIdx = KA.Dim3(*block_point)
            self.thread_id = self.threadIdx.x + bdim[0] * (self.threadIdx.y + bdim[1] * self.threadIdx.z)
            self._vj_epoch = 0

        def syncthreads(self):
            tracker = self._manager._vj_tracker
            if tracker is not None:
                tracker.barrier(self, _call_site(2))
            self.parent.switch(_AT_BARRIER)     # park; the block resumes everyone once all arrived
            self._vj_epoch += 1

        def _with_block_state(self, value, reduce):
            idx = self.threadIdx.x, self.threadIdx.y, self.threadIdx.z
            self._manager.block_state[idx] = value
            self.syncthreads()
            out = reduce(self._manager.block_state)
            self.syncthreads()
            return out

        def shuffle(self, mask, value, source):
            """A warp shuffle: every lane of the warp deposits its value and parks; once the whole
            warp has arrived, lane l receives the value of lane source(l)."""
            return self.parent.switch((_AT_SHUFFLE, self.thread_id // WARP, mask, value, source))

    def _fail(t, threads, exc):
        """The kernel raised in thread t: unwind the others (their ``with`` blocks exit), re-raise
        naming the thread, as the stock simulator does."""
        for other in threads:
            if other is not t and other and not other.dead:
                try:
                    other.throw(_Abort)
                except _Abort:
                    pass
        tid = "tid=%s" % list(t.threadIdx)
        ctaid = "ctaid=%s" % list(t.blockIdx)
        msg = "%s %s" % (tid, ctaid) if str(exc) == "" else "%s %s: %s" % (tid, ctaid, exc)
        try:
            err = type(exc)(msg)
        except Exception:
            err = RuntimeError(msg)
        raise err.with_traceback(exc.__traceback__) from None

    def _exchange(lanes, waiting, warp):
        """Resolve one warp's shuffle once all its live lanes wait at it: {thread: received value}."""
        calls = {t.thread_id % WARP: waiting[t] for t in lanes}
        masks = {c[2] for c in calls.values()}
        present = sum(1 << lane for lane in calls)
        if len(masks) != 1 or (next(iter(masks)) & present) != present:
            raise RuntimeError(f"warp {warp}: a shuffle whose mask leaves out live lanes (partial-warp "
                               f"shuffles are not simulated)")
        out = {}
        for t in lanes:
            lane = t.thread_id % WARP
            src = calls[lane][4](lane)
            if src not in calls:
                raise RuntimeError(f"warp {warp}: lane {lane} shuffles from lane {src}, which this block lacks")
            out[t] = calls[src][3]
        return out

    def block_run(self, grid_point, *args):
        points = list(np.ndindex(*self._block_dim))
        if len(points) > MAX_THREADS_PER_BLOCK:
            raise RuntimeError(f"a block of {len(points)} threads: a GPU runs at most "
                               f"{MAX_THREADS_PER_BLOCK} threads per block")
        self._vj_tracker = _Tracker(grid_point) if _detect_depth > 0 else None
        dims = tuple(self._block_dim) + (1,) * (3 - len(self._block_dim))
        _BLOCK_DIM.dims = dims
        f = self._f
        context = contextvars.copy_context()
        threads = [SimThread(self, grid_point, bp, lambda: f(*args), context.copy()) for bp in points]
        by_warp: dict = {}
        for t in threads:
            by_warp.setdefault(t.thread_id // WARP, []).append(t)
        kernel_globals = getattr(f, "__globals__", {})
        swap_math = kernel_globals.get("math") is math
        if swap_math:
            kernel_globals["math"] = _GPU_MATH
        try:
            self._vj_run(threads[::-1] if _thread_order.get() == "reversed" else threads, by_warp)
        finally:
            if swap_math:
                kernel_globals["math"] = math
        if self._vj_tracker is not None:
            self._vj_tracker.finish(threads)
            _stats["accesses"] += self._vj_tracker.accesses
            _stats["blocks"] += 1
            if self._vj_tracker.violations:
                raise RaceError(self._vj_tracker.violations)

    def run_threads(self, threads, by_warp):
        """Round-robin: each runnable thread runs until it parks (at a barrier or a warp shuffle) or
        returns. Then warps whose live lanes all wait at a shuffle exchange and run on; once every
        live thread waits at the barrier, the barrier opens. A thread that returned lets the others
        through (as the stock simulator does; the detector reports the barrier not reached by all)."""
        runnable = {t: None for t in threads}          # thread -> the value its park returns
        waiting: dict = {}                             # thread -> its shuffle call, while parked at one
        barrier: list = []
        rank = {t: i for i, t in enumerate(threads)}   # every round runs in the order ``threads`` gives
        while runnable:
            runnable = dict(sorted(runnable.items(), key=lambda item: rank[item[0]]))
            for t, value in runnable.items():
                try:
                    parked = t.switch(value) if value is not None else t.switch()
                except BaseException as exc:
                    _fail(t, threads, exc)
                if t.dead:
                    continue
                if parked is _AT_BARRIER:
                    barrier.append(t)
                else:
                    waiting[t] = parked
            runnable = {}
            for w in sorted({c[1] for c in waiting.values()}):
                lanes = [t for t in by_warp[w] if not t.dead]
                if all(t in waiting for t in lanes):
                    try:
                        got = _exchange(lanes, waiting, w)
                    except BaseException as exc:
                        _fail(lanes[0], threads, exc)
                    for t, v in got.items():
                        del waiting[t]
                        runnable[t] = _Received(v)
            if runnable:
                continue
            if waiting:
                t = next(iter(waiting))
                _fail(t, threads, RuntimeError(f"warp {t.thread_id // WARP} waits at a shuffle that some of its "
                                               f"lanes never reach (they wait at a barrier or returned)"))
            runnable = {t: None for t in barrier}
            barrier = []

    def shfl_sync(self, mask, value, src_lane):
        return current().shuffle(mask, value, lambda lane: int(src_lane) % WARP)._v

    def shfl_xor_sync(self, mask, value, lane_mask):
        return current().shuffle(mask, value, lambda lane: lane ^ int(lane_mask))._v

    def shfl_down_sync(self, mask, value, delta):
        return current().shuffle(mask, value, lambda lane: lane + int(delta) if lane + int(delta) < WARP else lane)._v

    def shfl_up_sync(self, mask, value, delta):
        return current().shuffle(mask, value, lambda lane: lane - int(delta) if lane >= int(delta) else lane)._v

    dtypes: dict = {}

    def shared_array(self, shape, dtype, alignment=None):
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        if isinstance(dtype, nb_types.Type):
            if dtype not in dtypes:                # every thread asks, at every launch: convert once
                dtypes[dtype] = numpy_support.as_dtype(dtype)
            dtype = dtypes[dtype]
        if shape == 0:                      # dynamic shared memory: as the stock simulator, untracked
            count = self._dynshared_size // dtype.itemsize
            return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
        f = sys._getframe(1)
        key = (f.f_code.co_filename, f.f_lineno)   # as the stock simulator: one array per source line
        res = self._allocations.get(key)
        if res is None:
            arr = np.empty(shape, dtype)
            # The static shared memory of a launch is the sum of its distinct arrays. Over the
            # device's static limit the kernel does not link for a GPU; the simulator would run it.
            total = sum(r[0].nbytes for r in self._allocations.values()) + arr.nbytes
            if total > MAX_STATIC_SHARED_BYTES:
                raise RuntimeError(f"static shared memory {total} bytes > {MAX_STATIC_SHARED_BYTES}: this "
                                   f"kernel would not link for a GPU (array at {os.path.basename(key[0])}:{key[1]})")
            if np.issubdtype(dtype, np.floating):
                arr.fill(np.nan)                 # an unwritten element poisons what reads it
            res = self._allocations[key] = (arr, TrackedShared(arr, f"{os.path.basename(key[0])}:{key[1]}"))
        return res[1] if _detect_depth > 0 else res[0]

    def fma(self, a, b, c):
        """A fused multiply-add rounds once. The stock simulator computes a * b + c in the operands'
        type (two roundings in float32), which breaks algorithms that rely on the exact product
        (RoPE's angle reduction). float32 operands: the product is exact in float64, then one
        addition in float64 and the rounding to float32 (double rounding: rarely off by an ulp)."""
        if isinstance(a, np.float32) or isinstance(b, np.float32) or isinstance(c, np.float32):
            return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
        return a * b + c

    KA.FakeCUDAModule.fma = fma
    K.np = _BlockOrderNumpy()       # the launch's loop over blocks (np.ndindex) follows thread_order
    K.BlockManager.run = block_run
    K.BlockManager._vj_run = run_threads
    KA.FakeCUDAShared.array = shared_array
    # Everything the fake ``cuda`` module asked of threading.current_thread() asks the greenlet.
    KA.FakeCUDAModule.threadIdx = property(lambda self: current().threadIdx)
    KA.FakeCUDAModule.blockIdx = property(lambda self: current().blockIdx)
    KA.FakeCUDAModule.laneid = property(lambda self: current().thread_id % 32)
    KA.FakeCUDAModule.syncthreads = lambda self: current().syncthreads()
    KA.FakeCUDAModule.syncthreads_count = lambda self, v: current()._with_block_state(v, np.count_nonzero)
    KA.FakeCUDAModule.syncthreads_and = lambda self, v: current()._with_block_state(v, lambda a: int(np.all(a)))
    KA.FakeCUDAModule.syncthreads_or = lambda self, v: current()._with_block_state(v, lambda a: int(np.any(a)))
    KA.GridGroup.sync = lambda self: current().syncthreads()
    KA.FakeCUDAModule.shfl_sync = shfl_sync
    KA.FakeCUDAModule.shfl_xor_sync = shfl_xor_sync
    KA.FakeCUDAModule.shfl_down_sync = shfl_down_sync
    KA.FakeCUDAModule.shfl_up_sync = shfl_up_sync
    _installed = True
    return True


_stats = {"accesses": 0, "blocks": 0}


class _BlockOrderNumpy:
    """numpy, as the simulator's kernel module sees it, except ``ndindex``: the points of a launch's
    grid, which it runs one block after another, come last to first under ``thread_order("reversed")``."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def ndindex(*shape):
        points = list(np.ndindex(*shape))
        return points[::-1] if _thread_order.get() == "reversed" else points


@contextlib.contextmanager
def thread_order(order: str):
    """Within this context every simulated launch runs its blocks, and every block its threads, in
    ``order`` (THREAD_ORDERS)."""
    if order not in THREAD_ORDERS:
        raise ValueError(f"thread order {order!r}; orders: {THREAD_ORDERS}")
    token = _thread_order.set(order)
    try:
        yield
    finally:
        _thread_order.reset(token)


@contextlib.contextmanager
def race_detector():
    """Within this context every simulated launch is checked; a violation raises RaceError from the
    launch. Yields a dict that counts the shared accesses and blocks that were checked."""
    global _detect_depth
    if not install():
        raise DetectorUnavailable(_unavailable_reason)
    before = dict(_stats)
    _detect_depth += 1
    counts = {"accesses": 0, "blocks": 0}
    try:
        yield counts
    finally:
        _detect_depth -= 1
        counts.update({k: _stats[k] - before[k] for k in _stats})


def unavailable_reason(installing: bool = True) -> str | None:
    """Why kernels cannot run in the simulator: after installing the patches (a run), or, with
    ``installing=False``, from the installed packages alone (planning: no numba.cuda import)."""
    if not installing and not _installed:
        return missing()
    install()
    return _unavailable_reason
