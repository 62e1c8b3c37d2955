"""The method registry, derived from the methods' own declarations (:mod:`intact.methods.declare`).

A built-in method is one module of this package that defines ``METHOD`` (shared machinery lives in the
subpackage :mod:`intact.methods.shared`); a method of another installed package registers under the
entry-point group ``intact.methods`` (``name = "package.module:METHOD"``), as pytest and timm plugins do.
Both are found here, so a new method is one file: nothing else lists it. Importing the declarations
imports no torch (the Snakefile validates configs at start-up and on every cluster job).
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Any

from intact.methods.declare import Method

ENTRY_POINT_GROUP = "intact.methods"
_NOT_METHODS = {"declare"}


def _builtin() -> list[Method]:
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.ispkg and info.name not in _NOT_METHODS:
            out.append(importlib.import_module(f"{__name__}.{info.name}").METHOD)
    return out


def _installed() -> list[Method]:
    out = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        method = ep.load()
        if not isinstance(method, Method):
            raise TypeError(f"entry point {ep.name!r} = {ep.value!r} of group {ENTRY_POINT_GROUP!r}: "
                            f"expected an intact.methods.declare.Method, got {type(method).__name__}")
        if method.name != ep.name:
            raise ValueError(f"entry point {ep.name!r} of group {ENTRY_POINT_GROUP!r} declares method {method.name!r}: "
                             "the two names must agree")
        out.append(method)
    return out


def discover() -> dict[str, Method]:
    """Every method: the built-ins, then those of installed packages; a name may be declared only once."""
    found: dict[str, Method] = {}
    for method in _builtin() + _installed():
        if method.name in found:
            raise ValueError(f"method {method.name!r} is declared twice (a built-in or another package has it)")
        found[method.name] = method
    return found


#: name -> declaration, every method this installation knows
METHODS: dict[str, Method] = discover()


def method_spec(base: str) -> Method:
    """The declaration of method ``base``; KeyError naming the known ones."""
    try:
        return METHODS[base]
    except KeyError:
        raise KeyError(f"unknown method {base!r}; registered: {', '.join(sorted(METHODS))}") from None


def create_method(run: Any, backbone: Any, num_classes: int, num_tasks: int) -> Any:
    """Instantiate the method of ``run`` (a :class:`~intact.settings.RunConfig`) on ``backbone``, with the
    penalties its declaration composes around the loss."""
    from intact.methods.shared.penalties import attach_penalties
    from intact.settings import build_dataclass

    spec = method_spec(run.base)
    settings = build_dataclass(spec.settings, run.settings, f"methods.{spec.name}")
    depth = getattr(backbone, "depth", None)
    for key in spec.layer_keys if depth is not None else ():
        blocks = list(getattr(settings, key))
        if blocks and max(blocks) >= depth:
            raise ValueError(f"methods.{spec.name}.{key} = {blocks}: the backbone has only {depth} blocks")
    method = spec.load()(run, settings, backbone, num_classes, num_tasks)
    attach_penalties(method, spec.penalties, settings)
    return method
