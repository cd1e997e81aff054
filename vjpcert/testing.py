"""Certify ops and implementations from your own test suite (also the ``vjpcert`` pytest fixture).

    from vjpcert.testing import assert_proved, assert_checked, assert_matches_spec

    def test_my_op():
        assert_proved("my_ops.py::square_scale")            # exact proofs, or a readable failure
        assert_checked("softmax", dps=30)                    # mpmath, digits of agreement

    def test_my_kernel():
        assert_matches_spec("softmax", my_softmax_backward, kind="backward", dtype=np.float32)

Ops are given as a registered op, a built-in name, or ``"path/to/file.py::op_name"``. Failures
raise ``CertificationError`` (an AssertionError) that shows the witness and the residual.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from vjpcert.specs import resolve_op as resolve


class CertificationError(AssertionError):
    pass


def _hide_certification_failures(excinfo) -> bool:
    """pytest's ``__tracebackhide__``: a failed certification is about the user's op or kernel, so
    its traceback stops at the user's test; any other error (a bug, a bad spec file) keeps these frames."""
    return excinfo.errisinstance(CertificationError)


def _short_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class CertificateCache:
    """Certificates a test suite derived, kept in a folder and reused while they are current.

    Whether a kept certificate is current is the planner's own rule (``vjpcert.plan.is_current``, what
    resuming `vjpcert all` uses): intact (its digest), the certificate of this very task, and issued for
    the spec, data and checker code there is now. On top of that a certificate is trusted only as this
    cache wrote it: beside each one lies the sha256 of its file, so a record edited by hand, even with
    its digest made again, or one copied in from elsewhere, is derived again instead. Only decided
    verdicts are kept (passed or failed): an inconclusive run (a budget ran out, the checker crashed)
    is tried again next time."""

    def __init__(self, root):
        self.root = Path(root)
        self.reused = 0
        self.derived = 0

    def _path(self, task, op) -> Path:
        from vjpcert.plan import task_identity, task_relpath
        ref = task.op
        # two spec files may define ops of the same name, and tests may ask for the same claim with
        # other options (digits, budget) where a report directory keeps one: each gets its own file
        where = json.dumps([ref.name, ref.file, ref.mutant, ref.frontend, ref.collection])
        folder = f"{op.base_name}-{_short_sha(where)}"
        rel = task_relpath(task, op.base_name)
        name = f"{rel.stem}__{_short_sha(json.dumps(task_identity(task, op), sort_keys=True))}{rel.suffix}"
        return self.root / folder / rel.with_name(name)

    @staticmethod
    def _seal(path: Path) -> Path:
        return path.with_name(path.name + ".sha256")

    def _kept(self, path: Path) -> dict | None:
        try:
            data = path.read_bytes()
            seal = self._seal(path).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != seal:
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None

    def run(self, tasks, op) -> list:
        """The certificate of each task: the kept one when current, else derived now (and kept)."""
        from vjpcert import runner
        from vjpcert.core.certificate import Certificate, atomic_write
        from vjpcert.plan import is_current
        out = []
        for task in tasks:
            path = self._path(task, op)
            record = self._kept(path)
            if record is not None and is_current(record, task, op):
                try:
                    out.append(Certificate.from_dict(record))
                    self.reused += 1
                    continue
                except (TypeError, ValueError):
                    pass
            cert = runner.execute(task)
            self.derived += 1
            if cert.passed or cert.verdict == "failed":
                text = cert.to_json()
                atomic_write(path, text)
                atomic_write(self._seal(path), hashlib.sha256(text.encode("utf-8")).hexdigest() + "\n")
            out.append(cert)
        return out


def _run(tasks, op, cache: CertificateCache | None) -> list:
    if cache is not None:
        return cache.run(tasks, op)
    from vjpcert import runner
    return [runner.execute(t) for t in tasks]


def _explain(certs) -> str:
    lines = []
    for c in certs:
        if c.passed:
            continue
        lines.append(f"{c.op} {c.claim} at {c.dims}: {c.verdict} ({c.method})")
        w = c.evidence.get("witness")
        if w:
            keep = {k: v for k, v in w.items() if k not in ("point", "dy", "u")}
            lines.append("  witness: " + json.dumps(keep, default=str)[:800])
            if "point" in w:
                lines.append("  at: " + json.dumps(w["point"], default=str)[:400])
        elif "reason" in c.evidence:
            lines.append(f"  {c.evidence['reason']}")
    return "\n".join(lines)


