"""An every-size statement at concrete sizes: instantiated and compared, entry by entry and exactly,
with the spec run on the SymPy backend (the cross-check, the tracer's self-check: a mismatch means
the trace derived another formula), and searched for a counter-example (a witness) when its normal
form is not 0. ``symbolic.every_size.general`` calls both around its proof.
"""
from __future__ import annotations

import itertools
import random
import time

import numpy as np
import sympy as sp

from vjpcert.core.registry import Op, SpecError
from vjpcert.symbolic import settings as tol
from vjpcert.symbolic.every_size.form import GeneralBuilder, Statement, _cot_name, _entry
from vjpcert.symbolic.every_size.atoms import Log
from vjpcert.symbolic.every_size.heads import check_heads
from vjpcert.symbolic.every_size.normal import NormalFormError, Normaliser, expand_sums, plainly_zero
from vjpcert.symbolic.fixed.sympy_forms import symbols

UNDEFINED = ("the spec is undefined at these sizes (a denominator vanishes for every input, e.g. a variance "
             "at n = 1 with eps = 0): not compared")


def default_check_dims(stmt: Statement) -> list[dict]:
    """Spec dims for the cross-check: every free dim symbol runs through (1, 2, 3, 5), offset per
    dim so the shapes are not square; batch dims (rows) through (1, 2)."""
    G = stmt.G
    if G.check_dims:
        return G.check_dims
    out = []
    for t in range(tol.GENERAL_CROSS_CHECK_POINTS):
        vals, pos = {}, 0
        for s in G.dim_symbols:
            if str(s) in tol.GENERAL_BATCH_DIMS:
                vals[s] = tol.GENERAL_BATCH_LADDER[t % len(tol.GENERAL_BATCH_LADDER)]
            else:
                vals[s] = tol.GENERAL_LADDER[(t + pos) % len(tol.GENERAL_LADDER)]
                pos += 1
        size = int(np.prod([v for s, v in vals.items() if str(s) not in tol.GENERAL_BATCH_DIMS]))
        out.append((size, {name: int(expr.xreplace(vals)) for name, expr in G.dim_exprs.items()}))
    # a point whose coupled dims are large (attention at m = 5, d = 3) costs seconds to write out;
    # it is dropped as long as tol.GENERAL_MIN_COMPARED points remain
    small = [d for size, d in out if size <= tol.GENERAL_CROSS_CHECK_MAX_SIZE]
    chosen = small if len(small) >= tol.GENERAL_MIN_COMPARED else [d for _, d in out]
    return [d for k, d in enumerate(chosen) if d not in chosen[:k]]        # rows alone repeat (1, 2)


def own_dims(stmt: Statement) -> list[dict]:
    """The op's own dims (its fixed-dims ladder) that the statement's dim forms allow."""
    out = []
    for d in stmt.op.dims:
        try:
            _dim_values(stmt.G, stmt.op.resolve_dims({**stmt.op.dims[0], **d}))
        except Exception:  # a size the statement does not cover (an odd d): not compared
            continue
        d = {k: v for k, v in stmt.op.resolve_dims({**stmt.op.dims[0], **d}).items() if k in stmt.G.dim_exprs}
        if d not in out:
            out.append(d)
    return out


def _dim_values(G: GeneralBuilder, spec_dims: dict) -> dict:
    """Values of the dim symbols for concrete spec dims (solving d = 2h for h)."""
    vals = {}
    for name, expr in G.dim_exprs.items():
        (s,) = expr.free_symbols
        v = sp.solve(sp.Eq(expr, spec_dims[name]), s)
        if len(v) != 1 or not v[0].is_Integer or v[0] < 1:
            raise SpecError(G.op.name, f"dims {spec_dims} do not fit the general form's {name} = {expr}")
        vals[s] = v[0]
    return vals


