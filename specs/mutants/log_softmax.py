"""Wrong log-softmax backwards."""
from vjpcert.specs.log_softmax import log_softmax


@log_softmax.mutant("uniform_instead_of_softmax", kills=["vjp[x]"])
def _(B, x, dy):
    """dy - mean(dy): the softmax weights replaced by 1/n (still sums to 0)."""
    return (dy - dy.mean(-1, keepdims=True),)


@log_softmax.mutant("missing_sum_of_dy", kills=["vjp[x]", "cotangent_sums_to_zero"])
def _(B, x, dy):
    from vjpcert.specs.softmax import softmax
    return (dy - softmax(B, x) * dy,)


@log_softmax.mutant("forward_without_log", replaces="forward", kills=["vjp[x]", "exp_rows_sum_to_one"])
def _(B, x):
    return x - B.exp(x).sum(-1, keepdims=True)


@log_softmax.mutant("lse_forgets_shift", replaces="forward", kills=["max_shift_free"])
def _(B, x):
    """x - log sum exp(x - m), without adding m back: right at m = 0 (exact arithmetic), off by the row
    maximum in floats."""
    m = B.max_shift(x)
    return x - B.log(B.exp(x - m).sum(-1, keepdims=True))
