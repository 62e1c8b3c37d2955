"""How a setting is declared (:func:`setting`), and everything derived from a declaration: its JSON schema, its
defaults, the check a declaration makes of itself, a typed section built from config data and the plain form a
run records (no torch; imports only the foundations)."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any
from collections.abc import Mapping


class ConfigError(ValueError):
    """Invalid configuration: the message names the key or file and what was expected (raised by every
    layer that checks settings; defined here, the lowest of them)."""


#: the JSON-schema keywords a :func:`setting` may bound a value (or, in ``items``, each element) with, and ours:
#: ``finite`` (:func:`validator`)
BOUND_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum",
                            "const", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern",
                            "minProperties", "maxProperties", "propertyNames", "required", "finite"})

#: the integers a config may hold: a signed 64-bit integer's (a seed past them overflows torch's generators, a
#: count past them every tensor's index)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def setting(default: Any, doc: str = "", *, later: bool = False, settable: bool = True,
            items: Mapping[str, Any] | None = None, schema: Mapping[str, Any] | None = None, **bounds: Any) -> Any:
    """A settings field: its default, a one-line description, and JSON-schema bounds (``minimum=1``,
    ``exclusiveMinimum=0``, ``multipleOf=2``, ``enum=[...]``, ``minItems=1``; ``items`` bounds each element
    of a list, or each value of a mapping; ``finite=False``: a number that may be ``.nan``, ``.inf`` or ``-.inf``,
    which :func:`validator` refuses everywhere else). ``later=True``: a key added after runs were recorded; left out
    of a run's plain form (and so of its hash) while at its default, so finished runs keep their hashes.
    ``schema``: the value's JSON schema, for what its type cannot say (a ``$ref`` to config.schema.yaml's
    ``$defs``). ``settable=False``: a field of a family's shared settings that this member does not take (a subclass
    declares it again to take it): no config key, but recorded, so the family's runs share one recorded form."""
    meta = {"doc": doc, "later": later, "settable": settable, "items": dict(items or {}), "bounds": bounds,
            "schema": schema}
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"setting({default!r}): a default must be immutable (a tuple for a list)")
    return dataclasses.field(default=default, metadata=meta)


# --------------------------------------------------------------------------------------------------
# The validator of every setting


def validator(schema: Mapping[str, Any]) -> Any:
    """The one validator of settings (the config schema, a declaration's defaults): JSON Schema draft 2020-12, in
    which a number is finite unless its schema says ``finite: false`` (YAML's ``.nan``, ``.inf`` and ``-.inf`` pass
    every ``minimum`` and ``maximum``) and an integer lies in :data:`INT_MIN`..:data:`INT_MAX`. Checked wherever a
    schema gives a ``type``: the derived sections', the hand-written config.schema.yaml's and the run's merged
    sections, a run name's overrides included."""
    return _validator_class()(schema)


@functools.cache
def _validator_class() -> type:
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"type": _typed})


