"""A user's Equinox module as an op (``frontends.modules``): its floating arrays (the leaves of the
module's pytree that ``eqx.is_inexact_array`` selects) are differentiable inputs, and its forward is
the module called with those leaves replaced (``eqx.partition`` / ``eqx.combine``), traced as any JAX
function is.

    from vjpcert.frontends.jaxpr import from_jax

    op = from_jax(eqx.nn.MLP, init={"in_size": "n", "out_size": 2, "width_size": "h", "depth": 1},
                  inputs={"x": ("n",)}, dims=[{"n": 3, "h": 4}])

A class is built with ``key=jax.random.PRNGKey(0)`` when its constructor takes a key (the values do not
matter: they are inputs). Equinox modules have no training mode: a flag such as ``inference`` is a
constructor argument like any other.
"""
from __future__ import annotations

import inspect

from vjpcert.frontends.modules import ModuleTarget


def _eqx():
    import equinox
    return equinox


class EquinoxModule(ModuleTarget):

    @staticmethod
    def module_types() -> tuple:
        return (_eqx().Module,)

    def construct(self, kwargs: dict, seed: int = 0):
        import jax
        try:
            takes_key = "key" in inspect.signature(self.cls).parameters
        except (TypeError, ValueError):
            takes_key = False
        if takes_key and "key" not in kwargs:
            kwargs = {**kwargs, "key": jax.random.PRNGKey(seed)}
        return self.cls(**kwargs)

    def _leaves(self, mod):
        import jax
        eqx = _eqx()
        params, static = eqx.partition(mod, eqx.is_inexact_array)
        leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
        return [(jax.tree_util.keystr(path), leaf) for path, leaf in leaves], treedef, static

    def arrays(self, mod) -> list[tuple[str, object, bool]]:
        return [(own, leaf, True) for own, leaf in self._leaves(mod)[0]]

    def call(self, mod, swap: dict, args: tuple, kwargs: dict):
        import jax
        leaves, treedef, static = self._leaves(mod)
        params = jax.tree_util.tree_unflatten(treedef, [swap[own] for own, _ in leaves])
        return _eqx().combine(params, static)(*args, **kwargs)


def is_module(obj) -> bool:
    try:
        eqx = _eqx()
    except ImportError:
        return False
    return isinstance(obj, eqx.Module) or (inspect.isclass(obj) and issubclass(obj, eqx.Module))
