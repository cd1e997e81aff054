#!/usr/bin/env python3
"""The prepared GPU run: one script, run once on a machine with a GPU, that cannot waste its shot.

    python benchmarks/gpu_run.py                      # on a GPU (about 6 minutes; --deadline caps it)
    python benchmarks/gpu_run.py --simulate           # CPU only: Numba's simulator, tiny sizes (a test)

Needs numpy, numba, numba-cuda and torch (scipy optional: torch's erf stands in). No network.

Sections, in this order, each guarded (an exception is recorded with its traceback tail and the run
goes on), each followed by writing ``$OUT/gpu_run.json`` (atomically), all under one global deadline
(``--deadline`` seconds from the start: a section that would start after it is recorded as skipped,
and timing loops shorten themselves to what is left):
  1. preflight: versions, the device, torch's CUDA, and a trivial kernel compiled, run and checked.
     Any failure here stops the run at once (exit 2): nothing after it would mean anything.
  2. bench: fp32, TF32 off, CUDA events around many back-to-back launches (no synchronisation
     between them, outputs preallocated once: ``common.Workspace``), against PyTorch computing the
     same outputs (RMSNorm backward: dx *and* dgamma; LayerNorm backward: dx, dgamma, dbeta; linear
     backward: dx, dW, db; attention: forward + backward of Q, K, V).
       * memory-bound kernels: essential traffic (each input read once, each output written once) as
         a percentage of the device-to-device copy bandwidth measured the same way, and speed vs
         PyTorch (torch ms / ours ms);
       * linear; attention (FlashAttention-style and plain, causal and not) against SDPA fp32.
     ``cpu_us`` is the host time to issue one launch: where it is close to the GPU time, the
     launch rate, not the kernel, bounded the measurement (flagged ``launch_bound``).
  3. checks: ``cuda_kernels.check.check_kernel_claim`` for every kernel at the registry's GPU sizes
     and every input case, while time remains (smallest sizes first), each a certificate.
  4. triton: ``triton_kernels.check.check_triton_claim`` for every Triton kernel (ours, and
     Liger-Kernel's in float32 and bfloat16) at its GPU sizes, compiled; skipped, saying why, where
     triton or torch is missing. With --simulate: Triton's interpreter, each kernel's smallest size.
Then a short table, last. Targets: memory-bound kernels >= 80% of copy bandwidth and at
least PyTorch's speed; attention forward + backward fp32 >= 0.5x SDPA's speed.

Exit codes: 0 everything ran and no check failed; 1 a check failed or a section raised; 2 no GPU
(or --simulate not given) or the preflight failed; 3 nothing failed but the deadline cut sections.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
import types
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Sizes. GPU: every memory-bound tensor is 256 MiB (16384 x 4096 float32), ~120 us of traffic at
# 4.3 TB/s, well above the ~20-40 us a Python launch takes to issue, so back-to-back launches keep
# the GPU busy; attention 16 heads x 2048 x 64. Simulator: tiny, every path once.
GPU_SIZES = {"rows": 16384, "n": 4096, "rope_d": 128, "lin": (4096, 4096, 4096), "attn": (16, 2048, 64),
             "copy_floats": 1 << 26, "min_ms": 150.0, "max_reps": 200}
SIM_SIZES = {"rows": 3, "n": 40, "rope_d": 8, "lin": (5, 9, 7), "attn": (1, 9, 4),
             "copy_floats": 1 << 10, "min_ms": 0.0, "max_reps": 2}
TARGETS = {"pct_of_copy_bw": 80.0, "speed_vs_torch": 1.0, "attention_speed_vs_sdpa": 0.5}
DEFAULT_DEADLINE = 540.0            # seconds: inside a 10-minute device slot, with room to write
CHECKS_SHARE = 0.35                 # of the deadline kept for the checks when the bench runs first


class PreflightFailed(RuntimeError):
    pass


class Run:
    """The results, written after every section; the deadline every section asks about."""

    def __init__(self, out: Path, deadline: float, simulate: bool):
        self.out = out
        self.t0 = time.perf_counter()
        self.deadline = deadline
        self.simulate = simulate
        self.reserve = 0.0          # seconds the bench leaves to the checks after it
        self.results = {"mode": None, "simulate": simulate, "deadline_s": deadline, "sections": {},
                        "preflight": None, "bench": None, "checks": [], "triton_checks": [], "targets": TARGETS}

    def left(self) -> float:
        return self.deadline - (time.perf_counter() - self.t0)

    def left_for_bench(self) -> float:
        return self.left() - self.reserve

    def write(self) -> None:
        self.results["seconds"] = round(time.perf_counter() - self.t0, 2)
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.out / ".gpu_run.json.tmp"
        tmp.write_text(json.dumps(self.results, indent=1, default=str) + "\n")
        os.replace(tmp, self.out / "gpu_run.json")

    @contextmanager
    def section(self, name: str, *, min_left: float = 1.0):
        """Run a section unless the deadline is (nearly) reached; record how it went; write JSON."""
        rec = {"status": "running"}
        self.results["sections"][name] = rec
        start = time.perf_counter()
        if self.left() < min_left:
            rec["status"] = "skipped: deadline"
            self.write()
            print(f"[{name}] skipped: {self.left():.0f} s left of the deadline", flush=True)
            yield None
            return
        print(f"[{name}] ({self.left():.0f} s left)", flush=True)
        try:
            yield rec
            rec["status"] = "ok" if rec["status"] == "running" else rec["status"]
        except PreflightFailed:
            rec["status"] = "failed"
            raise
        except Exception as exc:                 # recorded, never fatal to the sections after it
            rec["status"] = "error"
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc()[-3000:]
            print(f"[{name}] error: {rec['error']}", flush=True)
        finally:
            rec["seconds"] = round(time.perf_counter() - start, 2)
            self.write()


def _scipy_shim() -> str | None:
    """core.backends imports scipy.special.erf; stand torch's erf in for it where scipy is missing."""
    try:
        import scipy.special  # noqa: F401
        return None
    except ImportError:
        pass
    import numpy as np
    try:
        import torch

        def erf(a):
            arr = np.array(a, copy=True)
            out = torch.special.erf(torch.from_numpy(np.atleast_1d(arr))).numpy()
            return out.reshape(arr.shape) if arr.ndim else out.reshape(())[()]
        how = "torch.special.erf"
    except ImportError:
        vec = np.vectorize(math.erf)

        def erf(a):
            arr = np.asarray(a)
            return vec(arr).astype(arr.dtype)
        how = "math.erf (vectorised)"
    special = types.ModuleType("scipy.special")
    special.erf = erf
    package = types.ModuleType("scipy")
    package.special = special
    sys.modules["scipy"], sys.modules["scipy.special"] = package, special
    return f"{how} (scipy is not installed)"


