"""The method registry, derived from the methods' own declarations (:mod:`intact.methods.declare`).

A built-in method is one module of this package that defines ``METHOD`` (shared machinery lives in the
subpackage :mod:`intact.methods.shared`); a method of another installed package registers under the
entry-point group ``intact.methods`` (``name = "package.module:METHOD"``), as pytest and timm plugins do.
Both are found here, so a new method is one file: nothing else lists it. Importing the declarations
imports no torch (the Snakefile validates configs at start-up and on every cluster job).
"""

from __future__ import annotations

from typing import Any

from intact.methods.declare import Method, problems
from intact.registry import Registry
from intact.removed import RENAMED_METHODS

ENTRY_POINT_GROUP = "intact.methods"

#: name -> declaration, every method this installation knows: the built-ins (``METHODS.builtin``), then
#: those of installed packages. A method whose module or entry point failed to load is not in it; looking
#: its name up raises a one-line :class:`~intact.registry.RegistryError` (``METHODS.failures``). A module
#: here without ``METHOD`` (``declare``) is a helper: skipped.
#: A former name (:data:`intact.removed.RENAMED_METHODS`) is refused, naming the new one.
METHODS: Registry[Method] = Registry("method", Method, __name__, "METHOD", ENTRY_POINT_GROUP, renamed=RENAMED_METHODS)


def create_method(run: Any, backbone: Any, num_classes: int, num_tasks: int) -> Any:
    """Instantiate the method of ``run`` (a :class:`~intact.settings.RunConfig`) on ``backbone``, with the
    penalties its declaration composes around the loss."""
    from intact.methods.shared.penalties import attach_penalties

    spec = METHODS[run.base]
    settings = run.settings
    for key, problem in problems(spec, settings, run.benchmark, backbone):  # validation checked these already
        raise ValueError(f"methods.{spec.name}.{key} = {_shown(getattr(settings, key))}: {problem}")
    method = spec.import_class()(run, settings, backbone, num_classes, num_tasks)
    attach_penalties(method, spec.penalties, settings)
    return method


def _shown(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
