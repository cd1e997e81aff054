"""Real implementations put to the test: a backward someone else wrote (PyTorch's own, or yours)
against the certified spec, at float64, float32, bfloat16 or float16, under the tolerance rule of
``vjpcert.core.tolerance``.

    truth     = the spec's backward in mpmath (50 digits), rounded to float64
    baseline  = the spec's backward evaluated at the implementation's dtype (numpy backend); for
                bfloat16 and float16 (inputs drawn in that dtype, the truth computed from those very
                values), the spec in float32 rounded to the dtype
    pass      = |impl - truth| <= 3 |baseline - truth| + 4 u * max|truth|   (per cotangent)

Outside the rule, a cotangent within 3 x the rounding bound that holds for every summation order at
the implementation's precision (``core/kernel_bounds.py``; a low-precision implementation may round
any intermediate to its dtype) makes the verdict ``inconclusive`` (ill-conditioned inputs), never
``failed``; beyond it, ``failed`` with the element and the bound.

``vjpcert check OP --impl module:function`` checks your own: ``function`` is either a plain callable
``f(**inputs, dy=...) -> tuple of cotangents`` (numpy in, numpy out) or a ``torch.autograd.Function``
subclass whose ``apply`` takes the op's differentiable inputs in order.
"""
from __future__ import annotations

import inspect
import json
import math
import time
from fractions import Fraction
from pathlib import Path
from typing import Mapping

import numpy as np

from vjpcert.numeric.sampling import cotangent, sample_point
from vjpcert.core import tolerance
from vjpcert.core.backends import MpmathBackend
from vjpcert.core import kernel_bounds
from vjpcert.core import low_precision as low
from vjpcert.core.certificate import Certificate, atomic_write, checker_code_sha256
from vjpcert.core.reference import forward as reference_forward
from vjpcert.core.reference import vjp as reference_vjp
from vjpcert.core.registry import Op, SpecError

CHECKER_SHA256 = checker_code_sha256(__name__)


def spec_params(op: Op, params: Mapping | None) -> dict:
    """The op's parameter values with the given ones applied; an unknown name is bad input."""
    params = dict(params or {})
    unknown = set(params) - set(op.params)
    if unknown:
        raise SpecError(op.name, f"unknown params {sorted(unknown)}; it has {list(op.params) or 'none'}")
    return {k: params.get(k, p.default) for k, p in op.params.items()}


def _exact(v):
    """A parameter value as an exact number: a float is the decimal it prints as (1e-06 is 1/10^6)."""
    if isinstance(v, float):
        return Fraction(repr(v))
    return v


def _mp_values(op: Op, B: MpmathBackend, point: dict, params: Mapping | None) -> dict:
    values = {k: B.convert(v) for k, v in point.items()}
    for k, v in spec_params(op, params).items():
        values[k] = B.c(_exact(v)) if op.params[k].symbolic else v
    return values


def _to_float64(a) -> np.ndarray:
    return np.vectorize(float, otypes=[np.float64])(np.asarray(a, dtype=object))


def truth_vjp(op: Op, point: dict, dy: np.ndarray, dps: int = 50, params: Mapping | None = None) -> tuple:
    """The spec's backward in mpmath (50 digits), rounded once to float64."""
    B = MpmathBackend(dps)
    values = _mp_values(op, B, point, params)
    with B.strict():
        cots = op.bind(op.vjp, B, {**values, "dy": B.convert(dy)})
    return tuple(_to_float64(c) for c in cots)


def truth_forward(op: Op, point: dict, dps: int = 50, params: Mapping | None = None) -> np.ndarray:
    """The spec's forward in mpmath (50 digits), rounded once to float64: the reference of a forward
    check (the float64 spec is the *baseline* of a float64 check, so it cannot be its reference too)."""
    B = MpmathBackend(dps)
    values = _mp_values(op, B, point, params)
    with B.strict():
        y = op.bind(op.forward, B, values)
    return _to_float64(y)


