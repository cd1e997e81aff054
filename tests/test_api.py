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
