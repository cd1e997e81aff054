"""The spec language, written once: every numpy construct a spec may apply to traced values.

A spec is numpy code over ``B``. What that code *means* is decided here, not separately by each array
type that runs it: this table names every primitive (numpy function, ufunc, array method, operator,
``B`` function), the keyword arguments it accepts and the values they may take. Every interpreter of
spec code -- the object arrays of the exact fields, mpmath, SymPy and floats (``core.spec_array``), the
arrays mod p (``symbolic.modular.backend``), the symbolic-size arrays (``symbolic.every_size``) -- calls
``check_call`` before it runs a primitive, so a construct outside the language is refused at trace time
with the same message in every tier, and a construct inside it is one row here and one cell per
interpreter (``tests/test_language_matrix.py`` holds every cell to numpy float64).

Semantics are numpy's: aliases, views and in-place updates behave as in numpy (an interpreter that
cannot follow one refuses it with ``refuse_view_write``). What numpy computes *structurally* -- a
reshape with ``order="F"``, a strided slice, a pad, a flip, a gather -- is taken from numpy itself by
``index_map``: the construct is run on an array of entry numbers, so an interpreter needs one gather,
never its own reading of numpy's rules.

The refusals every interpreter shares are here too: comparisons of values, branches on values, floats
and ``math.*`` on traced values, numpy transcendentals in place of ``B``'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vjpcert.core.errors import refuse


@dataclass(frozen=True)
class Primitive:
    """One construct of the language: ``name`` is numpy's (``np.<name>``, the method ``x.<name>`` or
    the operator's ufunc), ``kind`` its family, ``keywords`` the keyword arguments a spec may pass
    (anything else is refused), ``values`` the values a keyword may take where only some are meaningful
    (e.g. ``np.pad(mode="constant")``)."""

    name: str
    kind: str
    keywords: frozenset = frozenset()
    values: dict = field(default_factory=dict)
    doc: str = ""


def _p(name, kind, keywords=(), doc="", **values):
    return Primitive(name, kind, frozenset(keywords), values, doc)


# B's elementwise functions of a traced value, each a row of ``core.derivatives``: the smooth ones,
# and the kink ``step`` (a free Boolean per argument where a prover splits into regions)
TRANSCENDENTAL = ("exp", "log", "sqrt", "erf", "tanh", "sin", "cos")
KINK = "step"
ELEMENTWISE = TRANSCENDENTAL + (KINK,)

# The families, in the order docs/spec-language.md lists them.
KINDS = {
    "arithmetic": "exact arithmetic: + - * / and ** with a constant exponent, as operators or ufuncs",
    "backend": "the number system: B.exp, B.log, B.sqrt, B.erf, B.tanh, B.sin, B.cos, B.pi, B.c, "
               "B.zeros, B.array, B.max_shift; the kink B.step ([a > 0], 0 at 0) and B.relu = a * B.step(a) "
               "(proved region by region)",
    "reduction": "sums and means over axes",
    "contraction": "products that sum: matmul, einsum",
    "structural": "moving entries without arithmetic (numpy's own index rules, via index_map)",
    "linear": "static linear maps of entries: cumulative sums, differences, scatter-adds",
    "select": "selection by a mask built from shapes (never from values)",
    "shape": "questions about shapes (never about values)",
}

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in (
    # arithmetic (operators dispatch to these ufuncs)
    _p("add", "arithmetic", doc="a + b"),
    _p("subtract", "arithmetic", doc="a - b"),
    _p("multiply", "arithmetic", doc="a * b"),
    _p("true_divide", "arithmetic", doc="a / b (a division by an exact zero is refused)"),
    _p("negative", "arithmetic", doc="-a"),
    _p("positive", "arithmetic", doc="+a"),
    _p("power", "arithmetic", doc="a ** k, k a constant int or Fraction"),
    # reductions
    _p("sum", "reduction", ("axis", "keepdims", "where", "initial"),
       doc="np.sum / x.sum, where= a static mask, initial= an exact constant"),
    _p("mean", "reduction", ("axis", "keepdims", "where"), doc="np.mean / x.mean, where= a static mask"),
    _p("prod", "reduction", ("axis", "keepdims"), doc="np.prod / x.prod"),
    # contractions
    _p("matmul", "contraction", doc="a @ b, np.matmul"),
    _p("dot", "contraction", doc="np.dot of vectors or matrices"),
    _p("einsum", "contraction", doc="np.einsum with explicit subscripts"),
    _p("outer", "contraction", doc="np.outer"),
    # structural: numpy computes where each entry goes (index_map)
    _p("getitem", "structural", doc="x[...]: basic slicing (strided too), None, ..., static integer "
                                    "arrays and static boolean masks"),
    _p("reshape", "structural", ("order",), order=("C", "F"), doc="np.reshape / x.reshape, order C or F"),
    _p("ravel", "structural", ("order",), order=("C", "F"), doc="np.ravel / x.ravel"),
    _p("transpose", "structural", ("axes",), doc="np.transpose / x.transpose / x.T"),
    _p("moveaxis", "structural", doc="np.moveaxis"),
    _p("swapaxes", "structural", doc="np.swapaxes / x.swapaxes"),
    _p("expand_dims", "structural", ("axis",), doc="np.expand_dims"),
    _p("squeeze", "structural", ("axis",), doc="np.squeeze / x.squeeze"),
    _p("broadcast_to", "structural", doc="np.broadcast_to"),
    _p("repeat", "structural", ("axis",), doc="np.repeat / x.repeat"),
    _p("tile", "structural", doc="np.tile"),
    _p("split", "structural", ("axis",), doc="np.split (static sections)"),
    _p("concatenate", "structural", ("axis",), doc="np.concatenate"),
    _p("stack", "structural", ("axis",), doc="np.stack"),
    _p("pad", "structural", ("mode", "constant_values"), mode=("constant",), constant_values=(0,),
       doc="np.pad with zeros"),
    _p("flip", "structural", ("axis",), doc="np.flip"),
    _p("roll", "structural", ("axis",), doc="np.roll (static shifts)"),
    _p("take", "structural", ("axis",), doc="np.take with static indices"),
    _p("take_along_axis", "structural", ("axis",), doc="np.take_along_axis with static indices"),
    _p("tril", "structural", ("k",), doc="np.tril (entries above the band set to 0)"),
    _p("triu", "structural", ("k",), doc="np.triu"),
    _p("copy", "structural", doc="np.copy / x.copy"),
    # linear maps with static coefficients
    _p("cumsum", "linear", ("axis",), doc="np.cumsum / x.cumsum"),
    _p("diff", "linear", ("n", "axis"), doc="np.diff"),
    _p("add.at", "linear", doc="np.add.at(x, static indices, values): scatter-add"),
    _p("setitem", "linear", doc="x[...] = v and in-place updates (+=, -=, *=, /=) with numpy's "
                                "semantics for aliases and views; never into a spec's inputs"),
    # selection by static masks
    _p("where", "select", doc="np.where(mask, a, b), mask built from shapes or structural params"),
    # shape questions
    _p("shape", "shape", doc="np.shape / x.shape"),
    _p("ndim", "shape", doc="np.ndim / x.ndim"),
    _p("size", "shape", doc="np.size / x.size"),
    _p("zeros_like", "shape", doc="np.zeros_like (exact zeros of the same shape)"),
)}

# Array methods that are spellings of a primitive (``x.sum(...)`` is ``np.sum(x, ...)``).
METHODS = ("sum", "mean", "prod", "reshape", "ravel", "transpose", "swapaxes", "squeeze", "repeat",
           "copy", "cumsum", "dot")


# numpy's ufuncs as the primitives they spell: a ufunc called (``__call__``) or one of its methods
# (numpy spells x ** 2 and x ** -1 on float arrays as np.square and np.reciprocal)
_UFUNC_ALIASES = {"divide": "true_divide", "square": "power", "reciprocal": "power"}
UFUNC_METHODS = {("add", "reduce"): "sum", ("multiply", "reduce"): "prod", ("add", "accumulate"): "cumsum",
                 ("add", "at"): "add.at"}
COMPARING_UFUNCS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                              "maximum", "minimum", "fmax", "fmin", "absolute", "fabs", "sign", "heaviside"})


def ufunc_primitive(ufunc, method: str = "__call__") -> str:
    """The primitive a ufunc call spells (``np.add.reduce`` is ``sum``), or a refusal: a comparison,
    a numpy transcendental (the spec must use ``B``'s), or any other ufunc outside the language."""
    name = _UFUNC_ALIASES.get(ufunc.__name__, ufunc.__name__)
    if method != "__call__":
        prim = UFUNC_METHODS.get((name, method))
        if prim is None:
            refuse(f"np.{name}.{method} is not part of the spec language")
        return prim
    prim = PRIMITIVES.get(name)
    if prim is None or prim.kind not in ("arithmetic", "contraction"):
        if name in COMPARING_UFUNCS:
            refuse_comparison()
        refuse_ufunc(ufunc)
    return name


def check_call(name: str, kwargs: dict | None = None, args: tuple = ()) -> Primitive:
    """The primitive ``name`` called with ``kwargs``, or a refusal naming what is outside the language.
    Every interpreter calls this before it runs a construct, so all refuse alike."""
    prim = PRIMITIVES.get(name)
    if prim is None:
        refuse(f"np.{name} is not part of the spec language (docs/spec-language.md: what a spec may use), so no "
               f"checker could follow it the same way")
    for key, value in (kwargs or {}).items():
        if key not in prim.keywords:
            refuse(f"np.{name}(..., {key}=...) is not part of the spec language: "
                   + (f"np.{name} accepts {', '.join(sorted(prim.keywords))}" if prim.keywords
                      else f"np.{name} takes no keyword arguments"))
        allowed = prim.values.get(key)
        if allowed is not None and not _is_one_of(value, allowed):
            refuse(f"np.{name}(..., {key}={value!r}) is not part of the spec language: {key} may be "
                   + " or ".join(map(repr, allowed)))
    return prim


def _is_one_of(value, allowed) -> bool:
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value.size > 0 and all(any(v == a for a in allowed) for v in value.ravel().tolist())
    return any(type(value) is type(a) and value == a for a in allowed) or (
        isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value in allowed)


def keywords(names, kwargs: dict) -> dict:
    """``kwargs`` without the keywords whose value is numpy's default (None), for interpreters whose own
    implementation does not take them."""
    return {k: v for k, v in kwargs.items() if v is not None or k not in names}


# ------------------------------------------------------------------ the refusals every interpreter shares
COMPARISON = ("a comparison (==, !=, <, <=, >, >=, max, abs, sort, ...) of traced values: specs must be "
              "branch-free in their inputs (a comparison is a kink or a branch the proof cannot follow)")
BRANCH = ("a branch depends on a traced value (if, and, or, np.where on values, any/all): specs must be "
          "branch-free in their inputs; build masks from shapes or structural params")
FLOAT_CALL = ("float() or math.* was applied to a traced value (a float has 16 digits, and no proof can "
              "follow it): use B.exp, B.sqrt, ... so the spec runs on every backend")
NUMPY_TRANSCENDENTAL = ("np.{name} was applied to traced values: use B.exp, B.sqrt, ... for numbers "
                        "(comparisons and max/abs are not part of the spec language)")


INPUT_WRITE = ("a write into an input (or a view of one) in place; inputs are read-only to spec code: "
               "compute a new array instead (x = x - m, not x -= m)")


def refuse_input_write(*_):
    refuse(INPUT_WRITE)


def refuse_comparison(*_):
    refuse(COMPARISON)


def refuse_branch(*_):
    refuse(BRANCH)


def refuse_float(*_):
    refuse(FLOAT_CALL)


def refuse_ufunc(ufunc) -> None:
    """A ufunc that is no arithmetic primitive (np.exp, np.maximum, np.abs, np.greater, ...)."""
    refuse(NUMPY_TRANSCENDENTAL.format(name=getattr(ufunc, "__name__", ufunc)))


def refuse_view_write(what: str) -> None:
    refuse(f"{what}: this checker cannot follow a write through a view of another array; write the "
           f"update into a fresh array (B.zeros) or use np.where / np.concatenate")


# ------------------------------------------------------------------ structure, computed by numpy itself
def index_map(fn, shapes, *args, **kwargs) -> np.ndarray:
    """Where each output entry of a structural construct comes from, as numpy computes it: ``fn`` is run
    on integer arrays of entry numbers of the given ``shapes`` (the operands) -- numbered 1, 2, ...
    across all operands in order, so 0 marks an entry the construct fills with zero (a pad, the
    outside of a band). The result has the output's shape; entry i - 1 of the operands' concatenated
    ravel (C order) is the source of an output entry holding i. ``fn(*operands, *args, **kwargs)``."""
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    starts = np.cumsum([0, *sizes])
    operands = [np.arange(starts[i] + 1, starts[i + 1] + 1, dtype=np.int64).reshape(s)
                for i, s in enumerate(shapes)]
    return np.asarray(fn(*operands, *args, **kwargs))


def gather(flat: np.ndarray, idx: np.ndarray, zero) -> np.ndarray:
    """The output of a structural construct from the operands' concatenated ravel ``flat`` and its
    ``index_map``: entries numbered 0 are ``zero``."""
    out = np.asarray(flat)[np.maximum(idx, 1) - 1]
    return np.where(idx == 0, zero, out) if (idx == 0).any() else out


def primitives_by_kind() -> dict[str, list[Primitive]]:
    out: dict[str, list[Primitive]] = {k: [] for k in KINDS}
    for prim in PRIMITIVES.values():
        out[prim.kind].append(prim)
    return out
