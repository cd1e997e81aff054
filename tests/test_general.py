"""Proofs for every size (symbolic dimensions), derived from the spec's own code: every every-size
claim is proved-general from a statement the shape-polymorphic trace derived; Python control flow on
a size (and slices that fit only some sizes) is refused, never proved; every wrong spec is refused
or fails with a witness; the cross-check (the tracer's self-check) refuses a statement that is not the
spec's; and the normal form behind it never calls a false identity zero."""
import json

import numpy as np
import pytest
import sympy as sp
from sympy import IndexedBase, KroneckerDelta, Sum

from conftest import HEAVY_LEAVES, OPS
from vjpcert.core.registry import Param, SpecError, op
from vjpcert.specs.mutants.general import MISMATCHED, SIZE_MUTANTS
from vjpcert.symbolic.every_size.general import general_claims, general_dims, prove_general
from vjpcert.symbolic.every_size.normal import Ind, Log, Normaliser
from vjpcert.symbolic.fixed.prover import prove_claim

# The claims proved for every size, VJPs and laws (derived from the spec's code, not transcribed).
REQUIRED = {
    "softmax": {"vjp[x]", "cotangent_sums_to_zero", "shift_invariance"},
    "rmsnorm": {"vjp[x]", "vjp[gamma]", "dx_orthogonal_to_x"},
    "layernorm": {"vjp[x]", "vjp[gamma]", "vjp[beta]", "dx_sums_to_zero", "dx_orthogonal_to_xhat"},
    "linear": {"vjp[x]", "vjp[W]", "vjp[b]", "adjoint_x", "adjoint_W"},
    "gelu_erf": {"vjp[x]", "derivative_formula", "odd_part_is_identity"},
    "gelu_tanh": {"vjp[x]", "derivative_formula", "odd_part_is_identity"},
    "log_softmax": {"vjp[x]", "cotangent_sums_to_zero", "exp_rows_sum_to_one"},
    "rope_pair": {"vjp[x]", "inverse_rotation", "backward_inverts_forward", "preserves_norm"},
    "rope_interleaved": {"vjp[x]", "inverse_rotation", "backward_inverts_forward"},
    "rope_half": {"vjp[x]", "inverse_rotation", "backward_inverts_forward"},
    "scaled_dot": {"vjp[q]", "vjp[k]", "euler_homogeneity"},
    "attention": {"vjp[Q]", "vjp[K]", "vjp[V]"},
    "attention_causal": {"vjp[Q]", "vjp[K]", "vjp[V]", "first_row_sees_only_itself", "fully_masked_row_is_zero"},
}
# Every claim whose statement is derived from the spec's code; a recurrence's claims are proved by
# induction from its cell's instead (tests/test_recurrence.py), and its cell's are here.
GENERAL = [(name, claim) for name, o in OPS.items()
           if getattr(o, "recurrence", None) is None and getattr(o, "chunked", None) is None
           for claim in general_claims(o)]
# The default run proves (and refutes a wrong spec of) every every-size claim of these ops, which
# between them use reductions, exp, a causal mask and laws; tests/test_every_size_language.py holds
# each construct to numpy; --slow does every op. The committed certificates hold all.
DEFAULT_OPS = ("softmax", "attention_causal")


def _by_default(cases):
    return [pytest.param(*c, marks=() if c[0] in DEFAULT_OPS else pytest.mark.slow) for c in cases]


def corroborated(rows: list[dict], expected: str, name: str, at_own_dims) -> bool:
    """The fixed-dims prover agrees at the cross-check's sizes: ``expected`` at each. For a heavy leaf
    (nine taps' regions; 80 windows at the cross-check's largest size) its 10 s a size may run out: a
    timeout there (``inconclusive``, never the other verdict) is allowed, and where no size was
    decided, the prover is run at the op's own first dims (``at_own_dims()``) and must agree there."""
    if not rows or any(r["verdict"] not in (expected, "inconclusive") for r in rows):
        return False
    if name not in HEAVY_LEAVES:
        return all(r["verdict"] == expected for r in rows)
    return any(r["verdict"] == expected for r in rows) or at_own_dims() == expected


HERE = "tests/test_general.py"
SIXTEEN = 16               # `n is SIXTEEN` is True at n = 16 for a Python int (small ints are shared)


def test_the_issue_s_claims_are_proved_for_every_size():
    for name, claims in REQUIRED.items():
        assert claims <= set(general_claims(OPS[name])), name


