"""The symbolic tier: exact proofs that backward = J^T dy and that each law holds.

Interactive use: ``from vjpcert.symbolic import jacobian, vjp, prove``.
"""
from vjpcert.symbolic.api import forward, jacobian, prove, symbols, vjp

__all__ = ["forward", "jacobian", "prove", "symbols", "vjp"]
