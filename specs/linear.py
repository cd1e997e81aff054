"""Linear layer, batched over rows:  y = x W^T + b.

    dx = dy W,   dW = dy^T x,   db = sum_rows dy
"""
from vjpcert.core.registry import op


@op(inputs={"x": ("rows", "n_in"), "W": ("n_out", "n_in"), "b": ("n_out",)}, output=("rows", "n_out"),
    dims=[{"rows": 1, "n_in": 2, "n_out": 1}, {"rows": 2, "n_in": 3, "n_out": 4}],
    large_dims=[{"rows": 8, "n_in": 16, "n_out": 12}], check_dims={"rows": 5, "n_in": 7, "n_out": 3})
def linear(B, x, W, b):
    return x @ W.T + b


@linear.defvjp
def linear_vjp(B, x, W, b, dy):
    return dy @ W, dy.T @ x, dy.sum(0)


@linear.law
def adjoint_x(B, x, W, b, dy, forward, backward):
    """<W x, dy> = <x, W^T dy>: the input gradient is the adjoint of the linear map."""
    dx, _, _ = backward(x, W, b, dy)
    return ((forward(x, W, b) - b) * dy).sum(), (x * dx).sum()


@linear.law
def adjoint_W(B, x, W, b, dy, forward, backward):
    """<W x, dy> = <W, dy^T x>: the weight gradient is the adjoint in W."""
    _, dW, _ = backward(x, W, b, dy)
    return ((forward(x, W, b) - b) * dy).sum(), (W * dW).sum()


# ------------------------------------------------------------------ general forms (every shape)
def general_linear(G):
    """y[r, o] = sum_i x[r, i] W[o, i] + b[o] with symbolic rows, n_in, n_out."""
    rows, n_in, n_out = G.dim("rows"), G.dim("n_in"), G.dim("n_out")
    x, W, b, dy = G.array("x"), G.array("W"), G.array("b"), G.array("dy")

    def y(r, o):
        return G.sum(lambda i: x[r, i] * W[o, i], n_in) + b[o]

    def dx(s, j):
        return G.sum(lambda o: dy[s, o] * W[o, j], n_out)

    def dW(p, q):
        return G.sum(lambda r: dy[r, p] * x[r, q], rows)

    def db(p):
        return G.sum(lambda r: dy[r, p], rows)
    return dict(rows=rows, n_in=n_in, n_out=n_out, x=x, W=W, b=b, dy=dy, y=y, dx=dx, dW=dW, db=db)


for _wrt, _cot in (("x", "dx"), ("W", "dW"), ("b", "db")):
    @linear.general_form(f"vjp[{_wrt}]")
    def _(G, _wrt=_wrt, _cot=_cot):
        f = general_linear(G)
        return G.vjp(_wrt, forward=f["y"], backward=f[_cot])