def assert_proved(op, claims=None, dims: dict | None = None, budget: float = 60.0, general: bool = True,
                  cache: CertificateCache | None = None):
    """Prove every claim (or those named) exactly, as `vjpcert prove` plans them (its dims ladder,
    compositional and every-size proofs; ``dims`` as `--dims`); raise with the witnesses otherwise.
    ``cache``: reuse the current certificates kept there (the pytest fixture's)."""
    __tracebackhide__ = _hide_certification_failures
    from vjpcert.plan import plan_op
    op = resolve(op)
    certs = _run(plan_op(op, ("symbolic",), dims=dims, claims=claims, budget=budget, general=general), op, cache)
    if not all(c.verdict.startswith("proved") for c in certs):
        raise CertificationError("not proved:\n" + _explain([c for c in certs if not c.verdict.startswith("proved")]
                                                              or certs))
    return certs


def assert_checked(op, claims=None, dims: dict | None = None, dps: int = 50,
                   cache: CertificateCache | None = None):
    """Check every claim in mpmath as `vjpcert check` plans them (its dims, the float references);
    raise with the witnesses otherwise. ``cache``: as for ``assert_proved``."""
    __tracebackhide__ = _hide_certification_failures
    from vjpcert.plan import plan_op
    op = resolve(op)
    certs = _run(plan_op(op, ("numeric",), dims=dims, claims=claims, dps=dps), op, cache)
    if not all(c.passed for c in certs):
        raise CertificationError("not checked:\n" + _explain(certs))
    return certs


def assert_matches_spec(op, impl, *, kind: str = "backward", dims: dict | None = None, dtype=np.float32,
                        seed: int = 0, params: dict | None = None):
    """An implementation of the op's forward (``impl(**inputs) -> y``) or backward
    (``impl(**inputs, dy=...) -> cotangents``; a torch.autograd.Function works too, and its forward
    is checked with its backward) against the spec, under the tolerance rule of
    ``vjpcert.core.tolerance`` at ``dtype``, with the spec at ``params`` (e.g. ``{"eps": 1e-6}``; an
    implementation that takes a parameter by name is given the same value)."""
    __tracebackhide__ = _hide_certification_failures
    op = resolve(op)
    if kind == "backward":
        from vjpcert.impl import check_backward
        cert = check_backward(op, impl, name=getattr(impl, "__name__", "impl"), dims=dims, dtype=dtype, seed=seed,
                              params=params)
        if cert.verdict == "inconclusive":
            raise CertificationError(f"inconclusive: {cert.evidence['reason']}: {cert.evidence['ill_conditioned'][0]}")
        if cert.verdict != "checked":
            w = cert.evidence["witness"]
            what = "forward" if w["cotangent"] == "forward" else f"{w['cotangent']}{w['index']} of {op.name}'s backward"
            if w["cotangent"] == "forward":
                what = f"{op.name}'s forward{w['index']} (an autograd.Function's forward is checked too)"
            raise CertificationError(
                (f"{w['dtype']}: " if w.get("dtype") else "")
                + f"{what}: implementation {w['implementation']!r}, "
                f"spec {w['spec (50 digits)']!r}; error {w['error']:.3g} vs bound {w['bound']:.3g} "
                f"({cert.evidence['rule']}; {w['case']} inputs, seed {seed})")
        return cert
    if kind != "forward":
        raise ValueError("kind is 'forward' or 'backward'")
    return _check_forward(op, impl, dims, dtype, seed, params)


def assert_triton_matches(op, launcher, *, kind: str = "backward", dims=None, seed: int = 0, cases=None,
                          name: str | None = None, laws=(), dtype: str = "float32", accumulate: str = "float32"):
    """A Triton kernel of yours against the op's spec, through the Triton tier (in Triton's interpreter
    without a GPU): ``launcher`` takes the spec's argument names as numpy arrays (``dy`` for a backward,
    and the op's params) and returns numpy arrays; allocate with ``vjpcert.triton_kernels.harness``
    (``device_tensor``, ``empty``) so inputs are fenced and outputs NaN-poisoned. ``dims``: one dims
    dict or a list (default: the op's check dims), to which the gate adds its own sizes (edge sizes,
    and sizes drawn from your kernel's code and ``seed``; ``seed="fresh"`` draws a new seed each run,
    recorded in the certificates). ``dtype``: the kernel's inputs and outputs ("bfloat16", "float16"),
    ``accumulate`` the dtype its sums accumulate in. Returns the certificates; raises with the witness."""
    __tracebackhide__ = _hide_certification_failures
    from vjpcert.triton_kernels.check import check_triton_claim, unavailable_reason
    from vjpcert.triton_kernels.gate import gate_sizes
    from vjpcert.triton_kernels.registry import TritonKernel
    why = unavailable_reason()
    if why:
        raise CertificationError(why)
    op = resolve(op)
    if kind not in ("forward", "backward"):
        raise ValueError("kind is 'forward' or 'backward'")
    outputs = ("y",) if kind == "forward" else tuple(f"d{n}" for n in op.inputs)
    kernel = TritonKernel(name or getattr(launcher, "__name__", "user_kernel"), op.base_name, kind, outputs,
                          launcher, tuple(laws), source="your kernel", dtype=str(dtype), accumulate=str(accumulate))
    if seed == "fresh":         # a seed no kernel could have known; a failure's witness records it
        from vjpcert.triton_report import fresh_seed
        seed = fresh_seed()
    # your sizes, then the gate's (sizes your kernel cannot choose: triton_kernels/gate.py)
    ladder = gate_sizes(kernel, op, seed, declared=[dims] if isinstance(dims, dict) else list(dims or [op.check_dims]))
    certs = [check_triton_claim(op, kernel.claim, d, seed=seed, kernel=kernel, cases=cases) for d in ladder]
    if not all(c.verdict == "kernel-match" for c in certs):
        raise CertificationError("Triton kernel does not match the spec:\n" + _explain(certs))
    return certs


