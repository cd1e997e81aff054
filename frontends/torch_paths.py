"""The paths a torch function takes at other dtypes and on other devices, so that none hides.

``make_fx`` records the one path the function takes for the example inputs: fake cpu tensors of one
dtype. A function that branches on ``x.dtype`` (a fused ``autograd.Function`` for float16/bfloat16/
float32, plain ops for float64) or on ``x.is_cuda`` would be proved for a path training never takes.

* **dtype.** By default the graph proved is float64's, and the function is traced at float32,
  bfloat16 and float16 too; each graph must be the float64 one modulo casts (``canonical``: a cast
  between float dtypes and an identity op are skipped, float constants compared rounded to float32,
  the precision PyTorch computes all three in, dtype arguments as their kind). One that differs, or fails to trace, is refused, naming the
  dtype to pass (``dtype=``, ``--dtype``) to prove the graph that dtype runs; with a dtype given, that
  dtype's graph alone is traced and proved (the assumptions say so).
* **device.** A fake CUDA tensor cannot go through autograd in a build without CUDA (the process
  aborts), so the function is not traced on CUDA. Instead ``DeviceProbe`` watches what the function's
  own code (any frame outside PyTorch and this package) reads of the device: ``x.is_cuda``,
  ``x.is_cpu``, ``x.get_device()``, ``x.device``, ``torch.cuda.is_available()`` /
  ``device_count()``. If it reads any, it is traced once more (in a forked child: a CUDA-only path may
  abort) with those reads answered as on CUDA (``x.device`` answers ``cuda:0`` to every question the
  code asks of it, while PyTorch's argument parser, which reads a ``str``'s characters, still makes
  cpu tensors of it), and the graph must be the same. PyTorch's own choice of kernels by device (in
  C++, such as fused attention) is not seen: the assumptions say "traced on cpu".
"""
from __future__ import annotations

import math
import sys
import threading
from pathlib import Path

from vjpcert.frontends.eager import HELD
from vjpcert.frontends.precision import DEFAULT, checked_paths, commuted, round_to, term, who
from vjpcert.frontends.torch_graph import _op_name, trace
from vjpcert.frontends.torch_rules import RULES, _identity

FRONTEND_DIR = str(Path(__file__).resolve().parent)
_LOCK = threading.RLock()          # the probe patches classes: one trace at a time in a process
_PLACEMENT = {"device", "layout", "pin_memory", "memory_format", "non_blocking"}
_CASTS = ("aten._to_copy.default", "prims.convert_element_type.default")


# ------------------------------------------------------------------------------ graphs modulo casts
def canonical(g, at: str) -> tuple:
    """The graph as the terms its outputs compute (``precision.term``: the same term is the same
    value, whatever order the trace met it in), with casts between float dtypes and identity ops
    skipped, float constants rounded to ``at`` and dtypes as their kind: (outputs, terms)."""
    # a Python float in an ATen graph stays a double whatever the tensors' dtype, and PyTorch's kernels
    # compute float16 and bfloat16 in float32: a constant can only be rounded to float32 (rms_norm's eps)
    at = "float64" if at == "float64" else "float32"
    ref = {ph: term(("in", i)) for i, ph in enumerate(g.placeholders)}
    # a constant the trace lifted (x[:, [0, 1, 3, 2]]'s index) by its values: an index that depends on
    # the dtype or the device is another graph
    ref.update({node: term(("lifted", tuple(v.a.shape), tuple(v.a.ravel().tolist()))) for node, v in g.lifted.items()})
    terms: dict = {}
    needed = g._needed["all"]
    for n in g.order:
        if n not in needed:
            continue
        name = _op_name(n.target)
        if RULES.get(name) is _identity or (name in _CASTS and _float_to_float(n)):
            ref[n] = _arg(n.args[0], ref, at)
            continue
        kwargs = tuple(sorted((k, _arg(v, ref, at)) for k, v in n.kwargs.items() if k not in _PLACEMENT))
        args = _arg(tuple(n.args), ref, at)
        ref[n] = term((name, commuted(name, args, kwargs), kwargs), terms, name)
    return tuple(None if o is None else _arg(o, ref, at) for o in g.outputs), terms


def _float_to_float(n) -> bool:
    out, src = n.meta.get("val"), getattr(n.args[0], "meta", {}).get("val") if n.args else None
    return out is not None and src is not None and out.dtype.is_floating_point and src.dtype.is_floating_point


