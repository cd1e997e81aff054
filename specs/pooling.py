"""Pooling over images x (N x C x H x W), as PyTorch defines it: max-pooling (2x2 stride 2, and
ResNet's stem 3x3 stride 2 with padding 1), average pooling 2x2 stride 2, global average pooling.

    max_pool2d    y[n,c,p,q] = max over the window's taps v_t = x[n,c,s p + i - pad, s q + j - pad]
                  = sum_t win_t v_t,  win_t = prod_{u<t} step(v_t - v_u) prod_{u>t} (1 - step(v_u - v_t))
                  (t wins when it beats every earlier tap and is at least every later one; a tap in
                  the padding never competes, never wins)
                  dx = each window's dy routed to its winner: win_t spread back to where tap t reads
    avg_pool2d    y = the mean of each 2x2 window,  dx = dy / 4 spread to the window
    global_avg    y[n,c] = mean_{h,w} x[n,c,h,w],  dx = dy / (H W) everywhere
Exactly one tap wins each window, and on a tie it is the first in scan order (row by row): the index
PyTorch's max_pool2d_with_indices keeps and its backward routes the gradient to (XLA's select-and-
scatter may route a tie elsewhere). The VJP claims are proved on every region of the taps' order;
``at_the_kink`` checks the tie-breaking at exact points with ties. The 3x3/2 padded pooling takes two
windows a side or more (``two_windows_on``): the every-size statement holds from there.
"""
import numpy as np

from vjpcert.core.registry import op
from vjpcert.specs.conv2d import pad, spread, window

POOL = dict(inputs={"x": ("N", "C", "2*Ho", "2*Wo")}, output=("N", "C", "Ho", "Wo"),
            dims=[{"N": 1, "C": 1, "Ho": 1, "Wo": 1}, {"N": 1, "C": 2, "Ho": 2, "Wo": 2}],
            check_dims={"N": 2, "C": 2, "Ho": 2, "Wo": 3})


def taps(x, k, stride, p):
    """[(value, inside)] of each tap of the k x k windows, in scan order: the entries it reads of the
    input padded by p, and the static mask of those inside the input."""
    # (H + 2p - k) // stride + 1 is H / 2 for both windows here (2x2 unpadded, 3x3 padded by 1) at
    # the even H these ops take; written so, the every-size tier reads an exact size
    Ho, Wo = x.shape[2] // stride, x.shape[3] // stride
    xp, inside = pad(x, p), pad(np.ones(x.shape, dtype=bool), p)
    return [(window(xp, i, j, Ho, Wo, stride), window(inside, i, j, Ho, Wo, stride))
            for i in range(k) for j in range(k)]


def first_max(B, tapped, beats=lambda B, d, earlier: B.step(d) if earlier else 1 - B.step(-d)):
    """The 0/1 indicator of each tap winning its window: inside the input, greater than every earlier
    tap inside, at least every later one. ``beats`` reads d = v_t - v_u; a pair with a tap in the
    padding is no comparison at all (its argument is a constant that passes, never a kink)."""
    wins = []
    for t, (v, inside) in enumerate(tapped):
        win = np.where(inside, 1 + 0 * v, 0 * v)
        for u, (w, inside_u) in enumerate(tapped):
            if u != t:
                d = np.where(inside & inside_u, v - w, 1 + 0 * v)
                win = win * beats(B, d, u < t)
        wins.append(win)
    return wins


def route(parts, k, stride, p, like):
    """dx: each tap's part (an output-sized array) added back at the entries the tap reads."""
    H, W = like.shape[2], like.shape[3]
    total = 0
    for (i, j), part in zip([(i, j) for i in range(k) for j in range(k)], parts):
        spread_part = spread(part) if stride == 2 else part
        Hs, Ws = spread_part.shape[2], spread_part.shape[3]
        # room for the last tap's shift, cropped with the padding below
        total = total + np.pad(spread_part, ((0, 0), (0, 0), (i, H + 2 * p + 2 - Hs - i), (j, W + 2 * p + 2 - Ws - j)))
    return total[:, :, p:p + H, p:p + W]


def max_pool(B, x, k, p):
    tapped = taps(x, k, 2, p)
    return sum(win * v for win, (v, _) in zip(first_max(B, tapped), tapped))


def max_pool_grad(B, x, dy, k, p, wins=first_max):
    return route([dy * win for win in wins(B, taps(x, k, 2, p))], k, 2, p, x)


@op(**POOL)
def max_pool2d(B, x):
    return max_pool(B, x, 2, 0)


@max_pool2d.defvjp
def max_pool2d_vjp(B, x, dy):
    return (max_pool_grad(B, x, dy, 2, 0),)


@max_pool2d.law
def positively_homogeneous(B, x, forward):
    """max_pool(2x) = 2 max_pool(x): scaling keeps every window's winner."""
    return forward(2 * x), 2 * forward(x)


def two_windows_on(d):
    """The 3x3/2 padded pooling's sizes: Ho, Wo >= 2. With one window a side, its first and last taps
    are the padding on both sides at once, and the every-size statement's pieces are in one order only
    from two windows on."""
    small = [name for name in ("Ho", "Wo") if d.get(name, 2) < 2]
    return f"{' and '.join(small)} must be at least 2 (3x3 windows, stride 2, padding 1)" if small else None


# checked numerically with enough windows (144) that some lie wholly below zero: only there would a
# padding read as zeros (not -inf) win
@op(**{**POOL, "dims": [{"N": 1, "C": 1, "Ho": 2, "Wo": 2}, {"N": 1, "C": 2, "Ho": 2, "Wo": 2}],
       "check_dims": {"N": 2, "C": 8, "Ho": 3, "Wo": 3}, "constraints": two_windows_on})
def max_pool2d_3x3s2(B, x):
    """ResNet's stem pooling: 3x3 windows, stride 2, padding 1 (the padding never wins)."""
    return max_pool(B, x, 3, 1)


@max_pool2d_3x3s2.defvjp
def max_pool2d_3x3s2_vjp(B, x, dy):
    return (max_pool_grad(B, x, dy, 3, 1),)


@op(**POOL)
def avg_pool2d(B, x):
    return sum(v for v, _ in taps(x, 2, 2, 0)) / 4


@avg_pool2d.defvjp
def avg_pool2d_vjp(B, x, dy):
    return (route([dy / 4] * 4, 2, 2, 0, x),)


@avg_pool2d.law
def mean_is_kept(B, x, forward):
    """The mean of the pooled image is the image's mean."""
    return forward(x).mean((2, 3)), x.mean((2, 3))


@op(inputs={"x": ("N", "C", "H", "W")}, output=("N", "C"),
    dims=[{"N": 1, "C": 1, "H": 1, "W": 2}, {"N": 2, "C": 2, "H": 2, "W": 3}],
    check_dims={"N": 2, "C": 3, "H": 3, "W": 4})
def global_avg_pool(B, x):
    return x.mean((2, 3))


@global_avg_pool.defvjp
def global_avg_pool_vjp(B, x, dy):
    return (np.broadcast_to(dy[:, :, None, None], x.shape) / (x.shape[2] * x.shape[3]),)


# Proved for every size, region by region where there are kinks: the statements are derived from the
# code above (symbolic.every_size.shape_trace), each step a Boolean atom of the region.
max_pool2d.every_size("vjp[x]", "positively_homogeneous")
max_pool2d_3x3s2.every_size("vjp[x]")
avg_pool2d.every_size("vjp[x]")
global_avg_pool.every_size("vjp[x]")