# ------------------------------------------------------------------------------ 1. preflight
def preflight(run: Run, rec: dict) -> None:
    """Fail fast: any exception here is a failed preflight."""
    try:
        _preflight(run, rec)
    except PreflightFailed:
        raise
    except Exception as exc:
        raise PreflightFailed(f"{type(exc).__name__}: {exc}") from exc


def _preflight(run: Run, rec: dict) -> None:
    import numpy as np

    from vjpcert.cuda_kernels.check import detect_mode
    from vjpcert.cuda_kernels.env import versions
    mode = detect_mode()
    run.results["mode"] = mode
    info = {"python": platform.python_version(), "platform": platform.platform(), "packages": versions(),
            "numpy": np.__version__}
    rec["info"] = info
    if mode == "none" or (mode != "gpu" and not run.simulate):
        raise PreflightFailed(f"no GPU to run on (kernel mode: {mode}); --simulate runs the CPU simulator")
    try:
        import torch
    except ImportError as exc:
        raise PreflightFailed(f"torch is not installed: {exc}") from exc
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    if mode == "gpu":
        if not torch.cuda.is_available():
            raise PreflightFailed("torch has no CUDA here: its baselines would run on the CPU")
        from numba import cuda
        dev = cuda.get_current_device()
        info["device"] = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info["compute_capability"] = list(dev.compute_capability)
        info["torch_device"] = torch.cuda.get_device_name(0)
        info["driver"] = cuda.driver.driver.get_version() if hasattr(cuda.driver.driver, "get_version") else None
    # a trivial kernel (the buffer fill): compiled, launched, its result checked (compiler, driver,
    # launch path and copies, before minutes are spent on anything else)
    from vjpcert.cuda_kernels.common import _fill_kernel, launch, to_device
    d = to_device(np.zeros(1000, np.float32))
    t = time.perf_counter()
    launch(_fill_kernel(), 4, 256, d, np.float32(1.5))
    got = d.copy_to_host()
    rec["trivial_kernel_s"] = round(time.perf_counter() - t, 3)
    if not np.all(got == np.float32(1.5)):
        raise PreflightFailed(f"a trivial kernel computed the wrong result: {got[:4]}")
    if mode == "gpu":
        a = torch.arange(1000, device="cuda", dtype=torch.float32)
        if not torch.equal((a + 1).cpu(), torch.arange(1, 1001, dtype=torch.float32)):
            raise PreflightFailed("torch computed the wrong result on the GPU")
    rec["ok"] = True