def _typed(validator: Any, types: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
    """JSON Schema's ``type`` keyword, then, for a value of the type, :func:`number_problem`."""
    import jsonschema

    errors = list(jsonschema.Draft202012Validator.VALIDATORS["type"](validator, types, instance, schema))
    problem = None if errors else number_problem(instance, types, schema.get("finite", True))
    yield from errors or ([jsonschema.ValidationError(problem)] if problem else [])


def number_problem(value: Any, types: str | list[str] = "number", finite: bool = True) -> str | None:
    """Why ``value`` cannot be a setting's number of JSON-schema ``types`` (not finite where ``finite``; a float
    where only an integer is allowed, which JSON Schema takes for ``2.0``; an integer past 64 bits), or None."""
    types = [types] if isinstance(types, str) else list(types)
    if isinstance(value, float) and finite and not math.isfinite(value):
        return "not a finite number (.nan, .inf and -.inf pass every bound, then fail or spoil the run)"
    if isinstance(value, float) and "integer" in types and "number" not in types:
        return "an integer is written without a decimal point (2, not 2.0)"
    if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        return f"does not fit in 64 bits (an integer here is at most 2^63 - 1 = {INT_MAX:,}, at least -2^63)"
    return None


# --------------------------------------------------------------------------------------------------
# Derived: schema, defaults, checks of a declaration


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a settings field's type: scalars, ``tuple[X, ...]``, ``X | None`` and a nested
    settings dataclass."""
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
    if typing.get_origin(hint) is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if dataclasses.is_dataclass(hint):
        return section_schema(hint)
    raise TypeError(f"unsupported settings type {hint!r}: use bool, int, float, str, tuple[X, ...], X | None "
                    "or a settings dataclass")


def settable_fields(settings: type) -> list[dataclasses.Field]:
    """The fields of a settings dataclass that a config may set: all but those declared ``settable=False``."""
    return [f for f in dataclasses.fields(settings) if f.metadata.get("settable", True)]


def fields_schema(settings: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON schema of each settable field of a settings dataclass (but ``skip``), from its type and its
    :func:`setting` metadata."""
    hints = type_hints(settings)
    props: dict[str, Any] = {}
    for f in settable_fields(settings):
        if f.name in skip:
            continue
        prop = _field_schema(f, hints[f.name])
        prop.update(f.metadata.get("bounds", {}))
        if f.metadata.get("items"):
            each = "items" if "items" in prop else "additionalProperties"
            prop[each] = _with_items(prop[each], f.metadata["items"])
        if f.metadata.get("doc"):
            prop["description"] = f.metadata["doc"]
        props[f.name] = prop
    return props


def _field_schema(f: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """A field's value schema: its declared ``schema``, else its type's."""
    return dict(f.metadata["schema"]) if f.metadata.get("schema") else _type_schema(hint)


def _with_items(schema: dict[str, Any], bounds: Mapping[str, Any]) -> dict[str, Any]:
    """A list element's schema with its bounds; ``items`` in them bounds the elements of a nested list."""
    out = {**schema, **{k: v for k, v in bounds.items() if k != "items"}}
    if "items" in bounds:
        out["items"] = _with_items(schema["items"], bounds["items"])
    return out


def section_schema(settings: type, description: str = "", skip: tuple[str, ...] = (),
                   required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON schema of a config section declared by ``settings``: closed, one property per field."""
    out: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "properties": fields_schema(settings, skip)}
    if description or settings.__doc__:
        out["description"] = description or " ".join(settings.__doc__.split())
    if required:
        out["required"] = list(required)
    return out


def plain(value: Any) -> Any:
    """A declared value as config data: tuples as lists, a settings dataclass as a mapping (recursively)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def defaults(settings: type) -> dict[str, Any]:
    """The declared defaults as config values (tuples as lists); fields without a default are left out."""
    out = {}
    for f in dataclasses.fields(settings):
        if f.default is not dataclasses.MISSING:
            out[f.name] = plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = plain(f.default_factory())
    return out


def check_declared(settings: type, where: str, skip: tuple[str, ...] = (),
                   placeholders: tuple[str, ...] = ()) -> None:
    """A declaration checks itself when it is made (at import): every field (but ``skip``) has a default,
    of its declared type and inside its own bounds, and only known bound keywords. TypeError naming
    ``where`` and the field. ``placeholders``: fields whose default stands for "not set" (a benchmark's data root
    that a config must give, its ``domains: ()`` for every task): of their type, not necessarily in bounds."""
    import jsonschema

    def fail(name: str, problem: str) -> None:
        raise TypeError(f"{where}: settings field {name!r}: {problem}")

    for f in dataclasses.fields(settings):
        if f.name in skip:
            continue
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            fail(f.name, "has no default (declare it with setting(default, ...))")
        checked, items = [("", f.metadata.get("bounds", {}))], f.metadata.get("items", {})
        while items:   # a nested list's elements are bounded under ``items``
            checked.append(("items ", {k: v for k, v in items.items() if k != "items"}))
            items = items.get("items", {})
        for kind, bounds in checked:
            unknown = sorted(set(bounds) - BOUND_KEYWORDS)
            if unknown:
                fail(f.name, f"unknown {kind}bound {', '.join(unknown)} (known: {', '.join(sorted(BOUND_KEYWORDS))})")
    props, hints = fields_schema(settings, skip), type_hints(settings)
    declared = {f.name: f for f in dataclasses.fields(settings)}
    for name, value in defaults(settings).items():
        if name not in props:   # skipped, or not settable (recorded as declared)
            continue
        if name in placeholders and value is None:   # a required mapping: nothing stands for "not set" better
            continue
        schema = props[name]
        if name in placeholders:   # of its type only (a declared schema's bounds are the config's to meet)
            own = declared[name].metadata.get("schema")
            schema = {"type": own["type"]} if own else _type_schema(hints[name])
        error = jsonschema.exceptions.best_match(validator(schema).iter_errors(value))
        if error is not None:
            fail(name, f"default {value!r} breaks its own declaration: {error.message}")


# --------------------------------------------------------------------------------------------------
# Building a typed section from config data, and its plain form


def build_dataclass(cls: type, data: Mapping[str, Any] | None, where: str, as_written: bool = False) -> Any:
    """Construct settings dataclass ``cls`` from a mapping: unknown keys are errors, a nested settings dataclass is
    built too, and every value takes its declared form (:func:`_as_declared`)."""
    data = dict(data or {})
    hints = type_hints(cls)
    names = hints.keys()
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"config: unknown key '{where}.{unknown[0]}' (expected one of: {', '.join(sorted(names))})")
    return cls(**{key: _as_declared(value, hints[key], as_written, f"{where}.{key}") for key, value in data.items()})


def _as_declared(value: Any, hint: Any, as_written: bool, where: str) -> Any:
    """``value`` in the form its ``hint`` declares: a nested settings dataclass built (:func:`build_dataclass`), a list
    as a tuple, a mapping's values and a list's elements each in their declared form, at any depth, and an integer as
    a float where a float is declared (``as_written=True``: numbers stay as the config writes them, as a method's
    settings do - they enter the run's hash as written, so ``lambda_ewc=1`` keeps the hash it was recorded with)."""
    hint = _unwrap_optional(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return build_dataclass(hint, value, where)
    if isinstance(value, list) and typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        return tuple(_as_declared(v, args[0] if args[-1] is Ellipsis else args[i], as_written, f"{where}[{i}]")
                     for i, v in enumerate(value))
    if isinstance(value, Mapping) and typing.get_origin(hint) is dict:
        return {k: _as_declared(v, typing.get_args(hint)[1], as_written, f"{where}.{k}") for k, v in value.items()}
    if hint is float and isinstance(value, int) and not isinstance(value, bool) and not as_written:
        return float(value)
    return value


@functools.cache
def type_hints(cls: type) -> types.MappingProxyType:
    """The resolved type of each field of settings dataclass ``cls`` (read-only; resolved once per class: a
    config's validation builds each section once per declared run, ~200 runs in the default config)."""
    hints = typing.get_type_hints(cls)
    return types.MappingProxyType({f.name: hints[f.name] for f in dataclasses.fields(cls)})


def nested_settings(hint: Any) -> type | None:
    """The settings dataclass a field of type ``hint`` holds: itself, a list's element or a mapping's value (each may
    be ``X | None``); None if it holds none."""
    hint = _unwrap_optional(hint)
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    inner = _unwrap_optional(args[1] if origin is dict else args[0] if origin is tuple else hint)
    return inner if dataclasses.is_dataclass(inner) else None


def _unwrap_optional(hint: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return args[0] if is_union and len(args) == 1 else hint


def recorded(value: Any) -> Any:
    """The plain form a run records of a settings dataclass: :func:`plain`, without the keys declared
    ``later`` that are at their default (so runs recorded before such a key existed keep their params and
    hashes), recursively."""
    if not (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return plain(value)
    out = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if f.metadata.get("later") and plain(v) == plain(f.default):
            continue
        out[f.name] = recorded(v)
    return out
