"""Real implementations put to the test: a backward someone else wrote (PyTorch's own, or yours)
against the certified spec, at float64 or float32, under the tolerance rule of ``vjpcert.core.tolerance``.

    truth     = the spec's backward in mpmath (50 digits), rounded to float64
    baseline  = the spec's backward evaluated at the implementation's dtype (numpy backend)
    pass      = |impl - truth| <= 3 |baseline - truth| + 4 ulp * max|truth|   (per cotangent)

``vjpcert check OP --impl module:function`` checks your own: ``function`` is either a plain callable
``f(**inputs, dy=...) -> tuple of cotangents`` (numpy in, numpy out) or a ``torch.autograd.Function``
subclass whose ``apply`` takes the op's differentiable inputs in order.
"""
from __future__ import annotations

import importlib
import inspect
import json
import math
import time
from pathlib import Path

import numpy as np

from vjpcert.numeric.sampling import cotangent, sample_point
from vjpcert.core import tolerance
from vjpcert.core.backends import MpmathBackend
from vjpcert.core.certificate import Certificate, atomic_write, sources_sha256
from vjpcert.core.reference import vjp as reference_vjp
from vjpcert.core.registry import Op, SpecError

CHECKER_SHA256 = sources_sha256([Path(__file__), Path(tolerance.__file__)])


