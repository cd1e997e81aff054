"""Deliberately wrong backwards (and forwards), one file per op, modelled on real bug families.

Each mutant names the claims it must make fail; tests and ``vjpcert mutate`` hold every checker to it.
"""
import importlib

from vjpcert.specs import BUILTIN_MODULES

for _mod in BUILTIN_MODULES:
    importlib.import_module(f"vjpcert.specs.mutants.{_mod}")
