"""The PyTorch frontend: a torch function's forward and backward, traced by ``make_fx``, as an op.

    from vjpcert.frontends.pytorch import torch_op

    @torch_op(inputs={"x": ("rows", "n"), "gamma": ("n",)}, dims=[{"rows": 2, "n": 3}], params={"eps": 1e-6})
    def my_rmsnorm(x, gamma, eps):
        return MyRMSNorm.apply(x, gamma, eps)        # a torch.autograd.Function, or any torch code

How: ``make_fx`` (fake tensors, so no input value can steer the trace) records

    joint(x..., dy) = (f(x...), torch.autograd.grad(f(x...), x, dy))

as one flat graph of ATen ops: the forward, and the backward PyTorch would run (the custom
``backward``, or autograd's own derivative formulas). In-place ops are removed by functionalization.
An ATen op with an exact rule here (``RULES``) stays as it is; any other is replaced by PyTorch's own
decomposition (``torch._decomp``) and traced again, until every node has a rule, or one has neither:
that is bad input naming the op, never a silent skip. The graph is then evaluated node by node with
numpy over the backend ``B`` (``vjpcert.frontends.values``).

The fake tensors are cpu tensors of one dtype: float64 unless ``dtype=`` asks for another. A function
whose graph changes with the dtype or the device (a fused path for float32, or on CUDA) is refused
unless the dtype is named (``vjpcert.frontends.torch_paths``).

Rules give each op its mathematical meaning: ``aten.exp`` is exp, ``aten._softmax`` is
exp(x_i) / sum_j exp(x_j) (its shift by the row maximum is ``B.max_shift``: 0 exactly, the maximum in
floats). A comparison of input-dependent values (``aten.gt``, ``aten.amax``, ``relu``) is refused, as
it is in a spec: the proof would otherwise hold only on one side of the kink.
"""
from __future__ import annotations

import inspect
from typing import Callable, Mapping

from vjpcert.core.registry import Op, SpecError
from vjpcert.frontends.op import FrontendOp, call_by_name
from vjpcert.frontends.precision import check_dtype
from vjpcert.frontends.torch_graph import TorchGraph, trace  # noqa: F401  (re-exported: the frontend's names)
from vjpcert.frontends.torch_module import TorchModule, is_module
from vjpcert.frontends.modules import module_op
from vjpcert.frontends.torch_paths import trace_checked
from vjpcert.frontends.constants import DEFAULT_CONSTANTS
from vjpcert.frontends.torch_rules import RULES, _torch, rule  # noqa: F401  (re-exported: the frontend's names)


def torch_version() -> str:
    return _torch().__version__


# ------------------------------------------------------------------------------------ making ops
def from_torch(fn: Callable, *, name: str | None = None, inputs: Mapping[str, tuple] | None = None,
               dims: list[dict] | None = None, nondiff: Mapping[str, tuple] | None = None,
               params: Mapping | None = None, output: tuple | None = None, large_dims=None, check_dims=None,
               modular_dims=None,
               spec: Op | None = None, constants: str = DEFAULT_CONSTANTS, module=None, doc: str = "",
               dtype: str | None = None, init: Mapping | None = None, train: bool = False) -> FrontendOp:
    """An op whose forward is ``fn(*inputs, *nondiff, **params)`` (torch tensors in, one tensor out)
    and whose backward is what PyTorch computes for it. Inputs, dims and output default to the
    spec's when ``spec`` is given. ``dtype``: the graph traced at that dtype is the one proved; by
    default float64, and the function must have the same graph at every lower precision too
    (``vjpcert.frontends.torch_paths``). ``fn`` may be an ``nn.Module`` class (built at each dims with
    ``init``) or instance: its parameters and buffers are inputs too (``frontends.torch_module``), and
    it runs in eval mode unless ``train``. ``modular_dims``: production sizes, where ``--modular`` runs
    the randomised exact test on the same graph (``symbolic.modular``), as it does for a spec."""
    made = None
    if is_module(fn):
        fn, name, inputs, nondiff, doc, made = module_op(TorchModule, fn, init, name, dims, inputs, nondiff, doc, train)
    elif init is not None or train:
        raise SpecError(name, "init= and train= build an nn.Module; this is not one")
    elif isinstance(fn, type):
        fn = _function_caller(fn, list((params or {}).keys()))
    if spec is not None:
        inputs = inputs or spec.inputs
        nondiff = spec.nondiff if nondiff is None else nondiff
        dims = dims or spec.dims
        large_dims = large_dims if large_dims is not None else spec.large_dims
        check_dims = check_dims or spec.check_dims
        output = output or spec.output
    if not inputs:
        raise SpecError(name, "declare the inputs and their dims (inputs={'x': ('rows', 'n')}), or name a spec")
    name = name or getattr(fn, "__name__", "torch_fn")
    dtype = check_dtype(name, dtype)
    n_diff = len(inputs)
    call = call_by_name(fn, [*inputs, *(nondiff or {})], params, name)

    def tracer(shapes, param_values, compare=True):
        return trace_checked(call, shapes, n_diff, param_values, constants=constants, op_name=name, dtype=dtype,
                             compare=compare)
    return FrontendOp(name=name, framework="PyTorch", framework_version=torch_version(), tracer=tracer, fn=fn,
                      dtype=dtype,
                      module=module if module is not None else inspect.getmodule(fn), inputs=inputs,
                      dims=list(dims or []), nondiff=nondiff, params=params, output=output,
                      large_dims=large_dims, check_dims=check_dims, modular_dims=modular_dims, spec=spec,
                      constants=constants,
                      doc=doc or inspect.getdoc(fn) or "", identity=made)


