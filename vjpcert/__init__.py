"""vjpcert: certificates for backward passes (VJPs).

What a spec file needs is importable from here::

    from vjpcert import op, Param

The floors beneath the command (``vjpcert.cli``): ``vjpcert.specs`` (the claims),
``vjpcert.symbolic`` / ``vjpcert.numeric`` / ``vjpcert.cuda_kernels`` (the three checkers) and
``vjpcert.core`` (the machinery). See ARCHITECTURE.md.
"""
from vjpcert.core.registry import Param, SpecError, op

__all__ = ["Param", "SpecError", "op"]