def _arg(a, idx, at):
    import torch          # optional and slow to import; loaded by then, since a graph was traced
    if hasattr(a, "op") and hasattr(a, "all_input_nodes"):
        return idx.get(a) or term(("node", a.op, str(a.target)))
    if isinstance(a, (list, tuple)):
        return tuple(_arg(x, idx, at) for x in a)
    if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        return a
    if isinstance(a, float):
        return ("float", round_to(a, at) if math.isfinite(a) else repr(a))
    if isinstance(a, torch.dtype):
        return ("dtype", "float" if a.is_floating_point else "bool" if a == torch.bool else str(a))
    if isinstance(a, torch.device):
        return ("device",)
    return (type(a).__name__, str(a))


# ------------------------------------------------------------------------------ the device
class _CudaDevice(str):
    """``x.device`` as on CUDA: ``cuda:0`` to the code's questions (``.type``, ``==``, ``str``), the
    string "cpu" to PyTorch's argument parser (``device=x.device`` still makes fake cpu tensors)."""

    def __new__(cls):
        return str.__new__(cls, "cpu")

    type = "cuda"
    index = 0

    def __str__(self):
        return "cuda:0"

    def __repr__(self):
        return "device(type='cuda', index=0)"

    def __eq__(self, other):
        return str(other) in ("cuda", "cuda:0")

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash("cuda:0")


class DeviceProbe:
    """While active: records each read of the device by the function's own code (frames outside
    PyTorch and this package) and, ``as_cuda``, answers it as on CUDA."""

    def __init__(self, as_cuda: bool = False):
        self.as_cuda = as_cuda
        self.reads: list[str] = []
        self._saved: list = []

    def _read(self, what: str, real, cuda):
        frame = sys._getframe(2)                       # the code that asked (getter -> _read)
        file = frame.f_code.co_filename
        if not (file.startswith(_TORCH_DIR[0]) or file.startswith(FRONTEND_DIR)):
            where = f"{what} at {Path(file).name}:{frame.f_lineno}"
            if where not in self.reads:
                self.reads.append(where)
            if self.as_cuda:
                return cuda
        return real()

    def _patch(self, owner, name, value):
        self._saved.append((owner, name, name in owner.__dict__, owner.__dict__.get(name)))
        setattr(owner, name, value)

    def __enter__(self):
        import torch      # optional and slow to import: only a torch trace enters the probe
        from torch._subclasses.fake_tensor import FakeTensor
        _LOCK.acquire()
        _TORCH_DIR[0] = str(Path(torch.__file__).resolve().parent)
        base, probe = torch._C.TensorBase, self
        fake_device = FakeTensor.__dict__["device"]
        try:
            self._patch(torch.Tensor, "is_cuda",
                        property(lambda t: probe._read("x.is_cuda", lambda: base.is_cuda.__get__(t), True)))
            self._patch(torch.Tensor, "is_cpu",
                        property(lambda t: probe._read("x.is_cpu", lambda: base.is_cpu.__get__(t), False)))
            self._patch(torch.Tensor, "get_device",
                        lambda t: probe._read("x.get_device()", lambda: base.get_device(t), 0))
            self._patch(FakeTensor, "device",
                        property(lambda t: probe._read("x.device", lambda: fake_device.__get__(t), _CudaDevice())))
            available, count = torch.cuda.is_available, torch.cuda.device_count
            self._patch_module(torch.cuda, "is_available",
                               lambda: probe._read("torch.cuda.is_available()", available, True))
            self._patch_module(torch.cuda, "device_count",
                               lambda: probe._read("torch.cuda.device_count()", count, 1))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _patch_module(self, module, name, value):
        self._saved.append((module, name, True, getattr(module, name)))
        setattr(module, name, value)

    def __exit__(self, *exc):
        try:
            for owner, name, had, old in reversed(self._saved):
                if had:
                    setattr(owner, name, old)
                else:
                    delattr(owner, name)
            self._saved.clear()
        finally:
            _LOCK.release()
        return False


_TORCH_DIR = ["\0"]


# ------------------------------------------------------------------------------ the checked trace
def trace_checked(fn, shapes, n_diff, params, *, constants: str, op_name: str, dtype: str | None,
                  compare: bool = True):
    """The graph proved: traced at ``dtype`` (float64 when None), refused if the function's graph at
    another dtype (when none is given) or as on CUDA (when its code reads the device) differs."""

    def one(d, as_cuda):
        probe = DeviceProbe(as_cuda)
        g = trace(fn, shapes, n_diff, params, constants=constants, op_name=op_name, dtype=d, probe=probe)
        if compare and not as_cuda:
            # the graph is what PyTorch runs on real tensors, at every dtype traced
            g.against_eager(strict=d == (dtype or DEFAULT))
            g.eager = getattr(g, "eager", None) or HELD
        return g, probe.reads, []
    # in a forked child: a CUDA-only path may make a fake CUDA tensor, and autograd on one aborts
    # the process in a build without CUDA
    return checked_paths(one, canonical, dtype=dtype, op_name=op_name, name=who(fn, op_name), fork=True,
                         compare=compare)
