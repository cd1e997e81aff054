#!/usr/bin/env python3
"""The prepared GPU run: kernel checks at large sizes, then every kernel timed against PyTorch.

    python benchmarks/gpu_run.py                 # on a machine with a GPU (a few minutes)
    python benchmarks/gpu_run.py --simulate      # CPU only: Numba's simulator, tiny sizes (a test)

Needs only numpy, numba, numba-cuda and torch (not this repo's environment): the specs' float
backends import ``scipy.special.erf``; where scipy is missing, torch's ``erf`` stands in (the
float64 / float32 results keep their dtype). No network.

1. checks: ``cuda_kernels.check.check_kernel_claim`` for every kernel at the GPU sizes of the kernel
   registry (simulator: the two smallest sizes), each a certificate (kernel-match / failed).
2. benchmarks, fp32, same device, TF32 off: median wall time of our launcher on device arrays
   (outputs not NaN-poisoned; Python launch overhead included) against PyTorch's own op:
   * memory-bound kernels (softmax, RMSNorm, LayerNorm, RoPE, GELU; forward and backward): achieved
     bandwidth on the *essential* traffic (each input read once, each output written once) as a
     percentage of the measured device-to-device copy bandwidth, and the time ratio ours / torch;
   * linear: ours / torch (F.linear, and dy @ W, dy^T x, sum dy);
   * attention: fused forward + backward, ours (FlashAttention-style) / torch SDPA, fp32, plain and
     causal; also the plain (materialised) variant.
   PyTorch has no RoPE op: the reference is the usual eager composition (x*cos + rotate_half(x)*sin).
Writes ``$OUT/gpu_run.json`` (``--out`` overrides; default ./gpu_run_out) and prints a short table
last. Exit code 1 if any check failed, 2 if there is no CUDA to run on.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Sizes. GPU: large enough that launch overhead is small against the kernel (128 MiB per
# memory-bound tensor; attention 16 heads x 2048 x 64). Simulator: tiny, to exercise every path.
GPU_SIZES = {"rows": 8192, "n": 4096, "rope_d": 128, "lin": (4096, 4096, 4096), "attn": (16, 2048, 64),
             "reps": 10, "copy_floats": 1 << 28}
SIM_SIZES = {"rows": 3, "n": 40, "rope_d": 8, "lin": (5, 9, 7), "attn": (1, 9, 4), "reps": 2,
             "copy_floats": 1 << 16}


def _scipy_shim() -> str | None:
    """specs.backends imports scipy.special.erf; stand torch's erf in for it where scipy is missing."""
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
        import math
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


