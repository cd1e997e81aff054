"""A user's PyTorch code, proved as it is: `vjpcert prove examples/my_torch_ops.py`, or from pytest
(examples/test_my_ops.py). The backward proved is the one PyTorch runs: the autograd.Function's."""
import torch

from vjpcert import torch_op


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


@torch_op(spec="rmsnorm", params={"eps": 1e-6}, dims=[{"rows": 2, "n": 3}])
def my_rmsnorm(x, gamma, eps):
    """RMSNorm through the autograd.Function above, tied to the certified spec."""
    return RMSNorm.apply(x, gamma, eps)