def _spec_values(op: Op, spec_dims: dict, overrides: dict | None = None) -> tuple[dict, dict]:
    """SymPy symbols for the op's arrays at concrete dims (as ``fixed.sympy_forms`` names them), and dy."""
    values = symbols(op, **spec_dims)
    values.update(overrides or {})
    dims = op.resolve_dims({**op.dims[0], **spec_dims})
    dy = np.empty(op.shape(op.output, dims), dtype=object)
    for idx in np.ndindex(*dy.shape):
        dy[idx] = sp.Symbol(f"dy_{{{','.join(map(str, idx))}}}" if idx else "dy", real=True)
    values["dy"] = dy
    return values, dims


def instantiate(pieces: list, shape: tuple, dimvals: dict, arrays: dict) -> np.ndarray:
    """The pieces written out at concrete dims as one array; every entry must be covered once."""
    out = np.empty(shape, dtype=object)
    count = np.zeros(shape, dtype=int)
    arrays = {k: np.asarray(v, dtype=object) for k, v in arrays.items() if isinstance(v, np.ndarray)}
    memo: dict = {}
    for p in pieces:
        sizes = [int(sp.sympify(z).xreplace(dimvals)) for z in p.sizes]
        for vals in itertools.product(*[range(z) for z in sizes]):
            m = {**dimvals, **dict(zip(p.syms, map(sp.Integer, vals)))}
            idx = tuple(sp.sympify(i).xreplace(m) for i in p.idx)
            if not all(i.is_Integer for i in idx):
                raise NormalFormError(f"piece index {p.idx} not concrete at {vals}")
            idx = tuple(int(i) for i in idx)
            if len(idx) != len(shape) or any(not 0 <= i < n for i, n in zip(idx, shape)):
                raise NormalFormError(f"piece index {idx} is outside the shape {shape}")
            out[idx] = expand_sums(p.value, m, memo, arrays)
            count[idx] += 1
    if (count != 1).any():
        missing = [tuple(map(int, i)) for i in np.argwhere(count == 0)[:3]]
        twice = [tuple(map(int, i)) for i in np.argwhere(count > 1)[:3]]
        raise NormalFormError(f"the pieces do not tile the array: entries {missing} not covered, {twice} "
                              f"covered more than once")
    return out


def _agree(a, b, rng: random.Random, N: Normaliser) -> str:
    """'exact' when a - b normalises to 0, 'mismatch' when it is far from 0 at a random exact point
    at 50 digits, else 'numeric' (agreement at 50 digits, not proved)."""
    a, b = sp.sympify(a), sp.sympify(b)
    if a == b or plainly_zero(a - b):  # the same tree, or the same up to + - * / of equal subterms
        return "exact"
    try:
        if N.is_zero(a - b)[0]:
            return "exact"
    except NormalFormError:
        pass
    point = _random_point(a.free_symbols | b.free_symbols, rng, positive=_under_a_log([(None, a, b)]))
    va, vb = sp.N(a.xreplace(point), tol.LOW_DPS), sp.N(b.xreplace(point), tol.LOW_DPS)
    if not (va.is_number and vb.is_number):
        raise NormalFormError(f"cannot evaluate {sp.sstr(a)[:80]} numerically")
    return "mismatch" if abs(va - vb) > tol.FAIL_REL * (1 + abs(va)) else "numeric"


def _compare(general: np.ndarray, spec, label: str, rng) -> dict:
    spec = np.asarray(spec, dtype=object)
    if spec.shape != general.shape:
        return {"status": "mismatch", "where": f"{label}: shape {general.shape} vs the spec's {spec.shape}"}
    worst, N = "exact", Normaliser()          # one normaliser: entries share their subterms
    for idx in np.ndindex(*spec.shape):
        verdict = _agree(general[idx], spec[idx], rng, N)
        if verdict == "mismatch":
            return {"status": "mismatch", "where": f"{_entry(label, idx)}",
                    "general": sp.sstr(general[idx])[:200], "spec": sp.sstr(spec[idx])[:200]}
        if verdict == "numeric":
            worst = "numeric"
    return {"status": worst, "entries": int(np.prod(spec.shape))}


