"""The report "Liger-Kernel against vjpcert specs" (reports/liger/), and the Triton tier's command.

    python -m vjpcert.triton_report --liger --out reports/liger      # the committed report
    python -m vjpcert.triton_report [FILE.py ...] [--out DIR]        # your own TRITON_KERNELS

For every Liger op (RMSNorm in its three casting modes, LayerNorm, softmax, RoPE, SwiGLU, GeGLU,
cross-entropy with and without label smoothing), forward and backward, at every size of its ladder:
the Triton tier's verdict, and per output the worst error and its bound over the input cases. Runs
in Triton's interpreter without a GPU (TRITON_INTERPRET=1), natively with one. Certificates go to
``<out>/certificates/``, the table to ``<out>/README.md`` and the figures to ``<out>/liger.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from vjpcert.core.certificate import atomic_write
from vjpcert.core.registry import SpecError


def load_user_module(path, prefix: str):
    """A user's Python file run as the module ``<prefix>_<stem>`` (registered, so its kernels and the
    tools that import them by name find it); a missing file is bad input."""
    import importlib.util
    p = Path(path)
    if not p.is_file():
        raise SpecError(None, f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(f"{prefix}_{p.stem}", p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_user_kernels(path: str) -> list:
    """The ``TRITON_KERNELS`` list of a user's Python file (its specs come from ``vjpcert.specs`` or from
    ops the file itself defines with ``@op``)."""
    module = load_user_module(path, "vjpcert_user_triton")
    kernels = getattr(module, "TRITON_KERNELS", None)
    if not kernels:
        raise SpecError(None, f"{path}: defines no TRITON_KERNELS = [TritonKernel(...), ...]")
    return list(kernels)


def seed_or_fresh(text: str) -> int | None:
    """An int, or "fresh" (None: drawn when the run starts)."""
    if text == "fresh":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is an integer or 'fresh', not {text!r}") from None


def fresh_seed() -> int:
    """A seed no kernel could have known: from the operating system's entropy."""
    import secrets
    return secrets.randbits(31)


def file_intro(path: str) -> str:
    """A user's kernel file's own docstring, the report's introduction (read, not run again)."""
    import ast
    doc = ast.get_docstring(ast.parse(Path(path).read_text(encoding="utf-8")))
    return f"From `{Path(path).name}`:\n\n```text\n{doc}\n```" if doc else ""


def _worst(cert) -> dict:
    """Per output: the worst error over the cases, with its bound, and the case it came from."""
    out: dict = {}
    for case, pc in (cert.evidence.get("per_case") or {}).items():
        for name, o in pc["outputs"].items():
            ratio = o["error"] / o["bound"] if o["bound"] else (0.0 if o["error"] == 0 else float("inf"))
            if name not in out or ratio > out[name]["ratio"]:
                out[name] = {"error": o["error"], "bound": o["bound"], "ratio": ratio, "case": case}
    w = cert.evidence.get("witness")
    if w and w.get("check") == "tolerance":
        ratio = w["error"] / w["bound"] if w["bound"] else float("inf")
        out[w["output"]] = {"error": w["error"], "bound": w["bound"], "ratio": ratio, "case": w["case"]}
    return out


def run(kernels, *, seed: int = 0, progress=print) -> list[dict]:
    from vjpcert.triton_kernels.check import check_triton_claim, triton_dims
    rows = []
    for k in kernels:
        for dims in triton_dims(k, seed=seed):
            t0 = time.perf_counter()
            try:
                cert = check_triton_claim(k.op, k.claim, dims, seed=seed, kernel=k)
            except SpecError as exc:
                progress(f"  {k.name} {dims}: bad input: {exc}")
                raise
            seconds = time.perf_counter() - t0
            rows.append({"kernel": k.name, "op": k.op_name, "kind": k.kind, "dtype": k.dtype, "source": k.source, "doc": k.doc,
                         "params": {n: str(v) for n, v in k.params.items()},
                         "dims": dims, "verdict": cert.verdict, "seconds": round(seconds, 3),
                         "outputs": _worst(cert), "cert": cert,
                         # a failure's witness, or where an inconclusive one was ill-conditioned
                         "witness": cert.evidence.get("witness") or (cert.evidence.get("ill_conditioned") or [None])[0]})
            progress(f"  {k.name:36s} {json.dumps(dims):26s} {cert.verdict:13s} {seconds:6.2f} s")
    return rows


def _fmt(x: float) -> str:
    return f"{x:.2e}"


