"""The numpy arrays spec code holds in the object and float interpreters, held to the spec language.

The exact fields, mpmath, SymPy and the float backends run spec code on plain numpy arrays (of
``core.trace`` nodes, of numbers), so their semantics are numpy's own. What they would not do by
themselves is refuse what the other interpreters cannot follow: ``SpecArray`` is an ndarray view that
calls ``core.language.check_call`` for every numpy function, ufunc and method applied to it, so a
construct outside the language (``np.sum(x, dtype=...)``, ``np.pad(x, mode="reflect")``, ``np.exp``
on traced values, ``x > 0``) is refused here with the message the modular and every-size
interpreters give. Inside a primitive numpy's own implementation runs unchecked (it calls other
numpy functions on the same arrays).

Where numpy itself cannot run a primitive on object arrays the language defines it: ``np.mean(x,
where=m)`` is ``np.sum(x, where=m, initial=0) / count``, as numpy computes it on floats.

Arrays enter spec code as SpecArrays (``core.registry.read_only``, ``B``'s functions) and leave it
as plain arrays (``plain``).
"""
from __future__ import annotations

import threading

import numpy as np

from vjpcert.core import language
from vjpcert.core.errors import refuse

_state = threading.local()

# numpy's keyword arguments that say nothing: passed by numpy's own wrappers with their default value
_DEFAULTS = {"dtype": None, "out": None}


def _inside() -> bool:
    return getattr(_state, "depth", 0) > 0


def in_spec_code() -> bool:
    """Whether spec code itself is running (inside ``spec_code``, outside any primitive): the number
    types that cannot refuse by themselves (mpmath's) refuse comparisons and branches then."""
    return getattr(_state, "spec", 0) > 0 and not _inside()


class spec_code:
    """While ``core.registry.Op.bind`` runs a spec function (nested calls of nodes included)."""

    def __enter__(self):
        _state.spec = getattr(_state, "spec", 0) + 1

    def __exit__(self, *exc):
        _state.spec -= 1


class running:
    """While a primitive (or a backend function) runs, numpy's implementation of it is not checked
    again."""

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc):
        _state.depth -= 1


def _meaningful(kwargs: dict) -> dict:
    """The keywords that change what a construct computes (numpy's wrappers pass their defaults on)."""
    return {k: v for k, v in kwargs.items() if not (k in _DEFAULTS and v is _DEFAULTS[k])
            and not (k == "keepdims" and v is False) and not (k == "axis" and v is None)
            and not (k == "where" and v is True) and not (k == "initial" and v is np._NoValue)}


def wrap(value):
    """ndarrays (in tuples and lists too) as SpecArrays; other values unchanged."""
    if isinstance(value, np.ndarray) and not isinstance(value, SpecArray):
        return value.view(SpecArray)
    if isinstance(value, (tuple, list)):
        return type(value)(wrap(v) for v in value)
    return value