def cross_check(stmt: Statement, dims_list: list[dict], seed: int = 0) -> dict:
    """Instantiate the general form at each concrete size and compare it with the spec run on the
    SymPy backend, entry by entry. Runs in a forked child."""
    from vjpcert.core.backends import SYMPY
    op, G = stmt.op, stmt.G
    rng = random.Random(seed)
    rows = []
    for spec_dims in dims_list:
        t = time.perf_counter()
        row = {"dims": dict(spec_dims)}
        try:
            dimvals = _dim_values(G, spec_dims)
            if stmt.kind == "vjp":
                values, dims = _spec_values(op, spec_dims)
                wrt = stmt.form.wrt
                y_spec = np.asarray(op.bind(op.forward, SYMPY, values), dtype=object)
                cots = op.bind(op.vjp, SYMPY, values)
                dx_spec = np.asarray(cots[list(op.inputs).index(wrt)], dtype=object)
                if _undefined(y_spec, dx_spec):
                    row["undefined"] = UNDEFINED
                    rows.append(row)
                    continue
                y_gen = instantiate(stmt.forward, y_spec.shape, dimvals, values)
                dx_gen = instantiate(stmt.backward, values[wrt].shape, dimvals, values)
                row["forward"] = _compare(y_gen, y_spec, "y", rng)
                row["backward"] = _compare(dx_gen, dx_spec, _cot_name(wrt), rng)
            else:
                law = op.get_law(stmt.claim)
                values, dims = _spec_values(op, spec_dims, law.params)
                res = op.bind(law.fn, SYMPY, values)
                if isinstance(res, tuple):
                    res = np.asarray(res[0], dtype=object) - np.asarray(res[1], dtype=object)
                res = np.asarray(res, dtype=object)
                if _undefined(res):
                    row["undefined"] = UNDEFINED
                    rows.append(row)
                    continue
                gen = instantiate(stmt.law, res.shape, dimvals, values)
                row["law"] = _compare(gen, res, stmt.claim, rng)
        except Exception as exc:  # a general form that cannot be instantiated is not the spec's formula
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["seconds"] = round(time.perf_counter() - t, 4)
        rows.append(row)
    statuses = [v["status"] for r in rows for k, v in r.items() if k in ("forward", "backward", "law")]
    compared = [r for r in rows if "undefined" not in r and "error" not in r]
    if "mismatch" in statuses:
        status = "mismatch"
    elif any("error" in r for r in rows):
        status = "error"
    elif len(compared) < min(tol.GENERAL_MIN_COMPARED, len(rows)):
        status, rows = "error", rows + [{"error": f"only {len(compared)} of {len(rows)} sizes could be compared"}]
    else:
        status = "numeric" if "numeric" in statuses else "exact"
    return {"status": status, "at": rows}




def _undefined(*arrays) -> bool:
    return any(sp.sympify(v).has(sp.zoo, sp.nan, sp.oo, -sp.oo) for a in arrays for v in np.ravel(a))


# ============================================================================ 3. witness
def _random_point(symbols, rng: random.Random, scale=1, positive=frozenset()) -> dict:
    """Exact rationals: inputs in [-2, 2] * scale, never 0 (in (0, 2] * scale for those in ``positive``:
    an input under a log, whose domain is there); positive parameters in [0.05, 1]."""
    point = {}
    for s in sorted(symbols, key=str):
        if s.is_positive:
            point[s] = sp.Rational(rng.randint(tol.WITNESS_POS_LO, tol.WITNESS_POS_HI), tol.WITNESS_DEN)
        else:
            sign = 1 if s in positive else rng.choice([-1, 1])
            point[s] = sp.Rational(sign * rng.randint(1, tol.WITNESS_SPAN), tol.WITNESS_DEN) * sp.nsimplify(scale)
    return point


def _under_a_log(pairs) -> frozenset:
    """The inputs whose log is taken (the log of an input itself: a product along a symbolic axis read
    as exp of the sum of its factors' logs, or a spec's own B.log of an input): a witness is looked for
    where that log is real."""
    return frozenset(f.args[0] for _, a, b in pairs for e in (a, b) for f in sp.sympify(e).atoms(sp.log, Log)
                     if f.args[0].is_Symbol)


