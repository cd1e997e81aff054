"""Wrong pooling backwards, from the bugs of hand-written pooling kernels."""
import numpy as np

from vjpcert.specs.pooling import (avg_pool2d, first_max, global_avg_pool, max_pool, max_pool2d, max_pool2d_3x3s2,
                                   max_pool_grad, route, taps)


def every_tied_max(B, tapped):
    """[v_t >= every other tap]: on a tie, every maximum wins."""
    return first_max(B, tapped, lambda B, d, earlier: 1 - B.step(-d))


def last_max(B, tapped):
    """The last maximum in scan order wins a tie (another framework's convention)."""
    return first_max(B, tapped, lambda B, d, earlier: 1 - B.step(-d) if earlier else B.step(d))


def padding_competes(B, tapped):
    """The padding read as zeros that can win (a zero pad where -inf was meant); two padded taps (both
    0) tie, and the first wins, as in the kernel's scan."""
    wins = []
    for t, (v, inside) in enumerate(tapped):
        win = 1 + 0 * v
        for u, (w, inside_u) in enumerate(tapped):
            if u != t:
                d = np.where(inside | inside_u, v - w, (-1 if u < t else 1) + 0 * v)
                win = win * (B.step(d) if u < t else 1 - B.step(-d))
        wins.append(win)
    return wins


@max_pool2d.mutant("gradient_to_every_tied_index", kills=["at_the_kink"])
def _(B, x, dy):
    """dy to every tap equal to the maximum: right on every region, twice the gradient on a tie."""
    return (max_pool_grad(B, x, dy, 2, 0, every_tied_max),)


@max_pool2d.mutant("tie_to_the_last_index", kills=["at_the_kink"])
def _(B, x, dy):
    return (max_pool_grad(B, x, dy, 2, 0, last_max),)


@max_pool2d.mutant("taps_transposed_in_dx", kills=["vjp[x]", "at_the_kink"])
def _(B, x, dy):
    """The winner of tap (i, j) routed to the entry of tap (j, i)."""
    wins = first_max(B, taps(x, 2, 2, 0))
    return (route([dy * wins[k] for k in (0, 2, 1, 3)], 2, 2, 0, x),)


@max_pool2d_3x3s2.mutant("padding_can_win", kills=["vjp[x]", "at_the_kink"])
def _(B, x, dy):
    """The backward's winners computed with the padding's zeros competing."""
    return (max_pool_grad(B, x, dy, 3, 1, padding_competes),)


@avg_pool2d.mutant("gradient_not_divided_by_the_window", kills=["vjp[x]"])
def _(B, x, dy):
    return (route([dy] * 4, 2, 2, 0, x),)


@global_avg_pool.mutant("mean_over_the_height_only", kills=["vjp[x]"])
def _(B, x, dy):
    """dy / H: the width's share forgotten."""
    return (np.broadcast_to(dy[:, :, None, None], x.shape) / x.shape[2],)


@max_pool2d.mutant("pools_the_input_plus_one", replaces="forward", kills=["positively_homogeneous"])
def _(B, x):
    """The pool of x + 1 (a bias of the next layer folded in before the max): the same winners, so
    the same gradient, but no longer homogeneous."""
    return max_pool(B, x + 1, 2, 0)


@avg_pool2d.mutant("window_sum_not_mean", replaces="forward", kills=["vjp[x]", "mean_is_kept"])
def _(B, x):
    """Each window's sum, the division by its size forgotten in the forward."""
    return sum(v for v, _ in taps(x, 2, 2, 0))
