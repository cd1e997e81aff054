"""A spec as a JAX function with a custom VJP (float64 on the CPU): the forward and the hand-written
backward are the spec's own, run on the float64 numpy backend through ``jax.pure_callback``, so
``jax.test_util.check_grads`` can be put side by side with ours on the same ops and bugs.

JAX is optional: importing this module without it raises ImportError.
"""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax.test_util import check_grads as _check_grads

from vjpcert.core.backends import F64
from vjpcert.core.registry import Op

jax.config.update("jax_enable_x64", True)


def as_function(op: Op, fixed: dict):
    names = list(op.inputs)
    params = {k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()}
    fixed = {k: np.asarray(v, dtype=np.float64) for k, v in fixed.items()}

    def forward_np(*xs):
        values = {**fixed, **params, **{n: np.asarray(x) for n, x in zip(names, xs)}}
        return np.asarray(op.bind(op.forward, F64, values), dtype=np.float64)

    def backward_np(*args):
        xs, dy = args[:-1], args[-1]
        values = {**fixed, **params, **{n: np.asarray(x) for n, x in zip(names, xs)}, "dy": np.asarray(dy)}
        return tuple(np.asarray(c, dtype=np.float64) for c in op.bind(op.vjp, F64, values))

    @jax.custom_vjp
    def f(*xs):
        shape = jax.ShapeDtypeStruct(forward_np(*[np.zeros(x.shape) for x in xs]).shape, jnp.float64)
        return jax.pure_callback(forward_np, shape, *xs)

    def f_fwd(*xs):
        return f(*xs), xs

    def f_bwd(xs, dy):
        shapes = tuple(jax.ShapeDtypeStruct(x.shape, jnp.float64) for x in xs)
        return jax.pure_callback(backward_np, shapes, *xs, dy)

    f.defvjp(f_fwd, f_bwd)
    return f


def check_grads(op: Op, point: dict) -> bool:
    """``jax.test_util.check_grads`` in reverse mode, first order, its default tolerances."""
    f = as_function(op, {k: v for k, v in point.items() if k not in op.inputs})
    args = tuple(jnp.asarray(point[n], dtype=jnp.float64) for n in op.inputs)
    try:
        _check_grads(f, args, order=1, modes=("rev",))
        return True
    except AssertionError:
        return False
