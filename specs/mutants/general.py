"""Wrong general forms: the negative controls of the symbolic-dimension proofs (``symbolic.general``).

``GENERAL_MUTANTS``: a general form whose backward (or law) is wrong, one per general claim. Most
repeat, in index form, the mistake of a spec mutant (``pairs`` names it): proved against that mutant
twin of the op, the general form *is* the (mutated) spec -- the cross-check passes -- so the general
prover must return `failed` with a witness. Against the correct spec, the same form must not be
proved either (its backward is not the spec's). A mutant without a spec twin (``pairs=None``) makes a
mistake that numpy array code cannot make in the same way.

``MISMATCHED``: general forms that are right about *themselves* (their backward is the VJP of their
own forward, so the symbolic identity holds) but are not the spec's formula. Only the cross-check
against the spec can refuse them; one differs from the spec at n = 3 alone.

Builders take ``G`` like the registered general forms (see ``symbolic/general.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vjpcert.specs.attention import attention, general_attention
from vjpcert.specs.gelu import gelu_erf, gelu_tanh
from vjpcert.specs.layernorm import general_layernorm, layernorm
from vjpcert.specs.linear import general_linear, linear
from vjpcert.core.registry import Op
from vjpcert.specs.rmsnorm import general_rmsnorm, rmsnorm
from vjpcert.specs.rope import general_rope, half_slot, interleaved_slot, rope_half, rope_interleaved
from vjpcert.specs.scaled_dot import general_scaled_dot, scaled_dot
from vjpcert.specs.softmax import general_softmax, softmax


@dataclass(frozen=True)
class GeneralMutant:
    op: str
    claim: str
    name: str
    builder: Callable
    pairs: str | None          # the spec mutant (op.mutants) making the same mistake, if any
    doc: str


GENERAL_MUTANTS: list[GeneralMutant] = []
MISMATCHED: list[GeneralMutant] = []


def general_mutant(op: Op, claim: str, name: str, *, pairs: str | None = None, mismatch: bool = False):
    def register(f):
        if claim not in op.claims():
            raise ValueError(f"{op.name}: no claim {claim!r}")
        if pairs is not None and pairs not in {m.name for m in op.mutants}:
            raise ValueError(f"{op.name}: no spec mutant {pairs!r} to pair with")
        entry = GeneralMutant(op.name, claim, name, f, pairs, (f.__doc__ or name).strip())
        (MISMATCHED if mismatch else GENERAL_MUTANTS).append(entry)
        return f
    return register


def spec_mutant(op: Op, name: str):
    return next(m for m in op.mutants if m.name == name)


# ------------------------------------------------------------------------------ softmax
@general_mutant(softmax, "vjp[x]", "sign_flip", pairs="sign_flip")
def _(G):
    y, dx = general_softmax(G)
    return G.vjp("x", forward=y, backward=lambda s, j: -dx(s, j))


@general_mutant(softmax, "cotangent_sums_to_zero", "missing_s_factor", pairs="missing_s_factor")
def _(G):
    """dx = dy - sum_l y_l dy_l (the factor y_j dropped): its entries no longer sum to 0."""
    n, (y, _) = G.dim("n"), general_softmax(G)
    dy = G.array("dy")

    def dx(s, j):
        return dy[s, j] - G.sum(lambda l: y(s, l) * dy[s, l], n)
    return G.law(lambda s: G.sum(lambda j: dx(s, j), n), over=("rows",))


@general_mutant(softmax, "vjp[x]", "wrong_only_at_n3", mismatch=True)
def _(G):
    """Forward and backward both scaled by k(n) = 1 + (n-1)(n-2)(n-4)(n-5): a true identity about
    another function, equal to softmax for n = 1, 2, 4, 5 and five times it at n = 3."""
    y, dx = general_softmax(G)
    n = G.dim("n")
    k = 1 + (n - 1) * (n - 2) * (n - 4) * (n - 5)
    return G.vjp("x", forward=lambda r, i: k * y(r, i), backward=lambda s, j: k * dx(s, j))


# ------------------------------------------------------------------------------ RMSNorm
@general_mutant(rmsnorm, "vjp[x]", "missing_gamma_in_dx", pairs="missing_gamma_in_dx")
def _(G):
    f = general_rmsnorm(G)
    x, dy, rstd, n = f["x"], f["dy"], f["rstd"], f["n"]

    def dx(s, j):
        return rstd(s) * (dy[s, j] - x[s, j] * rstd(s) ** 2 * G.mean(lambda l: dy[s, l] * x[s, l], n))
    return G.vjp("x", forward=f["y"], backward=dx)


@general_mutant(rmsnorm, "vjp[gamma]", "dgamma_missing_rstd", pairs="dgamma_missing_rstd")
def _(G):
    f = general_rmsnorm(G)
    x, dy = f["x"], f["dy"]
    return G.vjp("gamma", forward=f["y"], backward=lambda j: G.sum(lambda r: dy[r, j] * x[r, j], f["rows"]))


# ------------------------------------------------------------------------------ LayerNorm
@general_mutant(layernorm, "vjp[x]", "dropped_mean_term", pairs="dropped_mean_term")
def _(G):
    f = general_layernorm(G)
    dy, gamma, xh, rstd, n = f["dy"], f["gamma"], f["xh"], f["rstd"], f["n"]

    def dx(s, j):
        return rstd(s) * (dy[s, j] * gamma[j] - xh(s, j) * G.mean(lambda l: dy[s, l] * gamma[l] * xh(s, l), n))
    return G.vjp("x", forward=f["y"], backward=dx)


@general_mutant(layernorm, "vjp[gamma]", "dgamma_uses_x_not_xhat", pairs="dgamma_uses_x_not_xhat")
def _(G):
    f = general_layernorm(G)
    x, dy = f["x"], f["dy"]
    return G.vjp("gamma", forward=f["y"], backward=lambda j: G.sum(lambda r: dy[r, j] * x[r, j], f["rows"]))


@general_mutant(layernorm, "vjp[beta]", "missing_dbeta", pairs="missing_dbeta")
def _(G):
    f = general_layernorm(G)
    return G.vjp("beta", forward=f["y"], backward=lambda j: 0 * f["dbeta"](j))


# ------------------------------------------------------------------------------ linear
@general_mutant(linear, "vjp[x]", "sign_flip_dx", pairs="sign_flip_dx")
def _(G):
    f = general_linear(G)
    return G.vjp("x", forward=f["y"], backward=lambda s, j: -f["dx"](s, j))


@general_mutant(linear, "vjp[W]", "dW_first_row_only")
def _(G):
    """dW = dy[0]^T x[0]: the batch accumulation forgotten (right only when rows = 1)."""
    f = general_linear(G)
    x, dy = f["x"], f["dy"]
    return G.vjp("W", forward=f["y"], backward=lambda p, q: dy[0, p] * x[0, q])


@general_mutant(linear, "vjp[b]", "bias_gradient_mean_not_sum", pairs="bias_gradient_mean_not_sum")
def _(G):
    f = general_linear(G)
    return G.vjp("b", forward=f["y"], backward=lambda p: f["db"](p) / f["rows"])


@general_mutant(linear, "vjp[b]", "bias_doubled_consistently", mismatch=True)
def _(G):
    """y = x W^T + 2 b with db = 2 sum_rows dy: a correct VJP of a different layer."""
    f = general_linear(G)
    b, y = f["b"], f["y"]
    return G.vjp("b", forward=lambda r, o: y(r, o) + b[o], backward=lambda p: 2 * f["db"](p))


# ------------------------------------------------------------------------------ GELU
# The spec mutants are elementwise array code, so the general mutant applies them to one entry.
def _elementwise_mutant(op: Op, name: str):
    fn = spec_mutant(op, name).fn

    @general_mutant(op, "vjp[x]", name, pairs=name)
    def _(G):
        x, dy = G.array("x"), G.array("dy")
        G.dim("rows"), G.dim("n")
        return G.vjp("x", forward=lambda r, i: op.forward(G, x[r, i]),
                     backward=lambda s, j: fn(G, x[s, j], dy[s, j])[0])


_elementwise_mutant(gelu_erf, "missing_pdf_term")
_elementwise_mutant(gelu_tanh, "cubic_term_not_tripled")


# ------------------------------------------------------------------------------ RoPE
@general_mutant(rope_interleaved, "vjp[x]", "half_split_layout", pairs="half_split_layout")
def _(G):
    """The backward of the half-split layout on interleaved pairs."""
    fwd, back = general_rope(G, interleaved_slot), general_rope(G, half_slot)
    return G.vjp("x", forward=fwd["pieces"](fwd["x"], 1), backward=back["pieces"](back["dy"], -1))


@general_mutant(rope_half, "vjp[x]", "interleaved_layout", pairs="interleaved_layout")
def _(G):
    """The backward of the interleaved layout on half-split pairs."""
    fwd, back = general_rope(G, half_slot), general_rope(G, interleaved_slot)
    return G.vjp("x", forward=fwd["pieces"](fwd["x"], 1), backward=back["pieces"](back["dy"], -1))


@general_mutant(rope_interleaved, "vjp[x]", "half_split_both_ways", mismatch=True)
def _(G):
    """A correct proof of the *half-split* layout offered for the interleaved op."""
    f = general_rope(G, half_slot)
    return G.vjp("x", forward=f["pieces"](f["x"], 1), backward=f["pieces"](f["dy"], -1))


# ------------------------------------------------------------------------------ scaled dot
@general_mutant(scaled_dot, "vjp[q]", "dq_scaled_twice", pairs="dq_scaled_twice")
def _(G):
    f = general_scaled_dot(G)
    return G.vjp("q", forward=f["s"], backward=lambda a, j: f["c"] * f["dq"](a, j))


@general_mutant(scaled_dot, "vjp[k]", "dk_missing_scale", pairs="dk_missing_scale")
def _(G):
    f = general_scaled_dot(G)
    return G.vjp("k", forward=f["s"], backward=lambda a, j: f["dy"][a] * f["q"][a, j])


# ------------------------------------------------------------------------------ attention
@general_mutant(attention, "vjp[Q]", "softmax_jacobian_missing_P", pairs="softmax_jacobian_missing_P")
def _(G):
    f = general_attention(G)
    P, dP, m, c = f["P"], f["dP"], f["m"], f["c"]
    K = G.array("K")

    def dS(i, j):                       # dP - rowsum(P * dP), without the factor P
        return dP(i, j) - G.sum(lambda j2: P(i, j2) * dP(i, j2), m)
    return G.vjp("Q", forward=f["O"], backward=lambda a, b: c * G.sum(lambda j: dS(a, j) * K[j, b], m))


@general_mutant(attention, "vjp[K]", "dK_missing_scale", pairs="dK_missing_scale")
def _(G):
    f = general_attention(G)
    return G.vjp("K", forward=f["O"], backward=lambda a, b: f["dK"](a, b) / f["c"])


@general_mutant(attention, "vjp[V]", "transposed_dV", pairs="transposed_dV")
def _(G):
    """P dO instead of P^T dO."""
    f = general_attention(G)
    P, m, dO = f["P"], f["m"], G.array("dy")
    return G.vjp("V", forward=f["O"], backward=lambda a, b: G.sum(lambda i: P(a, i) * dO[i, b], m))