def _function_caller(cls, param_names):
    """An ``autograd.Function`` subclass called as PyTorch code calls it: ``cls.apply(*tensors,
    *params)``, the parameters positionally in their declared order."""
    torch = _torch()
    if not issubclass(cls, torch.autograd.Function):
        raise SpecError(None, f"{cls.__name__} is a class but not a torch.autograd.Function")

    def call(*tensors, **params):
        return cls.apply(*tensors, *[params[k] for k in param_names])
    call.__name__ = cls.__name__
    call.__doc__ = cls.__doc__
    call.__module__ = cls.__module__
    return call


def torch_op(fn=None, **declaration):
    """Decorator form of ``from_torch``: ``@torch_op(inputs=..., dims=..., params=...)``."""
    if fn is not None:
        return from_torch(fn, **declaration)
    return lambda f: from_torch(f, **declaration)


# ------------------------------------------------------------------------------------ the report's functions
def selective_scan_ref(h, x, dt, b, A, dt_bias, c, z, D, softplus=None):
    """Mamba's selective_scan_ref for one sequence, as its users write it: F.softplus (threshold 20) for
    delta, exp(delta A), a loop over the sequence, the D skip and the silu gate. x, dt, z (T, d); b, c
    (T, N); A (d, N); D, dt_bias (d,); the state h (d, N). ``softplus`` replaces F.softplus."""
    torch = _torch()
    import torch.nn.functional as F
    delta = (softplus or F.softplus)(dt + dt_bias)
    ys = []
    for t in range(x.shape[0]):
        h = torch.exp(delta[t][:, None] * A) * h + (delta[t] * x[t])[:, None] * b[t][None, :]
        ys.append((h @ c[t] + D * x[t]) * F.silu(z[t]))
    return torch.stack(ys)


def report_functions() -> dict:
    """PyTorch's own code for the ops of the Framework backwards report (``vjpcert.frameworks``):
    name -> (function of tensors, its parameters). Attention takes the math path explicitly."""
    torch = _torch()
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(Q, K, V):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(Q, K, V)

    def sdpa_causal(Q, K, V):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(Q, K, V, is_causal=True)

    def rnn_tanh(h, x, W, U, b):
        """torch.nn.RNN's own layer (one sequence, one layer): its bias b_ih = b, b_hh = 0."""
        out, _ = torch.rnn_tanh(x[:, None], h[None, None], [U, W, b, torch.zeros_like(b)], True, 1, 0.0, False,
                                False, False)
        return out[:, 0]

    def gru(h, x, Wr, Ur, Wz, Uz, Wn, Un):
        """torch.nn.GRU's own layer without biases, its gates stacked in PyTorch's order (r, z, n)."""
        out, _ = torch.gru(x[:, None], h[None, None], [torch.cat([Wr, Wz, Wn]), torch.cat([Ur, Uz, Un])], False, 1,
                           0.0, False, False, False)
        return out[:, 0]

    def selective_scan(h, x, dt, b, A, dt_bias, c, z, D):
        return selective_scan_ref(h, x, dt, b, A, dt_bias, c, z, D)
    return {
        "softmax": (lambda x: torch.softmax(x, -1), {}),
        "log_softmax": (lambda x: torch.log_softmax(x, -1), {}),
        "layer_norm": (lambda x, gamma, beta, eps: F.layer_norm(x, x.shape[-1:], gamma, beta, eps), {"eps": 1e-5}),
        "rms_norm": (lambda x, gamma, eps: F.rms_norm(x, x.shape[-1:], gamma, eps), {"eps": 1e-6}),
        "gelu": (lambda x: F.gelu(x), {}),
        "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), {}),
        "linear": (lambda x, W, b: F.linear(x, W, b), {}),
        "sdpa": (sdpa, {}),
        "sdpa_causal": (sdpa_causal, {}),
        "relu": (lambda x: F.relu(x), {}),
        "relu6": (lambda x: F.relu6(x), {}),
        "batch_norm": (lambda x, gamma, beta, eps: F.batch_norm(x, None, None, gamma, beta, True, 0.1, eps),
                       {"eps": 1e-5}),
        "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), {}),
        "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), {}),
        "conv2d_dilated_grouped": (lambda x, w: F.conv2d(x, w, padding=2, dilation=2, groups=2), {}),
        "max_pool2d": (lambda x: F.max_pool2d(x, 2), {}),
        "max_pool2d_3x3s2": (lambda x: F.max_pool2d(x, 3, 2, padding=1), {}),
        "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), {}),
        "rnn_tanh": (rnn_tanh, {}),
        "gru": (gru, {}),
        "selective_scan": (selective_scan, {}),
    }
