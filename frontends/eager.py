"""The traced graph against the framework's own run of the same code on real arrays.

A framework op is proved from the graph its tracer records (``make_fx`` on fake tensors, a jaxpr
under JAX's tracers). Code can see that it is being traced -- ``isinstance(dy, FakeTensor)``,
``isinstance(g, jax.core.Tracer)``, ``torch.compiler.is_compiling()``, a fast path for real tensors
only, a backward that reads ``dy``'s memory layout -- and compute another function there: the proof
would then be of a graph the user's code never runs. No check of the graph alone can tell, so the
graph is run on real arrays at a few random points and held to the framework's eager run of the same
function there (the same kernels, up to decompositions that reorder a few roundings), with ``dy`` and
the inputs also in other memory layouts where the framework has them (a transposed or strided view,
an expanded ``dy`` as ``.sum()`` hands one back). It also sees what exact algebra cannot: a backward
that returns nan or inf where the forward is finite (``torch.where(x > 0, x.sqrt(), 0)``: the masked
branch's derivative is 0 times 1/sqrt of a negative number, nan in floats, while the exact proof reads
that root as a formal one whose product with 0 is 0).

A few points are a sample, not a proof: what differs only on a region no point falls in is not seen
(``docs/how-it-decides.md``). Either finding refuses the op (exit 2), naming the point.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from vjpcert.core.registry import SpecError

# Point k is drawn at scale EAGER_SCALES[k]: a standard normal, then a wide draw (a backward wrong only
# for x < -1, sqrt(x + 1)'s domain, is met there), then a positive one (|x| + 1/2: a forward defined
# for positive inputs alone, log(x), is finite there, so some point compares every entry).
EAGER_SCALES = (1.0, 4.0, "positive")
EAGER_SEED = 20260
# A rounding floor under each output's allowance: this many units in the last place of the point's
# largest value (a cotangent that cancels to nearly 0, softmax's for a dy the same everywhere, carries
# the rounding of the O(1) terms it cancels).
EAGER_FLOOR_ULPS = 64


def tolerance(eps: float) -> float:
    """Relative to the outputs' scale, from the dtype's machine epsilon: the same kernels, up to
    decompositions that reorder a few roundings, so sqrt(u) -- 1.5e-8 in float64 -- is far above what
    reordering leaves in any well-conditioned op, and far below the O(1) difference of code that computes
    another function when traced. (Here, not in ``core.tolerance``: it is the frontends' rule alone, and
    the exact tiers' certificates hash that module.)"""
    return float(np.sqrt(eps))


# what a certificate says of a graph that passed (``FrontendOp.assumptions``)
HELD = (f"the graph was held to the framework's own run of the code on real arrays at {len(EAGER_SCALES)} random "
        f"points, at each dtype it was traced at (forward and backward equal to sqrt(u) of their scale, nan where "
        f"it has nan; the forward alone too; PyTorch's also with the inputs and dy as strided, reversed-order and "
        f"expanded views), and its backward at the dtype proved finite wherever the forward is")

# Past this many input elements one point is drawn, not one per scale: a trace at production dims
EAGER_LARGE = 1 << 16


def check_against_eager(op_name: str, shapes: Sequence[tuple], n_diff: int, out_shape: tuple, eps: float,
                        graph_run: Callable, eager_run: Callable, layouts: Sequence[str] = ("contiguous",),
                        forward_run: Callable | None = None, strict: bool = True) -> None:
    """Refuse (``SpecError``) where ``graph_run(inputs, dy)`` and ``eager_run(inputs, dy, layout)`` --
    each (forward, cotangents) as float64 numpy arrays, from float64 arrays each rounds to the dtype
    traced (machine epsilon ``eps``) -- disagree at a random point, or where the eager cotangents are not
    finite while the forward is; ``forward_run(inputs)``, the forward alone (no gradients recorded), is
    held to the graph's forward too. ``inputs`` past the first ``n_diff`` are the non-differentiable
    ones, held at the zeros they were traced at (indices, masks). Not ``strict`` (a dtype the function
    is only compared at), an eager run that raises is no finding: it computes nothing there."""
    rng = np.random.default_rng(EAGER_SEED)
    tol = tolerance(eps)
    size = sum(int(np.prod(s)) for s in shapes)
    for scale in EAGER_SCALES[:1] if size > EAGER_LARGE else EAGER_SCALES:
        inputs = [(np.abs(rng.standard_normal(s)) + 0.5 if scale == "positive" else rng.standard_normal(s) * scale)
                  if i < n_diff else np.zeros(s) for i, s in enumerate(shapes)]
        drawn = rng.standard_normal(out_shape)
        for layout in layouts:
            # an expanded dy holds one value everywhere (its stride is 0)
            dy = np.full(out_shape, drawn.flat[0] if drawn.size else 0.0) if layout == "expanded" else drawn
            try:
                graph = graph_run(inputs, dy)
            except Exception as exc:  # noqa: BLE001  (the framework's own kernels on the graph's ops)
                if strict:
                    raise SpecError(op_name, f"the graph traced from the code cannot be run on real arrays "
                                             f"({type(exc).__name__}: {str(exc)[:200]})") from None
                return               # a dtype the function is only compared at, without kernels for it here
            try:
                eager = eager_run(inputs, dy, layout)
            except SpecError:
                if layout == "contiguous" and strict:
                    raise
                continue             # code that runs only on contiguous arrays (x.view(-1)) computes nothing there
            if layout == "contiguous" and strict:
                _finite_where_the_forward_is(op_name, eager, inputs[:n_diff])
            # every entry compared, a nan where both have one too (outside the forward's domain)
            _same(op_name, graph, eager, layout, tol, inputs[:n_diff], EAGER_FLOOR_ULPS * eps * _scale(graph, inputs, dy))
        if forward_run is not None:     # the forward alone, as inference runs it (no graph of gradients)
            try:
                plain = forward_run(inputs)
            except SpecError:
                if strict:
                    raise
                continue
            _same(op_name, graph[:1], plain, "plain", tol, inputs[:n_diff], EAGER_FLOOR_ULPS * eps * _scale(graph, inputs, dy))


def _finite_where_the_forward_is(op_name, eager, diff_inputs) -> None:
    out, grads = eager[0], eager[1:]
    if not np.all(np.isfinite(out)):
        return
    for i, g in enumerate(grads):
        bad = ~np.isfinite(g)
        if bad.any():
            at = tuple(int(k) for k in np.argwhere(bad)[0])
            raise SpecError(op_name, f"its backward returns {float(g[at])} in the cotangent of input {i} at index {at} "
                                     f"where the forward is finite ({_point(diff_inputs)}): a float nan or inf "
                                     f"the exact proof cannot see (it reads a square root or a power of a "
                                     f"negative number as a formal root; 0 times it is 0 there, nan in "
                                     f"floats). A branch masked with where() still differentiates: mask "
                                     f"the argument (sqrt(where(x > 0, x, 1))), not the result")


def _scale(graph, inputs, dy) -> float:
    """The largest finite value among the graph's outputs, the inputs and dy: the rounding floor's scale."""
    return max([float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for a in (*graph, *inputs, dy)] + [2.0 ** -100])


def _same(op_name, graph, eager, layout, tol, diff_inputs, floor) -> None:
    """Each output held to ``tol`` of its own scale, plus the rounding ``floor``."""
    names = ["the forward"] + [f"the cotangent of input {i}" for i in range(len(graph) - 1)]
    for name, g, e in zip(names, graph, eager):
        g, e = np.asarray(g, dtype=np.float64), np.asarray(e, dtype=np.float64)
        if g.shape != e.shape:
            raise SpecError(op_name, f"run on real arrays, {name} has shape {e.shape}, and {g.shape} in the "
                                     f"traced graph")
        finite = np.isfinite(g) & np.isfinite(e)
        with np.errstate(invalid="ignore", over="ignore"):     # inf - inf where both are inf: not used
            gap = np.where(finite, np.abs(g - e), np.where(np.isnan(g) & np.isnan(e) | (g == e), 0.0, np.inf))
        scale = max(float(np.abs(g[finite]).max(initial=0.0)), float(np.abs(e[finite]).max(initial=0.0)))
        if gap.max(initial=0.0) > tol * scale + floor:
            at = tuple(int(k) for k in np.unravel_index(int(np.argmax(gap)), gap.shape)) if gap.ndim else ()
            where = "" if layout == "contiguous" else f" with {LAYOUT_WORDS[layout]}"
            raise SpecError(op_name, f"the code computes another function when it runs on real arrays{where} "
                                     f"than in the graph traced from it: {name} at index {at} is "
                                     f"{float(e[at]):.17g} run, "
                                     f"{float(g[at]):.17g} traced ({_point(diff_inputs)}). A proof of the traced graph "
                                     f"would not be of what runs: code that tests for the tracer (FakeTensor, "
                                     f"a jax Tracer, is_compiling()), takes a path for real arrays only, or "
                                     f"reads memory layout (strides, as_strided, data_ptr) computes another "
                                     f"function there")


LAYOUT_WORDS = {"plain": "the forward alone, no gradients recorded",
                "strided": "its inputs and dy strided views of larger arrays",
                "transposed": "its inputs and dy in the reverse memory order (a transposed view)",
                "expanded": "dy an expanded view (stride 0, as .sum() hands one back)"}


def _point(diff_inputs) -> str:
    parts = []
    for i, x in enumerate(diff_inputs):
        flat = np.asarray(x, dtype=np.float64).ravel()
        shown = ", ".join(f"{v:.6g}" for v in flat[:4]) + (", ..." if flat.size > 4 else "")
        parts.append(f"input {i} = [{shown}]")
    return "; ".join(parts) or "no differentiable input"