@pytest.mark.parametrize("name,claim", _by_default(GENERAL))
def test_every_general_claim_is_proved_from_the_spec_s_own_code(name, claim):
    o = OPS[name]
    cert = prove_general(o, claim)
    ev = cert.evidence
    assert cert.verdict == "proved-general", (ev.get("reason"), ev.get("proof"))
    assert cert.method == "general" and cert.variant == "symbolic-general"
    assert ev["proof"]["status"] == "proved"
    assert not any("vacuous" in i for i in ev["proof"]["identities"]), "both sides 0 proves nothing"
    # derived from the spec: the certificate names the functions it traced, file and line
    assert ev["derivation"].startswith("shape-polymorphic trace")
    assert any(f"specs/{o.module.__name__.rsplit('.', 1)[-1]}.py:" in w for w in ev["derived_from"])
    assert "derived from the spec's own code" in ev["scope"]
    assert "general_form" not in ev
    # the dimension variables and the assumptions are stated
    assert ev["dimension_variables"] and set(cert.dims) == o.dim_names()
    assert any(">= 1" in a for a in cert.assumptions)
    at = o.get_law(claim).params if not claim.startswith("vjp[") else {}
    for pname, p in o.params.items():
        if pname in at:
            assert f"{pname} = {at[pname]!r} (the law is stated there)" in cert.assumptions
        elif p.positive:
            assert f"{pname} > 0" in cert.assumptions
    assert (ev.get("backward_latex") or ev.get("law_latex")) and ev["statement"]
    assert ev["formula"] and ev["formula_latex"]
    assert cert.dims == general_dims(o, claim)             # where the planner expects the file
    # the cross-check instantiated the statement at several sizes, the op's own dims among them,
    # and found the spec there; the fixed-dims prover proves the spec at the ladder's sizes
    x = ev["cross_check"]
    assert x["status"] == "exact"
    sizes = [row["dims"] for row in x["at"] if "undefined" not in row]
    assert len(sizes) >= 3 and len({tuple(sorted(d.items())) for d in sizes}) == len(sizes)
    own = [{k: v for k, v in o.resolve_dims({**o.dims[0], **d}).items() if k in cert.dims} for d in o.dims]
    assert all(d in sizes for d in own)
    assert corroborated(x["fixed_dims_prover"], "proved", name,
                        lambda: prove_claim(o, claim, o.dims[0]).verdict), x["fixed_dims_prover"]
    json.loads(cert.to_json())


def test_sizes_of_the_cross_check():
    """n = 1, 2, 3, 5 (not square against rows); RoPE's d runs through even widths only."""
    cert = prove_general(OPS["softmax"], "vjp[x]")
    ladder = [r["dims"]["n"] for r in cert.evidence["cross_check"]["at"]][:4]
    assert sorted(ladder) == [1, 2, 3, 5]
    cert = prove_general(OPS["rope_half"], "vjp[x]")
    assert cert.dims["d"] == "2h" and "d = 2*h (even)" in cert.assumptions
    assert all(r["dims"]["d"] % 2 == 0 for r in cert.evidence["cross_check"]["at"])
    assert cert.evidence["proof"]["layout"]["x"]["status"] == "proved"       # the pieces tile dx
    assert cert.evidence["proof"]["layout"]["output"]["status"] == "proved"


def test_the_formula_is_what_the_spec_computes():
    """softmax's derived backward, as the certificate shows it: the spec's y * (dy - sum(y dy))."""
    ev = prove_general(OPS["softmax"], "vjp[x]").evidence
    (line,) = ev["backward"]
    assert line.startswith("dx[s, t] = ") and "exp(x[s, t])" in line and "dy[s, t]" in line
    assert "Sum(exp(x[s, k" in line


def test_an_undefined_size_is_not_compared():
    """dx_orthogonal_to_xhat at eps = 0 divides by the variance, 0 for every input at n = 1."""
    cert = prove_general(OPS["layernorm"], "dx_orthogonal_to_xhat")
    assert cert.verdict == "proved-general"
    undefined = [r["dims"] for r in cert.evidence["cross_check"]["at"] if "undefined" in r]
    assert undefined and all(d["n"] == 1 for d in undefined)


# ------------------------------------------------------------------------------ sizes the tiers miss
@pytest.mark.parametrize("m", SIZE_MUTANTS, ids=lambda m: m.mutant.name)
def test_a_spec_wrong_only_at_some_sizes_is_refused_never_proved(m):
    o = OPS[m.op]
    twin = o.with_mutant(m.mutant)
    cert = prove_general(twin, m.claim)
    ev = cert.evidence
    assert cert.verdict == "inconclusive", ev
    assert ev["reason"].startswith("refused: ") and m.construct in ev["reason"]
    assert ev["refused_at"].startswith("specs/mutants/general.py:")
    assert m.construct in ev["refused_code"] or "2048" in ev["refused_code"]
    assert cert.dims == general_dims(o, m.claim)           # written where the planner expects it


@pytest.mark.parametrize("m", SIZE_MUTANTS, ids=lambda m: m.mutant.name)
def test_the_fixed_dims_tier_kills_a_size_mutant_only_where_it_looks(m):
    """wrong_when_n_divisible_by_4 dies at n = 16; the others are right at every dims the fixed tier
    uses -- only the refusal above stands between them and a proof."""
    o = OPS[m.op]
    twin = o.with_mutant(m.mutant)
    for dims in o.dims:
        verdict = prove_claim(twin, m.claim, dims).verdict
        assert verdict == ("failed" if dims == m.fixed_dims else "proved"), (dims, verdict)


# Wrong specs whose statement the trace cannot derive (so: refused, inconclusive), and why.
NOT_DERIVED = {
    # the round trip feeds one layout's output into the other layout's strided slices
    ("rope_interleaved", "backward_inverts_forward", "half_split_layout"): "refused",
    ("rope_half", "backward_inverts_forward", "interleaved_layout"): "refused",
    # a transpose written as a reshape: (n_in, n_out) -> (n_out, n_in) is no layout of a size
    ("linear", "vjp[W]", "weight_gradient_reshaped_not_transposed"): "refused",
    ("linear", "adjoint_W", "weight_gradient_reshaped_not_transposed"): "refused",
    ("linear", "vjp[x]", "input_gradient_reshaped_weight"): "refused",
    ("linear", "adjoint_x", "input_gradient_reshaped_weight"): "refused",
}


