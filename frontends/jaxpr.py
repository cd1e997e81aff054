"""The JAX frontend: a JAX function's forward and backward, traced by ``jax.make_jaxpr``, as an op.

    from vjpcert.frontends.jaxpr import jax_op

    @jax_op(inputs={"x": ("rows", "n"), "gamma": ("n",)}, dims=[{"rows": 2, "n": 3}])
    def my_rmsnorm(x, gamma):
        return rmsnorm_with_custom_vjp(x, gamma)       # a jax.custom_vjp, or any JAX code

How: with 64-bit floats on, ``make_jaxpr`` traces (on abstract shapes only, so no input value can
steer the trace)

    joint(x..., dy) = (f(x...), vjp_f(dy))          with  y, vjp_f = jax.vjp(f, x...)

into one jaxpr: the forward, and the backward JAX would run (a ``custom_vjp``'s ``bwd``, a
``custom_jvp`` rule linearised and transposed, or JAX's own rules). Its equations are evaluated one by
one over the backend ``B`` (``vjpcert.frontends.values``), nested jaxprs (``jit``, ``custom_jvp_call``,
``custom_vjp_call``) recursively; only the equations an output needs are evaluated. A primitive without
a rule is bad input naming it. ``reduce_max`` (jax.nn.softmax's shift) is a maximum of input values:
it is evaluated as B.max_shift, and the op carries the claim ``max_shift_free``.

The trace is at float64 unless ``dtype=`` asks for another (then with 64-bit floats off, as JAX runs
by default); a function whose jaxpr changes with the dtype or the backend is refused unless the dtype
is named (``vjpcert.frontends.jax_paths``).

JAX is optional (``pip install -e '.[jax]'``); nothing here imports it until a JAX op is made.
"""
from __future__ import annotations

import inspect
from typing import Callable, Mapping

from vjpcert.core.registry import Op, SpecError
from vjpcert.frontends.jax_graph import RULES, JaxGraph, _jax, jax_version, rule, run_jaxpr, trace  # noqa: F401
# (RULES, rule, JaxGraph, run_jaxpr, trace: re-exported, the frontend's names as before)
from vjpcert.frontends.jax_module import EquinoxModule, is_module
from vjpcert.frontends.jax_paths import trace_checked
from vjpcert.frontends.modules import module_op
from vjpcert.frontends.op import FrontendOp, call_by_name
from vjpcert.frontends.precision import check_dtype
from vjpcert.frontends.constants import DEFAULT_CONSTANTS


# ------------------------------------------------------------------------------------ making ops
def from_jax(fn: Callable, *, name: str | None = None, inputs: Mapping[str, tuple] | None = None,
             dims: list[dict] | None = None, nondiff: Mapping[str, tuple] | None = None,
             params: Mapping | None = None, output: tuple | None = None, large_dims=None, check_dims=None,
             modular_dims=None,
             spec: Op | None = None, constants: str = DEFAULT_CONSTANTS, module=None, doc: str = "",
             dtype: str | None = None, init: Mapping | None = None) -> FrontendOp:
    """An op whose forward is ``fn(*inputs, *nondiff, **params)`` (JAX arrays in, one array out) and
    whose backward is what ``jax.vjp`` computes for it. Inputs, dims and output default to the spec's.
    ``dtype``: the jaxpr traced at that dtype is the one proved; by default float64, and the
    function must have the same jaxpr at every lower precision too (``vjpcert.frontends.jax_paths``).
    ``fn`` may be an Equinox module class (built at each dims with ``init``) or instance: its floating
    arrays are inputs too (``frontends.jax_module``)."""
    made = None
    if is_module(fn):
        fn, name, inputs, nondiff, doc, made = module_op(EquinoxModule, fn, init, name, dims, inputs, nondiff, doc, False)
    elif init is not None:
        raise SpecError(name, "init= builds an Equinox module; this is not one")
    if spec is not None:
        inputs = inputs or spec.inputs
        nondiff = spec.nondiff if nondiff is None else nondiff
        dims = dims or spec.dims
        large_dims = large_dims if large_dims is not None else spec.large_dims
        check_dims = check_dims or spec.check_dims
        output = output or spec.output
    if not inputs:
        raise SpecError(name, "declare the inputs and their dims (inputs={'x': ('rows', 'n')}), or name a spec")
    name = name or getattr(fn, "__name__", "jax_fn")
    dtype = check_dtype(name, dtype)
    n_diff = len(inputs)
    call = call_by_name(fn, [*inputs, *(nondiff or {})], params, name)

    def tracer(shapes, param_values, compare=True):
        return trace_checked(call, shapes, n_diff, param_values, constants=constants, op_name=name, dtype=dtype,
                             compare=compare)
    return FrontendOp(name=name, framework="JAX", framework_version=jax_version(), tracer=tracer, fn=fn,
                      dtype=dtype,
                      module=module if module is not None else inspect.getmodule(fn), inputs=inputs,
                      dims=list(dims or []), nondiff=nondiff, params=params, output=output,
                      large_dims=large_dims, check_dims=check_dims, modular_dims=modular_dims, spec=spec,
                      constants=constants,
                      doc=doc or inspect.getdoc(fn) or "", identity=made)


