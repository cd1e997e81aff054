"""The cases of the spec-language matrix (``tests/test_language_matrix.py``): small spec-style functions
``f(B, x, y)``, each exercising one primitive of ``core.language.PRIMITIVES`` with one of its keywords
or allowed values, and the constructs every interpreter must refuse with one message.

A case runs at two small shape pairs by default (``shapes``) and at bigger ones under ``--slow``
(``slow_shapes``). ``truth`` is an equivalent function for the exact ground truth where numpy's own
object arrays cannot run the construct (``np.mean(where=)`` has no identity for object dtype); the
float64 run of ``fn`` itself is still compared with it, so the substitute is checked too.

A refusal case names the message every interpreter must refuse with (``refusal``): the text
``check_call`` produces for a keyword outside the table, or one of the shared refusals of
``core.language``; ``SAME`` asks only that every interpreter refuses with one and the same message
(the language names no text for it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from vjpcert.core import language as L
from vjpcert.core.registry import SpecError, take_refusals

SAME = "<one message, the same in every interpreter>"

SQUARE = (((2, 3), (2, 3)), ((3, 4), (3, 4)))           # x and y alike
SQUARE_SLOW = (((4, 5), (4, 5)), ((5, 7), (5, 7)))
CHAIN = (((2, 3), (3, 4)), ((3, 2), (2, 5)))             # x @ y
CHAIN_SLOW = (((4, 5), (5, 6)), ((6, 3), (3, 7)))


@dataclass(frozen=True)
class Case:
    prim: str                 # the row of PRIMITIVES it exercises ("" for a shared refusal)
    name: str
    fn: Callable
    shapes: tuple = SQUARE
    slow_shapes: tuple = SQUARE_SLOW
    refusal: str | None = None
    truth: Callable | None = None

    @property
    def id(self) -> str:
        return f"{self.prim or 'refuse'}:{self.name}"


def keyword_refusal(name: str, **kwargs) -> str:
    """The message ``check_call`` refuses ``np.<name>(..., **kwargs)`` with."""
    take_refusals()
    try:
        L.check_call(name, kwargs)
    except SpecError as exc:
        return exc.problem
    finally:
        take_refusals()
    raise AssertionError(f"np.{name}(**{kwargs}) is inside the language; not a refusal case")


def mask_of(shape):
    """A static mask built from shapes (the lower triangle), as specs build them."""
    return np.tril(np.ones(shape, dtype=bool))


def _cols(shape):
    return np.arange(shape[-1]) % 2 == 0


CASES: list[Case] = []


def case(prim, name, shapes=SQUARE, slow_shapes=SQUARE_SLOW, refusal=None, truth=None):
    def register(fn):
        CASES.append(Case(prim, name, fn, shapes, slow_shapes, refusal, truth))
        return fn
    return register


def simple(prim, name, fn, shapes=SQUARE, slow_shapes=SQUARE_SLOW, truth=None):
    CASES.append(Case(prim, name, fn, shapes, slow_shapes, None, truth))


# ------------------------------------------------------------------ arithmetic
simple("add", "op", lambda B, x, y: x + y)
simple("add", "ufunc", lambda B, x, y: np.add(x, y))
simple("add", "const_broadcast_row", lambda B, x, y: x + B.c(1, 3) + y[:1])
simple("subtract", "op", lambda B, x, y: x - y)
simple("subtract", "ufunc", lambda B, x, y: np.subtract(x, y))
simple("subtract", "rconst", lambda B, x, y: B.c(2) - x)
simple("multiply", "op", lambda B, x, y: x * y)
simple("multiply", "ufunc", lambda B, x, y: np.multiply(x, y))
simple("multiply", "int_col", lambda B, x, y: 3 * x * y[:, :1])
simple("true_divide", "op", lambda B, x, y: x / y)
simple("true_divide", "ufunc", lambda B, x, y: np.true_divide(x, y))
simple("true_divide", "rconst_int", lambda B, x, y: B.c(1) / y + x / 2)
simple("negative", "op", lambda B, x, y: -x)
simple("negative", "ufunc", lambda B, x, y: np.negative(x) * y)
simple("positive", "op", lambda B, x, y: +x)
simple("positive", "ufunc", lambda B, x, y: np.positive(x) + y)
simple("power", "square", lambda B, x, y: x ** 2)
simple("power", "cube_inverse", lambda B, x, y: x ** 3 + y ** -1)
simple("power", "ufunc", lambda B, x, y: np.power(x, 2) * y ** 0)
# a decay's powers: a value to the power of each index (gamma ** np.arange(n), gamma not a constant)
simple("power", "int_powers_of_a_value", lambda B, x, y: x[0, 0] ** B.array(np.arange(x.shape[1])) * y[0],
       truth=lambda B, x, y: np.array([x[0, 0] ** j for j in range(x.shape[1])], dtype=object) * y[0])

# ------------------------------------------------------------------ reductions
simple("sum", "all", lambda B, x, y: x.sum() * y)
simple("sum", "np_all", lambda B, x, y: np.sum(x * y))
simple("sum", "axis0", lambda B, x, y: np.sum(x, axis=0))
simple("sum", "axis1_method", lambda B, x, y: x.sum(axis=1))
simple("sum", "axis_neg", lambda B, x, y: x.sum(-1))
simple("sum", "axis_tuple", lambda B, x, y: np.sum(x * y, axis=(0, 1)))
simple("sum", "keepdims", lambda B, x, y: y - x.sum(axis=-1, keepdims=True))
simple("sum", "where", lambda B, x, y: np.sum(x, axis=1, where=mask_of(x.shape), initial=0))
simple("sum", "where_no_initial", lambda B, x, y: np.sum(x, axis=0, where=mask_of(x.shape)),
       truth=lambda B, x, y: np.sum(x * mask_of(x.shape), axis=0))
simple("sum", "initial", lambda B, x, y: np.sum(x, axis=0, initial=B.c(1, 2)))
simple("sum", "initial_int", lambda B, x, y: x.sum(initial=1) * y)
simple("mean", "all", lambda B, x, y: x.mean() + y)
simple("mean", "axis0", lambda B, x, y: np.mean(x, axis=0))
simple("mean", "keepdims", lambda B, x, y: x - x.mean(axis=-1, keepdims=True))
simple("mean", "where", lambda B, x, y: np.mean(x, axis=1, where=mask_of(x.shape)),
       truth=lambda B, x, y: np.sum(x * mask_of(x.shape), axis=1) / mask_of(x.shape).sum(axis=1))
simple("prod", "all", lambda B, x, y: np.prod(x) * y)
simple("prod", "axis0", lambda B, x, y: np.prod(x, axis=0))
simple("prod", "axis1_keepdims", lambda B, x, y: y * x.prod(axis=1, keepdims=True))

# ------------------------------------------------------------------ contractions
simple("matmul", "op", lambda B, x, y: x @ y, CHAIN, CHAIN_SLOW)
simple("matmul", "ufunc", lambda B, x, y: np.matmul(x, y), CHAIN, CHAIN_SLOW)
simple("matmul", "matrix_vector", lambda B, x, y: x @ y[:, 0], CHAIN, CHAIN_SLOW)
simple("dot", "matrices", lambda B, x, y: np.dot(x, y), CHAIN, CHAIN_SLOW)
simple("dot", "vectors", lambda B, x, y: np.dot(x[0], y[:, 0]) * x, CHAIN, CHAIN_SLOW)
simple("dot", "method", lambda B, x, y: x.dot(y), CHAIN, CHAIN_SLOW)
simple("einsum", "matmul", lambda B, x, y: np.einsum("ij,jk->ik", x, y), CHAIN, CHAIN_SLOW)
simple("einsum", "transpose", lambda B, x, y: np.einsum("ij->ji", x))
simple("einsum", "rowdot", lambda B, x, y: np.einsum("ij,ij->i", x, y))
simple("outer", "vectors", lambda B, x, y: np.outer(x[0], y[:, 0]))
simple("outer", "flattens", lambda B, x, y: np.outer(x, y[0]))

# ------------------------------------------------------------------ structural
simple("getitem", "int", lambda B, x, y: x[0] * y[1])
simple("getitem", "slice", lambda B, x, y: x[:, 1:] - y[:, :-1])
simple("getitem", "strided", lambda B, x, y: x[::2] + y[1::2].sum())
simple("getitem", "reversed", lambda B, x, y: x[:, ::-1] * y)
simple("getitem", "none_ellipsis", lambda B, x, y: x[None, ..., 0] + y[:, None, 1])
simple("getitem", "int_array", lambda B, x, y: x[np.array([1, 0, 1])] if x.shape[0] > 1 else x)
simple("getitem", "mixed_int_list", lambda B, x, y: x[1, [0, 2]] * y[0, [2, 1]])
simple("getitem", "bool_mask", lambda B, x, y: x[mask_of(x.shape)] + y[mask_of(y.shape)])
simple("reshape", "flat", lambda B, x, y: x.reshape(-1))
simple("reshape", "transposed_shape", lambda B, x, y: x.reshape(x.shape[1], x.shape[0]) * y.T)
simple("reshape", "order_C", lambda B, x, y: np.reshape(x, (x.shape[1], x.shape[0]), order="C"))
simple("reshape", "order_F_method", lambda B, x, y: x.reshape(x.shape[1], x.shape[0], order="F"))
simple("reshape", "order_F_np", lambda B, x, y: np.reshape(x, (-1,), order="F") + y.ravel())
# runs: (c n) -> (c, n) and back, c constant, as a grouped convolution reads its channels
RUNS = (((4, 3), (4, 3)), ((6, 2), (6, 2)))
simple("reshape", "into_runs_and_back",
       lambda B, x, y: (x.reshape(2, x.shape[0] // 2, x.shape[1])[1] * y.reshape(2, -1, y.shape[1])[0])
       .reshape(1, -1, x.shape[1]).reshape(x.shape[0] // 2, x.shape[1]),
       RUNS, (((8, 3), (8, 3)), ((10, 4), (10, 4))))
simple("ravel", "method", lambda B, x, y: x.ravel() * y.ravel())
simple("ravel", "order_C", lambda B, x, y: np.ravel(x, order="C"))
simple("ravel", "order_F", lambda B, x, y: np.ravel(x, order="F") - y.ravel(order="F"))
simple("transpose", "T", lambda B, x, y: x.T)
simple("transpose", "np", lambda B, x, y: np.transpose(x) * y.T)
simple("transpose", "method_axes", lambda B, x, y: x.transpose(1, 0))
simple("transpose", "axes_kw", lambda B, x, y: np.transpose(x[:, :, None] * y[:, None, :], axes=(2, 0, 1)))
simple("moveaxis", "np", lambda B, x, y: np.moveaxis(x[None] * y[:, None], 0, -1))
simple("swapaxes", "np", lambda B, x, y: np.swapaxes(x, 0, 1))
simple("swapaxes", "method", lambda B, x, y: (x[:, :, None] * y[:, None, :]).swapaxes(0, 2))
simple("expand_dims", "axis0", lambda B, x, y: np.expand_dims(x, axis=0))
simple("expand_dims", "axis_neg", lambda B, x, y: np.expand_dims(x, -1) * y[:, None, :])
simple("expand_dims", "axis_tuple", lambda B, x, y: np.expand_dims(x, axis=(0, 2)))
simple("squeeze", "method", lambda B, x, y: x[None].squeeze())
simple("squeeze", "axis", lambda B, x, y: np.squeeze(x[:, None], axis=1) + y)
simple("broadcast_to", "row", lambda B, x, y: np.broadcast_to(x[0], x.shape) * y)
simple("repeat", "axis0", lambda B, x, y: np.repeat(x, 2, axis=0))
simple("repeat", "method_axis1", lambda B, x, y: x.repeat(2, axis=1))
simple("repeat", "flat", lambda B, x, y: np.repeat(x, 2))
simple("tile", "int", lambda B, x, y: np.tile(x, 2))
simple("tile", "tuple", lambda B, x, y: np.tile(x, (2, 1)) * np.tile(y, (2, 1)))
simple("split", "axis1", lambda B, x, y: (lambda a, b: b * 2 - a)(*np.split(x, [1], axis=1)))
simple("split", "default_axis", lambda B, x, y: np.split(x, [1])[1] + y[1:])
simple("concatenate", "axis0", lambda B, x, y: np.concatenate([x, y]))
simple("concatenate", "axis1", lambda B, x, y: np.concatenate([x, y * 2], axis=1))
simple("concatenate", "axis_neg", lambda B, x, y: np.concatenate((x[:, :1], y), axis=-1))
simple("stack", "axis0", lambda B, x, y: np.stack([x, y]))
simple("stack", "axis1", lambda B, x, y: np.stack([x, y], axis=1))
simple("stack", "axis_neg", lambda B, x, y: np.stack((x, y), axis=-1))
simple("pad", "int", lambda B, x, y: np.pad(x, 1))
simple("pad", "widths", lambda B, x, y: np.pad(x, ((0, 1), (2, 0))))
simple("pad", "mode_constant", lambda B, x, y: np.pad(x, ((1, 0), (0, 1)), mode="constant"))
simple("pad", "constant_values_0", lambda B, x, y: np.pad(x, 1, mode="constant", constant_values=0))
simple("flip", "all", lambda B, x, y: np.flip(x))
simple("flip", "axis0", lambda B, x, y: np.flip(x, axis=0) * y)
simple("flip", "axis1", lambda B, x, y: np.flip(x, axis=1))
simple("roll", "flat", lambda B, x, y: np.roll(x, 1))
simple("roll", "axis1", lambda B, x, y: np.roll(x, -1, axis=1) + y)
simple("roll", "axis0", lambda B, x, y: np.roll(x, 2, axis=0))
simple("take", "flat", lambda B, x, y: np.take(x, [0, 2, 1]))
simple("take", "axis0", lambda B, x, y: np.take(x, [1, 0], axis=0) * y[:2])
simple("take", "axis1", lambda B, x, y: np.take(x, [2, 0, 0], axis=1))
simple("take_along_axis", "axis1",
       lambda B, x, y: np.take_along_axis(x, (np.arange(x.shape[0])[:, None] + np.array([[0, 1]])) % x.shape[1],
                                          axis=1))
simple("take_along_axis", "axis0",
       lambda B, x, y: np.take_along_axis(x, np.zeros((1, x.shape[1]), dtype=np.int64), axis=0) + y)
simple("tril", "default", lambda B, x, y: np.tril(x))
simple("tril", "k1", lambda B, x, y: np.tril(x, k=1) * y)
simple("tril", "k_neg", lambda B, x, y: np.tril(x, -1))
simple("triu", "default", lambda B, x, y: np.triu(x))
simple("triu", "k1", lambda B, x, y: np.triu(x, k=1) + y)
simple("triu", "k_neg", lambda B, x, y: np.triu(x, -1))
simple("copy", "np", lambda B, x, y: np.copy(x) * y)
simple("copy", "method", lambda B, x, y: x.copy())

# ------------------------------------------------------------------ linear
simple("cumsum", "flat", lambda B, x, y: np.cumsum(x))
simple("cumsum", "axis0", lambda B, x, y: np.cumsum(x, axis=0) * y)
simple("cumsum", "method_axis1", lambda B, x, y: x.cumsum(axis=1))
simple("diff", "default", lambda B, x, y: np.diff(x))
simple("diff", "axis0", lambda B, x, y: np.diff(x, axis=0))
simple("diff", "n2_axis1", lambda B, x, y: np.diff(x, n=2, axis=1))


@case("add.at", "rows")
def _add_at_rows(B, x, y):
    out = B.zeros((2,) + x.shape[1:])
    np.add.at(out, np.arange(x.shape[0]) % 2, x)
    return out


@case("add.at", "entries_repeated")
def _add_at_entries(B, x, y):
    out = B.zeros(x.shape)
    np.add.at(out, (np.array([0, 0, 1]) % x.shape[0], np.array([1, 1, 0])), y[0, :3])
    return out


@case("setitem", "column_of_fresh")
def _set_column(B, x, y):
    out = B.zeros(x.shape)
    out[:, 1] = x[:, 0]
    return out


@case("setitem", "row_then_inplace_add")
def _set_row_add(B, x, y):
    out = B.zeros(x.shape)
    out[0] = y[0]
    out[1:] += x[1:]
    return out


@case("setitem", "alias_iadd")
def _alias_iadd(B, x, y):
    z = y * 1                       # fresh: inputs are read-only
    w = z                           # an alias: the update is seen through z too
    w += x
    return z + w


@case("setitem", "view_imul_then_base")
def _view_imul(B, x, y):
    fresh = y + 0
    head = fresh[:2]
    head *= 3
    return fresh + x


@case("setitem", "strided_view_isub_then_base")
def _view_isub(B, x, y):
    fresh = x * 1
    v = fresh[:, ::2]
    v -= y[:, ::2]
    return fresh


@case("setitem", "base_write_then_view")
def _base_then_view(B, x, y):
    fresh = x + 0
    v = fresh[0]
    fresh[0] = y[0]
    return v * 2 + fresh[1]


@case("setitem", "itruediv")
def _itruediv(B, x, y):
    fresh = x * 1
    fresh /= y
    return fresh


@case("setitem", "mask")
def _set_mask(B, x, y):
    out = B.zeros(x.shape)
    m = mask_of(x.shape)
    out[m] = x[m] * y[m]
    return out


@case("setitem", "scalar_constant")
def _set_scalar(B, x, y):
    out = x + y
    out[0, 0] = B.c(5, 2)
    return out


@case("setitem", "copy_is_not_a_view")
def _copy_not_view(B, x, y):
    c = x.copy()
    c[0] = y[0]
    return c + x


@case("setitem", "view_of_a_strided_view")
def _view_of_view(B, x, y):
    fresh = x * 1
    w = fresh[:, 1:][:, ::2]        # a view of a view: the write lands in fresh at columns 1, 3, ...
    w += y[:, :w.shape[1]]
    return fresh


@case("setitem", "through_a_reversed_view")
def _reversed_view(B, x, y):
    fresh = x + 0
    fresh[:, ::-1][:, 0] = y[:, 0]  # the reversed view's first column is fresh's last
    return fresh


@case("setitem", "entry_is_a_copy")
def _entry_copy(B, x, y):
    fresh = x + 0
    s = fresh[0, 0]                 # every index an int: numpy hands back the entry, not a view
    s += B.c(1)
    return fresh * y + s


@case("setitem", "repeated_index_last_wins")
def _last_wins(B, x, y):
    out = B.zeros(x.shape)
    out[[0, 0]] = y[:2]             # numpy assigns in order: row 0 ends as y[1]
    return out + x


@case("setitem", "transpose_sees_a_base_write")
def _transpose_sees(B, x, y):
    fresh = x * 1
    t = fresh.T
    fresh[0] = y[0]
    return t.T * y


@case("setitem", "copy_then_base_write")
def _copy_then_write(B, x, y):
    fresh = x * 1
    c = fresh.copy()
    fresh[0] = y[0]
    return c + fresh


@case("setitem", "unary_plus_is_a_new_array")
def _plus_then_iadd(B, x, y):
    fresh = x * 1
    p = +fresh
    fresh += y
    return p * 2 + fresh


@case("add.at", "basic_slice_key")
def _add_at_basic(B, x, y):
    out = x * 1
    np.add.at(out, (slice(None), 0), y[:, 1])
    return out


# ------------------------------------------------------------------ select and shape
simple("where", "mask_two_arrays", lambda B, x, y: np.where(mask_of(x.shape), x, y))
simple("where", "mask_const", lambda B, x, y: np.where(mask_of(x.shape), x, 0) + y)
simple("where", "broadcast_mask", lambda B, x, y: np.where(_cols(x.shape), x * y, B.c(1, 2)))
# a mask padded with False (a padded image's inside, as max-pooling with padding builds it)
simple("where", "padded_mask", lambda B, x, y: np.where(
    np.pad(np.ones((x.shape[0], x.shape[1] - 1), dtype=bool), ((0, 0), (1, 0))), x, y))
simple("shape", "attribute", lambda B, x, y: x * B.c(x.shape[1]) + y)
simple("shape", "np", lambda B, x, y: B.zeros(np.shape(x)) + x * B.c(np.shape(y)[0]))
simple("ndim", "attribute", lambda B, x, y: x * B.c(x.ndim))
simple("ndim", "np", lambda B, x, y: y * B.c(np.ndim(x) + 1))
simple("size", "attribute", lambda B, x, y: x * B.c(x.size))
simple("size", "np", lambda B, x, y: y / B.c(np.size(x)))
simple("zeros_like", "np", lambda B, x, y: np.zeros_like(x) + y)
simple("zeros_like", "alone", lambda B, x, y: np.zeros_like(x))


# ------------------------------------------------------------------ refusals
def refused(prim, name, fn, message, shapes=SQUARE[:1]):
    CASES.append(Case(prim, name, fn, shapes, (), message))


refused("sum", "dtype", lambda B, x, y: np.sum(x, dtype=object), keyword_refusal("sum", dtype=object))
refused("sum", "method_dtype", lambda B, x, y: x.sum(axis=0, dtype=object), keyword_refusal("sum", dtype=object))
refused("mean", "dtype", lambda B, x, y: np.mean(x, dtype=object), keyword_refusal("mean", dtype=object))
refused("cumsum", "dtype", lambda B, x, y: np.cumsum(x, dtype=object), keyword_refusal("cumsum", dtype=object))
refused("pad", "reflect", lambda B, x, y: np.pad(x, 1, mode="reflect"), keyword_refusal("pad", mode="reflect"))
refused("pad", "edge", lambda B, x, y: np.pad(x, 1, mode="edge"), keyword_refusal("pad", mode="edge"))
refused("pad", "constant_values_1", lambda B, x, y: np.pad(x, 1, constant_values=1),
        keyword_refusal("pad", constant_values=1))
refused("reshape", "order_A", lambda B, x, y: x.reshape(-1, order="A"), keyword_refusal("reshape", order="A"))
refused("ravel", "order_K", lambda B, x, y: np.ravel(x, order="K"), keyword_refusal("ravel", order="K"))
refused("take", "mode_clip", lambda B, x, y: np.take(x, [0, 5], mode="clip"), keyword_refusal("take", mode="clip"))
refused("diff", "prepend", lambda B, x, y: np.diff(x, prepend=0), keyword_refusal("diff", prepend=0))
refused("einsum", "optimize", lambda B, x, y: np.einsum("ij->ji", x, optimize=True),
        keyword_refusal("einsum", optimize=True))
refused("matmul", "dtype", lambda B, x, y: np.matmul(x, y.T, dtype=object), keyword_refusal("matmul", dtype=object))
refused("", "less", lambda B, x, y: x < y, L.COMPARISON)
refused("", "equal", lambda B, x, y: x == y, L.COMPARISON)
refused("", "where_on_values", lambda B, x, y: np.where(x > 0, x, y), L.COMPARISON)
refused("", "np_exp", lambda B, x, y: np.exp(x), L.NUMPY_TRANSCENDENTAL.format(name="exp"))
refused("", "np_sqrt", lambda B, x, y: np.sqrt(y), L.NUMPY_TRANSCENDENTAL.format(name="sqrt"))
refused("", "float", lambda B, x, y: x * float(x[0, 0]), L.FLOAT_CALL)
refused("", "branch", lambda B, x, y: x if x[0, 0] else y, L.BRANCH)
refused("", "np_maximum", lambda B, x, y: np.maximum(x, y), SAME)
refused("", "np_sort", lambda B, x, y: np.sort(x), SAME)
refused("", "abs", lambda B, x, y: abs(x), SAME)


def _write_input(B, x, y):
    x[0] = y[0]
    return x


refused("setitem", "into_input", _write_input, SAME)


def _iadd_input(B, x, y):
    z = y
    z += x                          # y is an input: an in-place update of it is refused
    return z


refused("setitem", "iadd_into_input", _iadd_input, SAME)


def by_primitive(primitives=None) -> dict[str, list[Case]]:
    """Every row of the table -> its computing cases (a row without one maps to [])."""
    primitives = L.PRIMITIVES if primitives is None else primitives
    out = {name: [] for name in primitives}
    for c in CASES:
        if c.refusal is None and c.prim in out:
            out[c.prim].append(c)
    return out


def unknown_rows() -> list[str]:
    """Cases naming a primitive the table does not have (a renamed row)."""
    return sorted({c.prim for c in CASES if c.prim and c.prim not in L.PRIMITIVES})