# ------------------------------------------------------------------------------ timing
def _median_time(fn, sync, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_checks(mode: str, simulate: bool) -> list[dict]:
    from vjpcert.cuda_kernels.check import check_kernel_claim, kernel_dims
    from vjpcert.cuda_kernels.registry import KERNELS
    from vjpcert.specs import builtin_ops
    ops = builtin_ops()
    out = []
    for spec in KERNELS.values():
        dims_list = kernel_dims(spec.op, "simulator")[:2] if simulate else kernel_dims(spec.op, "gpu")
        for dims in dims_list:
            t = time.perf_counter()
            try:
                cert = check_kernel_claim(ops[spec.op], spec.claim, dims, seed=0)
                rec = {"kernel": spec.name, "dims": dims, "verdict": cert.verdict,
                       "outputs": cert.evidence.get("outputs"), "witness": cert.evidence.get("witness"),
                       "seconds": round(time.perf_counter() - t, 3)}
            except Exception as exc:        # a crash is recorded, never a pass
                rec = {"kernel": spec.name, "dims": dims, "verdict": "inconclusive",
                       "error": f"{type(exc).__name__}: {exc}", "seconds": round(time.perf_counter() - t, 3)}
            out.append(rec)
            print(f"  check {spec.name:32s} {str(dims):38s} {rec['verdict']:13s} {rec['seconds']:.2f}s", flush=True)
    return out


def run_bench(mode: str, simulate: bool) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from vjpcert.cuda_kernels import attention, gelu, layernorm, linear, rmsnorm, rope, softmax
    from vjpcert.cuda_kernels.common import cuda, to_device

    S = SIM_SIZES if simulate else GPU_SIZES
    dev = torch.device("cuda" if (mode == "gpu" and torch.cuda.is_available()) else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False       # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    tsync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    osync = cuda.synchronize if mode == "gpu" else (lambda: None)
    reps = S["reps"]
    rng = np.random.default_rng(0)
    f32 = np.float32

    def both(a):
        a = np.ascontiguousarray(a, dtype=f32)
        return to_device(a), torch.from_numpy(a.copy()).to(dev)

    # device-to-device copy bandwidth (read + write)
    src = torch.empty(S["copy_floats"], dtype=torch.float32, device=dev).normal_()
    dst = torch.empty_like(src)
    t_copy = _median_time(lambda: dst.copy_(src), tsync, reps)
    copy_bw = 2 * src.numel() * 4 / t_copy
    res = {"device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (simulator)",
           "copy_GBps": copy_bw / 1e9, "memory_bound": {}, "linear": {}, "attention": {}}

    rows, n = S["rows"], S["n"]
    N = rows * n
    x, tx = both(rng.standard_normal((rows, n)))
    dy, tdy = both(rng.standard_normal((rows, n)))
    g, tg = both(rng.standard_normal(n))
    b, tb = both(rng.standard_normal(n))
    ty_soft = torch.softmax(tx, -1)
    mean, rstd = torch.ops.aten.native_layer_norm(tx, (n,), tg, tb, 1e-5)[1:]
    txr = tx.clone().requires_grad_(True)
    rms_out = F.rms_norm(txr, (n,), tg, 1e-6)

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

    mb = {  # name: (ours, torch, essential bytes)
        "softmax_fwd": (lambda: softmax.softmax_fwd(x, poison=False), lambda: torch.softmax(tx, -1), 2 * N * 4),
        "softmax_bwd": (lambda: softmax.softmax_bwd(x, dy, poison=False),
                        lambda: torch._softmax_backward_data(tdy, ty_soft, -1, torch.float32), 3 * N * 4),
        "rmsnorm_fwd": (lambda: rmsnorm.rmsnorm_fwd(x, g, eps=1e-6, poison=False),
                        lambda: F.rms_norm(tx, (n,), tg, 1e-6), 2 * N * 4),
        "rmsnorm_bwd": (lambda: rmsnorm.rmsnorm_bwd(x, g, dy, eps=1e-6, poison=False),
                        lambda: torch.autograd.grad(rms_out, (txr,), tdy, retain_graph=True), 3 * N * 4),
        "layernorm_fwd": (lambda: layernorm.layernorm_fwd(x, g, b, eps=1e-5, poison=False),
                          lambda: F.layer_norm(tx, (n,), tg, tb, 1e-5), 2 * N * 4),
        "layernorm_bwd": (lambda: layernorm.layernorm_bwd(x, g, b, dy, eps=1e-5, poison=False),
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
        t_o = _median_time(ours, osync, reps)
        t_t = _median_time(ref, tsync, reps)
        res["memory_bound"][name] = {"ours_ms": t_o * 1e3, "torch_ms": t_t * 1e3, "ratio": t_o / t_t,
                                     "ours_GBps": nbytes / t_o / 1e9,
                                     "pct_of_copy_bw": 100 * (nbytes / t_o) / copy_bw}
        print(f"  bench {name:24s} ours {t_o * 1e3:9.3f} ms  torch {t_t * 1e3:9.3f} ms", flush=True)

    # linear
    r, ni, no = S["lin"]
    lx, tlx = both(rng.standard_normal((r, ni)))
    lW, tlW = both(rng.standard_normal((no, ni)) / np.sqrt(ni))
    lb, tlb = both(rng.standard_normal(no))
    ldy, tldy = both(rng.standard_normal((r, no)))
    for name, ours, ref in [
        ("linear_fwd", lambda: linear.linear_fwd(lx, lW, lb, poison=False), lambda: F.linear(tlx, tlW, tlb)),
        ("linear_bwd", lambda: linear.linear_bwd(lx, lW, lb, ldy, poison=False),
         lambda: (tldy @ tlW, tldy.t() @ tlx, tldy.sum(0))),
    ]:
        t_o, t_t = _median_time(ours, osync, reps), _median_time(ref, tsync, reps)
        flops = 2 * r * ni * no * (1 if name.endswith("fwd") else 2)
        res["linear"][name] = {"ours_ms": t_o * 1e3, "torch_ms": t_t * 1e3, "ratio": t_o / t_t,
                               "ours_TFLOPs": flops / t_o / 1e12}
        print(f"  bench {name:24s} ours {t_o * 1e3:9.3f} ms  torch {t_t * 1e3:9.3f} ms", flush=True)

    # attention, fp32, forward + backward
    H, m, dh = S["attn"]
    q, tq = both(rng.standard_normal((H, m, dh)))
    k, tk = both(rng.standard_normal((H, m, dh)))
    v, tv = both(rng.standard_normal((H, m, dh)))
    do, tdo = both(rng.standard_normal((H, m, dh)))
    tq, tk, tv = (t.clone().requires_grad_(True) for t in (tq, tk, tv))
    for causal in (0, 1):
        def flash_fb():
            O, L = attention.flash_fwd_dev(q, k, v, causal=causal, poison=False)
            return attention.flash_bwd_dev(q, k, v, do, causal=causal, d_O=O, d_L=L, poison=False)

        def plain_fb():
            attention.plain_fwd_dev(q, k, v, causal=causal, poison=False)
            return attention.plain_bwd_dev(q, k, v, do, causal=causal, poison=False)

        def sdpa_fb():
            out = F.scaled_dot_product_attention(tq[None], tk[None], tv[None], is_causal=bool(causal))
            return torch.autograd.grad(out, (tq, tk, tv), tdo[None])

        t_f, t_p, t_t = (_median_time(flash_fb, osync, reps), _median_time(plain_fb, osync, reps),
                         _median_time(sdpa_fb, tsync, reps))
        # forward: 2 matmuls of 2 m^2 d flops; backward: 5 (S recomputed, dV, dP, dQ, dK): 14 m^2 d
        flops = 14 * H * m * m * dh / (2 if causal else 1)
        key = "causal" if causal else "full"
        res["attention"][key] = {"shape": [H, m, dh], "flash_ms": t_f * 1e3, "plain_ms": t_p * 1e3,
                                 "torch_sdpa_ms": t_t * 1e3, "flash_ratio": t_f / t_t, "plain_ratio": t_p / t_t,
                                 "flash_TFLOPs": flops / t_f / 1e12}
        print(f"  bench attention {key:8s} flash {t_f * 1e3:9.3f} ms  plain {t_p * 1e3:9.3f} ms  "
              f"sdpa {t_t * 1e3:9.3f} ms", flush=True)
    return res


def table(results: dict) -> str:
    lines = []
    checks = results.get("checks", [])
    if checks:
        verdicts = {}
        for c in checks:
            verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
        lines.append("checks: " + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())))
        for c in checks:
            if c["verdict"] != "kernel-match":
                lines.append(f"  {c['verdict']}: {c['kernel']} {c['dims']} {c.get('witness') or c.get('error')}")
    bench = results.get("bench")
    if bench:
        lines.append(f"device {bench['device']}; device-to-device copy {bench['copy_GBps']:.0f} GB/s"
                     + ("  (simulator: timings are meaningless)" if results["mode"] != "gpu" else ""))
        lines.append(f"{'kernel':24s} {'ours ms':>9s} {'torch ms':>9s} {'ours/torch':>10s} {'% copy BW':>9s}")
        for name, r in bench["memory_bound"].items():
            lines.append(f"{name:24s} {r['ours_ms']:9.3f} {r['torch_ms']:9.3f} {r['ratio']:10.2f} "
                         f"{r['pct_of_copy_bw']:9.1f}")
        for name, r in bench["linear"].items():
            lines.append(f"{name:24s} {r['ours_ms']:9.3f} {r['torch_ms']:9.3f} {r['ratio']:10.2f} {'':>9s}")
        for key, r in bench["attention"].items():
            lines.append(f"{'attn fwd+bwd ' + key:24s} {r['flash_ms']:9.3f} {r['torch_sdpa_ms']:9.3f} "
                         f"{r['flash_ratio']:10.2f} {'':>9s}  (flash vs SDPA fp32, {r['shape']})")
            lines.append(f"{'attn plain ' + key:24s} {r['plain_ms']:9.3f} {r['torch_sdpa_ms']:9.3f} "
                         f"{r['plain_ratio']:10.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="kernel checks and benchmarks on a GPU (or the simulator)")
    p.add_argument("--simulate", action="store_true", help="run in Numba's CUDA simulator at tiny sizes")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu_run_out", help="directory for gpu_run.json")
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    args = p.parse_args(argv)
    if args.simulate:
        os.environ["VJPCERT_KERNEL_MODE"] = "simulator"    # before anything imports numba
    sys.path.insert(0, str(ROOT))
    from vjpcert.cuda_kernels.env import detect_mode as env_mode
    env_mode()                 # chooses GPU or simulator before numba is imported
    import numba  # noqa: F401  (numba looks for scipy when imported: before the shim, not after)
    shim = _scipy_shim()
    from vjpcert.cuda_kernels.check import detect_mode
    from vjpcert.cuda_kernels.env import versions
    mode = detect_mode()
    if mode == "none" or (mode != "gpu" and not args.simulate):
        print(f"no GPU to run on (mode: {mode}); use --simulate for the CPU simulator", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = {"mode": mode, "versions": versions(), "scipy_shim": shim, "checks": [], "bench": None}
    print(f"mode {mode}", flush=True)
    if not args.skip_checks:
        results["checks"] = run_checks(mode, args.simulate)
    if not args.skip_bench:
        results["bench"] = run_bench(mode, args.simulate)
    results["seconds"] = round(time.perf_counter() - t0, 2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".gpu_run.json.tmp"
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    os.replace(tmp, out / "gpu_run.json")
    print(f"wrote {out / 'gpu_run.json'} in {results['seconds']} s")
    print(table(results))
    return 1 if any(c["verdict"] == "failed" for c in results["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
