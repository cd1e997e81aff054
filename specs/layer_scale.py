"""Layer scale (CaiT, ConvNeXt): a learned per-channel gain on a residual branch, over rows of
channels:  y = x * gamma.

    dx = dy * gamma,   dgamma = sum_rows dy * x
"""
from vjpcert.core.registry import op


@op(inputs={"x": ("rows", "n"), "gamma": ("n",)}, output=("rows", "n"),
    dims=[{"rows": 1, "n": 2}, {"rows": 3, "n": 2}], check_dims={"rows": 4, "n": 3})
def layer_scale(B, x, gamma):
    return x * gamma


@layer_scale.defvjp
def layer_scale_vjp(B, x, gamma, dy):
    return dy * gamma, (dy * x).sum(0)


# Proved for every shape: the statement is derived from the code above (symbolic.every_size.shape_trace).
layer_scale.every_size("vjp[x]", "vjp[gamma]")