def _dims(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def write(rows: list[dict], out: Path, *, title: str, intro: str, total_seconds: float, mode: str,
          findings: str = "") -> None:
    certs = out / "certificates"
    certs.mkdir(parents=True, exist_ok=True)
    for old in certs.glob("*.json"):
        old.unlink()
    for r in rows:
        c = r["cert"]
        atomic_write(certs / f"{r['kernel']}__{'_'.join(f'{k}{v}' for k, v in r['dims'].items())}.json", c.to_json())
    lines = [f"# {title}", "", intro, "",
             f"Mode: **{mode}**. Whole run: **{total_seconds:.1f} s** on this machine's CPU "
             f"({len(rows)} checks, every input case of `core/input_cases.py` and `core/kernel_checks.py` each).", "",
             "| op | kernel | kind | dtype | dims | verdict | worst error / bound per output (input case) | s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        outs = "; ".join(f"{n}: {_fmt(o['error'])} / {_fmt(o['bound'])} ({o['case']})" for n, o in r["outputs"].items())
        verdict = (f"**{r['verdict']}** ({r['witness']['check']}, {r['witness']['case']})" if r["witness"]
                   and r["verdict"] in ("failed", "inconclusive") else r["verdict"])
        lines.append(f"| {r['op']} | `{r['kernel']}` | {r['kind']} | {r['dtype']} | {_dims(r['dims'])} | {verdict} | {outs} | "
                     f"{r['seconds']:.2f} |")
    summary: dict = {}
    for r in rows:
        summary.setdefault(r["verdict"], 0)
        summary[r["verdict"]] += 1
    lines += ["", "Verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(summary.items())) + ".", ""]
    lines += _per_kernel(rows)
    if findings:
        lines += [findings, ""]
    atomic_write(out / "README.md", "\n".join(lines))
    data = {"mode": mode, "total_seconds": round(total_seconds, 2), "summary": summary,
            "rows": [{k: v for k, v in r.items() if k != "cert"} for r in rows]}
    atomic_write(out / "liger.json" if "Liger" in title else out / "triton.json",
                 json.dumps(data, indent=1, sort_keys=True, default=str))


def _per_kernel(rows: list[dict]) -> list[str]:
    """Per kernel: at how many of its sizes it matched, and the first check it failed (a kernel right
    at some sizes and wrong at others shows here at once)."""
    out = ["## Per kernel", "", "| kernel | sizes | kernel-match | inconclusive | failed | first failure |",
           "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["kernel"] for r in rows):
        mine = [r for r in rows if r["kernel"] == name]
        bad = [r for r in mine if r["verdict"] == "failed"]
        first = (f"{bad[0]['witness']['check']} at {_dims(bad[0]['dims'])} ({bad[0]['witness']['case']})"
                 if bad else "")
        out.append(f"| `{name}` | {len(mine)} | {sum(r['verdict'] == 'kernel-match' for r in mine)} | "
                   f"{sum(r['verdict'] == 'inconclusive' for r in mine)} | {len(bad)} | {first} |")
    return out + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vjpcert.triton_report", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="Python files defining TRITON_KERNELS")
    p.add_argument("--liger", action="store_true", help="Liger-Kernel's kernels (the committed report)")
    p.add_argument("--out", default=None, help="report folder (default reports/liger with --liger, else reports/triton)")
    p.add_argument("--seed", type=seed_or_fresh, default=0,
                   help="seed of the inputs and the drawn sizes (default 0, replayable); 'fresh': a new one, "
                        "printed and recorded in every certificate")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = fresh_seed()
        print(f"seed {args.seed} (fresh; replay with --seed {args.seed})")
    try:
        from vjpcert.triton_kernels.check import detect_mode, unavailable_reason
        why = unavailable_reason()
        if why:
            raise SpecError(None, why)
        if args.liger:
            from vjpcert.triton_kernels.registry import discover
            kernels_all, missing = discover()
            if "liger" in missing:
                raise SpecError(None, f"liger-kernel does not import: {missing['liger']}")
            kernels = [k for k in kernels_all.values() if k.source.startswith("liger-kernel")]
        else:
            if not args.files:
                raise SpecError(None, "give Python files defining TRITON_KERNELS, or --liger")
            kernels = [k for f in args.files for k in load_user_kernels(f)]
        out = Path(args.out or ("reports/liger" if args.liger else "reports/triton"))
        mode = detect_mode()
        print(f"Triton tier ({mode}): {len(kernels)} kernels")
        t0 = time.perf_counter()
        rows = run(kernels, seed=args.seed)
        total = time.perf_counter() - t0
    except SpecError as exc:
        print(f"vjpcert: {exc}", file=sys.stderr)
        return 2
    if args.liger:
        from vjpcert.liger_findings import CASTINGS, FINDINGS, INTRO
        write(rows, out, title="Liger-Kernel against vjpcert specs", intro=INTRO(mode), total_seconds=total,
              mode=mode, findings=FINDINGS(rows) + "\n\n" + CASTINGS())
    else:
        write(rows, out, title="Triton kernels against vjpcert specs",
              intro="\n\n".join(filter(None, (file_intro(f) for f in args.files))), total_seconds=total, mode=mode)
    failed = [r for r in rows if r["verdict"] != "kernel-match"]
    print(f"{len(rows) - len(failed)}/{len(rows)} kernel-match in {total:.1f} s; report: {out / 'README.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
