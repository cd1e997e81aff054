"""Deliberately wrong backwards (and forwards), modelled on real bug families: ``<op file>.py`` here
holds the mutants of the spec file of the same name (optional). Each names the claims it must make
fail (or is marked refused: bad input); tests and ``vjpcert mutate`` hold every checker to it.
"""
import importlib
from pathlib import Path

from vjpcert.specs import BUILTIN_MODULES

for _mod in BUILTIN_MODULES:
    if (Path(__file__).parent / f"{_mod}.py").is_file():
        importlib.import_module(f"{__name__}.{_mod}")
