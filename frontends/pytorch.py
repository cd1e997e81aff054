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

import contextlib
import inspect
from fractions import Fraction
from typing import Callable, Mapping

import numpy as np

from vjpcert.core.registry import Op, SpecError
from vjpcert.frontends.op import FrontendOp
from vjpcert.frontends.precision import check_dtype
from vjpcert.frontends.values import Constants, Context, Val

MAX_DECOMPOSITION_ROUNDS = 40


def _torch():
    try:
        import torch
    except ImportError:
        raise SpecError(None, "the PyTorch frontend needs PyTorch: pip install 'vjpcert[torch]'") from None
    return torch


def torch_version() -> str:
    return _torch().__version__


# ------------------------------------------------------------------------------------ ATen rules
RULES: dict[str, Callable] = {}


def rule(*names):
    def register(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return register


def _kind(dtype) -> str | None:
    torch = _torch()
    if dtype is None:
        return None
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point:
        return "float"
    if dtype.is_complex:
        raise SpecError(None, "complex tensors are not supported")
    return "int"


def _shape(size) -> tuple:
    return tuple(int(s) for s in size)


def _axes(dims, ndim) -> tuple | None:
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    return tuple(int(d) % max(ndim, 1) for d in dims)


@rule("aten.add.Tensor", "aten.add.Scalar")
def _add(c, x, y, alpha=1):
    return c.binary("+", x, y, alpha)


@rule("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(c, x, y, alpha=1):
    return c.binary("-", x, y, alpha)


@rule("aten.rsub.Tensor", "aten.rsub.Scalar")
def _rsub(c, x, y, alpha=1):
    return c.binary("-", y, c.binary("*", x, alpha))


@rule("aten.mul.Tensor", "aten.mul.Scalar")
def _mul(c, x, y):
    return c.binary("*", x, y)


@rule("aten.div.Tensor", "aten.div.Scalar")
def _div(c, x, y):
    return c.binary("/", x, y)


@rule("aten.neg.default")
def _neg(c, x):
    return c.neg(x)


for _name in ("exp", "log", "sqrt", "rsqrt", "erf", "tanh", "sin", "cos", "sigmoid", "expm1", "log1p",
              "reciprocal"):
    rule(f"aten.{_name}.default")(lambda c, x, _k=_name: c.unary(_k, x))


@rule("aten.pow.Tensor_Scalar")
def _pow(c, x, k):
    return c.power(x, k)


@rule("aten.pow.Tensor_Tensor")
def _pow_tt(c, x, k):
    return c.power(x, k)


@rule("aten.pow.Scalar")
def _pow_scalar(c, base, x):
    """base ** x: an algebraic constant per entry when x is static (RoPE's base^(-2i/d)), else
    exp(x log base)."""
    b = c.scalar(base)
    if not b.static or b.a.shape != () or b.neginf is not None or not Fraction(b.a.item()) > 0:
        c.refuse("base ** x needs a positive constant base")
    B = c.B
    if x.static and x.neginf is None:
        flat = [B.c(Fraction(b.a.item())) ** B.c(Fraction(e)) for e in c._static_exact(x).ravel()]
        return Val(c._array_of(flat, x.shape), False)
    return c.unary("exp", c.binary("*", x, Val(np.asarray(B.log(B.c(Fraction(b.a.item())))), False)))


@rule("aten.cumsum.default")
def _cumsum(c, x, dim, dtype=None):
    if x.neginf is not None:
        c.refuse("a cumulative sum over -inf entries")
    a = c._static_exact(x) if x.static else x.a
    return Val(np.cumsum(a, axis=int(dim) % max(x.a.ndim, 1)), x.static)


@rule("aten.square.default")
def _square(c, x):
    return c.power(x, 2)


@rule("aten.sum.dim_IntList")
def _sum(c, x, dim=None, keepdim=False, dtype=None):
    return c.reduce_sum(x, _axes(dim, x.a.ndim), keepdim)


@rule("aten.sum.default")
def _sum_all(c, x, dtype=None):
    return c.reduce_sum(x, None, False)


@rule("aten.mean.dim")
def _mean(c, x, dim=None, keepdim=False, dtype=None):
    return c.reduce_sum(x, _axes(dim, x.a.ndim), keepdim, mean=True)


@rule("aten.mean.default")
def _mean_all(c, x, dtype=None):
    return c.reduce_sum(x, None, False, mean=True)


@rule("aten.mm.default", "aten.bmm.default", "aten.matmul.default", "aten.mv.default", "aten.dot.default")
def _mm(c, x, y):
    return c.matmul(x, y)


@rule("aten.addmm.default", "aten.baddbmm.default")
def _addmm(c, bias, x, y, beta=1, alpha=1):
    prod = c.matmul(x, y)
    return c.binary("+", c.binary("*", bias, beta) if beta != 1 else bias,
                    c.binary("*", prod, alpha) if alpha != 1 else prod)


@rule("aten._softmax.default")
def _softmax(c, x, dim, half_to_float=False):
    return c.softmax(x, int(dim) % max(x.a.ndim, 1))


@rule("aten._log_softmax.default")
def _log_softmax(c, x, dim, half_to_float=False):
    return c.softmax(x, int(dim) % max(x.a.ndim, 1), log=True)


@rule("aten.where.self")
def _where(c, cond, x, y):
    return c.where(cond, x, y)


for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    rule(f"aten.{_cmp}.Tensor", f"aten.{_cmp}.Scalar")(lambda c, x, y, _k=_cmp: c.compare(_k, x, y))


@rule("aten.isinf.default")
def _isinf(c, x):
    return Val(x.mask().copy(), True)


@rule("aten.isnan.default")
def _isnan(c, x):
    return Val(np.zeros(x.shape, dtype=bool), True)


@rule("aten.logical_not.default", "aten.bitwise_not.default")
def _not(c, x):
    if x.static and x.kind == "int":
        c.refuse("bitwise not of an integer")
    return c.logical("not", x)


for _lg in ("and", "or", "xor"):
    rule(f"aten.logical_{_lg}.default", f"aten.bitwise_{_lg}.Tensor")(
        lambda c, x, y, _k=_lg: c.logical(_k, x, y))


@rule("aten.any.dim", "aten.any.dims", "aten.any.default")
def _any(c, x, dim=None, keepdim=False):
    return c.any_all("any", x, _axes(dim, x.a.ndim), keepdim)


@rule("aten.all.dim", "aten.all.dims", "aten.all.default")
def _all(c, x, dim=None, keepdim=False):
    return c.any_all("all", x, _axes(dim, x.a.ndim), keepdim)


# ---------------------------------------------------------------- making tensors (static)
def _default_kind(value, dtype):
    k = _kind(dtype)
    if k:
        return k
    if isinstance(value, bool):
        return "bool"
    return "int" if isinstance(value, int) else "float"


@rule("aten.full.default")
def _full(c, size, fill_value, dtype=None, **_):
    return c.full(_shape(size), fill_value, _default_kind(fill_value, dtype))


@rule("aten.full_like.default")
def _full_like(c, x, fill_value, dtype=None, **_):
    return c.full(x.shape, fill_value, _kind(dtype) or x.kind)


@rule("aten.zeros.default")
def _zeros(c, size, dtype=None, **_):
    return c.full(_shape(size), 0, _kind(dtype) or "float")


@rule("aten.ones.default")
def _ones(c, size, dtype=None, **_):
    return c.full(_shape(size), 1, _kind(dtype) or "float")


@rule("aten.zeros_like.default")
def _zeros_like(c, x, dtype=None, **_):
    return c.full(x.shape, 0, _kind(dtype) or x.kind)


@rule("aten.ones_like.default")
def _ones_like(c, x, dtype=None, **_):
    return c.full(x.shape, 1, _kind(dtype) or x.kind)


@rule("aten.scalar_tensor.default")
def _scalar_tensor(c, value, dtype=None, **_):
    return c.full((), value, _default_kind(value, dtype) if dtype is not None else "float")


@rule("aten.fill.Scalar")
def _fill(c, x, value):
    return c.full(x.shape, value, x.kind)


@rule("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def _arange(c, start, end=None, step=1, dtype=None, **_):
    if end is None:
        start, end = 0, start
    if not any(isinstance(v, float) for v in (start, end, step)):
        out = Val(np.arange(int(start), int(end), int(step), dtype=np.int64), True)
        return c.convert(out, _kind(dtype)) if dtype is not None else out
    a, b, h = (c.scalar(v).a.item() for v in (start, end, step))      # exact: floats as their decimals
    n = max(0, -((a - b) // h))
    out = Val(np.array([a + k * h for k in range(int(n))], dtype=object), True)
    return c.convert(out, _kind(dtype) or "float")


def _static_index(c, indices, ndim):
    idx = []
    for i in indices:
        if i is None:
            idx.append(slice(None))
        elif not i.static:
            c.refuse("entries are picked by a traced index")
        else:
            idx.append(i.a.astype(bool) if i.kind == "bool" else i.a.astype(np.int64))
    return tuple(idx)


@rule("aten.index.Tensor")
def _index(c, x, indices):
    idx = _static_index(c, indices, x.a.ndim)
    return c.structural(x, lambda a: a[idx])


@rule("aten.index_put.default", "aten._unsafe_index_put.default")
def _index_put(c, x, indices, values, accumulate=False):
    idx = _static_index(c, indices, x.a.ndim)
    if x.neginf is not None or values.neginf is not None:
        c.refuse("-inf in an index_put")
    static = x.static and values.static
    out = np.array(c._static_exact(x) if static else c.lift(x), copy=True)
    vals = np.broadcast_to(c._static_exact(values) if static else c.lift(values), out[idx].shape)
    if accumulate:
        np.add.at(out, idx, vals)
    else:
        out[idx] = vals
    return Val(out, static)


@rule("aten.copy.default")
def _copy(c, x, src, non_blocking=False):
    s = c.structural(src, lambda a: np.broadcast_to(a, x.shape).copy())
    return c.convert(s, x.kind) if x.static or not s.static else s


# ---------------------------------------------------------------- conversions and identities
@rule("aten._to_copy.default")
def _to_copy(c, x, dtype=None, **_):
    return c.convert(x, _kind(dtype)) if dtype is not None else x


@rule("prims.convert_element_type.default")
def _convert(c, x, dtype):
    return c.convert(x, _kind(dtype))


@rule("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
      "aten.detach_copy.default", "aten.alias_copy.default", "prims.clone.default", "aten.contiguous.default")
def _identity(c, x, *_, **__):
    return x


# ---------------------------------------------------------------- structure
def _view(c, x, size):
    return c.structural(x, lambda a: a.reshape(_shape(size)))


for _n in ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.view_copy.default"):
    rule(_n)(_view)


def _expand(c, x, size, implicit=False):
    size = list(_shape(size))
    lead = len(size) - x.a.ndim
    size = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return c.structural(x, lambda a: np.broadcast_to(a, tuple(size)))


rule("aten.expand.default", "aten.expand_copy.default")(_expand)


@rule("aten.permute.default", "aten.permute_copy.default")
def _permute(c, x, dims):
    return c.structural(x, lambda a: np.transpose(a, _axes(dims, a.ndim)))


@rule("aten.transpose.int", "aten.transpose_copy.int")
def _transpose(c, x, d0, d1):
    return c.structural(x, lambda a: np.swapaxes(a, d0, d1) if a.ndim else a)


@rule("aten.t.default", "aten.t_copy.default")
def _t(c, x):
    return c.structural(x, lambda a: a.T)


@rule("aten.unsqueeze.default", "aten.unsqueeze_copy.default")
def _unsqueeze(c, x, dim):
    return c.structural(x, lambda a: np.expand_dims(a, int(dim) % (a.ndim + 1)))


@rule("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.squeeze_copy.dim",
      "aten.squeeze_copy.dims", "aten.squeeze_copy.default")
def _squeeze(c, x, dim=None):
    def fn(a):
        axes = [i for i in range(a.ndim) if a.shape[i] == 1] if dim is None else \
            [d for d in _axes(dim, a.ndim) if a.ndim and a.shape[d] == 1]
        return np.squeeze(a, axis=tuple(axes)) if axes else a
    return c.structural(x, fn)


@rule("aten.select.int", "aten.select_copy.int")
def _select(c, x, dim, index):
    return c.structural(x, lambda a: np.take(a, int(index), axis=int(dim)))


@rule("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(c, x, dim=0, start=None, end=None, step=1):
    def fn(a):
        idx = [slice(None)] * a.ndim
        n = a.shape[int(dim)]
        s = 0 if start is None else max(-n, min(int(start), n))
        e = n if end is None else max(-n, min(int(end), n))
        idx[int(dim)] = slice(s, e, int(step))
        return a[tuple(idx)]
    return c.structural(x, fn)


@rule("aten.cat.default")
def _cat(c, tensors, dim=0):
    return c.concat(list(tensors), int(dim) % max(max(t.a.ndim for t in tensors), 1))


@rule("aten.stack.default")
def _stack(c, tensors, dim=0):
    nd = tensors[0].a.ndim + 1
    return c.concat([c.structural(t, lambda a: np.expand_dims(a, int(dim) % nd)) for t in tensors], int(dim) % nd)


@rule("aten.split.Tensor", "aten.split_copy.Tensor")
def _split(c, x, split_size, dim=0):
    n = x.shape[int(dim)]
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    return _split_sizes(c, x, sizes, dim)


@rule("aten.split_with_sizes.default", "aten.split_with_sizes_copy.default")
def _split_sizes(c, x, split_sizes, dim=0):
    out, start = [], 0
    for s in split_sizes:
        out.append(_slice(c, x, dim, start, start + int(s)))
        start += int(s)
    return out


def _scatter_into(c, base: Val, src: Val, index) -> Val:
    """``base`` with the entries at ``index`` replaced by ``src`` (a fresh array)."""
    if src.neginf is not None or base.neginf is not None:
        c.refuse("-inf in a scatter")
    static = base.static and src.static
    out = np.array(c._static_exact(base) if static else c.lift(base), copy=True)
    out[index] = c._static_exact(src) if static else c.lift(src)
    return Val(out, static)


def _slice_index(shape, dim, start, end, step):
    n = shape[int(dim)]
    s = 0 if start is None else max(-n, min(int(start), n))
    e = n if end is None else max(-n, min(int(end), n))
    idx = [slice(None)] * len(shape)
    idx[int(dim)] = slice(s, e, int(step))
    return tuple(idx)


@rule("aten.slice_scatter.default")
def _slice_scatter(c, x, src, dim=0, start=None, end=None, step=1):
    return _scatter_into(c, x, src, _slice_index(x.shape, dim, start, end, step))


@rule("aten.select_scatter.default")
def _select_scatter(c, x, src, dim, index):
    idx = [slice(None)] * x.a.ndim
    idx[int(dim)] = int(index)
    return _scatter_into(c, x, src, tuple(idx))


@rule("aten.slice_backward.default")
def _slice_backward(c, grad, input_sizes, dim, start, end, step):
    return _slice_scatter(c, c.full(_shape(input_sizes), 0, "float"), grad, dim, start, end, step)


@rule("aten.select_backward.default")
def _select_backward(c, grad, input_sizes, dim, index):
    return _select_scatter(c, c.full(_shape(input_sizes), 0, "float"), grad, dim, index)


@rule("aten.new_zeros.default")
def _new_zeros(c, x, size, dtype=None, **_):
    return c.full(_shape(size), 0, _kind(dtype) or x.kind)


@rule("aten.new_ones.default")
def _new_ones(c, x, size, dtype=None, **_):
    return c.full(_shape(size), 1, _kind(dtype) or x.kind)


@rule("aten.unbind.int", "aten.unbind_copy.int")
def _unbind(c, x, dim=0):
    return [_select(c, x, dim, i) for i in range(x.shape[int(dim)])]


@rule("aten.flip.default")
def _flip(c, x, dims):
    return c.structural(x, lambda a: np.flip(a, axis=_axes(dims, a.ndim)))


@rule("aten.index_select.default")
def _index_select(c, x, dim, index):
    if not index.static:
        c.refuse("entries are picked by a traced index")
    return c.structural(x, lambda a: np.take(a, index.a.astype(np.int64), axis=int(dim)))


@rule("aten.repeat.default")
def _repeat(c, x, repeats):
    return c.structural(x, lambda a: np.tile(a, tuple(repeats)))


@rule("aten.as_strided.default", "aten.as_strided_copy.default")
def _as_strided(c, x, size, stride, storage_offset=None):
    size = _shape(size)
    want, acc = [], 1
    for s in reversed(size):
        want.append(acc)
        acc *= s
    want = tuple(reversed(want))
    if int(np.prod(size)) != int(np.prod(x.shape)) or (storage_offset or 0) != 0 or \
            any(st != w for st, w, n in zip(stride, want, size) if n != 1):
        c.refuse(f"as_strided(size={list(size)}, stride={list(stride)}) is not a plain reshape")
    return _view(c, x, size)


@rule("aten.amax.default")
def _amax(c, x, dim=(), keepdim=False):
    return c.max_site(x, _axes(dim, x.a.ndim) or tuple(range(x.a.ndim)), keepdim)


MAX_SITES = {"aten.amax.default"}

RULES["<built-in function getitem>"] = lambda c, xs, i: xs[i]

# Why a few ops are refused, for the one-line error.
HINTS = {
    "aten.max": "a maximum compares input values (a kink)",
    "aten.relu": "relu has a kink at 0 (a comparison of input values)",
    "aten._local_scalar_dense": "the function reads an input-dependent Python number (.item(), float(), "
                                "a branch on a tensor)",
    "aten.abs": "abs has a kink at 0 (a comparison of input values)",
}


def _op_name(target) -> str:
    return str(target)


def _has_rule(target) -> bool:
    return _op_name(target) in RULES


# ------------------------------------------------------------------------------------ tracing
class TorchGraph:
    """One traced joint graph: outputs[0] is the forward, outputs[1:] the cotangents."""

    def __init__(self, gm, n_arrays: int, output_shape: tuple, decomposed: list[str], constants: str,
                 op_name: str, dtype: str = "float64"):
        self.gm = gm
        self.op_name = op_name
        self.dtype = dtype              # what it was traced at (torch_paths adds what it was compared with)
        self.explicit, self.compared, self.device_reads = False, (), ()
        self.output_shape = tuple(int(s) for s in output_shape)
        self.decomposed = sorted(decomposed)
        self.constants_mode = constants
        nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in nodes if n.op == "placeholder"]
        if len(self.placeholders) != n_arrays + 1:
            raise SpecError(op_name, f"the traced graph takes {len(self.placeholders)} tensors, expected "
                                     f"{n_arrays + 1}")
        out = [n for n in nodes if n.op == "output"][0]
        self.outputs = list(out.args[0])
        self.order = [n for n in nodes if n.op == "call_function"]
        self._needed = {"forward": self._needed_for(self.outputs[:1]),
                        "backward": self._needed_for(self.outputs[1:]),
                        "all": self._needed_for(self.outputs)}
        self.max_sites = sum(1 for n in self.order if _op_name(n.target) in MAX_SITES)
        self.code = gm.code
        self._scan()

    def _needed_for(self, roots) -> set:
        seen, stack = set(), [r for r in roots if r is not None]
        while stack:
            n = stack.pop()
            if n in seen or not hasattr(n, "op"):
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return seen

    def _scan(self):
        """What the graph's certificates rest on: how its float constants are read, which dtype
        conversions it makes (read as exact), which ops PyTorch's decompositions replaced."""
        consts = Constants(self.constants_mode, self.dtype)
        self.casts = set()
        for n in self.order:
            for v in _flat_args(n):
                if isinstance(v, float) and np.isfinite(v):
                    consts.read(v)
            dtype = n.kwargs.get("dtype")
            if _op_name(n.target) in ("aten._to_copy.default", "prims.convert_element_type.default") and n.args \
                    and hasattr(n.args[0], "meta") and "val" in n.args[0].meta:
                dtype = dtype or (n.args[1] if len(n.args) > 1 else None)
                src = n.args[0].meta["val"].dtype
                if dtype is not None and dtype != src:
                    self.casts.add(f"{str(src).replace('torch.', '')} -> {str(dtype).replace('torch.', '')}")
        self.readings = dict(consts.readings)

    def evaluate(self, B, arrays, part: str) -> list[np.ndarray]:
        ctx = Context(B, Constants(self.constants_mode, self.dtype), self.op_name)
        env = {}
        for ph, a in zip(self.placeholders, arrays):
            env[ph] = Val(np.asarray(a), False)
        needed = self._needed[part]
        for node in self.order:
            if node not in needed:
                continue
            ctx.at = f"{_op_name(node.target)} ({node.name})"
            fn = RULES.get(_op_name(node.target))
            if fn is None:      # trace() guarantees a rule; keep the error if a graph is hand-made
                raise SpecError(self.op_name, f"{_op_name(node.target)} has no exact rule")
            args = _map_args(node.args, env)
            kwargs = {k: _map_args(v, env) for k, v in node.kwargs.items()}
            env[node] = fn(ctx, *args, **kwargs)
        ctx.at = "output"
        roots = {"forward": self.outputs[:1], "backward": self.outputs[1:], "all": self.outputs}[part]
        return [ctx.output(env[r]) for r in roots]


def _map_args(a, env):
    if hasattr(a, "op") and hasattr(a, "all_input_nodes"):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_map_args(x, env) for x in a)
    return a


def _flat_args(node):
    stack = [*node.args, *node.kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, (list, tuple)):
            stack.extend(a)
        else:
            yield a


def _describe_error(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    low = str(exc).lower()
    if "data-dependent" in low or "data dependent" in low or "_local_scalar_dense" in low:
        text += " (the function branches on, or reads, input values: its graph would hold at one point only)"
    return text[:400]


def trace(fn: Callable, shapes: list, n_diff: int, params: Mapping, *, constants: str = "decimal",
          op_name: str = "?", dtype: str = "float64", probe=None) -> TorchGraph:
    """Trace ``fn(*diff, *nondiff, **params)`` and its backward at these shapes, on fake cpu tensors
    of ``dtype``; ``probe`` (``torch_paths.DeviceProbe``) watches (or answers) the code's reads of the
    device. One trace: ``torch_paths.trace_checked`` is the one that compares dtypes and devices."""
    torch = _torch()
    with probe if probe is not None else contextlib.nullcontext():
        return _trace(torch, fn, shapes, n_diff, params, constants, op_name, dtype)


def _trace(torch, fn, shapes, n_diff, params, constants, op_name, dtype) -> TorchGraph:
    from torch._decomp import core_aten_decompositions, decomposition_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    params = dict(params)
    tdt = getattr(torch, dtype)

    def call(*xs):
        try:
            out = fn(*xs, **params)
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"calling the function on tensors of shapes {shapes} raised "
                                     f"{_describe_error(exc)}") from None
        if not isinstance(out, torch.Tensor):
            raise SpecError(op_name, f"the function returned a {type(out).__name__}; it must return one tensor")
        return out

    with FakeTensorMode():
        out_shape = tuple(call(*[torch.zeros(s, dtype=tdt) for s in shapes]).shape)

    def joint(*args):
        diff, rest, dy = args[:n_diff], args[n_diff:-1], args[-1]
        xs = [x.detach().requires_grad_(True) for x in diff]
        with torch.enable_grad():
            out = call(*xs, *rest)
            if not out.requires_grad:
                grads = [None] * len(xs)
            else:
                grads = torch.autograd.grad(out, xs, dy, allow_unused=True)
        return (out, *[torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads)])

    examples = [torch.zeros(s, dtype=tdt) for s in shapes] + [torch.zeros(out_shape, dtype=tdt)]
    core = core_aten_decompositions()
    table: dict = {}
    decomposed: set[str] = set()
    origin: dict[str, str] = {}          # an op that appeared through a decomposition -> where from
    seen: set[str] = set()
    last: list[str] = []
    for _ in range(MAX_DECOMPOSITION_ROUNDS):
        try:
            gm = make_fx(joint, decomposition_table=table, tracing_mode="fake")(*examples)
            if any(getattr(getattr(n.target, "_schema", None), "is_mutable", False) for n in gm.graph.nodes
                   if n.op == "call_function"):
                gm = make_fx(torch.func.functionalize(gm, remove="mutations"), decomposition_table=table,
                             tracing_mode="fake")(*examples)
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"tracing with make_fx failed: {_describe_error(exc)}") from None
        present = {_op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"}
        for t in present - seen:
            if last:
                origin.setdefault(t, origin.get(last[0], last[0]))
        seen |= present
        missing = list(dict.fromkeys(n.target for n in gm.graph.nodes       # in graph order
                                     if n.op == "call_function" and not _has_rule(n.target)))
        new = [t for t in missing if t in core or t in decomposition_table]
        if not new:
            break
        for t in new:
            table[t] = core.get(t) or decomposition_table[t]
            decomposed.add(_op_name(t))
        last = [_op_name(t) for t in new]
    if missing:
        t = _op_name(missing[0])
        source = origin.get(t)
        packet = ".".join((source or t).split(".")[:2])
        hint = HINTS.get(packet, "")
        more = f" (also without one: {', '.join(_op_name(m) for m in missing[1:4])})" if len(missing) > 1 else ""
        raise SpecError(op_name, f"{t} has no exact rule and PyTorch has no decomposition for it"
                                 + (f" (it comes from PyTorch's decomposition of {source})" if source else "")
                                 + more + (f"; {hint}" if hint else ""))
    return TorchGraph(gm, len(shapes), out_shape, sorted(decomposed), constants, op_name, dtype)


# ------------------------------------------------------------------------------------ making ops
def from_torch(fn: Callable, *, name: str | None = None, inputs: Mapping[str, tuple] | None = None,
               dims: list[dict] | None = None, nondiff: Mapping[str, tuple] | None = None,
               params: Mapping | None = None, output: tuple | None = None, large_dims=None, check_dims=None,
               spec: Op | None = None, constants: str = "decimal", module=None, doc: str = "",
               dtype: str | None = None) -> FrontendOp:
    """An op whose forward is ``fn(*inputs, *nondiff, **params)`` (torch tensors in, one tensor out)
    and whose backward is what PyTorch computes for it. Inputs, dims and output default to the
    spec's when ``spec`` is given. ``dtype``: the graph traced at that dtype is the one proved; by
    default float64, and the function must have the same graph at every lower precision too
    (``vjpcert.frontends.torch_paths``)."""
    if isinstance(fn, type):
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

    def tracer(shapes, param_values):
        from vjpcert.frontends.torch_paths import trace_checked
        return trace_checked(fn, shapes, n_diff, param_values, constants=constants, op_name=name, dtype=dtype)
    return FrontendOp(name=name, framework="PyTorch", framework_version=torch_version(), tracer=tracer, fn=fn,
                      dtype=dtype,
                      module=module if module is not None else inspect.getmodule(fn), inputs=inputs,
                      dims=list(dims or []), nondiff=nondiff, params=params, output=output,
                      large_dims=large_dims, check_dims=check_dims, spec=spec, constants=constants,
                      doc=doc or inspect.getdoc(fn) or "")


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


# ---------------------------------------------------------------- prims (PyTorch's reference decompositions use them)
@rule("prims.broadcast_in_dim.default")
def _broadcast_in_dim(c, x, shape, broadcast_dimensions):
    shape = _shape(shape)

    def fn(a):
        inter = [1] * len(shape)
        for i, d in enumerate(broadcast_dimensions):
            inter[int(d)] = a.shape[i]
        return np.broadcast_to(a.reshape(inter), shape)
    return c.structural(x, fn)


@rule("prims.var.default")
def _prims_var(c, x, dims, correction=1, output_dtype=None):
    axes = _axes(dims, x.a.ndim)
    count = int(np.prod([x.shape[a] for a in axes]))
    if count - correction <= 0:
        c.refuse(f"a variance over {count} entries with correction {correction}")
    mean = c.reduce_sum(x, axes, True, mean=True)
    d = c.binary("-", x, mean)
    return c.binary("/", c.reduce_sum(c.binary("*", d, d), axes, False), count - correction)


@rule("prims.sum.default")
def _prims_sum(c, x, dims, output_dtype=None):
    return c.reduce_sum(x, _axes(dims, x.a.ndim), False)


for _p, _f in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/")):
    rule(f"prims.{_p}.default")(lambda c, x, y, _k=_f: c.binary(_k, x, y))
for _name in ("exp", "log", "sqrt", "rsqrt", "erf", "tanh", "sin", "cos", "reciprocal"):
    rule(f"prims.{_name}.default")(lambda c, x, _k=_name: c.unary(_k, x))
rule("prims.neg.default")(_neg)
rule("prims.where.default")(_where)
rule("prims.view_of.default")(_identity)


@rule("prims.transpose.default")
def _prims_transpose(c, x, permutation):
    return c.structural(x, lambda a: np.transpose(a, tuple(permutation)))


@rule("prims.reshape.default")
def _prims_reshape(c, x, shape):
    return _view(c, x, shape)


@rule("prims.squeeze.default")
def _prims_squeeze(c, x, dimensions):
    return c.structural(x, lambda a: np.squeeze(a, axis=tuple(dimensions)) if dimensions else a)


# ------------------------------------------------------------------------------------ the report's functions
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
    }