def jax_op(fn=None, **declaration):
    """Decorator form of ``from_jax``: ``@jax_op(inputs=..., dims=..., params=...)``."""
    if fn is not None:
        return from_jax(fn, **declaration)
    return lambda f: from_jax(f, **declaration)


# ------------------------------------------------------------------------------------ the report's functions
def report_functions() -> dict:
    """JAX's own code for the ops of the Framework backwards report: jax.nn where JAX has the op, and
    the jax.numpy formulas Flax's LayerNorm / RMSNorm use (JAX has no layer_norm of its own)."""
    jax = _jax()
    import jax.numpy as jnp

    def layer_norm(x, gamma, beta, eps):
        mean = jnp.mean(x, -1, keepdims=True)
        var = jnp.var(x, -1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta

    def rms_norm(x, gamma, eps):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * gamma

    def sdpa(Q, K, V, causal=False):
        out = jax.nn.dot_product_attention(Q[None, :, None, :], K[None, :, None, :], V[None, :, None, :],
                                           is_causal=causal)
        return out[0, :, 0, :]
    return {
        "softmax": (lambda x: jax.nn.softmax(x, axis=-1), {}),
        "log_softmax": (lambda x: jax.nn.log_softmax(x, axis=-1), {}),
        "layer_norm": (layer_norm, {"eps": 1e-5}),
        "rms_norm": (rms_norm, {"eps": 1e-6}),
        "gelu": (lambda x: jax.nn.gelu(x, approximate=False), {}),
        "gelu_tanh": (lambda x: jax.nn.gelu(x, approximate=True), {}),
        "linear": (lambda x, W, b: x @ W.T + b, {}),
        "sdpa": (lambda Q, K, V: sdpa(Q, K, V), {}),
        "sdpa_causal": (lambda Q, K, V: sdpa(Q, K, V, causal=True), {}),
        "relu": (lambda x: jax.nn.relu(x), {}),
        "relu6": (lambda x: jax.nn.relu6(x), {}),
        "conv2d": (lambda x, w, b: jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                                                dimension_numbers=("NCHW", "OIHW", "NCHW"))
                   + b[None, :, None, None], {}),
        "conv2d_dilated_grouped": (lambda x, w: jax.lax.conv_general_dilated(
            x, w, (1, 1), ((2, 2), (2, 2)), rhs_dilation=(2, 2), feature_group_count=2,
            dimension_numbers=("NCHW", "OIHW", "NCHW")), {}),
        # pooling as Flax writes it: lax.reduce_window over NCHW here (Flax's own layout is NHWC)
        "max_pool2d": (lambda x: jax.lax.reduce_window(x, -jax.numpy.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                                       "VALID"), {}),
        "max_pool2d_3x3s2": (lambda x: jax.lax.reduce_window(x, -jax.numpy.inf, jax.lax.max, (1, 1, 3, 3),
                                                             (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1))), {}),
        "avg_pool2d": (lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4,
                       {}),
    }
