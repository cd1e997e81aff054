"""Sliding windows as both frameworks' pooling rules read them: the entries each tap of a window reads
for every output position, and which tap holds each window's maximum. One definition for PyTorch's
``max_pool2d`` (``torch_cnn``) and JAX's ``reduce_window_max`` / ``select_and_scatter_add``
(``jax_cnn``), so the two frameworks' max-pooling are read alike, ties included.
"""
from __future__ import annotations

import itertools

import numpy as np


def tap_view(xp: np.ndarray, offsets, strides, out) -> np.ndarray:
    """The entries of the padded array ``xp`` one tap reads for every output position: along each
    axis, from the tap's offset, every ``stride``-th entry, ``out`` of them (a view: writing into it
    writes into ``xp``)."""
    return xp[tuple(slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offsets, strides, out))]


def window_offsets(window) -> list[tuple]:
    """Every tap of a window, in row-major order: the order in which PyTorch and XLA scan a window."""
    return list(itertools.product(*(range(int(k)) for k in window)))


def first_winners(step, taps) -> list:
    """[win_t]: 1 where tap t holds its window's maximum and is the first tap that does, else 0, for
    ``taps`` [(values, inside)] in scan order (``inside``: a static mask, False where the tap reads
    padding). Tap t wins where it is inside, greater than every earlier tap and at least every later
    one, so exactly one tap wins each window with a tap inside it: the rule of PyTorch's max_pool2d and
    of XLA's select-and-scatter with ``ge`` (a later tap replaces the selection only when strictly
    greater). A pair with a tap in the padding is no comparison: a constant argument, never a kink."""
    wins = []
    for t, (e_t, in_t) in enumerate(taps):
        win = np.where(in_t, 1 + 0 * e_t, 0 * e_t)               # in the dtype of the values
        for u, (e_u, in_u) in enumerate(taps):
            if u == t:
                continue
            diff = np.where(in_t & in_u, e_t - e_u, 1 + 0 * e_t)
            win = win * (step(diff) if u < t else 1 - step(-diff))
        wins.append(win)
    return wins