def assert_cuda_kernels_match(path, *, seed: int = 0):
    """Every Numba CUDA kernel of your kernel file (``KERNELS``, with error models; ``SIZES`` optional:
    ``vjpcert/cuda_report.py``) through the kernel tier -- error model per element, input cases, race
    detector in the simulator, determinism with the threads reversed, laws -- at its sizes. Returns
    the certificates; raises with the witness of each that is not ``kernel-match``."""
    __tracebackhide__ = _hide_certification_failures
    from vjpcert.core.registry import SpecError
    from vjpcert.cuda_kernels.check import detect_mode
    from vjpcert.cuda_report import load_kernel_file, run
    if detect_mode() == "none":
        raise CertificationError("no CUDA to run kernels on: install numba-cuda (the simulator needs no GPU)")
    try:
        kernels, sizes, _ = load_kernel_file(path)
    except SpecError as exc:
        raise CertificationError(str(exc)) from None
    certs = [r["cert"] for r in run(kernels, sizes, seed=seed, progress=lambda *a: None)]
    if not all(c.verdict == "kernel-match" for c in certs):
        raise CertificationError("CUDA kernel does not match the spec:\n" + _explain(certs))
    return certs


def _check_forward(op, impl, dims, dtype, seed, params=None):
    """The forward against the spec: the reference is the spec in mpmath (50 digits) rounded to
    float64, the baseline the spec at ``dtype`` (as for backwards)."""
    __tracebackhide__ = _hide_certification_failures
    from vjpcert.core import tolerance
    from vjpcert.core.reference import forward
    from vjpcert.core import low_precision as low
    from vjpcert.impl import _accepted, _arithmetic, _baseline, _dtype_leak, _outside_rule, spec_params, truth_forward
    from vjpcert.numeric.sampling import sample_point
    dtype = low.storage_dtype(dtype)
    d = op.resolve_dims(dims or op.check_dims)
    values = spec_params(op, params)
    given = {k: values[k] for k in _accepted(impl, values)}
    start = time.perf_counter()
    for case in ("random", "large_magnitude", "near_constant"):
        point = sample_point(op, d, case, seed)
        if low.is_low(dtype):       # drawn in the dtype: the truth is computed from these very values
            point = {k: low.rounded(v, dtype) if k in op.inputs else v for k, v in point.items()}
        truth = truth_forward(op, point, params=params)
        baseline = _baseline(forward(op, _arithmetic(dtype), params=params, **point), dtype)
        held = {k: dtype if k in op.inputs or not low.is_low(dtype) else np.float32 for k in point}
        got = np.asarray(impl(**{k: np.asarray(v, np.float64).astype(held[k]) for k, v in point.items()}, **given))
        if got.shape != truth.shape:
            raise CertificationError(f"{op.name} forward: implementation returned shape {got.shape}, spec {truth.shape}")
        leak = _dtype_leak(got, dtype)
        if leak:
            raise CertificationError(f"{op.name} forward: {leak}")
        r = tolerance.compare(got, truth, baseline, backward=False, dtype=dtype)
        if not r["ok"]:
            idx = np.unravel_index(r["worst_index"], truth.shape)
            found = _outside_rule(op, "forward", 0, got, truth, point, None, params, dtype)
            if found.get("ill_conditioned"):
                raise CertificationError(
                    f"inconclusive: {op.name} forward{[int(i) for i in idx]} is outside the rule (error {r['error']:.3g} > "
                    f"{r['bound']:.3g}) but within k x the rounding bound that holds for every summation order in "
                    f"{dtype.name}: ill-conditioned {case} inputs ({found['ill_conditioned']})")
            raise CertificationError(
                f"{op.name} forward{[int(i) for i in idx]}: implementation {float(got[idx])!r}, spec {float(truth[idx])!r}; "
                f"error {r['error']:.3g} > bound {r['bound']:.3g} ({tolerance.rule_in_words(False, dtype)}; "
                f"{case} inputs, seed {seed})")
    return time.perf_counter() - start
