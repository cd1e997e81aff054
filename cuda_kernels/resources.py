"""Compile every kernel for a real GPU (sm_90) on a machine without one, and read its resources.

Why: the simulator runs code a GPU cannot (lists, f-strings), accepts 2048-thread blocks and 128 KiB
of static shared memory, and never shows numba's silent float64 promotion (``0.5 * x``, ``acc = 0.0``
make a float32 kernel compute in float64). So CI compiles each kernel to PTX with
``numba.cuda.compile_ptx(..., cc=(9, 0))`` (NVVM; no driver needed) and links it with the
``cuda.core`` Linker (nvJitLink underneath; also no driver needed) with ``verbose=True``, whose info
log carries ptxas's report: registers, spill stores/loads, stack frame, shared and local memory.

Per kernel: registers, spill_bytes (stores + loads), stack_bytes, shared_bytes (static, summed from the
PTX ``.shared`` declarations: the 48 KiB static limit applies to these), linker_smem_bytes (the info
log's figure, which on sm_90 includes 1 KiB reserved by the system), local_bytes, f64_instructions
(PTX instruction lines with a ``.f64`` type; declarations excluded), ptx_lines, seconds.

The simulator has no ``compile_ptx``, so ``resource_report()`` runs this module in a subprocess in
compile mode (``VJPCERT_KERNEL_MODE=compile``): kernels are built at the GPU configuration there.
Run directly: ``python -m cuda_kernels.resources [--out report.json] [--extra module:function]``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CC = (9, 0)
ARCH = "sm_90"
MAX_STATIC_SHARED = 48 * 1024        # bytes: the static shared-memory limit per block

_SHARED_DECL = re.compile(r"^\s*(?:\.visible\s+|\.extern\s+)?\.shared\s+(?:\.align\s+\d+\s+)?"
                          r"\.[a-z](\d+)\s+[\w$]+\[(\d+)\]", re.M)


def _static_shared(ptx: str) -> int:
    """Bytes of the PTX's static ``.shared`` arrays (``.visible .shared .align 4 .b8 name[4096];``)."""
    return sum(int(bits) // 8 * int(n) for bits, n in _SHARED_DECL.findall(ptx))


def f64_instructions(ptx: str) -> list[str]:
    """PTX lines that compute or move a float64 (``.reg .f64`` declarations are not instructions)."""
    out = []
    for line in ptx.splitlines():
        s = line.strip()
        if not s or s.startswith("//") or s.startswith(".reg") or s.startswith(".param"):
            continue
        if re.search(r"\.f64\b", s):
            out.append(s)
    return out


# sm_90 (H100, H200) per-SM limits: CUDA C++ Programming Guide, "Compute Capabilities" (compute
# capability 9.0) and the CUDA occupancy calculator's allocation granularities.
SM_MAX_THREADS = 2048
SM_MAX_WARPS = 64
SM_MAX_BLOCKS = 32
SM_REGISTERS = 65536
REGISTER_ALLOC_UNIT = 256            # registers are allocated per warp in units of 256
SM_SHARED_BYTES = 228 * 1024
SHARED_ALLOC_UNIT = 128
SHARED_RESERVED_PER_BLOCK = 1024     # the system's share of every block's shared memory on sm_90


def occupancy(registers: int, threads: int, shared_bytes: int) -> dict:
    """Theoretical occupancy of an sm_90 SM: resident blocks by each limit, and warps / 64."""
    warps = -(-threads // 32)
    regs_per_warp = -(-registers * 32 // REGISTER_ALLOC_UNIT) * REGISTER_ALLOC_UNIT
    smem = -(-(shared_bytes + SHARED_RESERVED_PER_BLOCK) // SHARED_ALLOC_UNIT) * SHARED_ALLOC_UNIT
    limits = {"threads": min(SM_MAX_BLOCKS, SM_MAX_WARPS // warps),
              "registers": (SM_REGISTERS // regs_per_warp) // warps,
              "shared memory": SM_SHARED_BYTES // smem}
    blocks = min(limits.values())
    return {"blocks_per_sm": blocks, "occupancy": round(blocks * warps / SM_MAX_WARPS, 4),
            "limited_by": min(limits, key=limits.get)}


def _parse_info(log: str) -> dict:
    def grab(pattern, default=0):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else default
    stores = grab(r"(\d+) bytes spill stores")
    loads = grab(r"(\d+) bytes spill loads")
    return {"registers": grab(r"[Uu]sed (\d+) registers", None), "spill_bytes": stores + loads,
            "spill_stores": stores, "spill_loads": loads, "stack_bytes": grab(r"(\d+) bytes stack frame"),
            "linker_smem_bytes": grab(r"(\d+) bytes smem"), "local_bytes": grab(r"(\d+) bytes lmem")}


def _device_functions_without_a_driver():
    """numba-cuda 0.30.4 compiles a device function called from a kernel for the *current device's*
    compute capability (``dispatcher.compile_device`` calls ``get_current_device()``), which needs a
    driver even inside ``compile_ptx(..., cc=...)``. This compile-only process has none: answer CC."""
    from numba.cuda import dispatcher

    class _Device:
        compute_capability = CC
    dispatcher.get_current_device = lambda: _Device()


def compile_one(py_func, sig: str, max_registers: int | None = None, launch_bounds: tuple | None = None) -> dict:
    """PTX for sm_90, linked with the cuda.core Linker (verbose) for ptxas's resource report."""
    from cuda.core import Linker, LinkerOptions, ObjectCode
    from numba import cuda
    t = time.perf_counter()
    ptx, _ = cuda.compile_ptx(py_func, sig, cc=CC, launch_bounds=launch_bounds)
    f64 = f64_instructions(ptx)
    out = {"shared_bytes": _static_shared(ptx), "f64_instructions": len(f64), "f64_examples": f64[:3],
           "ptx_lines": ptx.count("\n")}
    linker = Linker(ObjectCode.from_ptx(ptx.encode() if isinstance(ptx, str) else ptx),
                    options=LinkerOptions(arch=ARCH, verbose=True, max_register_count=max_registers))
    try:
        linker.link("cubin")
    except Exception as exc:                     # ptxas refused it (e.g. too much shared memory)
        return {**out, "error": f"link: {type(exc).__name__}: {str(exc)[:1500]}",
                "seconds": round(time.perf_counter() - t, 3)}
    info = linker.get_info_log() or ""
    return {**_parse_info(info), **out, "seconds": round(time.perf_counter() - t, 3)}


def ptx_kernels() -> list:
    """Every kernel at the GPU configuration, as PtxKernel(name, py_func, sig) (compile mode only): each
    kernel file's ``ptx_kernels(cfg)``, or the kernels of its ``build(cfg)``."""
    import importlib
    from vjpcert.cuda_kernels import common
    from vjpcert.cuda_kernels.registry import kernel_modules
    cfg = common.GPU_CONFIG
    out = []
    for name in kernel_modules():
        mod = importlib.import_module(f"vjpcert.cuda_kernels.{name}")
        if hasattr(mod, "ptx_kernels"):
            out += mod.ptx_kernels(cfg)
        else:
            out += [v for v in vars(mod.build(cfg)).values() if isinstance(v, common.PtxKernel)]
    out.append(common._colsum_kernels(cfg))
    out.append(common._fill_kernel())
    return out


def _load(spec: str):
    """"package.module:function" or "path/to/file.py:function"."""
    import importlib
    import importlib.util
    mod, _, fn = spec.rpartition(":") if spec.count(":") else (spec, "", "")
    if mod.endswith(".py"):
        loader = importlib.util.spec_from_file_location(Path(mod).stem, mod)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(mod)
    return getattr(module, fn or "ptx_kernels")


def _report_here(extra: str | None = None, only_extra: bool = False) -> dict:
    from vjpcert.cuda_kernels.env import detect_mode, versions
    if detect_mode() != "compile":
        raise RuntimeError("resources are compiled in compile mode (VJPCERT_KERNEL_MODE=compile)")
    _device_functions_without_a_driver()
    kernels = [] if only_extra else ptx_kernels()
    if extra:
        kernels += list(_load(extra)())
    report = {"arch": ARCH, "versions": versions(), "kernels": {}}
    for k in kernels:
        try:
            r = compile_one(k.py_func, k.sig, k.max_registers, k.launch_bounds)
            if r.get("registers"):
                r.update(occupancy(r["registers"], k.threads, r.get("shared_bytes", 0)))
            r["threads"] = k.threads
            report["kernels"][k.name] = r
        except Exception as exc:                 # a kernel that does not compile is a finding, not a crash
            report["kernels"][k.name] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
    return report


def resource_report(extra: str | None = None, only_extra: bool = False, timeout: float = 600) -> dict:
    """{arch, versions, kernels: {name: {...}}}; compiled in a subprocess in compile mode (this works
    from a simulator process too). ``extra`` = "module:function" adds kernels (negative controls)."""
    env = {**os.environ, "VJPCERT_KERNEL_MODE": "compile", "NUMBA_ENABLE_CUDASIM": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "vjpcert.cuda_kernels.resources", "--out", "-"]
    if extra:
        cmd += ["--extra", extra]
    if only_extra:
        cmd += ["--only-extra"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the kernels failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def problems(report: dict) -> list[str]:
    """What must fail CI: a kernel that does not compile, any spill, static shared memory over
    48 KiB, any .f64 instruction (every kernel here is a float32 kernel)."""
    out = []
    for name, r in report["kernels"].items():
        if "error" in r:
            out.append(f"{name}: does not compile for {report['arch']}: {r['error'][:300]}")
        if r.get("spill_bytes"):
            out.append(f"{name}: spills {r['spill_bytes']} bytes")
        if r.get("shared_bytes", 0) > MAX_STATIC_SHARED:
            out.append(f"{name}: {r['shared_bytes']} bytes of static shared memory > {MAX_STATIC_SHARED}")
        if r.get("f64_instructions"):
            out.append(f"{name}: {r['f64_instructions']} float64 instructions in a float32 kernel, "
                       f"e.g. {r['f64_examples'][0]}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="-", help="JSON file, or - for stdout")
    p.add_argument("--extra", default=None, help="module:function or file.py:function returning more PtxKernels")
    p.add_argument("--only-extra", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("VJPCERT_KERNEL_MODE", "compile")
    report = _report_here(args.extra, args.only_extra)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        bad = problems(report)
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