def truth_vjp(op: Op, point: dict, dy: np.ndarray, dps: int = 50) -> tuple:
    """The spec's backward in mpmath, rounded once to float64."""
    B = MpmathBackend(dps)
    values = {k: B.convert(v) for k, v in point.items()}
    values.update({k: (B.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()})
    with B.strict():
        cots = op.bind(op.vjp, B, {**values, "dy": B.convert(dy)})
    return tuple(np.vectorize(float, otypes=[np.float64])(np.asarray(c, dtype=object)) for c in cots)


def _as_backward(impl, op: Op, dtype):
    """A uniform ``backward(point, dy) -> tuple of numpy arrays`` from a callable or a torch Function."""
    names = list(op.inputs)
    try:
        import torch
        is_fn = inspect.isclass(impl) and issubclass(impl, torch.autograd.Function)
    except ImportError:
        is_fn = False
    if is_fn:
        tdtype = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32

        def backward(point, dy):
            xs = [torch.tensor(np.asarray(point[n]), dtype=tdtype, requires_grad=True) for n in names]
            out = impl.apply(*xs)
            grads = torch.autograd.grad(out, xs, torch.tensor(dy, dtype=tdtype), allow_unused=True)
            return tuple(np.zeros(np.shape(point[n])) if g is None else g.detach().numpy() for n, g in zip(names, grads))
        return backward

    def backward(point, dy):
        out = impl(**{k: np.asarray(v, dtype=dtype) for k, v in point.items()}, dy=np.asarray(dy, dtype=dtype))
        if not isinstance(out, (tuple, list)) or len(out) != len(names):
            raise SpecError(op.name, f"the implementation returned {type(out).__name__}; expected a tuple of "
                                     f"{len(names)} cotangents ({names})")
        return tuple(np.asarray(o) for o in out)
    return backward


def check_backward(op: Op, impl, *, name: str, dims: dict | None = None, dtype=np.float64, seed: int = 0,
                   cases=("random", "large_magnitude", "near_constant")) -> Certificate:
    """Check an implementation's backward against the spec under the tolerance rule."""
    start = time.perf_counter()
    dims = op.resolve_dims(dims or op.check_dims)
    backward = _as_backward(impl, op, dtype)
    per_case, failure = {}, None
    for case in cases:
        point = sample_point(op, dims, case, seed)
        dy = cotangent(op.shape(op.output, dims), seed, op.name, case)
        truth = truth_vjp(op, point, dy)
        baseline = reference_vjp(op, dy, dtype, **point)
        got = backward(point, dy)
        rows = {}
        siblings = max(float(np.abs(t).max()) for t in truth if np.size(t))
        for n, g, t, b in zip(op.inputs, got, truth, baseline):
            if np.shape(g) != np.shape(t):
                raise SpecError(op.name, f"{name}: cotangent for {n} has shape {np.shape(g)}, expected {np.shape(t)}")
            r = tolerance.compare(g, t, b, backward=True, dtype=dtype, floor_scale=siblings)
            own = float(np.abs(t).max()) if np.size(t) else 0.0
            r["digits"] = round(-math.log10(r["error"] / own), 1) if r["error"] and own else 16.0
            rows[n] = r
            if not r["ok"] and failure is None:
                idx = np.unravel_index(r["worst_index"], np.shape(t))
                failure = {"case": case, "cotangent": n, "index": [int(i) for i in idx],
                           "implementation": float(np.asarray(g)[idx]), "spec (50 digits)": float(t[idx]),
                           "error": r["error"], "bound": r["bound"],
                           "point": {k: np.asarray(v).tolist() for k, v in point.items()}, "dy": dy.tolist(),
                           "seed": seed}
        per_case[case] = rows
    evidence = {"implementation": name, "dtype": np.dtype(dtype).name,
                "rule": tolerance.rule_in_words(True, dtype), "cases": per_case, "seed": seed,
                "min_digits": min(r["digits"] for c in per_case.values() for r in c.values())}
    verdict = "checked"
    if failure is not None:
        verdict = "failed"
        evidence["witness"] = failure
    return Certificate.issue(op, claim=f"impl[{name}]", tier="numeric", verdict=verdict,
                       method=f"tolerance-rule@{np.dtype(dtype).name}", dims=dims,
                       assumptions=[f"{n} = {p.default}" for n, p in op.params.items()]
                       + ["truth: the spec's backward in mpmath at 50 digits (the spec is proved separately)"],
                       evidence=evidence, seconds=time.perf_counter() - start,
                       checker_sha256=CHECKER_SHA256)


# ------------------------------------------------------------------------------ PyTorch's own backwards
def torch_forwards() -> dict:
    """op name -> (the PyTorch call, a function of torch tensors): PyTorch's CPU ops whose autograd
    backward is put against our specs."""
    import torch
    import torch.nn.functional as F
    return {
        "softmax": ("torch.softmax", lambda x: torch.softmax(x, -1)),
        "log_softmax": ("torch.log_softmax", lambda x: torch.log_softmax(x, -1)),
        "layernorm": ("F.layer_norm", lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, 1e-5)),
        "rmsnorm": ("F.rms_norm", lambda x, g: F.rms_norm(x, (x.shape[-1],), g, 1e-6)),
        "gelu_erf": ("F.gelu(approximate='none')", lambda x: F.gelu(x)),
        "gelu_tanh": ("F.gelu(approximate='tanh')", lambda x: F.gelu(x, approximate="tanh")),
        "linear": ("F.linear", lambda x, W, b: F.linear(x, W, b)),
        "attention": ("F.scaled_dot_product_attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
        "attention_causal": ("F.scaled_dot_product_attention(is_causal=True)",
                             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    }


def autograd_backward(forward, names):
    """numpy in, numpy out: the cotangents PyTorch's autograd computes for ``forward``."""
    import torch

    def impl(dy, **point):
        xs = [torch.tensor(np.asarray(point[n]), dtype=torch.float64, requires_grad=True) for n in names]
        grads = torch.autograd.grad(forward(*xs), xs, torch.tensor(np.asarray(dy), dtype=torch.float64))
        return tuple(g.detach().numpy() for g in grads)
    return impl


def torch_agreement(ops: dict[str, Op], root: Path, seed: int = 0) -> list[dict]:
    """PyTorch's CPU backwards against the specs, float64; writes reports/torch_agreement.{json,md}."""
    import torch
    rows = []
    for op_name, (call, forward) in torch_forwards().items():
        op = ops[op_name]
        cert = check_backward(op, autograd_backward(forward, list(op.inputs)), name=call, seed=seed)
        rows.append({"op": op_name, "pytorch": call, "verdict": cert.verdict,
                     "min_digits": cert.evidence["min_digits"], "torch": torch.__version__,
                     "witness": cert.evidence.get("witness")})
    atomic_write(Path(root) / "torch_agreement.json", json.dumps(rows, indent=1) + "\n")
    lines = ["# PyTorch's own backwards against the specs", "",
             f"PyTorch {torch.__version__}, CPU, float64; every cotangent against the spec's backward at 50 digits, "
             "under the rule " + tolerance.rule_in_words(True, np.float64) + ". Random, large-magnitude and "
             "near-constant inputs. Command: `python benchmarks/torch_agreement.py`.", "",
             "| op | PyTorch | verdict | min digits of agreement |", "|---|---|---|---|"]
    lines += [f"| {r['op']} | `{r['pytorch']}` | {r['verdict']} | {r['min_digits']} |" for r in rows]
    atomic_write(Path(root) / "torch_agreement.md", "\n".join(lines) + "\n")
    return rows


# ------------------------------------------------------------------------------ the command
def check_impl_command(args) -> int:
    from vjpcert.ops import parse_dims, select_ops
    from vjpcert.reports import write_certificate, write_reports
    module_name, _, attr = args.impl.partition(":")
    if not attr:
        raise SpecError(None, f"--impl expects module:function, got {args.impl!r}")
    try:
        impl = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SpecError(None, f"--impl {args.impl}: cannot load it ({type(exc).__name__}: {exc})") from None
    selected = select_ops(args.targets)
    if len(selected) != 1:
        raise SpecError(None, "--impl needs exactly one op to compare with")
    _, op = selected[0]
    dims = op.resolve_dims({**op.check_dims, **parse_dims(args.dims or getattr(args, "dims_alias", None))})
    cert = check_backward(op, impl, name=args.impl, dims=dims, seed=args.seed)
    write_certificate(cert, Path(args.reports))
    write_reports(Path(args.reports), {op.name: op}, "vjpcert check --impl")
    print(f"{cert.verdict}: {args.impl} against {op.name} ({cert.evidence['min_digits']} digits, "
          f"rule: {cert.evidence['rule']})")
    if cert.verdict == "failed":
        w = cert.evidence["witness"]
        print(f"  witness: {w['cotangent']}{w['index']} = {w['implementation']!r}, spec {w['spec (50 digits)']!r}, "
              f"error {w['error']:.3g} > bound {w['bound']:.3g} ({w['case']} inputs, seed {w['seed']})")
        return 1
    return 0
