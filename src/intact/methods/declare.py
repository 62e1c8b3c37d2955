"""How a method declares itself: one :class:`Method` object per method module, torch-free.

A method module (``intact/methods/<name>.py``, or a module of another package registered under the
entry-point group ``intact.methods``) holds, in this order: its settings dataclass (types, defaults, and
bounds / descriptions as field metadata via :func:`setting`), its consistency checks, its implementation
(a function that imports torch and returns the class: validating a config never imports torch), and::

    METHOD = Method("my_method", MySettings, implementation, "one line for the docs", accepts_intact=True,
                    layer_keys=("layers",), check=check)

Everything else is derived from these declarations (docs/adding-a-method.md): the registry
(:mod:`intact.methods`), the ``methods`` part of the config schema (:func:`settings_schema`), every
default of ``methods.<name>`` (:func:`run_settings`), the early checks (:mod:`intact.checks`) and the
configuration reference (docs/configuration.md, :mod:`intact.config_docs`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from intact.registry import load_target, target_problem

#: ``check(settings, benchmark, backbone) -> [(key, problem), ...]``: the method's own consistency checks,
#: run at config validation (and again when a job builds the method). ``benchmark``: the run's
#: :class:`~intact.settings.BenchmarkConfig` (``num_tasks``, ...); ``backbone``: what the settings must fit,
#: ``depth`` (blocks 0..depth-1), ``embed_dim`` (width) and ``num_heads`` (an :class:`intact.models.arch.Arch`
#: at validation, the built backbone in a job)
Check = Callable[[Any, Any, Any], Iterable[tuple[str, str]]]

#: the optimizers a job can build (``Method.optimizer``, ``optim.optimizer``); torch's Adam, AdamW, SGD
OPTIMIZERS = ("adam", "adamw", "sgd")


def setting(default: Any, doc: str = "", *, later: bool = False, items: Mapping[str, Any] | None = None,
            **bounds: Any) -> Any:
    """A settings field: its default, a one-line description, and JSON-schema bounds (``minimum=1``,
    ``exclusiveMinimum=0``, ``multipleOf=2``, ``enum=[...]``, ``minItems=1``; ``items`` bounds each element
    of a list). ``later=True``: a key added after runs were recorded; left out of the run's settings (and
    so of its config hash) while at its default, so finished runs keep their hashes."""
    meta = {"doc": doc, "later": later, "items": dict(items or {}), "bounds": bounds}
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Method:
    """Everything the pipeline knows about a method, declared once in the method's own module."""

    name: str                   #: the base of its run names (``<name>``, ``<name>+intact``, ``<name>@...``)
    settings: type              #: a frozen dataclass: the keys of ``methods.<name>``, with defaults and bounds
    #: ``"module:Class"`` or a function returning the class (it imports torch; only a job calls it)
    implementation: str | Callable[[], type]
    description: str
    accepts_intact: bool = False  #: ``<name>+intact`` is a valid run (InTAct's terms join the loss)
    #: why ``<name>+intact`` is refused (the config checks say it), for a method that does not accept it
    intact_refusal: str = ""
    layer_keys: tuple[str, ...] = ()  #: keys that list backbone blocks (checked against the backbone's depth)
    check: Check | None = None
    #: penalties composed around the loss (:data:`intact.methods.shared.penalties.PENALTIES`), in the order
    #: their terms are added; InTAct's comes last, with ``+intact``
    penalties: tuple[str, ...] = ()
    #: False: every task starts from a fresh model (joint); the job loads neither the previous state nor
    #: its hypercubes, and the workflow schedules the tasks independently
    loads_previous_state: bool = True
    uses_backbone: bool = True  #: False: the method trains a whole network of its own (no frozen ViT)
    #: the optimizer its code builds (one of :data:`OPTIMIZERS`; fresh at every task); a config's
    #: ``optim.optimizer`` (e.g. a protocol's, per method) replaces it
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.settings):
            raise TypeError(f"method {self.name!r}: settings must be a dataclass, got {self.settings!r}")
        unknown = set(self.layer_keys) - {f.name for f in dataclasses.fields(self.settings)}
        if unknown:
            raise TypeError(f"method {self.name!r}: layer_keys {sorted(unknown)} are not settings")
        if self.optimizer not in OPTIMIZERS:
            raise TypeError(f"method {self.name!r}: optimizer {self.optimizer!r} is not one of {OPTIMIZERS}")
        if self.intact_refusal and self.accepts_intact:
            raise TypeError(f"method {self.name!r}: accepts '+intact' yet gives a reason to refuse it")

        _check_declaration(self)

    def load(self) -> type:
        """The implementation class (imports it, and torch, on first use)."""
        return load_target(self.implementation)


