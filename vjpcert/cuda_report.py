"""Your own Numba CUDA kernels, from your own file, through the whole kernel tier.

    vjpcert kernels my_kernels.py [--out DIR] [--seed N]

``my_kernels.py`` is written as a kernel file of the package is (ARCHITECTURE.md, "Adding an op";
``cuda_kernels/relu.py`` is the shortest): it assigns ``KERNELS = [KernelSpec(...), ...]`` (or
``fwd_bwd(...)``), each kernel of a built-in spec op with its rounding-error model, and optionally
``SIZES = {op or kernel name: Sizes(...)}`` (else each op's check dims) and ``ptx_kernels(cfg)`` or
``build(cfg)`` (its kernels compiled for sm_90). Each kernel is checked by ``cuda_kernels/check.py``
exactly as ours are: its error model per element, every input case, NaN-poisoned outputs, the
shared-memory race detector in the simulator, determinism, the spec's laws, at the simulator's launch
configuration and, where ``Sizes.gpu_launch`` lists sizes, at the GPU's; and, where the file can
build its kernels, the sm_90 resource table (registers, spills, static shared memory, float64
instructions) of ``cuda_kernels/resources.py``. Certificates go to ``<out>/certificates/``, the table
to ``<out>/README.md``, the figures to ``<out>/cuda.json`` (default ``reports/cuda``).
"""
from __future__ import annotations

import ast
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from vjpcert.core.certificate import atomic_write
from vjpcert.core.registry import SpecError


USER_MODULE_PREFIX = "vjpcert_user_cuda"


def is_kernel_file(path) -> bool:
    """A Python file that assigns ``KERNELS`` at top level (a spec file defines ops, not kernels)."""
    p = Path(path)
    if p.suffix != ".py" or not p.is_file():
        return False
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"))
    except SyntaxError:
        return False
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "KERNELS" for t in targets):
            return True
    return False


def load_kernel_file(path) -> tuple[list, dict, object]:
    """(KERNELS, SIZES, module) of a user's kernel file; bad input is a SpecError naming the file."""
    from vjpcert.cuda_kernels.registry import KernelSpec, Sizes
    from vjpcert.triton_report import load_user_module
    module = load_user_module(path, USER_MODULE_PREFIX)
    kernels = list(getattr(module, "KERNELS", None) or [])
    if not kernels:
        raise SpecError(None, f"{path}: defines no KERNELS = [KernelSpec(...), ...] (or fwd_bwd(...))")
    for k in kernels:
        if not isinstance(k, KernelSpec):
            raise SpecError(None, f"{path}: KERNELS holds {type(k).__name__}, not KernelSpec")
        if k.model is None:
            raise SpecError(None, f"{path}: kernel {k.name} has no error model: the kernel tier holds a kernel to "
                                  f"the rounding-error model of its own arithmetic (cuda_kernels/error_model.py)")
    names = [k.name for k in kernels]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(None, f"{path}: kernels registered twice: {twice}")
    sizes = dict(getattr(module, "SIZES", {}) or {})
    for key, s in sizes.items():
        if not isinstance(s, Sizes):
            raise SpecError(None, f"{path}: SIZES[{key!r}] is {type(s).__name__}, not Sizes")
    return kernels, sizes, module


def ladder(kernel, op, sizes: dict, mode: str) -> list[tuple[dict, str | None]]:
    """[(dims, launch)] of one kernel: its own sizes (by kernel name, else by op) for this mode, or
    the op's check dims; in the simulator also the GPU's launch configuration at ``gpu_launch``; in
    either mode the summation-order check at ``orders``."""
    s = sizes.get(kernel.name) or sizes.get(kernel.op)
    if s is None:
        return [(dict(op.check_dims), None)]
    table = s.gpu if mode == "gpu" else s.simulator
    out = [(dict(d), None) for d in table] or [(dict(op.check_dims), None)]
    if mode == "simulator":
        out += [(dict(d), "gpu") for d in s.gpu_launch]
    return out + [(dict(d), "orders") for d in s.orders]


