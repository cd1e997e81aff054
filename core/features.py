"""What tracing an op's forward and backward says of it (``tracing.spec_features``: whether its own
code calls ``B.max_shift``, whether it meets a kink) decides which claims it has, so planning asked it
of every op in every command: a no-op ``vjpcert all`` spent about a third of its time tracing specs.
It is remembered on disk as a certificate is: by the op's code (``Op.identity_sha256``), the functions
traced, the tracer's own code (the normalised closure of ``core.tracing``), the dims traced, and every
data file the trace read, each hashed again when it is asked (``core.sources.current_sha256``, the
rule certificates are current by). An op whose traced functions are not in its own files (a notebook
cell's, a framework op's generated forward) is traced every time."""
from __future__ import annotations

import hashlib
from functools import lru_cache

from vjpcert.core.disk_cache import DiskCache
from vjpcert.core.reads import resolved

_MEMORY = DiskCache("features.json", "1")


@lru_cache(maxsize=1)
def _tracer_code() -> str:
    """The tracer's code (its whole closure) and what it runs on: Python's and numpy's versions."""
    import platform

    import numpy as np

    from vjpcert.core.code_hash import code_sha256
    return f"{code_sha256('vjpcert.core.tracing')} python {platform.python_version()} numpy {np.__version__}"


def _key(op) -> str | None:
    files = set(op.source_files)
    named = []
    for fn in (op.forward, op.vjp):
        code = getattr(fn, "__code__", None)
        if code is None or resolved(code.co_filename) not in files:
            return None
        named.append(f"{resolved(code.co_filename)}:{code.co_firstlineno}:{fn.__qualname__}")
    parts = [op.name, op.identity_sha256, _tracer_code(), repr(sorted(op.dims[0].items())), *named]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def spec_features(op, traced) -> tuple[bool, bool]:
    """``traced(op)`` (``tracing.spec_features``, handed in by the op, so that what computes the answer
    is in the hash of every checker that asks and this memory in none), from the memory when the op,
    its functions, the tracer and the data it read are all as they were."""
    from vjpcert.core.sources import covered, current_sha256
    key = _key(op)
    if key is None:
        return traced(op)
    hit = _MEMORY.get(key)
    if isinstance(hit, list) and len(hit) == 3:
        spec, sources, value = hit
        if current_sha256(op.identity_sha256, op, sources)[0] == spec:
            return bool(value[0]), bool(value[1])
    value = traced(op)
    spec, sources = covered(op)
    _MEMORY.put(key, [spec, sources, list(value)])
    _MEMORY.save()
    return value