def _wrong(name, claim):
    """Spec mutants of ``name`` that kill ``claim`` and whose statement the every-size prover must refute."""
    return [m for m in OPS[name].mutants if claim in m.kills and not m.refused and not m.exact_only
            and (name, claim, m.name) not in NOT_DERIVED]


ONE_PER_CLAIM = [(n, c, _wrong(n, c)[0].name) for n, c in GENERAL if _wrong(n, c)]
EVERY = [(n, c, m.name) for n, c in GENERAL for m in OPS[n].mutants if c in m.kills and not m.refused]


def test_every_general_claim_has_a_wrong_spec_to_refute():
    assert {(n, c) for n, c, _ in ONE_PER_CLAIM} == set(GENERAL)


@pytest.mark.parametrize("name,claim,mutant", _by_default(ONE_PER_CLAIM))
def test_a_wrong_spec_fails_for_every_size_with_a_witness(name, claim, mutant):
    """The statement derived from a wrong spec is false: `failed`, with a witness at a concrete size
    where the cross-check found the statement equal to the spec and the fixed-dims prover refutes it."""
    o = OPS[name]
    twin = o.with_mutant(next(m for m in o.mutants if m.name == mutant))
    cert = prove_general(twin, claim)
    assert cert.verdict == "failed", (cert.verdict, cert.evidence.get("reason"))
    w = cert.evidence["witness"]
    assert w["relative"] > 1e-20 and w["point"] and w["dims"]
    assert cert.evidence["cross_check"]["status"] == "exact"
    assert corroborated(cert.evidence["cross_check"]["fixed_dims_prover"], "failed", name,
                        lambda: prove_claim(twin, claim, o.dims[0]).verdict)
    assert cert.evidence["proof"]["status"] != "proved"


@pytest.mark.slow                   # every spec mutant against every every-size claim it kills (~90 proofs)
@pytest.mark.parametrize("name,claim,mutant", EVERY)
def test_no_wrong_spec_is_ever_proved_for_every_size(name, claim, mutant):
    o = OPS[name]
    m = next(m for m in o.mutants if m.name == mutant)
    cert = prove_general(o.with_mutant(m), claim)
    why = NOT_DERIVED.get((name, claim, mutant))
    if m.exact_only:                     # an error of 1e-90: beyond the witness search's 100 digits
        assert cert.verdict == "inconclusive"
    elif why is not None:
        assert cert.verdict == "inconclusive" and why in cert.evidence["reason"], cert.evidence["reason"]
    else:
        assert cert.verdict == "failed", cert.evidence.get("reason")


# ------------------------------------------------------------------------------ the tracer's self-check
@pytest.mark.parametrize("f", MISMATCHED, ids=lambda f: f"{f.op}-{f.name}")
def test_cross_check_refuses_a_true_identity_about_another_formula(f):
    cert = prove_general(OPS[f.op], f.claim, form=f.builder)
    assert cert.evidence["proof"]["status"] == "proved"           # the symbolic identity holds ...
    assert cert.verdict == "inconclusive"                          # ... but it is not the spec's
    assert cert.evidence["cross_check"]["status"] == "mismatch"
    assert "not the spec's formula" in cert.evidence["reason"]
    assert "hand-written" in cert.evidence["scope"]


def test_cross_check_catches_a_form_wrong_only_at_n_3():
    f = next(f for f in MISMATCHED if f.name == "wrong_only_at_n3")
    rows = prove_general(OPS["softmax"], "vjp[x]", form=f.builder).evidence["cross_check"]["at"]
    bad = [r["dims"]["n"] for r in rows if r["forward"]["status"] == "mismatch"]
    assert bad == [3]


def test_a_tracer_that_drops_a_term_is_caught_by_the_cross_check(monkeypatch):
    """A deliberately wrong tracer (every reduction skips its last entry) derives a statement that
    is a true identity about another function: the cross-check against the spec refuses it."""
    from vjpcert.symbolic.every_size import constructs
    real = Sum

    def short(body, limits):
        k, lo, hi = limits
        return real(body, (k, lo, hi - 1))
    monkeypatch.setattr(constructs, "Sum", short)
    cert = prove_general(OPS["softmax"], "vjp[x]")
    assert cert.verdict == "inconclusive"
    assert cert.evidence["cross_check"]["status"] in ("mismatch", "error")


def test_an_identity_test_on_a_size_is_caught_where_the_cross_check_looks():
    """`n is 16` cannot be intercepted by any object: the trace takes the path of every other size.
    The cross-check at the op's own dims (n = 16 among them) finds the statement is not the spec's."""
    base = OPS["softmax"]

    def backward(B, x, dy):
        y = base(B, x)
        dx = y * (dy - (y * dy).sum(-1, keepdims=True))
        return (2 * dx,) if x.shape[-1] is SIXTEEN else (dx,)      # deliberately an identity test
    from vjpcert.core.registry import Mutant
    twin = base.with_mutant(Mutant("identity_test_on_n", backward, "vjp", ("vjp[x]",), ""))
    cert = prove_general(twin, "vjp[x]")
    assert cert.verdict == "inconclusive", cert.verdict
    assert cert.evidence["cross_check"]["status"] == "mismatch"