def run(kernels, sizes: dict, *, seed: int = 0, progress=print) -> list[dict]:
    from vjpcert.cuda_kernels.check import check_kernel_claim, detect_mode
    from vjpcert.specs import resolve_op
    mode = detect_mode()
    rows = []
    for k in kernels:
        op = resolve_op(k.op) if isinstance(k.op, str) else k.op
        spec = dataclasses.replace(k, op=op.name) if not isinstance(k.op, str) else k
        for dims, launch in ladder(spec, op, sizes, mode):
            t0 = time.perf_counter()
            cert = check_kernel_claim(op, spec.claim, dims, seed=seed, kernel=spec, launch=launch)
            seconds = time.perf_counter() - t0
            worst = {name: o.get("worst_error_over_bound") for case in (cert.evidence.get("per_case") or {}).values()
                     for name, o in case.get("outputs", {}).items()}
            rows.append({"kernel": spec.name, "op": op.name, "kind": spec.kind, "dims": dims,
                         "launch": launch or "default", "verdict": cert.verdict, "seconds": round(seconds, 3),
                         "worst_error_over_bound": worst, "race_detector": cert.evidence.get("race_detector"),
                         "witness": cert.evidence.get("witness"), "reason": cert.evidence.get("reason"),
                         "cert": cert})
            progress(f"  {spec.name:32s} {json.dumps(dims):30s} {launch or 'default':8s} {cert.verdict:13s} "
                     f"{seconds:6.2f} s")
    return rows


SHIM = '''
import importlib.util
import sys


def ptx_kernels():
    from vjpcert.cuda_kernels import common
    spec = importlib.util.spec_from_file_location({name!r}, {path!r})
    module = importlib.util.module_from_spec(spec)
    sys.modules[{name!r}] = module
    spec.loader.exec_module(module)
    cfg = common.GPU_CONFIG
    if hasattr(module, "ptx_kernels"):
        return list(module.ptx_kernels(cfg))
    return [v for v in vars(module.build(cfg)).values() if isinstance(v, common.PtxKernel)]
'''


def resources(path, module) -> dict | None:
    """The sm_90 resource table of the file's kernels (compiled in a subprocess, no GPU needed), or
    None where the file has neither ``ptx_kernels(cfg)`` nor ``build(cfg)``."""
    if not (hasattr(module, "ptx_kernels") or hasattr(module, "build")):
        return None
    from vjpcert.cuda_kernels.resources import problems, resource_report
    with tempfile.TemporaryDirectory() as tmp:
        shim = Path(tmp) / "vjpcert_user_resources.py"
        shim.write_text(SHIM.format(name=f"{USER_MODULE_PREFIX}_{Path(path).stem}", path=str(Path(path).resolve())))
        try:
            report = resource_report(extra=f"{shim}:ptx_kernels", only_extra=True)
        except Exception as exc:          # no compiler here: say so, do not pass the check silently
            return {"error": f"{type(exc).__name__}: {str(exc)[-600:]}", "problems": [], "kernels": {}}
    report["problems"] = problems(report)
    return report