def _accepted(fn, names, skip: int = 0) -> list[str]:
    """The names among ``names`` that ``fn`` takes (all of them if it takes **kwargs), in the order of
    its signature."""
    try:
        sig = list(inspect.signature(fn).parameters.values())[skip:]
    except (TypeError, ValueError):
        return []
    if any(p.kind == p.VAR_KEYWORD for p in sig):
        return list(names)
    return [p.name for p in sig if p.name in names]


class Implementation:
    """A uniform face on what a user gives: ``backward(point, dy) -> cotangents`` and, for a torch
    ``autograd.Function`` (whose forward is part of what runs), ``forward(point) -> y``. The spec's
    parameter values (the given ones, else its defaults) reach the implementation when it takes them:
    by name for a callable; for a Function, positionally after its tensor inputs, in the order its
    ``forward`` names them. So both sides run at the same eps."""

    def __init__(self, impl, op: Op, dtype, params: Mapping | None):
        self.op, self.dtype = op, low.storage_dtype(dtype)
        values = spec_params(op, params)
        self.forward = None
        names = list(op.inputs)
        try:
            import torch
            is_fn = inspect.isclass(impl) and issubclass(impl, torch.autograd.Function)
        except ImportError:
            is_fn = False
        if is_fn:
            tdtype = low.torch_dtype(self.dtype)
            extra = [values[k] for k in _accepted(impl.forward, values, skip=1 + len(op.inputs) + len(op.nondiff))]

            def tensor(a, dtype=self.dtype):
                return low.from_numpy(np.asarray(a, np.float64).astype(dtype))

            def run(point, dy=None):
                xs = [tensor(point[n]).requires_grad_() for n in names]
                fixed = [tensor(point[n], self.held_as(n)) for n in op.nondiff]
                out = impl.apply(*xs, *fixed, *extra)
                if dy is None:
                    return low.to_numpy(out)
                grads = torch.autograd.grad(out, xs, tensor(dy), allow_unused=True)
                return tuple(np.zeros(np.shape(point[n]), dtype=self.dtype) if g is None else low.to_numpy(g)
                             for n, g in zip(names, grads))
            self.backward = lambda point, dy: run(point, dy)
            self.forward = lambda point: run(point)
            return

        given = {k: values[k] for k in _accepted(impl, values)}

        def backward(point, dy):
            out = impl(**{k: np.asarray(v, np.float64).astype(self.held_as(k)) for k, v in point.items()},
                       dy=np.asarray(dy, np.float64).astype(self.dtype), **given)
            if not isinstance(out, (tuple, list)) or len(out) != len(names):
                raise SpecError(op.name, f"the implementation returned {type(out).__name__}; expected a tuple of "
                                         f"{len(names)} cotangents ({names})")
            return tuple(np.asarray(o) for o in out)
        self.backward = backward

    def held_as(self, name: str):
        """The dtype an argument is handed in: the implementation's; a low-precision one gets its
        non-differentiable arguments (positions, targets, masks) in float32, as the spec reads them."""
        return np.float32 if low.is_low(self.dtype) and name not in self.op.inputs else self.dtype


def _dtype_leak(got, dtype) -> str | None:
    """A float32 check of an implementation that answers in float64 has checked float64 code (and a
    bfloat16 check of one that answers in float32, float32 code)."""
    g = np.asarray(got)
    if np.dtype(dtype) != np.float64 and g.dtype != np.dtype(dtype):
        return f"the implementation returned {g.dtype} in a {np.dtype(dtype).name} check (it computed in {g.dtype})"
    return None


def _outside_rule(op: Op, kind: str, index: int, got, truth, point, dy, params, dtype) -> dict:
    """Where a cotangent (or the forward) is outside the rule: ``inconclusive`` evidence when it is within
    K x its any-order rounding bound at every element, else where it is beyond that bound."""
    casting = (kernel_bounds.undocumented_casting(dtype.name) if low.is_low(dtype) else
               kernel_bounds.Casting(f"{dtype.name} arithmetic", dtype.name, None))
    diff = {k: v for k, v in point.items() if k in op.inputs or k in op.nondiff}
    if not kernel_bounds.analysable(diff, dy):
        return {"any_order_bound": "not computed at these dims (core/kernel_bounds.py)"}
    try:
        exact = {k: _exact(v) for k, v in spec_params(op, params).items()}
        bound = kernel_bounds.any_order_bounds(op, kind, diff, dy, exact, storage=dtype.name, casting=casting)[index]
    except SpecError:
        raise
    except Exception:        # a construct the running error analysis does not follow
        return {}
    factor = kernel_bounds.K_REFORMULATION[kind]
    within = kernel_bounds.ill_conditioned(got, truth, bound, factor, tolerance.unit_roundoff(dtype))
    if within:
        return {"ill_conditioned": within}
    return {"outside_any_order_bound": kernel_bounds.outside(got, truth, bound, factor)}