def plain(value):
    """SpecArrays (in tuples, lists and dicts too) as plain ndarrays, for the machinery."""
    if isinstance(value, SpecArray):
        return value.view(np.ndarray)
    if isinstance(value, (tuple, list)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def _strip(args):
    return tuple(plain(a) for a in args)


class SpecArray(np.ndarray):
    """An ndarray whose every numpy operation is a primitive of ``core.language`` (or refused)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if not _inside():
            kw = {k: v for k, v in kwargs.items() if k != "out"}
            prim = language.ufunc_primitive(ufunc, method)
            language.check_call(prim, _meaningful(kw))
            if prim == "sum" and _meaningful(kw).get("where") is not None and "initial" not in _meaningful(kw):
                kwargs["initial"] = 0       # numpy's sum from 0, also for objects (whose add has no identity)
        out = kwargs.get("out")
        if out is not None:
            if not _inside() and any(isinstance(o, np.ndarray) and not o.flags.writeable for o in out):
                language.refuse_input_write()
            kwargs["out"] = tuple(plain(o) for o in out)
        with running():
            result = getattr(ufunc, method)(*_strip(inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        if not _inside():
            name = func.__name__
            language.check_call(name, _meaningful(kwargs))
            if name == "mean" and kwargs.get("where") is not None:
                return _mean_where(*args, **kwargs)
            if name == "pad" and args and isinstance(args[0], np.ndarray) and args[0].dtype == object \
                    and args[0].size:
                # numpy pads an object array with the int 0: an exact zero of the array's own numbers
                # instead (an entry only padding reaches would otherwise be a stray int under mpmath)
                kwargs = {**kwargs, "constant_values": 0 * plain(args[0]).flat[0]}
            if name == "sum" and kwargs.get("where") is not None and "initial" not in kwargs:
                kwargs = {**kwargs, "initial": 0}   # numpy's sum from 0, for objects too
        with running():
            result = func(*_strip(args), **{k: plain(v) for k, v in kwargs.items()})
        return wrap(result)

    # -- methods that are spellings of a primitive (numpy does not dispatch them)
    def _method(self, name, kwargs, impl, *args):
        if not _inside():
            language.check_call(name, _meaningful(kwargs))
        with running():
            return wrap(impl(self.view(np.ndarray), *args, **kwargs))

    def reshape(self, *shape, **kwargs):
        return self._method("reshape", kwargs, np.ndarray.reshape, *shape)

    def ravel(self, *args, **kwargs):
        return self._method("ravel", kwargs, np.ndarray.ravel, *args)

    def transpose(self, *axes):
        return self._method("transpose", {}, np.ndarray.transpose, *axes)

    def swapaxes(self, *axes):
        return self._method("swapaxes", {}, np.ndarray.swapaxes, *axes)

    def squeeze(self, *args, **kwargs):
        return self._method("squeeze", kwargs, np.ndarray.squeeze, *args)

    def repeat(self, *args, **kwargs):
        return self._method("repeat", kwargs, np.ndarray.repeat, *args)

    def copy(self, *args, **kwargs):
        return self._method("copy", kwargs, np.ndarray.copy, *args)

    def dot(self, *args, **kwargs):
        return self._method("dot", kwargs, np.ndarray.dot, *args)

    def mean(self, *args, **kwargs):
        if not _inside() and kwargs.get("where") is not None:
            language.check_call("mean", _meaningful(kwargs))
            return _mean_where(self, *args, **kwargs)
        return self._method("mean", kwargs, np.ndarray.mean, *args)

    def __getitem__(self, key):
        if not _inside() and isinstance(key, SpecArray):
            refuse("an index built from traced values: indices must be static")
        with running():
            out = np.ndarray.__getitem__(self.view(np.ndarray), key)
        if isinstance(out, np.generic):     # a float entry stays an array, so float(x[0]) is refused
            out = np.asarray(out)
        return wrap(out)

    def __setitem__(self, key, value):
        if not _inside() and not self.flags.writeable:
            language.refuse_input_write()
        with running():
            np.ndarray.__setitem__(self.view(np.ndarray), key, plain(value))

    def __bool__(self):
        if not _inside() and self.size == 1 and self.dtype != object:
            language.refuse_branch()
        return np.ndarray.__bool__(self.view(np.ndarray))

    def __float__(self):
        language.refuse_float()

    __int__ = __index__ = __complex__ = __float__

    def tolist(self):
        return self.view(np.ndarray).tolist()


def _mean_where(a, axis=None, dtype=None, out=None, keepdims=False, *, where):
    """numpy's mean with a mask, for every element type: the masked sum from an exact 0 over the count
    (numpy refuses the mask on object arrays, whose add has no identity)."""
    if dtype is not None or out is not None:
        refuse("np.mean(..., dtype=/out=) is not part of the spec language")
    a = plain(a)
    where = np.broadcast_to(plain(where), np.shape(a))
    with running():
        total = np.sum(a, axis=axis, keepdims=keepdims, where=where, initial=0)
        count = np.sum(where, axis=axis, keepdims=keepdims)
    if np.any(count == 0):
        refuse("np.mean(..., where=mask) over a mask that selects nothing: the mean is 0/0")
    return wrap(np.asarray(total / count, dtype=a.dtype)) if a.dtype != object else wrap(
        np.asarray(total, dtype=object) / np.asarray(count, dtype=object))