def write(rows: list[dict], res: dict | None, out: Path, *, total_seconds: float, mode: str, files) -> None:
    certs = out / "certificates"
    certs.mkdir(parents=True, exist_ok=True)
    for old in certs.glob("*.json"):
        old.unlink()
    for r in rows:
        slug = "_".join(f"{k}{v}" for k, v in r["dims"].items()) + ("" if r["launch"] == "default" else f"_{r['launch']}-launch")
        atomic_write(certs / f"{r['kernel']}__{slug}.json", r["cert"].to_json())
    lines = ["# Your CUDA kernels against vjpcert specs", "",
             f"Files: {', '.join(f'`{Path(f).name}`' for f in files)}. Mode: **{mode}**. Whole run: "
             f"**{total_seconds:.1f} s** ({len(rows)} checks, every input case of `core/input_cases.py` and "
             f"`core/kernel_checks.py` each, "
             f"each kernel held to its own rounding-error model per element).", "",
             "| op | kernel | kind | dims | launch | verdict | worst error / bound per output | race detector | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        worst = "; ".join(f"{n}: {v:.2g}" for n, v in r["worst_error_over_bound"].items() if v is not None)
        verdict = r["verdict"] if r["verdict"] != "failed" else f"**failed** ({r['witness']['check']}, {r['witness']['case']})"
        race = r["race_detector"] or {}
        race_words = ("clean" if race.get("clean") else "**race**") if race.get("ran") else "not run"
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines.append(f"| {r['op']} | `{r['kernel']}` | {r['kind']} | {dims} | {r['launch']} | {verdict} | {worst} | "
                     f"{race_words} | {r['seconds']:.2f} |")
    if res is not None:
        lines += ["", "## sm_90 resources", ""]
        if res.get("error"):
            lines.append(f"Not compiled here: {res['error']}")
        else:
            lines += ["| kernel | registers | spill bytes | static shared bytes | float64 instructions |",
                      "|---|---|---|---|---|"]
            for name, k in sorted(res["kernels"].items()):
                lines.append(f"| `{name}` | {k.get('registers', '-')} | {k.get('spill_bytes', '-')} | "
                             f"{k.get('shared_bytes', '-')} | {k.get('f64_instructions', k.get('error', '-'))} |")
            lines += [""] + [f"- **{p}**" for p in res["problems"]]
    atomic_write(out / "README.md", "\n".join(lines) + "\n")
    data = {"mode": mode, "total_seconds": round(total_seconds, 2),
            "rows": [{k: v for k, v in r.items() if k != "cert"} for r in rows], "resources": res}
    atomic_write(out / "cuda.json", json.dumps(data, indent=1, sort_keys=True, default=str))


def main(files, *, out=None, seed: int = 0) -> int:
    """Exit 0 when every check is kernel-match and every kernel compiles within the limits, 1 on a
    failure (or an inconclusive check), 2 on bad input."""
    from vjpcert.cuda_kernels.check import detect_mode
    try:
        mode = detect_mode()
        if mode == "none":
            raise SpecError(None, "no CUDA to run kernels on: install numba-cuda (the simulator needs no GPU)")
        loaded = [(f, *load_kernel_file(f)) for f in files]
        out = Path(out or "reports/cuda")
        print(f"Kernel tier ({mode}): {sum(len(k) for _, k, _, _ in loaded)} kernels from {len(files)} file(s)")
        t0 = time.perf_counter()
        rows = [r for f, kernels, sizes, _ in loaded for r in run(kernels, sizes, seed=seed)]
        res = None
        for f, _, _, module in loaded:
            one = resources(f, module)
            if one is not None:
                res = one if res is None else {**res, "kernels": {**res["kernels"], **one["kernels"]},
                                               "problems": res["problems"] + one["problems"]}
        total = time.perf_counter() - t0
    except SpecError as exc:
        print(f"vjpcert: {exc}", file=sys.stderr)
        return 2
    write(rows, res, out, total_seconds=total, mode=mode, files=files)
    bad = [r for r in rows if r["verdict"] != "kernel-match"]
    for r in bad:
        w = r["witness"] or {}
        said = (f"{w.get('check')} (case {w.get('case')}): " + json.dumps({k: v for k, v in w.items() if k not in
                ("check", "case", "inputs", "seed", "dims")}, default=str) if w else str(r["reason"]))
        print(f"  {r['verdict']}: {r['kernel']} {r['dims']} {r['launch']}: {said[:400]}")
    for p in (res or {}).get("problems", []):
        print(f"  resources: {p}")
    print(f"{len(rows) - len(bad)}/{len(rows)} kernel-match in {total:.1f} s; report: {out / 'README.md'}")
    return 1 if bad or (res or {}).get("problems") else 0