#: the JSON-schema keywords a :func:`setting` may bound a value (or, in ``items``, each element) with
BOUND_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum", "const",
                            "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern"})


def _check_declaration(method: Method) -> None:
    """A declaration checks itself when it is made (at import): every field has a default inside its own
    bounds, only known bound keywords, and a ``"module:attr"`` implementation that resolves (found without
    importing it, so without torch). A TypeError names the method and the field."""
    import jsonschema

    def fail(field: str, problem: str) -> None:
        raise TypeError(f"method {method.name!r}: settings field {field!r}: {problem}")

    for f in dataclasses.fields(method.settings):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            fail(f.name, "has no default (declare it with setting(default, ...))")
        for where, bounds in (("", f.metadata.get("bounds", {})), ("items ", f.metadata.get("items", {}))):
            unknown = sorted(set(bounds) - BOUND_KEYWORDS)
            if unknown:
                fail(f.name, f"unknown {where}bound {', '.join(unknown)} (known: {', '.join(sorted(BOUND_KEYWORDS))})")
    props = settings_schema(method)["properties"]
    for name, value in defaults(method.settings).items():
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(props[name]).iter_errors(value))
        if error is not None:
            fail(name, f"default {value!r} breaks its own declaration: {error.message}")
    if isinstance(method.implementation, str):
        problem = target_problem(method.implementation)
        if problem:
            raise TypeError(f"method {method.name!r}: implementation {method.implementation!r} does not resolve: {problem}")


def problems(method: Method, settings: Any, benchmark: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """(key, problem) of every setting that does not fit: the blocks that ``layer_keys`` list past the
    backbone's depth, then the method's own :data:`Check`. ``backbone`` has ``depth`` (and ``embed_dim``,
    ``num_heads``); a method with ``uses_backbone=False`` is checked against the benchmark only."""
    depth = getattr(backbone, "depth", None) if method.uses_backbone else None
    for key in method.layer_keys if depth is not None else ():
        blocks = list(getattr(settings, key) or [])
        if blocks and max(blocks) >= depth:
            yield key, f"block {max(blocks)} does not exist: the backbone has depth {depth} (blocks 0-{depth - 1})"
    if method.check is not None:
        yield from method.check(settings, benchmark, backbone if method.uses_backbone else None)


# --------------------------------------------------------------------------------------------------
# Derived: defaults, run settings, schema


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def defaults(settings: type) -> dict[str, Any]:
    """The declared defaults as config values (tuples as lists)."""
    return {f.name: _plain(f.default) for f in dataclasses.fields(settings)}


def run_settings(method: Method, configured: Mapping[str, Any]) -> dict[str, Any]:
    """A run's ``methods.<name>`` settings: the declared defaults, then what the config sets (as written:
    the values enter the run's hash). Keys declared ``later`` are left out while at their default."""
    out = {**defaults(method.settings), **configured}
    for f in dataclasses.fields(method.settings):
        if f.metadata.get("later") and out.get(f.name) == _plain(f.default):
            del out[f.name]
    return out


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a settings field's type: scalars, ``tuple[X, ...]`` and ``X | None``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported settings type {hint!r}: only X | None")
        out = _type_schema(inner[0])
        out["type"] = [out["type"], "null"]
        return out
    if typing.get_origin(hint) is tuple:
        return {"type": "array", "items": _type_schema(args[0])}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    raise TypeError(f"unsupported settings type {hint!r}: use bool, int, float, str, tuple[X, ...] or X | None")


def settings_schema(method: Method) -> dict[str, Any]:
    """The JSON schema of ``methods.<name>``: one property per field, its type, bounds and description."""
    props = fields_schema(method.settings)
    return {"description": method.description, "type": "object", "additionalProperties": False, "properties": props}


def fields_schema(settings: type) -> dict[str, Any]:
    """The JSON schema of each field of a settings dataclass declared with :func:`setting` (also a benchmark's)."""
    hints = typing.get_type_hints(settings)
    props: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        prop = _type_schema(hints[f.name])
        prop.update(f.metadata.get("bounds", {}))
        if f.metadata.get("items"):
            prop["items"] = {**prop["items"], **f.metadata["items"]}
        if f.metadata.get("doc"):
            prop["description"] = f.metadata["doc"]
        props[f.name] = prop
    return props
