"""Computation ids of the modular backend's arrays (``derive``): a hash of the operations that made a
value from named leaves and constants, so equal ids are equal polynomials entry by entry -- a recomputed
atom is one atom, and ``Field.value`` reuses a product it has already computed.

Apart from the arrays (``array``) because the ids are a promise of their own: a description that
confuses two computations would make two different values one. ``TracedArray`` is the arrays' base,
so an operand that is one is described by its id, without this module importing them.
"""
from __future__ import annotations

import hashlib
import itertools
from fractions import Fraction

import numpy as np


class TracedArray:
    """The base of ``array.ModArray``: an operand described by its computation id and shape."""

    __slots__ = ()


_OPAQUE = itertools.count()


# Types whose repr is their value, matched exactly: a subclass (an int whose __index__ is not its
# value) may hide what it does behind an inherited repr
_VALUE_TYPES = frozenset({bool, int, float, complex, str, Fraction, type(None), type(Ellipsis)})
_NUMPY_SCALARS = frozenset(np.sctypeDict.values())


def _desc(x):
    """A stable description of a structural argument (an index, a shape, a mask) for ``derive``."""
    t = type(x)
    if isinstance(x, TracedArray):
        return ("traced", x.sid)
    if t is np.ndarray and x.dtype.kind in "biufc":
        return ("array", x.dtype.str, x.shape, hashlib.blake2b(np.ascontiguousarray(x).tobytes(),
                                                              digest_size=16).hexdigest())
    if t in (tuple, list):
        return (t.__name__, tuple(_desc(e) for e in x))
    if t is dict:
        return ("dict", tuple(sorted((k, _desc(v)) for k, v in x.items())))
    if t is slice:
        return ("slice", _desc(x.start), _desc(x.stop), _desc(x.step))
    if t in _NUMPY_SCALARS:
        return repr(x.item())
    if t in _VALUE_TYPES or isinstance(x, np.dtype):
        return repr(x)                           # its repr is its value
    if t is type:
        return ("type", x.__module__, x.__qualname__, id(x))
    # anything else (an object with __index__, a subclass, a callable, ...) may hide what it does
    # behind its repr: a fresh token, so the computation is never taken for another one
    # (``Field.value``, atom counts)
    return ("opaque", next(_OPAQUE))


def derive(op: str, detail, *operands):
    """The id of a value computed by ``op`` (with ``detail``) from ``operands`` (ModArrays: their ids
    and shapes), or None when one operand's is unknown."""
    parts = []
    for x in operands:
        if isinstance(x, TracedArray):
            if x.sid is None:
                return None
            parts.append((x.sid, x.shape))
        else:
            parts.append(_desc(x))
    return hashlib.blake2b(repr((op, detail, tuple(parts))).encode(), digest_size=16).digest()