def test_tiles_that_overlap_are_not_a_layout():
    """RoPE pieces at (r, p + c): pair p's second component lands on pair p + 1's first."""
    def form(G):
        G.even_dim("d", "h"), G.dim("rows")
        h = G.dim_exprs["d"] / 2
        x, dy = G.array("x"), G.array("dy")

        def pieces(a):
            return [G.piece(lambda r, p, c=c: (r, p + c), ("rows", h), lambda r, p, c=c: a[r, p + c])
                    for c in (0, 1)]
        return G.vjp("x", forward=pieces(x), backward=pieces(dy))
    cert = prove_general(OPS["rope_half"], "vjp[x]", form=form)
    assert cert.verdict == "inconclusive", cert.verdict


def test_a_contradiction_with_the_fixed_dims_prover_is_never_proved(monkeypatch):
    """If the fixed-dims prover refuted the spec where the statement equals it, one of the two
    provers would be wrong: the general claim must not be reported proved."""
    from vjpcert.symbolic.fixed import prover
    real = prover.prove_claim

    def refuting(op, claim, dims, **kw):
        cert = real(op, claim, dims, **kw)
        cert.verdict, cert.evidence = "failed", {**cert.evidence, "witness": {"planted": True}}
        return cert
    monkeypatch.setattr(prover, "prove_claim", refuting)
    cert = prove_general(OPS["softmax"], "vjp[x]")
    assert cert.verdict == "inconclusive" and "contradiction" in cert.evidence["reason"]


def test_a_construct_the_normal_form_does_not_know_is_inconclusive():
    def form(G):
        x, dy = G.array("x"), G.array("dy")
        G.dim("rows"), G.dim("n")
        f = lambda v: sp.Piecewise((v, v > 0), (0, True))  # noqa: E731  (relu: not treated)
        return G.vjp("x", forward=lambda r, i: f(x[r, i]), backward=lambda s, j: dy[s, j])
    cert = prove_general(OPS["gelu_erf"], "vjp[x]", form=form)
    assert cert.verdict == "inconclusive", cert.verdict


def test_a_timeout_is_inconclusive_never_proved():
    cert = prove_general(OPS["layernorm"], "vjp[x]", budget=0.05)
    assert cert.verdict == "inconclusive"


def test_unknown_claims_are_refused():
    with pytest.raises(SpecError):
        OPS["softmax"].every_size("no_such_law")
    with pytest.raises(SpecError):
        prove_general(OPS["softmax"], "max_shift_free")        # not declared for every size


def test_a_broken_general_form_is_inconclusive_with_its_error():
    cert = prove_general(OPS["softmax"], "vjp[x]", form=lambda G: G.vjp("nope", forward=None, backward=None))
    assert cert.verdict == "inconclusive" and "could not be built" in cert.evidence["reason"]


# ------------------------------------------------------------------------------ what the trace refuses
# Each spec below is right at every size a finite tier would try, or uses a construct the trace cannot
# follow for every size; each must be refused with the construct and this file's line.
def _softmax_like(name, backward, **decl):
    decl = {"inputs": {"x": ("rows", "n")}, "output": ("rows", "n"), "dims": [{"rows": 1, "n": 3}], **decl}

    @op(name=name, **decl)
    def fwd(B, x):
        e = B.exp(x)
        return e / e.sum(-1, keepdims=True)
    fwd.defvjp(backward)
    fwd.every_size("vjp[x]")
    return fwd


def _right(B, x, dy):
    e = B.exp(x)
    y = e / e.sum(-1, keepdims=True)
    return y * (dy - (y * dy).sum(-1, keepdims=True))


def _loop(B, x, dy):
    dx = _right(B, x, dy)
    for _ in range(x.shape[-1]):                                 # a loop over a size
        dx = dx * 1
    return (dx,)


