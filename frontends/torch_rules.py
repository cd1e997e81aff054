"""The ATen rules of the PyTorch frontend: each ATen (and prims) op a traced graph may hold, with its
exact mathematical meaning over the evaluator's values (``vjpcert.frontends.values``).

``RULES`` maps an op's name to its rule. An op with no rule here is replaced by PyTorch's own
decomposition when the graph is traced (``vjpcert.frontends.torch_graph``); one with neither is bad
input. ``aten.exp`` is exp, ``aten._softmax`` is exp(x_i) / sum_j exp(x_j) (its shift by the row
maximum is ``B.max_shift``); a comparison of input-dependent values is refused, as it is in a spec.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable

import numpy as np

from vjpcert.core.registry import SpecError
from vjpcert.frontends.values import Val, as_array, fresh_copy


def _torch():
    # PyTorch is an optional extra, and slow to import: it is loaded when a torch op is made or traced
    try:
        import torch
    except ImportError:
        raise SpecError(None, "the PyTorch frontend needs PyTorch: pip install 'vjpcert[torch]'") from None
    return torch


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
    return c.unary("exp", c.binary("*", x, Val(as_array(B.log(B.c(Fraction(b.a.item())))), False)))


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


@rule("aten.empty.memory_format")
def _empty(c, size, dtype=None, **_):
    """Uninitialised memory: NaN-poisoned, so an output that reads it is refused (a placeholder nothing
    reads, such as batch norm's saved statistics in eval mode, is never evaluated)."""
    return c.full(_shape(size), float("nan"), "float")


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
    out = fresh_copy(c._static_exact(x) if static else c.lift(x))
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
    out = fresh_copy(c._static_exact(base) if static else c.lift(base))
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
