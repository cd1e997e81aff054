"""Statements with symbolic dimensions, as ``symbolic.every_size.general`` proves them: the builder ``G`` and
``build_statement``.

The statements of the built-in ops are *derived* from their spec code (``symbolic.every_size.shape_trace``
builds them through ``G``); nobody writes them. A hand-written statement (``prove_general(...,
form=builder)``) uses the same builder and is what the negative controls of the cross-check are made
of (``specs/mutants/general.py``)::

    def form(G):
        n = G.dim("n")
        x, dy = G.array("x"), G.array("dy")

        def y(r, i):                       # the forward, one output entry, indices as arguments
            return G.exp(x[r, i]) / G.sum(lambda k: G.exp(x[r, k]), n)

        def dx(s, j):                      # the backward, one entry of the cotangent of x
            return y(s, j) * (dy[s, j] - G.sum(lambda l: y(s, l) * dy[s, l], n))
        return G.vjp("x", forward=y, backward=dx)

The builder signature is ``builder(G) -> G.vjp(...) | G.law(...)``; ``G`` is a ``GeneralBuilder``:

* ``G.dim(name)`` -- a spec dimension as an integer symbol >= 1; ``G.even_dim("d", "h")`` -- d = 2h;
  ``G.multiple_dim("d", k, "h")`` -- d = k h;
* ``G.param(name)`` -- a scalar parameter: a symbol (eps > 0, c real) or, for structural parameters
  such as RoPE's base, its value;
* ``G.array(name)`` -- an ``IndexedBase`` for an input, a non-differentiable input or ``"dy"``;
  indices start at 0, as in the spec's numpy arrays;
* ``G.sum(f, size)`` / ``G.mean(f, size)`` -- sum_{k=0}^{size-1} f(k) with a fresh index (named after
  f's parameter), so a nested sum can never capture an outer index;
* ``G.exp, G.sqrt, G.erf, G.tanh, G.sin, G.cos, G.pi, G.c(p, q)`` -- as the backend ``B`` has them;
* ``G.vjp(wrt, forward=..., backward=...)`` -- forward(*output_index) and backward(*input_index), or
  lists of ``G.piece(index, sizes, value)`` when a layout splits an axis (RoPE: x[2p + c]);
* ``G.law(value, over)`` -- value(*free) must be 0 (or a pair (lhs, rhs)) for free indices ranging
  over the dims in ``over``, or a list of pieces that must be 0, tiling an array of shape ``over``;
* ``@G.let("rstd")`` -- names an intermediate for the rendered formulas (the proof sees through it);
* ``G.check_at([...])`` -- the concrete sizes (spec dim names) for the cross-check, when the default
  ladder (1, 2, 3, 5) is too expensive.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Callable

import sympy as sp
from sympy import IndexedBase, Sum
from sympy.core.function import AppliedUndef

from vjpcert.core.backends import exact
from vjpcert.core.registry import Op, SpecError
from vjpcert.symbolic.every_size.dims import general_claims  # noqa: F401  (the tier's names)
from vjpcert.symbolic.every_size.dims import general_dims as declared_dims
from vjpcert.symbolic.every_size.heads import check_heads

JACOBIAN_SHOWN_CHARS = 1500    # the derived Jacobian entry is shown when it is this short


def general_dims(op: Op, claim: str, form: Callable | None = None) -> dict:
    """The dims a general certificate carries (``dims.general_dims``), or with a derived ``form`` the
    dims its statement names."""
    if form is not None:
        return build_statement(op, claim, form, display=True).dims
    return declared_dims(op, claim)


# ============================================================================ the builder (G)
@dataclass
class Piece:
    """Part of an array: entries at ``index(*p)`` for p ranging over ``sizes`` equal ``value(*p)``."""
    index: Callable
    sizes: tuple
    value: Callable


@dataclass
class Materialised:
    syms: tuple          # the piece's index symbols
    sizes: tuple
    idx: tuple           # index expressions into the full array
    value: sp.Expr


@dataclass
class GeneralVJP:
    wrt: str
    forward: list
    backward: list
    kind: str = "vjp"


@dataclass
class GeneralLaw:
    value: object             # value(*free), or a list of pieces (a law whose array is split into parts)
    over: tuple
    kind: str = "law"


class GeneralBuilder:
    """The ``G`` a general-form builder receives; see the module docstring."""

    def __init__(self, op: Op, display: bool = False):
        self.op = op
        self.display_mode = display      # named intermediates stay names (rendering only)
        self.exp, self.sqrt, self.erf, self.tanh = sp.exp, sp.sqrt, sp.erf, sp.tanh
        self.sin, self.cos, self.pi = sp.sin, sp.cos, sp.pi
        self.dim_exprs: dict[str, sp.Expr] = {}      # spec dim name -> expression in the dim symbols
        self.dim_symbols: list[sp.Symbol] = []
        self.even: dict[str, sp.Symbol] = {}         # dim name -> the symbol it is a multiple of
        self.multiple: dict[str, int] = {}            # dim name -> k (d = k * sub + least - k)
        self.least: dict[str, int] = {}               # dim name -> its least size (k unless declared)
        self.ranges: dict[sp.Symbol, tuple] = {}
        self.check_dims: list[dict] | None = None
        self._names: set[str] = set()
        self._arrays: dict[str, IndexedBase] = {}
        self.definitions: dict = {}      # name -> (args, expression), in display mode
        self.assumed: list[str] = []     # what a construct of the trace holds only under (stated)

    def assume(self, text: str) -> None:
        """A construct the trace reads under an assumption: the statement carries it."""
        if text not in self.assumed:
            self.assumed.append(text)

    # ---------------------------------------------------------------- numbers
    def c(self, p, q=1):
        f = exact(p, q)
        return sp.Rational(f.numerator, f.denominator)

    # ---------------------------------------------------------------- dimensions and params
    def _new_dim(self, name: str) -> sp.Symbol:
        s = sp.Symbol(name, integer=True, positive=True)
        if s not in self.dim_symbols:
            self.dim_symbols.append(s)
        return s

    def dim(self, name: str) -> sp.Expr:
        if name not in self.dim_exprs:
            if name not in self.op.dim_names():
                raise SpecError(self.op.name, f"general form: {name!r} is not a dim of the op "
                                              f"({sorted(self.op.dim_names())})")
            self.dim_exprs[name] = self._new_dim(name)
        return self.dim_exprs[name]

    def multiple_dim(self, name: str, k: int, sub: str, least: int | None = None) -> sp.Expr:
        """A dimension ``name`` = k * ``sub`` + least - k with sub >= 1: every multiple of k from ``least``
        (default k) on (k = 2: RoPE's even head width d = 2h; k = 1, least = 2: H = H' + 1 >= 2)."""
        if name not in self.dim_exprs:
            least = int(k) if least is None else int(least)
            s = self._new_dim(sub)
            self.even[name] = s
            self.multiple[name] = int(k)
            self.least[name] = least
            self.dim_exprs[name] = int(k) * s + (least - int(k))
        return self.dim_exprs[name]

    def even_dim(self, name: str, half: str) -> sp.Expr:
        """An even dimension ``name`` = 2 * ``half`` (RoPE's head width)."""
        return self.multiple_dim(name, 2, half)

    def size(self, entry) -> sp.Expr:
        if isinstance(entry, (int, sp.Basic)):
            return sp.sympify(entry)
        out = sp.Integer(1)
        for tok in str(entry).split("*"):
            tok = tok.strip()
            out *= int(tok) if tok.isdigit() else self.dim(tok)
        return out

    def shape(self, name: str) -> tuple:
        """The declared shape of an input (or ``dy``, the output's cotangent; ``y``, the output, unless
        an input has that name: a law over inputs ``x, y`` means the input)."""
        op = self.op
        arrays = {**op.inputs, **op.nondiff}
        decl = arrays.get(name) if name in arrays else op.output if name in ("y", "dy") else None
        if decl is None:
            raise SpecError(op.name, f"general form: no array {name!r}")
        return tuple(self.size(e) for e in decl)

    def output_shape(self) -> tuple:
        return tuple(self.size(e) for e in self.op.output)

    def param(self, name: str):
        p = self.op.params.get(name)
        if p is None:
            raise SpecError(self.op.name, f"general form: no parameter {name!r}")
        if not p.symbolic:
            return sp.sympify(p.default)
        return sp.Symbol(name, positive=True) if p.positive else sp.Symbol(name, real=True)

    def array(self, name: str) -> IndexedBase:
        if name not in (*self.op.inputs, *self.op.nondiff, "dy"):
            raise SpecError(self.op.name, f"general form: {name!r} is not an input of the op")
        if name not in self._arrays:
            self.shape(name)                       # declares the dims it uses
            self._arrays[name] = IndexedBase(name, real=True)
        return self._arrays[name]

    def check_at(self, dims_list: list[dict]):
        self.check_dims = [dict(d) for d in dims_list]

    # ---------------------------------------------------------------- indices and sums
    def index(self, name: str, size) -> sp.Symbol:
        """A fresh index symbol in [0, size - 1], never equal to another index of this form."""
        if name.startswith(("σ", "ι")):        # reserved for the normaliser's own indices
            name = "i" + name
        base, k = name, 1
        while name in self._names or name in {str(s) for s in self.dim_symbols}:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        s = sp.Symbol(name, integer=True)
        self.ranges[s] = (sp.Integer(0), sp.sympify(size) - 1)
        return s

    def sum(self, f: Callable, size):
        (name,) = _param_names(f, 1)
        k = self.index(name, size)
        return Sum(f(k), (k, 0, sp.sympify(size) - 1))

    def mean(self, f: Callable, size):
        return self.sum(f, size) / size

    def let(self, name: str, f: Callable | None = None) -> Callable:
        """``f`` as a named intermediate (rstd, P, ...); also a decorator, ``@G.let("rstd")``. The
        proof always sees the full expression; only when the formulas are rendered (display mode)
        does a call stay ``name(args)``, with the definition listed once."""
        if f is None:
            return lambda g: self.let(name, g)
        if not self.display_mode:
            return f
        head = sp.Function(name)

        @functools.wraps(f)                  # keeps f's parameter names (they name the indices)
        def call(*args):
            if name not in self.definitions:     # defined where first used: only what is used shows
                params = _param_names(f, len(inspect.signature(f).parameters))
                generic = tuple(sp.Symbol(p, integer=True) for p in params)
                self.definitions[name] = None    # a definition that uses itself must not recurse
                self.definitions[name] = (generic, sp.sympify(f(*generic)))
            return head(*args)
        return call

    def unfold(self, e):
        """A value that is one named intermediate shows its definition (the forward y = y(r, i)
        would say nothing)."""
        if isinstance(e, AppliedUndef) and self.definitions.get(e.func.__name__):
            args, body = self.definitions[e.func.__name__]
            return body.xreplace(dict(zip(args, e.args)))
        return e

    # ---------------------------------------------------------------- statements
    def piece(self, index: Callable, sizes, value: Callable) -> Piece:
        return Piece(index, tuple(self.size(s) for s in sizes), value)

    def vjp(self, wrt: str, *, forward, backward) -> GeneralVJP:
        if wrt not in self.op.inputs:
            raise SpecError(self.op.name, f"general form: {wrt!r} is not a differentiable input")
        self.array(wrt)
        return GeneralVJP(wrt, self._pieces(forward, self.output_shape()), self._pieces(backward, self.shape(wrt)))

    def law(self, value, over=()) -> GeneralLaw:
        """value(*free) must be 0 (or a pair (lhs, rhs)) for free indices ranging over ``over``; or a
        list of ``G.piece``s that must be 0, tiling an array of shape ``over``."""
        return GeneralLaw(value, tuple(self.size(s) for s in over))

    @staticmethod
    def _pieces(spec, shape) -> list:
        if callable(spec):
            return [Piece(None, shape, spec)]
        return list(spec)

    def materialise(self, pieces: list) -> list:
        """Index symbols and expressions for a group of pieces. Pieces of one group are separate
        statements, so they share index symbols (dx[r, 2p] and dx[r, 2p + 1] both use r, p); two
        groups never do (the output indices are summed over, the input indices stay free)."""
        shared: dict = {}
        out = []
        for piece in pieces:
            names = _param_names(piece.value, len(piece.sizes))
            syms = []
            for nm, sz in zip(names, piece.sizes):
                key = (nm, sp.sympify(sz))
                if key not in shared or shared[key] in syms:
                    shared[key] = self.index(nm, sz)
                syms.append(shared[key])
            syms = tuple(syms)
            idx = syms if piece.index is None else tuple(sp.sympify(i) for i in _tuple(piece.index(*syms)))
            out.append(Materialised(syms, piece.sizes, idx, sp.sympify(piece.value(*syms))))
        return out


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _param_names(f: Callable, count: int) -> list[str]:
    try:
        names = [p for p in inspect.signature(f).parameters][:count]
    except (TypeError, ValueError):
        names = []
    names += [f"i{k}" for k in range(len(names), count)]
    return names


# ============================================================================ the statement
@dataclass
class Identity:
    """lhs == rhs for every value of ``free`` (index symbols with ranges)."""
    free: tuple
    lhs: sp.Expr
    rhs: sp.Expr


@dataclass
class Statement:
    op: Op
    claim: str
    kind: str
    G: GeneralBuilder
    form: object
    identities: list
    forward: list = field(default_factory=list)       # materialised pieces
    backward: list = field(default_factory=list)
    law: list = field(default_factory=list)
    jacobian: list = field(default_factory=list)      # (out piece, in piece, raw derivative)
    law_shape: tuple = ()                             # the shape of a law's array

    @property
    def dims(self) -> dict:
        return {name: str(expr).replace("*", "").replace(" ", "") for name, expr in sorted(self.G.dim_exprs.items())}


def build_statement(op: Op, claim: str, builder: Callable, display: bool = False) -> Statement:
    """Run the general-form builder and derive the identities that make up the claim. With
    ``display`` the named intermediates stay names and nothing is derived: for rendering only."""
    G = GeneralBuilder(op, display=display)
    form = builder(G)
    if claim.startswith("vjp["):
        if not isinstance(form, GeneralVJP) or f"vjp[{form.wrt}]" != claim:
            raise SpecError(op.name, f"general form for {claim} must return G.vjp({claim[4:-1]!r}, ...)")
        X, dY = G.array(form.wrt), G.array("dy")
        ins = G.materialise(form.backward)       # first, so the formula shown keeps plain names
        outs = G.materialise(form.forward)
        stmt = Statement(op, claim, "vjp", G, form, [], forward=outs, backward=ins)
        if display:
            return stmt
        for out in outs:            # SymPy differentiates; each primitive's derivative is the table's
            check_heads(out.value, X)
        # Each output piece is differentiated once, at the entry X[p] of a symbolic position p, and each
        # input piece's derivative is that one at p = its index: d X[i] / d X[p] is the product of
        # KroneckerDelta(i_k, p_k), a function of p for every p, and substituting re-evaluates each
        # delta. One diff per output piece, not one per (output, input) pair: a convolution's edge
        # cases make 49 x 49 pairs of the 7 x 7 depthwise one.
        at = tuple(sp.Dummy(f"p{k}", integer=True) for k in range(len(ins[0].idx))) if ins else ()
        at_p = [out.value.diff(X[at]) for out in outs] if at else None
        for inp in ins:
            target = X[inp.idx]
            terms = []
            for k, out in enumerate(outs):
                d = at_p[k].xreplace(dict(zip(at, inp.idx))) if at else out.value.diff(target)
                stmt.jacobian.append((out, inp, d))
                body = dY[out.idx] * d
                terms.append(Sum(body, *[(v, 0, s - 1) for v, s in zip(out.syms, out.sizes)]))
            stmt.identities.append(Identity(inp.syms, sp.Add(*terms), inp.value))
        return stmt
    if not isinstance(form, GeneralLaw):
        raise SpecError(op.name, f"general form for law {claim} must return G.law(...)")
    if isinstance(form.value, (list, tuple)):
        law = G.materialise(list(form.value))
        return Statement(op, claim, "law", G, form, [Identity(p.syms, p.value, sp.Integer(0)) for p in law],
                         law=law, law_shape=form.over)
    names = _param_names(form.value, len(form.over))
    free = tuple(G.index(nm, sz) for nm, sz in zip(names, form.over))
    val = form.value(*free)
    lhs, rhs = (val if isinstance(val, tuple) else (val, sp.Integer(0)))
    law = Materialised(free, form.over, free, sp.sympify(lhs) - sp.sympify(rhs))
    return Statement(op, claim, "law", G, form, [Identity(free, sp.sympify(lhs), sp.sympify(rhs))], law=[law],
                     law_shape=form.over)


# ---------------------------------------------------------------------------- rendering
def _cot_name(wrt: str) -> str:
    return f"d{wrt}"


def _entry(name: str, idx) -> str:
    return f"{name}[{', '.join(map(str, idx))}]"


def _latex_entry(name: str, idx) -> str:
    base = {"gamma": r"\gamma", "beta": r"\beta"}.get(name, name)
    if name.startswith("d") and name[1:] in ("gamma", "beta"):
        base = r"d\%s" % name[1:]
    return f"{base}_{{{','.join(sp.latex(i) for i in idx)}}}"


def render(stmt: Statement, builder: Callable) -> dict:
    """The statement as text and LaTeX, for the certificate and the reports: the forward and the
    backward entry formulas with their named intermediates (``where``), the Jacobian entry derived
    by ``sympy.diff``, and the quantified statement."""
    if getattr(builder, "derived_from", None) is not None:
        D = stmt                 # a derived statement has no named intermediates: nothing to redo
    else:
        try:
            D = build_statement(stmt.op, stmt.claim, builder, display=True)
        except Exception:  # a form that only works with full expressions is still shown, unfolded
            D = stmt
    G = D.G
    ranges = lambda syms, sizes: ", ".join(f"{s} in [0, {sp.sstr(z - 1)}]" for s, z in zip(syms, sizes))
    dims = ", ".join(f"{d} >= 1" for d in G.dim_symbols)
    out: dict = {}
    if stmt.kind == "vjp":
        wrt = stmt.form.wrt
        fwd = [(p.idx, G.unfold(p.value)) for p in D.forward]
        bwd = [(p.idx, G.unfold(p.value)) for p in D.backward]
        out["forward"] = [f"{_entry('y', i)} = {sp.sstr(v)}" for i, v in fwd]
        out["forward_latex"] = [f"{_latex_entry('y', i)} = {sp.latex(v)}" for i, v in fwd]
        out["backward"] = [f"{_entry(_cot_name(wrt), i)} = {sp.sstr(v)}" for i, v in bwd]
        out["backward_latex"] = [f"{_latex_entry(_cot_name(wrt), i)} = {sp.latex(v)}" for i, v in bwd]
        if len(stmt.jacobian) == 1:
            o, i, d = stmt.jacobian[0]
            text = sp.sstr(d)
            if len(text) <= JACOBIAN_SHOWN_CHARS:
                out["jacobian_entry"] = f"d {_entry('y', o.idx)} / d {_entry(wrt, i.idx)} = {text}"
                out["jacobian_entry_latex"] = (rf"\frac{{\partial {_latex_entry('y', o.idx)}}}"
                                               rf"{{\partial {_latex_entry(wrt, i.idx)}}} = {sp.latex(d)}")
        out["statement"] = "; ".join(
            f"for all {dims}, {ranges(p.syms, p.sizes)}: sum over every output entry o of "
            f"dy[o] * d y[o] / d {_entry(wrt, p.idx)} = {_entry(_cot_name(wrt), p.idx)}" for p in D.backward)
    else:
        out["law"] = "; ".join(f"{_entry('law', p.idx)}: {sp.sstr(p.value)} = 0" if len(D.law) > 1
                               else f"{sp.sstr(p.value)} = 0" for p in D.law)
        out["law_latex"] = r",\quad ".join(f"{sp.latex(p.value)} = 0" for p in D.law)
        out["statement"] = "; ".join(f"for all {dims}, {ranges(p.syms, p.sizes)}: {sp.sstr(p.value)} = 0"
                                     for p in D.law)
    if G.definitions:
        out["where"] = [f"{n}({', '.join(map(str, a))}) = {sp.sstr(b)}" for n, (a, b) in G.definitions.items()]
        out["where_latex"] = [rf"\operatorname{{{n}}}({', '.join(map(sp.latex, a))}) = {sp.latex(b)}"
                              for n, (a, b) in G.definitions.items()]
    # one line each, for a report table: the formula proved and its LaTeX
    main = out.get("backward") or [out["law"]]
    main_tex = out.get("backward_latex") or [out["law_latex"]]
    out["formula"] = "; ".join(main) + ("  where " + "; ".join(out["where"]) if "where" in out else "")
    out["formula_latex"] = r",\quad ".join(main_tex) + (
        r"\quad\text{where } " + r",\quad ".join(out["where_latex"]) if "where" in out else "")
    return out


def _form_in_words(k: int, least: int) -> str:
    kind = "" if k == 1 else "even" if k == 2 else f"a multiple of {k}"
    if least == k:
        return kind
    return f"{kind}, at least {least}" if kind else f"at least {least}"


def assumptions_of(stmt: Statement) -> list[str]:
    G, op = stmt.G, stmt.op
    out = [f"{s} >= 1 (an integer)" for s in G.dim_symbols]
    out += [f"{name} = {expr} ({_form_in_words(G.multiple[name], G.least[name])})"
            for name, expr in G.dim_exprs.items() if name in G.even]
    at = op.get_law(stmt.claim).params if stmt.kind == "law" else {}
    for name, p in op.params.items():
        if name in at:
            out.append(f"{name} = {at[name]!r} (the law is stated there)")
        elif p.symbolic:
            out.append(f"{name} > 0" if p.positive else f"{name} real (any value)")
        else:
            out.append(f"{name} = {p.default!r}")
    if op.nondiff:
        out.append(f"{', '.join(op.nondiff)} not differentiated (held fixed)")
    out.append("inputs are real; the spec's denominators are nonzero at the input")
    return out + list(G.assumed) + list(op.assumptions)


# ============================================================================ 1. the proof
