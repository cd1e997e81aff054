"""Report pages show the evidence: digits for numeric checks, error/bound and the race detector for
kernels, witnesses as small wrapped tables (long vectors never pasted whole, numpy reprs as plain
numbers), general forms as MathML (parsed safely: a certificate's text is never code), no empty
blocks. Rendered from hand-made certificates: no checker runs here."""
from pathlib import Path

from vjpcert.core.certificate import Certificate
from vjpcert.html import general_form_mathml, render_html
from vjpcert.reports import render_op

SOFTMAX_FORM = ("dx[s, j] = (dy[s, j] - Sum(exp(x[s, k])*dy[s, k], (k, 0, n - 1))/Z(s))*exp(x[s, j])/Z(s)"
                "  where Z(s) = Sum(exp(x[s, k]), (k, 0, n - 1))")


def cert(claim="vjp[x]", tier="numeric", verdict="checked", method="mpmath-diff@50", dims=None, **evidence):
    return Certificate(op="toy", claim=claim, tier=tier, verdict=verdict, method=method, dims=dims or {"n": 1025},
                       assumptions=[], evidence=evidence, spec_sha256="0" * 64, checker_sha256="0" * 64, versions={})


FAILED = cert(verdict="failed", digits=0.5, witness={
    "case": "random", "mode": "full-jacobian", "worst": "d y(np.int64(700),) / d x(np.int64(3),)",
    "from_forward": "2.0447388774742213647", "from_backward": "1.3631592516494809098", "digits": 0.5,
    "point": {"x": [0.25] * 1025}, "dy": [1.0] * 1025, "seed": 0})
KERNEL = cert(claim="kernel:toy_bwd", tier="kernel", verdict="kernel-match", method="numba-cuda-simulator",
              per_case={"random": {"outputs": {"dx": {"worst_error_over_bound": 0.289}}},
                        "near_constant": {"outputs": {"dx": {"worst_error_over_bound": 0.5}}}},
              race_detector={"ran": True, "clean": True, "accesses": 18})
NUMERIC = cert(digits=48.2, required_digits=41.5)
GENERAL = cert(tier="symbolic", verdict="proved-general", method="general", dims={"n": "n", "rows": "rows"},
               formula=SOFTMAX_FORM, formula_latex="{dx}_{s,j} = \\sum_{k=0}^{n - 1} x_{s,k}",
               cross_check={"at": [{}, {}, {}]})


def test_markdown_shows_digits_kernel_error_and_a_witness_table():
    page = render_op("toy", [FAILED, KERNEL, NUMERIC, GENERAL], {"doc": "", "spec_file": None})
    assert "48.2 digits (needs 41.5)" in page
    assert "error/bound <= 0.5; race detector clean (18 shared accesses)" in page
    assert "| from_backward vs from_forward | 1.3631592516494809098 vs 2.0447388774742213647 |" in page
    assert "d y(700,) / d x(3,)" in page and "np.int64" not in page
    assert "0.25, 0.25, 0.25, 0.25" not in page, "a 1025-entry vector was pasted into the page"
    assert "[certificates/toy/numeric__vjp-x__n1025.json](certificates/toy/numeric__vjp-x__n1025.json)" in page
    assert not page.split("## ")[0].count("```"), "no docstring, yet a block"
    assert "```math\n" in page and "\\sum" in page       # the general form, as GitHub renders math


def test_html_shows_evidence_a_wrapped_witness_table_and_general_forms_as_mathml(tmp_path):
    page = render_html([FAILED, KERNEL, NUMERIC, GENERAL], {"toy": {"doc": "", "spec_file": None}}, Path(tmp_path))
    assert "<th>evidence</th>" in page and "48.2 digits (needs 41.5)" in page and "error/bound &lt;= 0.5" in page
    assert "<table class='witness'>" in page and "white-space:pre-wrap" in page
    assert "0.25, 0.25, 0.25, 0.25" not in page and "np.int64" not in page
    assert "<pre></pre>" not in page
    general = page.split("General form")[1]
    assert general.count("<math") == 2 and "<msub>" in general or "<mi>dx</mi>" in general


def test_general_forms_become_one_equation_each():
    equations = general_form_mathml(SOFTMAX_FORM)
    assert equations and len(equations) == 2 and all(e.startswith("<math") for e in equations)
    assert "<munderover><mo>&#x2211;</mo>" in equations[0]      # the sums are sums


def test_a_general_form_that_is_not_a_formula_is_never_evaluated(tmp_path):
    marker = tmp_path / "ran"
    for text in (f"x = __import__('os').system('touch {marker}')",
                 f"x = open('{marker}', 'w')",
                 "x = (lambda: 1)()",
                 "x = y.__class__",
                 "x = eval('1')"):
        assert general_form_mathml(text) is None, text
    assert not marker.exists()
