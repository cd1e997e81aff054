"""Frontends: framework code (PyTorch, JAX) turned into ordinary ops.

A frontend traces a framework function's forward *and* its backward (a custom ``autograd.Function``'s,
a ``jax.custom_vjp``'s, or the framework's own derivative formulas) into one flat graph of primitive
operations, and evaluates that graph node by node with numpy array code over a backend ``B``. The
result is a ``FrontendOp``: an ``Op`` (``vjpcert.core.registry``) whose forward and backward are the
framework's, so every checker proves and checks it exactly as it does a spec, and no checker knows
about PyTorch or JAX.

    vjpcert.frontends.pytorch   make_fx graphs of ATen ops (``torch_op``, ``from_torch``)
    vjpcert.frontends.torch_rules / torch_graph
                                the ATen rules (``RULES``); one make_fx trace and its evaluation
    vjpcert.frontends.jaxpr     jaxprs (``jax_op``, ``from_jax``), with the optional ``[jax]`` extra
    vjpcert.frontends.jax_graph the primitive rules (``RULES``), one jaxpr trace and its evaluation
    vjpcert.frontends.values    the evaluator's values: exact constants, masks, -inf; shared by both
    vjpcert.frontends.op        FrontendOp: declared inputs and dims, traced graphs, identity
    vjpcert.frontends.precision the traced dtype: exact rounding, graphs compared modulo casts, refusals
    vjpcert.frontends.torch_paths / jax_paths
                                the function traced at the other dtypes and with its reads of the
                                device answered as on CUDA: a path taken only there is refused

This floor sits beside ``specs`` and imports ``vjpcert.core`` only.
"""
