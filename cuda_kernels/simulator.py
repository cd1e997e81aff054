"""Instrumentation of Numba's CUDA simulator: a barrier scheduler and a shared-memory race detector.

Why: the simulator runs one Python thread per CUDA thread and, measured here, rarely shows a missing
``syncthreads`` (the Python threads happen to run in an order that hides it). So the detector does
not look at values at all. It logs every shared-memory access by (block, barrier epoch, thread) and
reports, whatever order the threads happened to run in:
  * a write/write or read/write conflict on one element between two threads in one epoch (no
    barrier orders them, so on a GPU the result depends on scheduling),
  * a read of a shared element that no thread of this block wrote (shared memory is not zeroed on a
    GPU, and the simulator reuses one buffer for every block of a launch, so a block would silently
    read the previous block's values),
  * a barrier not reached by every thread of the block, or different threads meeting at different
    ``syncthreads`` calls in one epoch (undefined behaviour on a GPU; the stock simulator lets the
    other threads through when a thread exits early).
An epoch is the span between two barriers: a thread's epoch is the number of barriers it passed.

The stock ``BlockManager`` busy-polls its threads and, with CPython's 5 ms switch interval, spent
~110 ms per 32-thread block here; the scheduler below blocks threads on a condition variable
instead (same semantics, including letting threads through a barrier once the others exited),
which is ~10-50x faster.

These are patches of simulator internals, tested against numba-cuda ``PINNED_NUMBA_CUDA`` only:
``numba.cuda.simulator.kernel.BlockManager.run``, ``BlockThread.syncthreads``,
``numba.cuda.simulator.kernelapi.FakeCUDAShared.array`` and ``FakeCUDAModule.fma``. On any other version nothing is patched,
the stock simulator runs, and ``race_detector()`` raises ``DetectorUnavailable``.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from importlib import metadata

import numpy as np

PINNED_NUMBA_CUDA = "0.30.4"
MAX_VIOLATIONS = 20          # keep the first few: one is enough to fail, more help to locate it

_installed = False
_unavailable_reason: str | None = None
_detect_depth = 0            # > 0 while a race_detector() context is open


class RaceError(AssertionError):
    """A kernel broke the shared-memory rules; ``violations`` lists what, where and who."""

    def __init__(self, violations):
        self.violations = list(violations)
        first = self.violations[0] if self.violations else {}
        super().__init__(f"{len(self.violations)} shared-memory violation(s); first: {first}")


class DetectorUnavailable(RuntimeError):
    pass


# ---------------------------------------------------------------------------------- bookkeeping
class _Block:
    """Barrier state of one simulated block (a reusable barrier that tolerates exited threads)."""

    def __init__(self, n: int):
        self.cond = threading.Condition()
        self.live = n
        self.arrived = 0
        self.generation = 0
        self.aborted = False
        self.first_exception = None

    def release(self):  # caller holds cond
        self.arrived = 0
        self.generation += 1
        self.cond.notify_all()


class _Tracker:
    """Shared-memory accesses of one block: per element, the last writer and the readers of the
    epoch in which they happened."""

    def __init__(self, grid_point):
        self.block = tuple(int(v) for v in grid_point)
        self.lock = threading.Lock()
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
        th = threading.current_thread()
        tid, epoch = th.thread_id, th._vj_epoch
        key = (id(arr), flat)
        with self.lock:
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
        with self.lock:
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


_BLOCK_DIM = threading.local()


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
        return threading.current_thread()._manager._vj_tracker

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


def install() -> bool:
    """Patch the simulator (once). False, with the reason kept, on an untested numba-cuda."""
    global _installed, _unavailable_reason
    if _installed:
        return True
    if _unavailable_reason is not None:
        return False
    try:
        version = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        version = "not installed"
    if version != PINNED_NUMBA_CUDA:
        _unavailable_reason = (f"numba-cuda {version} is installed; the simulator patches are tested "
                               f"with {PINNED_NUMBA_CUDA} only")
        return False
    from numba.cuda.simulator import kernel as K
    from numba.cuda.simulator import kernelapi as KA
    from numba.cuda import types as nb_types
    from numba.cuda.np import numpy_support

    class Worker(K.BlockThread):
        """A simulated CUDA thread that outlives its block: blocks of a launch (and later launches)
        reuse a pool of these instead of starting one Python thread per CUDA thread per block,
        which cost ~0.1-0.3 ms each here and dominated small kernels."""

        def __init__(self):
            threading.Thread.__init__(self, daemon=True)
            self.go = threading.Event()
            self.job = None

        def assign(self, manager, grid_point, block_point, job):
            bdim = manager._block_dim
            self._manager = manager
            self.blockIdx = KA.Dim3(*grid_point)
            self.threadIdx = KA.Dim3(*block_point)
            self.thread_id = self.threadIdx.x + bdim[0] * (self.threadIdx.y + bdim[1] * self.threadIdx.z)
            self.exception = None
            self.abort = False
            self.syncthreads_blocked = False
            self.debug = False
            self._vj_epoch = 0
            self.job = job
            self.go.set()

        def run(self):
            while True:
                self.go.wait()
                self.go.clear()
                job = self.job
                if job is None:
                    return
                try:
                    job()
                except Exception as e:       # as BlockThread.run: name the thread in the message
                    tid = "tid=%s" % list(self.threadIdx)
                    ctaid = "ctaid=%s" % list(self.blockIdx)
                    msg = "%s %s" % (tid, ctaid) if str(e) == "" else "%s %s: %s" % (tid, ctaid, e)
                    try:
                        exc = type(e)(msg)
                    except Exception:
                        exc = RuntimeError(msg)
                    self.exception = (exc, sys.exc_info()[2])
                finally:
                    blk = self._manager._vj_block
                    with blk.cond:
                        blk.live -= 1
                        if self.exception is not None:
                            if blk.first_exception is None and not blk.aborted:
                                blk.first_exception = self.exception
                            blk.aborted = True
                            blk.cond.notify_all()
                        elif blk.arrived and blk.arrived >= blk.live:
                            blk.release()
                        if blk.live == 0:
                            blk.cond.notify_all()

    pool: list = []
    # A forked child (the runner's process pool) inherits this list but not the threads in it:
    # start afresh there, or the first launch would wait forever for workers that do not exist.
    os.register_at_fork(after_in_child=pool.clear)

    def syncthreads(self):
        blk = self._manager._vj_block
        tracker = self._manager._vj_tracker
        if tracker is not None:
            tracker.barrier(self, _call_site(2))
        with blk.cond:
            if blk.aborted or self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            gen = blk.generation
            blk.arrived += 1
            if blk.arrived >= blk.live:
                blk.release()
            else:
                while blk.generation == gen and not blk.aborted:
                    blk.cond.wait()
            if blk.aborted:
                raise RuntimeError("abort flag set on syncthreads clear")
        self._vj_epoch += 1

    def block_run(self, grid_point, *args):
        points = list(np.ndindex(*self._block_dim))
        blk = self._vj_block = _Block(len(points))
        self._vj_tracker = _Tracker(grid_point) if _detect_depth > 0 else None
        dims = tuple(self._block_dim) + (1,) * (3 - len(self._block_dim))
        f = self._f

        def job():
            _BLOCK_DIM.dims = dims
            f(*args)
        while len(pool) < len(points):
            w = Worker()
            w.start()
            pool.append(w)
        workers = pool[:len(points)]
        for w, block_point in zip(workers, points):
            w.assign(self, grid_point, block_point, job)
        with blk.cond:
            while blk.live > 0:
                blk.cond.wait()
        if blk.first_exception is not None:
            exc, tb = blk.first_exception
            raise exc.with_traceback(tb)
        if self._vj_tracker is not None:
            _BLOCK_DIM.dims = dims
            self._vj_tracker.finish(workers)
            _stats["accesses"] += self._vj_tracker.accesses
            _stats["blocks"] += 1
            if self._vj_tracker.violations:
                raise RaceError(self._vj_tracker.violations)

    def shared_array(self, shape, dtype, alignment=None):
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        if isinstance(dtype, nb_types.Type):
            dtype = numpy_support.as_dtype(dtype)
        if shape == 0:                      # dynamic shared memory: as the stock simulator, untracked
            count = self._dynshared_size // dtype.itemsize
            return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
        f = sys._getframe(1)
        key = (f.f_code.co_filename, f.f_lineno)   # as the stock simulator: one array per source line
        # Under a lock: the stock simulator checks and inserts without one, so two threads that reach
        # the line together can get two different arrays (seen here as whole rows of wrong results
        # once threads started together; with one thread started at a time it is rare, not absent).
        with _alloc_lock:
            res = self._allocations.get(key)
            if res is None:
                arr = np.empty(shape, dtype)
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
    K.BlockThread.syncthreads = syncthreads
    K.BlockManager.run = block_run
    KA.FakeCUDAShared.array = shared_array
    _installed = True
    return True


_stats = {"accesses": 0, "blocks": 0}
_alloc_lock = threading.Lock()


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


def unavailable_reason() -> str | None:
    install()
    return _unavailable_reason
