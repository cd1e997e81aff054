"""The interactive API returns SymPy objects that agree with the proofs."""
import sympy

from vjpcert.symbolic import forward, jacobian, prove, vjp


def test_jacobian_is_a_sympy_matrix_and_transposes_to_the_vjp():
    J = jacobian("linear", wrt="x", rows=1, n_in=2, n_out=3)
    assert isinstance(J, sympy.Matrix) and J.shape == (3, 2)
    dy = sympy.Matrix(sympy.symbols("dy_{0\\,0} dy_{0\\,1} dy_{0\\,2}", real=True))
    back = vjp("linear", rows=1, n_in=2, n_out=3)["x"]
    dys = [s for s in back.free_symbols if s.name.startswith("dy")]
    subs = dict(zip(sorted(dys, key=lambda s: s.name), dy))
    assert sympy.simplify(back.subs(subs).T - J.T * dy) == sympy.zeros(2, 1)


def test_softmax_jacobian_rows_sum_to_zero():
    J = jacobian("softmax", rows=1, n=3)
    assert all(sympy.simplify(sum(J[:, j])) == 0 for j in range(3))


def test_prove_returns_renderable_certificates():
    certs = prove("scaled_dot", rows=1, n=2)
    assert [c.verdict for c in certs] == ["proved"] * 3
    assert "proved" in certs[0]._repr_markdown_()
    assert forward("softmax", rows=1, n=2).shape == (1, 2)


def test_certificates_print_as_a_short_table_with_the_witness_of_a_failure():
    """In a terminal (python -c, IPython) a result prints as a table of one line per claim, a failure
    followed by its witness in a few lines; in Jupyter it is one HTML table. The record itself (its
    evidence: strategy logs, points) stays in the certificate."""
    from vjpcert.session import Certificates
    from vjpcert.specs import resolve_op
    from vjpcert.symbolic.fixed.prover import prove_claim
    op = resolve_op("rmsnorm")
    twin = op.with_mutant(next(m for m in op.mutants if m.name == "eps_outside_sqrt"))
    certs = Certificates([prove_claim(twin, "vjp[x]", op.dims[0]), prove_claim(op, "vjp[x]", op.dims[0])])
    text = repr(certs)
    lines = text.splitlines()
    assert lines[0].split() == ["op", "claim", "tier", "dims", "verdict", "method"]
    assert "failed" in lines[1] and "proved" in text and "1 failed, 1 proved" in lines[-1]
    assert "backward vs J^T dy" in text and "certificate" in text          # the witness, in a few lines
    assert len(lines) < 20 and len(text) < 2500
    one = repr(certs[0])
    assert one.startswith("<certificate rmsnorm vjp[x] symbolic") and "failed" in one and len(one) < 200
    html = certs._repr_html_()
    assert html.startswith("<table>") and "failed" in html and "backward vs J^T dy" in html
    assert "<table>" in certs[1]._repr_html_() and "proved" in certs[1]._repr_html_()