# ------------------------------------------------------------------------------ timing
class Timer:
    """Seconds per call of many back-to-back calls: CUDA events on a GPU (numba's for our kernels,
    torch's for torch), wall time in the simulator (whose events carry no time)."""

    def __init__(self, run: Run, sizes: dict, mode: str):
        self.run, self.sizes, self.gpu = run, sizes, mode == "gpu"

    def _reps(self, per_call: float) -> int:
        budget = min(self.sizes["min_ms"] / 1e3, max(0.0, self.run.left_for_bench() - 5) / 50)
        return int(max(2, min(self.sizes["max_reps"], budget / max(per_call, 1e-7))))

    def ours(self, fn) -> dict:
        """fn runs inside a preallocated workspace with asynchronous launches."""
        from vjpcert.cuda_kernels.common import Workspace, async_launches, cuda, preallocated
        ws = Workspace()

        def call():
            ws.rewind()
            fn()
        with preallocated(ws), async_launches():
            return self._time(call, cuda.synchronize, lambda: cuda.event(timing=True),
                              lambda e: e.record(), lambda a, b: a.elapsed_time(b) / 1e3)

    def torch(self, fn) -> dict:
        import torch
        sync = torch.cuda.synchronize if self.gpu else (lambda: None)
        return self._time(fn, sync, lambda: torch.cuda.Event(enable_timing=True),
                          lambda e: e.record(), lambda a, b: a.elapsed_time(b) / 1e3)

    def _time(self, fn, sync, make_event, record, elapsed) -> dict:
        fn()                                     # compile / allocate, then warm
        fn()
        sync()
        t = time.perf_counter()
        fn()
        sync()
        reps = self._reps(time.perf_counter() - t)
        if not self.gpu:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            dt = (time.perf_counter() - t) / reps
            return {"s": dt, "reps": reps, "cpu_us": dt * 1e6, "launch_bound": None}
        start, end = make_event(), make_event()
        record(start)
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        cpu = (time.perf_counter() - t) / reps
        record(end)
        end.synchronize()
        gpu = elapsed(start, end) / reps
        return {"s": gpu, "reps": reps, "cpu_us": round(cpu * 1e6, 2), "launch_bound": cpu > 0.8 * gpu}


