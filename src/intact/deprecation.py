"""Names that moved: the old import path keeps working, with a DeprecationWarning naming the new one.

A module whose public names moved ends with ``__getattr__ = moved(__name__, {"old": "new.module:new"})``
(PEP 562: called only for names the module does not define). Every such move has a line in CHANGELOG.md.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any
from collections.abc import Callable, Mapping


def moved(module: str, targets: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves each old name from its ``"package.module:attr"`` target."""

    def __getattr__(name: str) -> Any:
        if name not in targets:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attr = targets[name].partition(":")
        warnings.warn(f"{module}.{name} moved to {where}.{attr or name}; import it from there "
                      "(CHANGELOG.md)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), attr or name)

    return __getattr__
