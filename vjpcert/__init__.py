"""vjpcert: certificates for backward passes (VJPs).

What a spec file needs is importable from here::

    from vjpcert import op, Param

The floors beneath the command (``vjpcert.cli``): ``vjpcert.specs`` (the claims),
``vjpcert.symbolic`` / ``vjpcert.numeric`` / ``vjpcert.cuda_kernels`` (the three checkers) and
``vjpcert.core`` (the machinery). See ARCHITECTURE.md.
"""
from pathlib import Path as _Path

# Run from a source tree (not installed), the floors are the folders beside this one: make them this
# package's subpackages, as the installed wheel and the editable install do.
_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "core" / "registry.py").is_file() and str(_ROOT) not in __path__:
    __path__.append(str(_ROOT))

from vjpcert.core.registry import Param, SpecError, op  # noqa: E402

__all__ = ["Param", "SpecError", "op"]