# ------------------------------------------------------------------------------ 2. bench
def bench(run: Run, rec: dict) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from vjpcert.cuda_kernels import attention, attention_flash, gelu, layernorm, linear, rmsnorm, rope, softmax
    from vjpcert.cuda_kernels.common import to_device

    mode = run.results["mode"]
    S = SIM_SIZES if run.simulate else GPU_SIZES
    dev = torch.device("cuda" if mode == "gpu" else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False       # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    timer = Timer(run, S, mode)
    rng = np.random.default_rng(0)
    f32 = np.float32
    res = {"device": run.results["preflight"].get("info", {}).get("device", "cpu (simulator)"),
           "sizes": {k: v for k, v in S.items()}, "memory_bound": {}, "linear": {}, "attention": {}}
    rec["result"] = res
    run.results["bench"] = res

    def both(a):
        a = np.ascontiguousarray(a, dtype=f32)
        return to_device(a), torch.from_numpy(a.copy()).to(dev)

    # device-to-device copy bandwidth (read + write), timed like everything else
    src = torch.empty(S["copy_floats"], dtype=torch.float32, device=dev).normal_()
    dst = torch.empty_like(src)
    copy = timer.torch(lambda: dst.copy_(src))
    res["copy_GBps"] = 2 * src.numel() * 4 / copy["s"] / 1e9
    run.write()

    rows, n = S["rows"], S["n"]
    N = rows * n
    x, tx = both(rng.standard_normal((rows, n)))
    dy, tdy = both(rng.standard_normal((rows, n)))
    g, tg = both(rng.standard_normal(n))
    b, tb = both(rng.standard_normal(n))
    ty_soft = torch.softmax(tx, -1)
    mean, rstd = torch.ops.aten.native_layer_norm(tx, (n,), tg, tb, 1e-5)[1:]
    txr, tgr = tx.clone().requires_grad_(True), tg.clone().requires_grad_(True)
    rms_out = F.rms_norm(txr, (n,), tgr, 1e-6)

    d = S["rope_d"]
    rrows = N // d
    xr, txr2 = both(rng.standard_normal((rrows, d)))
    dyr, tdyr = both(rng.standard_normal((rrows, d)))
    pos_np = rng.integers(0, 4096, rrows).astype(f32)
    pos, tpos = both(pos_np)
    inv = torch.from_numpy(rope.inv_freq(d, 10000)).to(dev)
    th = tpos[:, None] * inv[None, :]
    cos2, sin2 = torch.cat([th.cos()] * 2, -1), torch.cat([th.sin()] * 2, -1)
    cosi, sini = th.cos(), th.sin()

    def rot_half(t):
        h = t.shape[-1] // 2
        return torch.cat([-t[:, h:], t[:, :h]], -1)

    def torch_rope_half(t, sign):
        return t * cos2 + rot_half(t) * (sign * sin2)

    def torch_rope_inter(t, sign):
        a, c = t[:, 0::2], t[:, 1::2]
        s = sign * sini
        return torch.stack([a * cosi - c * s, a * s + c * cosi], -1).reshape(t.shape)

    # name: (ours on device arrays, torch computing the same outputs, essential bytes)
    mb = {
        "softmax_fwd": (lambda: softmax.softmax_fwd_dev(x, poison=False), lambda: torch.softmax(tx, -1), 2 * N * 4),
        "softmax_bwd": (lambda: softmax.softmax_bwd_dev(x, dy, poison=False),
                        lambda: torch._softmax_backward_data(tdy, ty_soft, -1, torch.float32), 3 * N * 4),
        "rmsnorm_fwd": (lambda: rmsnorm.rmsnorm_fwd_dev(x, g, eps=1e-6, poison=False),
                        lambda: F.rms_norm(tx, (n,), tg, 1e-6), 2 * N * 4),
        "rmsnorm_bwd": (lambda: rmsnorm.rmsnorm_bwd_dev(x, dy, g, eps=1e-6, poison=False),     # dx and dgamma
                        lambda: torch.autograd.grad(rms_out, (txr, tgr), tdy, retain_graph=True), 3 * N * 4),
        "layernorm_fwd": (lambda: layernorm.layernorm_fwd_dev(x, g, b, eps=1e-5, poison=False),
                          lambda: F.layer_norm(tx, (n,), tg, tb, 1e-5), 2 * N * 4),
        "layernorm_bwd": (lambda: layernorm.layernorm_bwd_dev(x, dy, g, eps=1e-5, poison=False),  # dx, dgamma, dbeta
                          lambda: torch.ops.aten.native_layer_norm_backward(tdy, tx, (n,), mean, rstd, tg, tb,
                                                                            [True, True, True]), 3 * N * 4),
        "gelu_erf_fwd": (lambda: gelu.gelu_erf_fwd(x, poison=False), lambda: F.gelu(tx), 2 * N * 4),
        "gelu_erf_bwd": (lambda: gelu.gelu_erf_bwd(x, dy, poison=False),
                         lambda: torch.ops.aten.gelu_backward(tdy, tx, approximate="none"), 3 * N * 4),
        "gelu_tanh_fwd": (lambda: gelu.gelu_tanh_fwd(x, poison=False), lambda: F.gelu(tx, approximate="tanh"),
                          2 * N * 4),
        "gelu_tanh_bwd": (lambda: gelu.gelu_tanh_bwd(x, dy, poison=False),
                          lambda: torch.ops.aten.gelu_backward(tdy, tx, approximate="tanh"), 3 * N * 4),
        "rope_half_fwd": (lambda: rope.rope_half_fwd(xr, pos, poison=False), lambda: torch_rope_half(txr2, 1),
                          2 * N * 4),
        "rope_half_bwd": (lambda: rope.rope_half_bwd(xr, pos, dyr, poison=False),
                          lambda: torch_rope_half(tdyr, -1), 2 * N * 4),
        "rope_interleaved_fwd": (lambda: rope.rope_interleaved_fwd(xr, pos, poison=False),
                                 lambda: torch_rope_inter(txr2, 1), 2 * N * 4),
        "rope_interleaved_bwd": (lambda: rope.rope_interleaved_bwd(xr, pos, dyr, poison=False),
                                 lambda: torch_rope_inter(tdyr, -1), 2 * N * 4),
    }
    for name, (ours, ref, nbytes) in mb.items():
        if run.left_for_bench() < 10:
            res["memory_bound"][name] = {"skipped": "deadline"}
            continue
        try:
            o, t = timer.ours(ours), timer.torch(ref)
            res["memory_bound"][name] = {
                "ours_ms": o["s"] * 1e3, "torch_ms": t["s"] * 1e3, "speed_vs_torch": t["s"] / o["s"],
                "ours_GBps": nbytes / o["s"] / 1e9,
                "pct_of_copy_bw": 100 * (nbytes / o["s"]) / (res["copy_GBps"] * 1e9),
                "reps": o["reps"], "cpu_us": o["cpu_us"], "launch_bound": o["launch_bound"],
                "torch_launch_bound": t["launch_bound"]}
            print(f"  bench {name:24s} ours {o['s'] * 1e3:9.3f} ms  torch {t['s'] * 1e3:9.3f} ms", flush=True)
        except Exception as exc:                 # one kernel's failure is recorded, the others still run
            res["memory_bound"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        run.write()

    # linear: y = x W^T + b; backward dx = dy W, dW = dy^T x, db = sum dy (the same three outputs)
    r, ni, no = S["lin"]
    lx, tlx = both(rng.standard_normal((r, ni)))
    lW, tlW = both(rng.standard_normal((no, ni)) / np.sqrt(ni))
    lb, tlb = both(rng.standard_normal(no))
    ldy, tldy = both(rng.standard_normal((r, no)))
    for name, ours, ref in [
        ("linear_fwd", lambda: linear.linear_fwd_dev(lx, lW, lb, poison=False), lambda: F.linear(tlx, tlW, tlb)),
        ("linear_bwd", lambda: linear.linear_bwd_dev(lx, ldy, lW, poison=False),
         lambda: (tldy @ tlW, tldy.t() @ tlx, tldy.sum(0))),
    ]:
        if run.left_for_bench() < 10:
            res["linear"][name] = {"skipped": "deadline"}
            continue
        try:
            o, t = timer.ours(ours), timer.torch(ref)
            flops = 2 * r * ni * no * (1 if name.endswith("fwd") else 2)
            res["linear"][name] = {"ours_ms": o["s"] * 1e3, "torch_ms": t["s"] * 1e3, "speed_vs_torch": t["s"] / o["s"],
                                   "ours_TFLOPs": flops / o["s"] / 1e12, "reps": o["reps"], "cpu_us": o["cpu_us"]}
            print(f"  bench {name:24s} ours {o['s'] * 1e3:9.3f} ms  torch {t['s'] * 1e3:9.3f} ms", flush=True)
        except Exception as exc:
            res["linear"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        run.write()

    # attention, fp32, forward + backward of Q, K, V
    H, m, dh = S["attn"]
    q, tq = both(rng.standard_normal((H, m, dh)))
    k, tk = both(rng.standard_normal((H, m, dh)))
    v, tv = both(rng.standard_normal((H, m, dh)))
    do, tdo = both(rng.standard_normal((H, m, dh)))
    tq, tk, tv = (t.clone().requires_grad_(True) for t in (tq, tk, tv))
    for causal in (0, 1):
        key = "causal" if causal else "full"
        if run.left_for_bench() < 15:
            res["attention"][key] = {"skipped": "deadline"}
            continue

        def flash_fb(causal=causal):
            O, L = attention_flash.flash_fwd_dev(q, k, v, causal=causal, poison=False)
            return attention_flash.flash_bwd_dev(q, k, v, do, causal=causal, d_O=O, d_L=L, poison=False)

        def plain_fb(causal=causal):
            attention.plain_fwd_dev(q, k, v, causal=causal, poison=False)
            return attention.plain_bwd_dev(q, k, v, do, causal=causal, poison=False)

        def sdpa_fb(causal=causal):
            out = F.scaled_dot_product_attention(tq[None], tk[None], tv[None], is_causal=bool(causal))
            return torch.autograd.grad(out, (tq, tk, tv), tdo[None])

        try:
            fl, sd = timer.ours(flash_fb), timer.torch(sdpa_fb)
            entry = {"shape": [H, m, dh], "flash_ms": fl["s"] * 1e3, "torch_sdpa_ms": sd["s"] * 1e3,
                     "flash_speed_vs_sdpa": sd["s"] / fl["s"], "reps": fl["reps"], "cpu_us": fl["cpu_us"]}
            # forward: 2 matmuls of 2 m^2 d flops; backward: 5 (S recomputed, dV, dP, dQ, dK): 14 m^2 d
            flops = 14 * H * m * m * dh / (2 if causal else 1)
            entry["flash_TFLOPs"] = flops / fl["s"] / 1e12
            if run.left_for_bench() > 30:
                pl = timer.ours(plain_fb)
                entry.update({"plain_ms": pl["s"] * 1e3, "plain_speed_vs_sdpa": sd["s"] / pl["s"]})
            res["attention"][key] = entry
            print(f"  bench attention {key:8s} flash {fl['s'] * 1e3:9.3f} ms  sdpa {sd['s'] * 1e3:9.3f} ms", flush=True)
        except Exception as exc:
            res["attention"][key] = {"error": f"{type(exc).__name__}: {exc}"}
        run.write()


# ------------------------------------------------------------------------------ 3. checks
def checks(run: Run, rec: dict) -> None:
    """Every kernel at the registry's GPU sizes (smallest first) and every input case, while time
    remains; in the simulator one tiny size and the random case (every code path, quickly)."""
    from vjpcert.cuda_kernels.check import check_kernel_claim, kernel_launches
    from vjpcert.cuda_kernels.registry import KERNELS
    from vjpcert.specs import builtin_ops
    ops = builtin_ops()
    plan = []
    for spec in KERNELS.values():
        launches = kernel_launches(spec.op, "simulator" if run.simulate else "gpu", spec.claim)
        if run.simulate:
            launches = [(d, launch) for d, launch in launches if launch is None][1:2]
        for dims, launch in launches:
            plan.append((sum(dims.values()), spec.name, dims, (spec, launch)))
    cases = ("random",) if run.simulate else None

    def check(item, dims):
        spec, launch = item
        cert = check_kernel_claim(ops[spec.op], spec.claim, dims, seed=0, launch=launch, cases=cases)
        worst = max((o["worst_error_over_bound"] for pc in cert.evidence.get("per_case", {}).values()
                     for o in pc["outputs"].values() if "worst_error_over_bound" in o), default=None)
        return {"verdict": cert.verdict, "worst_error_over_bound": worst, "witness": cert.evidence.get("witness"),
                "reason": cert.evidence.get("reason")}
    _run_plan(run, rec, "checks", "check", plan, check)


def triton_checks(run: Run, rec: dict) -> None:
    """Every registered Triton kernel at its GPU sizes and every input case, smallest first, while time
    remains (in the simulator run: the interpreter, each kernel's smallest size, the random case)."""
    try:
        from vjpcert.triton_kernels.check import check_triton_claim, triton_dims, unavailable_reason
    except ImportError as exc:
        rec["skipped"] = f"the Triton tier does not import: {exc}"
        return
    why = unavailable_reason()
    if why:
        rec["skipped"] = why
        return
    from vjpcert.triton_kernels.registry import discover
    kernels, missing = discover()
    rec["not_loaded"] = missing
    plan = []
    for k in kernels.values():
        sizes = triton_dims(k, "interpreter" if run.simulate else "gpu")
        for dims in (sizes[:1] if run.simulate else sizes):
            plan.append((sum(dims.values()), k.name, dims, k))
    cases = ("random",) if run.simulate else None

    def check(k, dims):
        cert = check_triton_claim(k.op, k.claim, dims, seed=0, kernel=k, cases=cases)
        return {"dtype": k.dtype, "verdict": cert.verdict, "witness": cert.evidence.get("witness"),
                "reason": cert.evidence.get("reason")}
    _run_plan(run, rec, "triton_checks", "triton", plan, check)


def _run_plan(run: Run, rec: dict, key: str, label: str, plan: list, check) -> None:
    """``check(item, dims) -> entry`` for each (size, name, dims, item) of ``plan``, smallest first,
    while time remains; every entry recorded in ``results[key]`` and written at once."""
    for _, name, dims, item in sorted(plan, key=lambda p: p[0]):
        if run.left() < 5:
            run.results[key].append({"kernel": name, "dims": dims, "verdict": "skipped: deadline"})
            continue
        t = time.perf_counter()
        try:
            entry = {"kernel": name, "dims": dims, **check(item, dims)}
        except Exception as exc:                 # a crash is recorded, never a pass
            entry = {"kernel": name, "dims": dims, "verdict": "inconclusive", "error": f"{type(exc).__name__}: {exc}"}
        entry["seconds"] = round(time.perf_counter() - t, 2)
        run.results[key].append(entry)
        run.write()
        print(f"  {label} {name:34s} {str(dims):38s} {entry['verdict']:13s} {entry['seconds']:.1f}s", flush=True)
    verdicts = {}
    for c in run.results[key]:
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    rec["verdicts"] = verdicts


# ------------------------------------------------------------------------------ the table
def _mark(ok) -> str:
    return "" if ok is None else ("ok" if ok else "MISS")


def table(results: dict) -> str:
    lines = []
    for name, sec in results["sections"].items():
        if sec["status"] != "ok":
            lines.append(f"section {name}: {sec['status']} {sec.get('error', '')}")
    bench_res = results.get("bench")
    if bench_res:
        sim = results["mode"] != "gpu"
        lines.append(f"device {bench_res['device']}; device-to-device copy {bench_res.get('copy_GBps', 0):.0f} GB/s"
                     + ("  (simulator: timings are meaningless)" if sim else ""))
        lines.append(f"{'kernel':24s} {'ours ms':>9s} {'torch ms':>9s} {'speed vs torch':>14s} "
                     f"{'% copy BW':>9s}  target")
        for name, r in bench_res["memory_bound"].items():
            if "ours_ms" not in r:
                lines.append(f"{name:24s} {r}")
                continue
            ok = None if sim else (r["pct_of_copy_bw"] >= TARGETS["pct_of_copy_bw"]
                                   and r["speed_vs_torch"] >= TARGETS["speed_vs_torch"])
            lines.append(f"{name:24s} {r['ours_ms']:9.3f} {r['torch_ms']:9.3f} {r['speed_vs_torch']:14.2f} "
                         f"{r['pct_of_copy_bw']:9.1f}  {_mark(ok)}{' (launch-bound)' if r['launch_bound'] else ''}")
        for name, r in bench_res["linear"].items():
            if "ours_ms" in r:
                lines.append(f"{name:24s} {r['ours_ms']:9.3f} {r['torch_ms']:9.3f} {r['speed_vs_torch']:14.2f}")
        for key, r in bench_res["attention"].items():
            if "flash_ms" not in r:
                lines.append(f"attn fwd+bwd {key}: {r}")
                continue
            ok = None if sim else r["flash_speed_vs_sdpa"] >= TARGETS["attention_speed_vs_sdpa"]
            lines.append(f"{'attn fwd+bwd ' + key:24s} {r['flash_ms']:9.3f} {r['torch_sdpa_ms']:9.3f} "
                         f"{r['flash_speed_vs_sdpa']:14.2f} {'':>9s}  {_mark(ok)} (flash vs SDPA fp32, {r['shape']})")
            if "plain_ms" in r:
                lines.append(f"{'attn plain ' + key:24s} {r['plain_ms']:9.3f} {r['torch_sdpa_ms']:9.3f} "
                             f"{r['plain_speed_vs_sdpa']:14.2f}")
    for title, key in (("checks", "checks"), ("triton", "triton_checks")):
        checks_res = results.get(key) or []
        if not checks_res:
            continue
        verdicts = {}
        for c in checks_res:
            verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
        lines.append(f"{title}: " + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())))
        for c in checks_res:
            if c["verdict"] not in ("kernel-match", "skipped: deadline"):
                lines.append(f"  {c['verdict']}: {c['kernel']} {c['dims']} "
                             f"{c.get('witness') or c.get('reason') or c.get('error')}"[:300])
    lines.append(f"{results.get('seconds', 0):.0f} s; JSON: gpu_run.json")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="kernel benchmarks and checks on a GPU (or the simulator)")
    p.add_argument("--simulate", action="store_true", help="run in Numba's CUDA simulator at tiny sizes")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu_run_out", help="directory for gpu_run.json")
    p.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE, help="seconds for the whole run")
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    args = p.parse_args(argv)
    if args.simulate:
        os.environ["VJPCERT_KERNEL_MODE"] = "simulator"    # before anything imports numba
    sys.path.insert(0, str(ROOT))
    run = Run(Path(args.out), args.deadline, args.simulate)
    run.write()
    from vjpcert.cuda_kernels.env import detect_mode as env_mode
    env_mode()                 # chooses GPU or simulator before numba is imported
    import numba  # noqa: F401  (numba looks for scipy when imported: before the shim, not after)
    run.results["scipy_shim"] = _scipy_shim()
    try:
        with run.section("preflight", min_left=-math.inf) as rec:
            run.results["preflight"] = rec
            preflight(run, rec)
    except PreflightFailed as exc:
        run.results["sections"]["preflight"]["error"] = str(exc)
        run.write()
        print(f"preflight failed: {exc}", file=sys.stderr)
        print(table(run.results))
        return 2
    if not args.skip_bench:
        run.reserve = 0.0 if args.skip_checks else CHECKS_SHARE * args.deadline
        with run.section("bench", min_left=20 + run.reserve) as rec:
            if rec is not None:
                bench(run, rec)
    if not args.skip_checks:
        run.reserve = 0.0
        with run.section("checks", min_left=10) as rec:
            if rec is not None:
                checks(run, rec)
        with run.section("triton", min_left=10) as rec:
            if rec is not None:
                triton_checks(run, rec)
    run.write()
    print(table(run.results))
    failed = any(c["verdict"] in ("failed", "inconclusive")
                 for c in run.results["checks"] + run.results.get("triton_checks", []))
    errored = any(s["status"] == "error" for s in run.results["sections"].values())
    cut = any(s["status"].startswith("skipped") for s in run.results["sections"].values()) or \
        any(c["verdict"].startswith("skipped") for c in run.results["checks"])
    return 1 if failed or errored else (3 if cut else 0)


if __name__ == "__main__":
    sys.exit(main())