def _witness(case, what, got, truth, r, point, dy, seed) -> dict:
    idx = np.unravel_index(r["worst_index"], np.shape(truth))
    return {"case": case, "cotangent": what, "index": [int(i) for i in idx],
            "implementation": float(np.asarray(got)[idx]), "spec (50 digits)": float(np.asarray(truth)[idx]),
            "error": r["error"], "bound": r["bound"],
            "point": {k: np.asarray(v).tolist() for k, v in point.items()},
            "dy": None if dy is None else np.asarray(dy).tolist(), "seed": seed}


def check_backward(op: Op, impl, *, name: str, dims: dict | None = None, dtype=np.float64, seed: int = 0,
                   cases=("random", "large_magnitude", "near_constant"), params: Mapping | None = None) -> Certificate:
    """Check an implementation's backward (and, for an autograd.Function, its forward) against the
    spec under the tolerance rule, at the given parameter values."""
    start = time.perf_counter()
    dtype = low.storage_dtype(dtype)
    values = spec_params(op, params)
    dims = op.resolve_dims(dims or op.check_dims)
    run = Implementation(impl, op, dtype, params)
    per_case, failure, ill = {}, None, []

    def judged(case, what, kind, index, got, truth, r, point, dy):
        """The failure of one output outside the rule, or None where rounding may explain it (recorded)."""
        found = _outside_rule(op, kind, index, got, truth, point, dy, params, dtype)
        if found.get("ill_conditioned"):
            ill.append({"case": case, "output": what, "error": r["error"], "bound": r["bound"],
                        **found["ill_conditioned"]})
            return None
        return {**_witness(case, what, got, truth, r, point, dy, seed), **found}
    for case in cases:
        point = sample_point(op, dims, case, seed)
        dy = cotangent(op.shape(op.output, dims), seed, op.name, case)
        if low.is_low(dtype):       # drawn in the dtype: the truth is computed from these very values
            point = {k: low.rounded(v, dtype) if k in op.inputs else v for k, v in point.items()}
            dy = low.rounded(dy, dtype)
        rows = {}
        if run.forward is not None:
            got = run.forward(point)
            truth = truth_forward(op, point, params=params)
            if np.shape(got) != np.shape(truth):
                raise SpecError(op.name, f"{name}: forward has shape {np.shape(got)}, expected {np.shape(truth)}")
            baseline = _baseline(reference_forward(op, _arithmetic(dtype), params=params, **point), dtype)
            r = tolerance.compare(got, truth, baseline, backward=False, dtype=dtype)
            rows["forward"] = _with_digits(r, truth)
            leak = _dtype_leak(got, dtype)
            if failure is None and leak:
                failure = {**_witness(case, "forward", got, truth, r, point, None, seed), "dtype": leak}
            elif failure is None and not r["ok"]:
                failure = judged(case, "forward", "forward", 0, got, truth, r, point, None)
        truth = truth_vjp(op, point, dy, params=params)
        baseline = tuple(_baseline(b, dtype) for b in reference_vjp(op, dy, _arithmetic(dtype), params=params, **point))
        got = run.backward(point, dy)
        siblings = max(float(np.abs(t).max()) for t in truth if np.size(t))
        for i, (n, g, t, b) in enumerate(zip(op.inputs, got, truth, baseline)):
            if np.shape(g) != np.shape(t):
                raise SpecError(op.name, f"{name}: cotangent for {n} has shape {np.shape(g)}, expected {np.shape(t)}")
            r = tolerance.compare(g, t, b, backward=True, dtype=dtype, floor_scale=siblings)
            rows[n] = _with_digits(r, t)
            leak = _dtype_leak(g, dtype)
            if failure is None and leak:
                failure = {**_witness(case, n, g, t, r, point, dy, seed), "dtype": leak}
            elif failure is None and not r["ok"]:
                failure = judged(case, n, "backward", i, g, t, r, point, dy)
        per_case[case] = rows
    evidence = {"implementation": name, "dtype": dtype.name, "params": {k: repr(v) for k, v in values.items()},
                "rule": tolerance.rule_in_words(True, dtype), "cases": per_case, "seed": seed,
                "forward_checked": run.forward is not None,
                "min_digits": min(r["digits"] for c in per_case.values() for r in c.values())}
    verdict = "checked"
    if failure is not None:
        verdict = "failed"
        evidence["witness"] = failure
    elif ill:
        verdict = "inconclusive"
        evidence["ill_conditioned"] = ill
        evidence["reason"] = ("outside the tolerance rule, yet within k x the rounding bound that holds for every "
                              f"summation order in {dtype.name}: ill-conditioned inputs, where the error does not tell "
                              "a wrong implementation from rounding (evidence.ill_conditioned: where, the bound and "
                              "its condition number)")
    suffix = "" if dtype == np.float64 else f"@{dtype.name}"
    return Certificate.issue(op, claim=f"impl[{name}]{suffix}", tier="implementation", verdict=verdict,
                             method=f"tolerance-rule@{dtype.name}", dims=dims,
                             assumptions=[f"{n} = {v!r}" for n, v in values.items()]
                             + ["truth: the spec in mpmath at 50 digits (the spec is proved separately)"]
                             + (["the autograd.Function's forward is checked too (the rule for forwards)"]
                                if run.forward is not None else []),
                             evidence=evidence, seconds=time.perf_counter() - start,
                             checker_sha256=CHECKER_SHA256)


