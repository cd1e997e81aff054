"""PyTorch classes the frontend tests certify: nn.Modules as model code writes them and
autograd.Functions with hand-written backwards (right and deliberately wrong). They live here, not in
the test files, so that collecting the tests imports no torch (``tests/optional.py``): a test file
reaches them through ``optional.importorskip("torch_models")``."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LlamaMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, -1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)      # the fused CPU kernel by default
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class _WrongSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return dy * x                                                  # should be 2 x dy


class WrongBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return _WrongSquare.apply(self.lin(x))


class Normed(nn.Module):
    """BatchNorm in eval mode (running statistics: buffers) after a frozen projection."""

    def __init__(self, dim):
        super().__init__()
        self.frozen = nn.Linear(dim, dim, bias=False)
        self.frozen.weight.requires_grad_(False)
        self.bn = nn.BatchNorm1d(dim)

    def forward(self, x):
        return self.bn(self.frozen(x))


class HFRMSNorm(nn.Module):
    """RMSNorm as a widely used model library writes it: computed in float32 and cast back."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.type_as(x) * self.weight


class RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, gamma, rstd)
        return x * rstd * gamma

    @staticmethod
    def backward(ctx, dy):
        x, gamma, rstd = ctx.saved_tensors
        g = dy * gamma
        dx = rstd * (g - x * rstd * rstd * (g * x).mean(-1, keepdim=True))
        return dx, (dy * x * rstd).sum(0), None


class RMSNormWrongTerm(RMSNorm):
    @staticmethod
    def backward(ctx, dy):
        x, gamma, rstd = ctx.saved_tensors
        g = dy * gamma
        dx = rstd * (g - x * rstd * (g * x).mean(-1, keepdim=True))       # one rstd too few
        return dx, (dy * x * rstd).sum(0), None


class WrongShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        return dy.sum(0)


# ------------------------------------------------------------------------------ gap: a Function's forward
class WrongForwardLayerNorm(torch.autograd.Function):
    """The forward uses eps = 1e-3; the backward is PyTorch's own at the spec's eps (right)."""

    @staticmethod
    def forward(ctx, x, gamma, beta):
        ctx.save_for_backward(x, gamma, beta)
        return F.layer_norm(x, x.shape[-1:], gamma, beta, 1e-3)

    @staticmethod
    def backward(ctx, dy):
        x, gamma, beta = ctx.saved_tensors
        with torch.enable_grad():
            xs = [t.detach().requires_grad_(True) for t in (x, gamma, beta)]
            y = F.layer_norm(xs[0], xs[0].shape[-1:], xs[1], xs[2], 1e-5)
            return torch.autograd.grad(y, xs, dy)


class ReluMaskGE(torch.autograd.Function):
    """A hand-written relu whose mask is x >= 0: right on every open region, relu'(0) = 1 on the kink,
    where torch.relu's own backward (and the derivative of its forward) gives 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return dy * (x >= 0)


class ReluMaskGT(ReluMaskGE):
    """The same with PyTorch's own mask, x > 0."""

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, dy, 0.0)


class ReluMaskOtherSide(ReluMaskGE):
    """The mask of x < 0."""

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return dy * (x < 0)


