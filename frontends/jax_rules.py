"""The JAX interpreter's table: jaxpr primitive name -> the rule that lowers it onto the spec
language's arrays (``frontends.values``). ``jax_graph`` registers most rules, ``jax_cnn`` those of
convolutional networks; ``jax_graph`` runs a jaxpr through the table.
"""
from __future__ import annotations

from typing import Callable

RULES: dict[str, Callable] = {}


def rule(*names):
    def register(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return register