def _with_digits(r: dict, truth) -> dict:
    own = float(np.abs(truth).max()) if np.size(truth) else 0.0
    r["digits"] = round(-math.log10(r["error"] / own), 1) if r["error"] and own else 16.0
    return r


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
DTYPES = ("float64", "float32", "bfloat16", "float16")


def parse_dtype(text: str | None):
    if text is None:
        return np.float64
    if text not in DTYPES:
        raise SpecError(None, f"--dtype {text}: implementations are checked in {', '.join(DTYPES)}")
    return low.storage_dtype(text)


def _arithmetic(dtype):
    """The dtype a baseline evaluates the spec in: its own, or float32 for bfloat16 and float16."""
    return np.float32 if low.is_low(dtype) else dtype


def _baseline(values, dtype):
    return low.rounded(values, dtype) if low.is_low(dtype) else values


def check_impl_command(args) -> int:
    from vjpcert.ops import import_object, parse_dims, parse_params, select_ops
    from vjpcert.reports import write_certificate, write_reports
    impl = import_object(args.impl, "--impl")
    dtype = parse_dtype(getattr(args, "dtype", None))
    params = parse_params(getattr(args, "param", None))
    selected = select_ops(args.targets)
    if len(selected) != 1:
        raise SpecError(None, "--impl needs exactly one op to compare with")
    _, op = selected[0]
    dims = op.resolve_dims({**op.check_dims, **parse_dims(args.dims or getattr(args, "dims_alias", None))})
    cert = check_backward(op, impl, name=args.impl, dims=dims, seed=args.seed, dtype=dtype, params=params)
    write_certificate(cert, Path(args.reports))
    write_reports(Path(args.reports), {op.name: op}, "vjpcert check --impl")
    print(f"{cert.verdict}: {args.impl} against {op.name} ({cert.evidence['min_digits']} digits, "
          f"rule: {cert.evidence['rule']})")
    if cert.verdict == "failed":
        from vjpcert.witness import witness_lines
        print("\n".join(witness_lines(cert, Path(args.reports), indent="  ")))
        return 1
    return 0