class ReluMLP(nn.Module):
    """Linear, ReLU, linear: a kink inside a module."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class BatchNormNoMeanTerm(torch.autograd.Function):
    """Training-mode BatchNorm over (N, C) whose backward forgets the mean-of-gradient term."""

    @staticmethod
    def forward(ctx, x, gamma, beta):
        mu = x.mean(0, keepdim=True)
        rstd = torch.rsqrt(((x - mu) ** 2).mean(0, keepdim=True) + 1e-5)
        xh = (x - mu) * rstd
        ctx.save_for_backward(xh, rstd, gamma)
        return xh * gamma + beta

    @staticmethod
    def backward(ctx, dy):
        xh, rstd, gamma = ctx.saved_tensors
        g = dy * gamma
        dx = rstd * (g - xh * (g * xh).mean(0, keepdim=True))
        return dx, (dy * xh).sum(0), dy.sum(0)


class BatchNormRight(BatchNormNoMeanTerm):
    @staticmethod
    def backward(ctx, dy):
        xh, rstd, gamma = ctx.saved_tensors
        g = dy * gamma
        dx = rstd * (g - g.mean(0, keepdim=True) - xh * (g * xh).mean(0, keepdim=True))
        return dx, (dy * xh).sum(0), dy.sum(0)


class MaxPoolEveryTie(torch.autograd.Function):
    """2x2/2 max-pooling whose backward sends the gradient to every entry equal to the maximum
    (PyTorch routes a tie to the first one only)."""

    @staticmethod
    def forward(ctx, x):
        y = torch.nn.functional.max_pool2d(x, 2)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, y = ctx.saved_tensors

        def up(t):
            return t.repeat_interleave(2, -1).repeat_interleave(2, -2)
        return up(dy) * (x == up(y))


# ------------------------------------------------------------------------------ recurrences
def elman_loop(h, x, W, U, b):
    """Elman's network as people write it in PyTorch: a Python loop over time."""
    hs = []
    for t in range(x.shape[0]):
        h = torch.tanh(W @ h + U @ x[t] + b)
        hs.append(h)
    return torch.stack(hs)


def lstm_cell(x, h, c, Wi, Wh):
    """An LSTM cell written by hand (gates i, f, g, o stacked as nn.LSTM's); the new h and c summed
    so that one output depends on both."""
    i, f, g, o = (Wi @ x + Wh @ h).chunk(4)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_new = f * c + i * g
    return o * torch.tanh(c_new) + c_new


def lstm_loop(s, x, Wi, Ui, Wf, Uf, Wo, Uo, Wg, Ug):
    """An LSTM network as people write it in PyTorch, with the spec's state (h, c) stacked: a loop."""
    h, c, states = s[0], s[1], []
    for t in range(x.shape[0]):
        i = torch.sigmoid(Wi @ x[t] + Ui @ h)
        f = torch.sigmoid(Wf @ x[t] + Uf @ h)
        o = torch.sigmoid(Wo @ x[t] + Uo @ h)
        c = f * c + i * torch.tanh(Wg @ x[t] + Ug @ h)
        h = o * torch.tanh(c)
        states.append(torch.stack([h, c]))
    return torch.stack(states)


class Recurrent(nn.Module):
    """torch.nn.RNN / GRU / LSTM over a sequence (batch-less input (T, k)), its outputs h_1 .. h_T."""

    def __init__(self, k, n, kind="GRU"):
        super().__init__()
        self.rnn = getattr(nn, kind)(k, n)

    def forward(self, x):
        return self.rnn(x)[0]


class _ElmanStepForgetsTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x, W, U, b):
        h_new = torch.tanh(W @ h + U @ x + b)
        ctx.save_for_backward(h, x, W, U, h_new)
        return h_new

    @staticmethod
    def backward(ctx, dy):
        h, x, W, U, h_new = ctx.saved_tensors
        g = dy                                                           # BUG: dy * (1 - h_new ** 2)
        return W.T @ g, U.T @ g, torch.outer(g, h), torch.outer(g, x), g


def elman_loop_wrong_step(h, x, W, U, b):
    hs = []
    for t in range(x.shape[0]):
        h = _ElmanStepForgetsTanh.apply(h, x[t], W, U, b)
        hs.append(h)
    return torch.stack(hs)


class _SoftplusThresholdOnTheKink(torch.autograd.Function):
    """softplus with a hand-written backward that takes the linear branch at a >= 20, not a > 20."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return F.softplus(a)

    @staticmethod
    def backward(ctx, dy):
        (a,) = ctx.saved_tensors
        return torch.where(a >= 20, dy, dy * torch.sigmoid(a))          # BUG: a > 20


def selective_scan_ref_softplus_on_the_kink(h, x, dt, b, A, dt_bias, c, z, D):
    """Mamba's scan (``vjpcert.frontends.pytorch.selective_scan_ref``) over that softplus."""
    from vjpcert.frontends.pytorch import selective_scan_ref
    return selective_scan_ref(h, x, dt, b, A, dt_bias, c, z, D, softplus=_SoftplusThresholdOnTheKink.apply)