def witness_dims(stmt: Statement, dims_list: list[dict]) -> list[dict]:
    """Concrete sizes to look for a counterexample at: every dim symbol at 2 first (a backward that
    reads the wrong head, group or key needs two of each to differ: the cross-check's sizes pair a
    2 with a 1 somewhere), then of those sizes the largest smallest dim (a bug in a mean or a
    projection can vanish at size 1), then the smallest total size."""
    twos = {name: int(expr.xreplace({s: 2 for s in stmt.G.dim_symbols})) for name, expr in stmt.G.dim_exprs.items()}
    ranked = sorted(dims_list, key=lambda d: (-min(d.values()), sum(d.values())))[:2]
    return [twos] + [d for d in ranked if d != twos]


def find_witness(stmt: Statement, dims_list: list[dict], seed: int = 0) -> dict:
    """Instantiate the general statement at concrete sizes, derive J^T dy there by differentiating
    the *instantiated* forward, and evaluate the residual at a random exact rational point at 50
    and 100 digits. A residual far above rounding that persists is a witness. Runs in a child."""
    op, G = stmt.op, stmt.G
    rng = random.Random(seed)
    for spec_dims in witness_dims(stmt, dims_list):
        dimvals = _dim_values(G, spec_dims)
        overrides = op.get_law(stmt.claim).params if stmt.kind == "law" else {}
        values, dims = _spec_values(op, spec_dims, overrides)
        if stmt.kind == "vjp":
            wrt = stmt.form.wrt
            X = values[wrt]
            y = instantiate(stmt.forward, values["dy"].shape, dimvals, values)
            dx = instantiate(stmt.backward, X.shape, dimvals, values)
            for o in np.ndindex(*y.shape):       # the heads sp.diff meets agree with the table
                check_heads(y[o], *X.ravel().tolist())
            entries = list(np.ndindex(*X.shape))[:tol.GENERAL_WITNESS_MAX_ENTRIES]
            pairs = []
            for e in entries:
                jt = sum((values["dy"][o] * sp.diff(y[o], X[e]) for o in np.ndindex(*y.shape)), sp.Integer(0))
                pairs.append((_entry(_cot_name(wrt), e), dx[e], jt))
        else:
            law = instantiate(stmt.law, tuple(int(sp.sympify(z).xreplace(dimvals)) for z in stmt.law_shape),
                              dimvals, values)
            pairs = [(_entry(stmt.claim, e), law[e], sp.Integer(0)) for e in np.ndindex(*law.shape)]
        free = set().union(*[sp.sympify(a).free_symbols | sp.sympify(b).free_symbols for _, a, b in pairs])
        # a point at each of the fixed-dims tier's scales: a backward wrong only for x < -3 is right
        # everywhere on [-2, 2]
        logged = _under_a_log(pairs)
        for point in [_random_point(free, rng, scale, logged) for scale in tol.WITNESS_SCALES]:
            for label, a, b in pairs:
                a50, b50 = sp.N(sp.sympify(a).xreplace(point), tol.LOW_DPS), sp.N(sp.sympify(b).xreplace(point), tol.LOW_DPS)
                r50 = a50 - b50
                scale = max(abs(a50), abs(b50), sp.Float(tol.GENERAL_SCALE_FLOOR))
                if abs(r50) <= tol.FAIL_REL * scale:
                    continue
                a100 = sp.N(sp.sympify(a).xreplace(point), tol.HIGH_DPS)
                b100 = sp.N(sp.sympify(b).xreplace(point), tol.HIGH_DPS)
                r100 = a100 - b100
                if abs(r100 - r50) > tol.PERSIST_REL * abs(r100):
                    continue
                shown = dict(list(point.items())[:40])
                return {"status": "failed", "witness": {
                    "dims": dict(spec_dims), "component": label,
                    "point": {str(k): str(v) for k, v in shown.items()},
                    "point_entries": len(point),
                    "claimed": sp.sstr(sp.N(a100, 20)), "derived": sp.sstr(sp.N(b100, 20)),
                    "residual": sp.sstr(sp.N(r100, 6)), "residual_50_digits": sp.sstr(sp.N(r50, 6)),
                    "relative": float(abs(r100) / max(abs(a100), abs(b100))),
                    "digits": [tol.LOW_DPS, tol.HIGH_DPS]}}
    return {"status": "zero"}


# ============================================================================ the certificate
