"""The method registry, derived from the methods' own declarations (:mod:`intact.methods.declare`).

A built-in method is one module of this package that defines ``METHOD`` (shared machinery lives in the
subpackage :mod:`intact.methods.shared`); a method of another installed package registers under the
entry-point group ``intact.methods`` (``name = "package.module:METHOD"``), as pytest and timm plugins do.
Both are found here, so a new method is one file: nothing else lists it. Importing the declarations
imports no torch (the Snakefile validates configs at start-up and on every cluster job).

A renamed method keeps its runs under its former name (``Method(stored_as=...)``): their folders, config hashes
and records are the stored form of a run name (:func:`stored_name`), which validation gives every name of a
config (:func:`intact.config.use_stored_names`); a config may use either name.
"""

from __future__ import annotations

import re
from typing import Any

from intact.methods.declare import Method, problems
from intact.registry import Registry

ENTRY_POINT_GROUP = "intact.methods"

#: name -> declaration, every method this installation knows: the built-ins (``METHODS.builtin``), then
#: those of installed packages. A method whose module or entry point failed to load is not in it; looking
#: its name up raises a one-line :class:`~intact.registry.RegistryError` (``METHODS.failures``). A module
#: here without ``METHOD`` (``declare``) is a helper: skipped.
METHODS: Registry[Method] = Registry("method", Method, __name__, "METHOD", ENTRY_POINT_GROUP)


#: a run name's base, and a ``methods.<base>.`` key in its overrides (after ``@`` or ``,``)
_BASE = re.compile(r"[a-z][a-z0-9_]*")
_SECTION = re.compile(r"(?<=[@,])methods\.([a-z][a-z0-9_]*)(?=\.)")


def _renamed(name: str, attr: str) -> str:
    try:
        return getattr(METHODS[name], attr)   # by its declared name or its former one (METHODS.aliases)
    except KeyError:
        return name   # unknown, or failed to load: validation says so


def stored_name(name: str) -> str:
    """Run name ``name`` as its run is stored - its folder, its config hash, its records: a renamed method's
    declared name replaced by the name its runs keep (:attr:`Method.stored_as`), as the base and in
    ``@methods.<name>.`` overrides. Every other name is its own stored form."""
    base = _BASE.match(name)
    if base is None:
        return name
    rest = _SECTION.sub(lambda m: f"methods.{_renamed(m.group(1), 'stored_as')}", name[base.end():])
    return _renamed(base.group(), "stored_as") + rest


def stored_key(key: str) -> str:
    """A setting's key as a run name overrides it (``methods.<name>.<key>``, ``optim.lr``, ``lambda_var``) with the
    method in its stored form (a tuning grid's keys)."""
    section, dot, rest = key.partition(".")
    method, dot2, field = rest.partition(".")
    return f"methods.{_renamed(method, 'stored_as')}.{field}" if section == "methods" and dot and dot2 else key


def declared_name(name: str) -> str:
    """The inverse of :func:`stored_name`: the run name with each method's declared name (as ``intact runs``
    shows a run)."""
    base = _BASE.match(name)
    if base is None:
        return name
    rest = _SECTION.sub(lambda m: f"methods.{_renamed(m.group(1), 'name')}", name[base.end():])
    return _renamed(base.group(), "name") + rest


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