def _as_int(B, x, dy):
    return (_right(B, x, dy) * (int(x.shape[-1]) // x.shape[-1]),)


def _bool(B, x, dy):
    return (_right(B, x, dy),) if x.shape[-1] else (dy,)


def _dict_key(B, x, dy):
    return (_right(B, x, dy) * {16: 2}.get(x.shape[-1], 1),)


def _str(B, x, dy):
    return (_right(B, x, dy) * (2 if str(x.shape[-1]) == "16" else 1),)


def _caught(B, x, dy):
    try:
        big = x.shape[-1] > 2048
    except Exception:                                            # the spec swallows the refusal
        big = False
    return (_right(B, x, dy) * (2 if big else 1),)


def _index_mask(B, x, dy):
    import numpy as np
    return (np.where(np.arange(x.shape[-1]) < 2048, _right(B, x, dy), dy),)


def _past_the_end(B, x, dy):
    return (_right(B, x, dy) + 0 * x[:, 2048:2049],)


def _odd_half(B, x, dy):
    return (_right(B, x, dy)[:, : x.shape[-1] // 2] * 0 + 1,)


def _numpy_exp(B, x, dy):
    import numpy as np
    return (np.exp(x) * 0 + _right(B, x, dy),)


def _float(B, x, dy):
    return (_right(B, x, dy) * 1.0,)


def _in_place(B, x, dy):
    dx = _right(B, x, dy)
    dx[:, 0] = 0
    return (dx,)


REFUSED = {"range": _loop, "Python int": _as_int, "bool()": _bool, "hash": _dict_key, "str()": _str,
           "caught": _caught, "comparison": _index_mask, "not provably inside": _past_the_end,
           "exact only for some sizes": _odd_half, "np.exp": _numpy_exp, "float": _float}


@pytest.mark.parametrize("construct", list(REFUSED))
def test_the_trace_refuses_what_it_cannot_follow_for_every_size(construct):
    fn = REFUSED[construct]
    o = _softmax_like(f"t12_{fn.__name__.strip('_')}", fn)
    cert = prove_general(o, "vjp[x]")
    ev = cert.evidence
    assert cert.verdict == "inconclusive", ev
    assert ev["reason"].startswith("refused: ")
    assert ev["refused_at"].startswith(f"{HERE}:"), ev["refused_at"]
    line = int(ev["refused_at"].split(":")[1])
    assert fn.__code__.co_firstlineno < line <= fn.__code__.co_firstlineno + 6


def test_a_write_in_place_is_followed_as_numpy_writes_so_a_wrong_one_is_refuted():
    """dx[:, 0] = 0 zeroes a column of the right answer: the trace follows the write for every size
    (numpy's semantics, as values), so the claim is refuted, not declined."""
    cert = prove_general(_softmax_like("t12_in_place", _in_place), "vjp[x]")
    assert cert.verdict == "failed", cert.evidence.get("reason")


def test_constraints_that_are_not_a_multiple_of_a_size_are_refused():
    o = _softmax_like("t12_capped", lambda B, x, dy: (_right(B, x, dy),),
                      constraints=lambda d: None if d["n"] <= 8 else "n <= 8")
    cert = prove_general(o, "vjp[x]")
    assert cert.verdict == "inconclusive" and "constraints" in cert.evidence["reason"]
    o = _softmax_like("t12_thirds", lambda B, x, dy: (_right(B, x, dy),),
                      constraints=lambda d: None if d["n"] % 3 == 0 else "n % 3")
    cert = prove_general(o, "vjp[x]", budget=120)
    assert cert.verdict == "proved-general" and cert.dims["n"] == "3n_3"
    assert "n = 3*n_3 (a multiple of 3)" in cert.assumptions


def test_constraints_from_a_least_size_on_are_a_shifted_size_and_nothing_below_is_an_instance():
    """n >= 3 (a 3 x 3 convolution's H >= 2, in small): the statement is over n = n0 + 2, n0 >= 1, says
    so, and a size below it is never read as an instance of it."""
    from vjpcert.symbolic.every_size.dims import dim_forms
    from vjpcert.symbolic.every_size.instance import instance_of
    o = _softmax_like("t12_from_three", lambda B, x, dy: (_right(B, x, dy),),
                      constraints=lambda d: None if d["n"] >= 3 else "n >= 3")
    assert dim_forms(o)["n"] == (1, "n0", 3) and dim_forms(o)["rows"] == (1, "rows", 1)
    cert = prove_general(o, "vjp[x]", budget=120)
    assert cert.verdict == "proved-general" and cert.dims["n"] == "n0+2", cert.evidence.get("reason")
    assert "n = n0 + 2 (at least 3)" in cert.assumptions and "n0 >= 1 (an integer)" in cert.assumptions
    assert instance_of(o, {"rows": 1, "n": 2}) is not None and instance_of(o, {"rows": 1, "n": 3}) is None


@pytest.mark.slow                   # two every-size proofs of a convolution (~1 min): the reports hold them too
def test_a_stride_one_convolution_is_proved_for_every_size_from_two_and_its_mutant_is_not():
    """The 3 x 3 depthwise convolution, stride 1, padding 1: proved for every batch, channel count and
    H, W >= 2; the kernel not flipped in dx fails for every size."""
    o = OPS["depthwise_conv2d"]
    cert = prove_general(o, "vjp[x]", budget=300)
    assert cert.verdict == "proved-general", cert.evidence.get("reason")
    assert cert.dims == {"C": "C", "H": "H0+1", "N": "N", "W": "W0+1"}
    assert "H = H0 + 1 (at least 2)" in cert.assumptions
    wrong = o.with_mutant(next(m for m in o.mutants if m.name == "kernel_not_flipped_in_dx"))
    assert prove_general(wrong, "vjp[x]", budget=300).verdict == "failed"


@pytest.mark.slow                   # every-size proofs of a grouped convolution (~1 min): the reports hold them too
def test_a_dilated_grouped_convolution_is_proved_for_every_size_from_four_and_its_group_mutants_are_not():
    """Dilation 2, padding 2, two groups (the channels read as two runs): proved for every batch, group
    width and H, W >= 4; dx with the groups swapped, and dw summed over both groups, fail for every size."""
    o = OPS["conv2d_dilated_grouped"]
    for claim, mutant in (("vjp[x]", "dx_groups_swapped"), ("vjp[w]", "dw_summed_over_both_groups")):
        cert = prove_general(o, claim, budget=300)
        assert cert.verdict == "proved-general", cert.evidence.get("reason")
        assert cert.dims == {"Cg": "Cg", "H": "H0+3", "N": "N", "Og": "Og", "W": "W0+3"}
        assert "H = H0 + 3 (at least 4)" in cert.assumptions
        wrong = o.with_mutant(next(m for m in o.mutants if m.name == mutant))
        assert prove_general(wrong, claim, budget=300).verdict == "failed", mutant


@pytest.mark.slow                   # an every-size proof of 49 taps, edges case by case (~4 min): the reports hold it
def test_the_7x7_depthwise_convolution_is_proved_for_every_size_from_seven_its_edges_case_by_case():
    """ConvNeXt's depthwise 7 x 7: dx proved for every batch, channel count and H, W >= 7, the first and
    last three rows and columns one by one (the normal form alone leaves their deltas); the kernel not
    flipped in dx fails for every size."""
    o = OPS["depthwise_conv7x7"]
    cert = prove_general(o, "vjp[x]")
    assert cert.verdict == "proved-general", cert.evidence.get("reason")
    assert cert.dims == {"C": "C", "H": "H0+6", "N": "N", "W": "W0+6"}
    assert "H = H0 + 6 (at least 7)" in cert.assumptions
    split = [i for i in cert.evidence["proof"]["identities"] if "split" in i]
    assert split and all(i["cases"] >= 2 for i in split)
    wrong = o.with_mutant(next(m for m in o.mutants if m.name == "kernel_not_flipped_in_dx"))
    assert prove_general(wrong, "vjp[x]").verdict == "failed"


@pytest.mark.slow                   # an every-size proof over 9 taps' regions (~1 min): the reports hold it too
def test_the_padded_3x3_stride_2_max_pool_is_proved_for_every_size_from_two_windows_and_its_mutant_is_not():
    """ResNet's stem pooling, region by region: proved for every batch, channel count and Ho, Wo >= 2;
    the padding competing for the maximum fails for every size."""
    o = OPS["max_pool2d_3x3s2"]
    cert = prove_general(o, "vjp[x]")
    assert cert.verdict == "proved-general", cert.evidence.get("reason")
    assert cert.dims == {"C": "C", "Ho": "Ho0+1", "N": "N", "Wo": "Wo0+1"}
    assert "Ho = Ho0 + 1 (at least 2)" in cert.assumptions
    wrong = o.with_mutant(next(m for m in o.mutants if m.name == "padding_can_win"))
    assert prove_general(wrong, "vjp[x]").verdict == "failed"


def test_a_structural_param_and_a_symbolic_one_reach_the_trace():
    @op(name="t12_scaled", inputs={"x": ("n",)}, output=("n",), dims=[{"n": 2}],
        params={"c": Param(2), "k": Param(3, symbolic=False)})
    def scaled(B, x, c, k):
        return c * x * k

    @scaled.defvjp
    def _(B, x, c, k, dy):
        return (c * k * dy,)
    scaled.every_size("vjp[x]")
    cert = prove_general(scaled, "vjp[x]")
    assert cert.verdict == "proved-general"
    assert "3*c" in cert.evidence["backward"][0]


def _rotated(B, x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[:, h:], x[:, :h]], axis=-1)


def _interleaved(B, x):
    return np.stack([x[:, 0::2], x[:, 1::2]], axis=-1).reshape(x.shape)


def _centred_product(B, x):
    return x * (x * x).mean(-1, keepdims=True)


def _ramp(B, x):
    i = B.array(np.arange(x.shape[-1] // 2))
    return np.concatenate([i, i * 2], -1)[None, :] * x


def _strictly_causal(B, x):
    mask = np.tril(np.ones((x.shape[0], x.shape[0]), dtype=bool), k=-1)
    return np.where(mask, x @ x.T, B.c(0)) @ x


def _edges(B, x):
    return x[:1] + x[..., -1:] + B.exp(x[0])


@pytest.mark.parametrize("construct", [_rotated, _interleaved, _centred_product, _ramp, _strictly_causal, _edges],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_trace_computes_what_numpy_computes(construct):
    """Each construct the trace follows: the statement it derives, written out at concrete sizes, equals
    the spec run by numpy on SymPy numbers entry by entry (the cross-check)."""
    from vjpcert.symbolic.every_size.concrete import cross_check
    from vjpcert.symbolic.every_size.form import build_statement
    from vjpcert.symbolic.every_size.shape_trace import derive

    @op(name=f"t12_{construct.__name__.strip('_')}", inputs={"x": ("rows", "d")}, output=("rows", "d"),
        dims=[{"rows": 2, "d": 4}], constraints=lambda d: None if d["d"] % 2 == 0 else "even d")
    def constructs(B, x):
        return x + construct(B, x)

    @constructs.defvjp
    def _(B, x, dy):                       # not a claim here: only the forward's statement is compared
        return (dy * 0,)
    stmt = build_statement(constructs, "vjp[x]", derive(constructs, "vjp[x]"))
    checked = cross_check(stmt, [{"rows": 1, "d": 2}, {"rows": 2, "d": 4}, {"rows": 3, "d": 6}])
    assert checked["status"] == "exact", checked


# ------------------------------------------------------------------------------ the normal form
n = sp.Symbol("n", integer=True, positive=True)
h = sp.Symbol("h", integer=True, positive=True)
i, j, k, l, p, q = sp.symbols("i j k l p q", integer=True)
x, y = IndexedBase("x", real=True), IndexedBase("y", real=True)
A = IndexedBase("A", real=True)


def zero(expr, **ranges):
    N = Normaliser([n, h], {sp.Symbol(s, integer=True): r for s, r in ranges.items()})
    return N.is_zero(expr)[0]


def test_delta_sums_are_evaluated_inside_their_range():
    assert zero(Sum(x[k] * KroneckerDelta(k, j), (k, 0, n - 1)) - x[j], j=(0, n - 1))
    assert zero(Sum(1, (k, 0, n - 1)) - n)
    assert zero(Sum(x[2 * p] * KroneckerDelta(2 * p, 2 * q + 1), (p, 0, h - 1)), q=(0, h - 1))   # parity
    assert zero(Sum(x[p] * KroneckerDelta(p, q + h), (p, 0, h - 1)), q=(0, h - 1))              # disjoint


def test_a_delta_is_not_evaluated_where_its_value_may_leave_the_range():
    # j may be n - 1, outside k in [0, n - 2]: the sum is x[j] only when j < n - 1
    assert not zero(Sum(x[k] * KroneckerDelta(k, j), (k, 0, n - 2)) - x[j], j=(0, n - 1))
    assert not zero(Sum(x[k] * KroneckerDelta(k, j + 1), (k, 0, n - 1)) - x[j + 1], j=(0, n - 1))


def test_ranges_and_index_positions_are_part_of_a_sum():
    assert not zero(Sum(x[k], (k, 0, n - 2)) - Sum(x[k], (k, 0, n - 1)))
    assert not zero(Sum(A[k, l] * y[l], (k, 0, n - 1), (l, 0, n - 1))
                    - Sum(A[l, k] * y[l], (k, 0, n - 1), (l, 0, n - 1)))          # a transpose
    assert not zero(Sum(x[k] ** 2, (k, 0, n - 1)) - Sum(x[k], (k, 0, n - 1)) ** 2)


def test_sums_are_renamed_interchanged_and_split_exactly():
    assert zero(Sum(x[k], (k, 0, n - 1)) - Sum(x[l], (l, 0, n - 1)))
    assert zero(Sum(Sum(A[k, l] * y[l], (l, 0, n - 1)), (k, 0, h - 1))
                - Sum(Sum(A[k, l] * y[l], (k, 0, h - 1)), (l, 0, n - 1)))
    assert zero(Sum(x[k] * y[l], (k, 0, n - 1), (l, 0, n - 1))
                - Sum(x[k], (k, 0, n - 1)) * Sum(y[l], (l, 0, n - 1)))
    mean = Sum(x[k], (k, 0, n - 1)) / n
    assert zero(Sum(x[l] - mean, (l, 0, n - 1)))                          # sum_l (x_l - mean) = 0


def test_sums_of_one_rational_function_written_two_ways_cancel_and_near_misses_do_not():
    """A sigmoid's 1 - 1/(1 + u) against u/(1 + u) inside a sum over the same range: the bodies are
    joined and cancel. Not when the ranges differ, the bodies differ, or an outer factor hides an
    index of the sum."""
    u = sp.exp(-x[k])
    g = y[k] / (1 + u)
    assert zero(Sum(g * (1 - 1 / (1 + u)), (k, 0, n - 1)) - Sum(g * u / (1 + u), (k, 0, n - 1)))
    assert zero(x[j] * Sum(g * (1 - 1 / (1 + u)), (k, 0, n - 1)) - x[j] * Sum(g * u / (1 + u), (k, 0, n - 1)))
    assert not zero(Sum(g * (1 - 1 / (1 + u)), (k, 0, n - 2)) - Sum(g * u / (1 + u), (k, 0, n - 1)))
    assert not zero(Sum(g * (1 - 1 / (1 + u)), (k, 0, n - 1)) - Sum(g / (1 + u), (k, 0, n - 1)))
    assert not zero(x[j] * Sum(g * (1 - 1 / (1 + u)), (k, 0, n - 1)) - Sum(g * u / (1 + u), (k, 0, n - 1)))


def test_transcendental_atoms_keep_their_identities():
    s = Sum(x[k] ** 2, (k, 0, n - 1))
    assert zero(sp.exp(x[j]) ** 2 - sp.exp(2 * x[j]))
    assert zero(sp.sqrt(s / n + 1) ** 2 - s / n - 1)
    assert zero(1 / sp.sqrt(s / n) - sp.sqrt(n) / sp.sqrt(s))
    assert not zero(sp.sqrt(s) - s)
    assert not zero(sp.erf(x[j]) + sp.erf(x[j]))
    assert zero(sp.erf(-x[j]) + sp.erf(x[j])) and zero(sp.cos(-x[j]) - sp.cos(x[j]))


def test_sine_and_cosine_squares_add_to_one_and_nothing_else():
    assert zero(sp.sin(x[j]) ** 2 + sp.cos(x[j]) ** 2 - 1)
    assert zero(sp.sin(x[j]) ** 4 - (1 - sp.cos(x[j]) ** 2) ** 2)
    assert not zero(sp.sin(x[j]) ** 2 + sp.cos(x[k]) ** 2 - 1)                 # different angles
    assert not zero(sp.sin(x[j]) + sp.cos(x[j]) - 1)


def test_logs_of_exponentials_and_exponentials_of_logs():
    s = Sum(sp.exp(x[k]), (k, 0, n - 1))
    assert zero(sp.exp(x[j] - sp.log(s)) - sp.exp(x[j]) / s)
    assert zero(Sum(sp.exp(x[k] - sp.log(s)), (k, 0, n - 1)) - 1)
    assert not zero(sp.log(s) - s)
    assert zero(Log(sp.exp(x[j])) - x[j])


def test_indicators_are_decided_by_index_bounds_only():
    assert zero(Ind(j) - 1, j=(0, n - 1))                           # j >= 0 always
    assert zero(Ind(-j - 1), j=(0, n - 1))                          # j < 0 never
    assert not zero(Ind(j - 1) - 1, j=(0, n - 1))                    # false at j = 0
    assert zero(Ind(j - 1) ** 2 - Ind(j - 1), j=(0, n - 1))          # an indicator is 0 or 1
    assert not zero(Ind(j - 1) - Ind(j - 2), j=(0, n - 1))
    assert zero(Sum(x[k] * Ind(-k), (k, 0, n - 1)) - x[0])            # -k >= 0 only at k = 0
    causal = Sum(x[k] * Ind(j - k), (k, 0, n - 1))                      # sum over k <= j
    assert zero(causal - Sum(x[l] * Ind(j - l), (l, 0, n - 1)), j=(0, n - 1))
    assert not zero(causal - Sum(x[k] * Ind(j - k - 1), (k, 0, n - 1)), j=(0, n - 1))   # off by one
    assert not zero(causal - Sum(x[k], (k, 0, n - 1)), j=(0, n - 1))


def test_a_derivation_is_deterministic():
    a = prove_general(OPS["rope_interleaved"], "vjp[x]").evidence
    b = prove_general(OPS["rope_interleaved"], "vjp[x]").evidence
    assert a["formula"] == b["formula"] and a["statement"] == b["statement"]
    assert np.array_equal(a["derived_from"], b["derived_from"])


# ------------------------------------------------------------------------------ instantiation
def _brute_force(e, values, arrays):
    """The statement at concrete sizes the slow, obvious way: substitute, expand every sum, then put
    in the arrays' entries."""
    out = e.xreplace(values).doit()
    return out.xreplace({sp.Indexed(sp.IndexedBase(name), *idx): sp.sympify(arr[idx])
                         for name, arr in arrays.items() for idx in np.ndindex(*arr.shape)})


def test_instantiation_walks_sums_with_their_indices_bound():
    """expand_sums writes each sum out with its index in an environment (a factor free of the index
    once for the whole sum): the same expression as substituting and expanding, on nested sums whose
    bounds depend on the dims, deltas, indicators and factors free of the inner index."""
    from vjpcert.symbolic.every_size.zero_test import expand_sums
    n, m, i, j, k, s = sp.symbols("n m i j k s", integer=True)
    x, y = IndexedBase("x"), IndexedBase("y")
    xs = np.array([[sp.Symbol(f"x{a}{b}") for b in range(4)] for a in range(3)], dtype=object)
    ys = np.array([sp.Symbol(f"y{a}") for a in range(4)], dtype=object)
    arrays = {"x": xs, "y": ys}
    exprs = [
        Sum(x[s, j] * y[j], (j, 0, n - 1)),
        Sum(sp.exp(x[s, j]) * Sum(x[s, k] * KroneckerDelta(j, k), (k, 0, n - 1)), (j, 0, n - 1)),
        Sum(y[j] * Sum(x[i, j], (i, 0, m - 1)) ** 2, (j, 0, n - 1)) / Sum(y[k], (k, 0, n - 1)),
        Sum(sp.Piecewise((x[s, j], j < s + 1), (0, True)) * y[j], (j, 0, n - 1)),
        Sum(x[i, j] * y[j], (i, 0, m - 1), (j, 0, n - 1)) + y[s],
    ]
    for dims in ({n: 4, m: 3, s: 1}, {n: 2, m: 1, s: 0}, {n: 1, m: 3, s: 2}):
        values = {q: sp.Integer(v) for q, v in dims.items()}
        memo: dict = {}
        for e in exprs:
            ours = expand_sums(e, values, memo, arrays)
            assert sp.simplify(ours - _brute_force(e, values, arrays)) == 0, (e, dims)
    # the control: a memo that forgets which index values a subterm was written out at (keyed by the
    # subterm alone) reuses x[s, 0] * y[0] for every term of the sum, and the comparison sees it
    class Forgetful(dict):
        def get(self, key, default=None):
            return super().get(key[0], default)

        def __setitem__(self, key, value):
            super().__setitem__(key[0], value)

    values = {n: sp.Integer(4), s: sp.Integer(1)}
    forgot = expand_sums(exprs[0], values, Forgetful(), arrays)
    assert sp.simplify(forgot - _brute_force(exprs[0], values, arrays)) != 0


@pytest.mark.parametrize("name", ["conv2d", "max_pool2d", "softmax", "layernorm"])
def test_each_piece_s_jacobian_is_sympy_s_own_derivative_there(name):
    """The statement differentiates each output piece once, at an entry of symbolic position, and reads
    each input piece's derivative off it: it must be what differentiating at that piece's own entry
    gives, piece by piece (an edge case a symbolic position mishandles would be a wrong Jacobian)."""
    from vjpcert.symbolic.every_size.form import build_statement
    from vjpcert.symbolic.every_size.shape_trace import derive
    o = OPS[name]
    claim = next(c for c in general_claims(o) if c.startswith("vjp["))
    stmt = build_statement(o, claim, derive(o, claim))
    X = stmt.G.array(claim[4:-1])
    assert stmt.jacobian
    for out, inp, d in stmt.jacobian:
        assert d == out.value.diff(X[inp.idx]), (out.idx, inp.idx)
