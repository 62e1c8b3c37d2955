"""The config schema: ``config.schema.yaml`` for what no declaration covers (the sensitivity and tune studies, the
protocol layers), and the rest derived from the declarations - ``methods`` from the methods', ``benchmarks`` from
the benchmark types', ``run``, ``head``, ``intact``, ``optim``, ``tracking``, ``experiments``, the other studies
and each ``backbones`` entry from :mod:`intact.settings`. Built once per process, and its errors turned into
messages that name the key and what was expected. A plugin enters the schema once it is loaded, which a config that
names it does (:func:`check_schema`): one that no config names is never imported."""

from __future__ import annotations

import functools
import json
import typing
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import jsonschema

from intact.data import BENCHMARKS
from intact.data.declare import benchmark_schema
from intact.layering import load_file
from intact.methods import METHODS
from intact.methods.declare import settings_schema
from intact.naming import excerpt
from intact.settings.experiments import EXPERIMENTS
from intact.settings.studies import STUDY_REQUIRED, STUDY_SETTINGS
from intact.settings import (BACKBONE_REQUIRED, RUN_REQUIRED, SECTIONS, BackboneConfig, ConfigError, RehearsalConfig,
                             RunSection,
                             section_schema, validator)

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")

#: the most items of a list the schema bounds no tighter (config.schema.yaml bounds seeds to 100, run names to
#: 500, benchmarks to 50, grid values to 100, ...; a declared list setting - prompt layers, domains - to this)
MAX_ITEMS = 1000


#: the names each registry knows (methods, benchmark types), and whether each is loaded: what the schema is built of
Loaded = tuple[tuple[tuple[str, bool], ...], ...]
#: the schema of a plugin's settings before it is loaded (a config that names it loads it: :func:`check_schema`)
UNLOADED = {"description": "a plugin's settings (checked once it is loaded)", "type": ["object", "null"]}


def schema() -> dict[str, Any]:
    """The schema of the declarations loaded so far (the built-ins, and the plugins looked up)."""
    return _schema(_loaded())


def _loaded() -> Loaded:
    out = []
    for registry in (METHODS, BENCHMARKS):
        done = registry.loaded()
        out.append(tuple((name, name in done) for name in registry))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def _schema(loaded: Loaded) -> dict[str, Any]:
    # parsed once per process and set of plugins: the Snakefile resolves every run of a paper grid (thousands)
    out = load_file(SCHEMA_PATH, "schema file")
    methods = out["properties"]["methods"]
    methods["additionalProperties"] = False
    methods["properties"] = {name: settings_schema(METHODS[name]) if ready else dict(UNLOADED)
                             for name, ready in loaded[0]}
    for section, cls in SECTIONS.items():
        out["properties"][section] = section_schema(cls)
    out["properties"]["run"] = section_schema(RunSection, required=RUN_REQUIRED)
    for name, cls in STUDY_SETTINGS.items():   # null switches a study off
        out["properties"]["studies"]["properties"][name] = {
            **section_schema(cls, required=STUDY_REQUIRED[name]), "type": ["object", "null"]}
    out["properties"]["rehearsal"] = {**section_schema(RehearsalConfig), "type": ["object", "null"]}
    out["properties"]["experiments"] = {
        "description": "the paper's non-prompt experiments (targets study_toy, study_drift; src/intact/experiments)",
        "type": "object", "additionalProperties": False,
        "properties": {name: section_schema(cls) for name, cls in EXPERIMENTS.items()}}
    out["properties"]["backbones"]["additionalProperties"] = section_schema(
        BackboneConfig, skip=("name",), required=BACKBONE_REQUIRED)
    _add_benchmarks(out, loaded[1])
    _bound_lists(out)
    return out


def _bound_lists(node: Any) -> None:
    """Every list schema under ``node`` that sets no ``maxItems`` gets :data:`MAX_ITEMS`."""
    if isinstance(node, dict):
        types = node.get("type")
        if ("array" in types if isinstance(types, list) else types == "array") and "maxItems" not in node:
            node["maxItems"] = MAX_ITEMS
        for value in node.values():
            _bound_lists(value)
    elif isinstance(node, list):
        for value in node:
            _bound_lists(value)


def _add_benchmarks(out: dict[str, Any], known: tuple[tuple[str, bool], ...]) -> None:
    """``benchmarks.<name>``: ``type`` one of the declared types, and the keys of that type (``$defs/bench_<type>``;
    a plugin's once it is loaded)."""
    entry = out["properties"]["benchmarks"]["additionalProperties"]
    types = {name: BENCHMARKS[name] for name, ready in known if ready}
    entry["properties"]["type"]["enum"] = [name for name, _ in known]
    entry["allOf"] = [{"if": {"properties": {"type": {"const": name}}}, "then": {"$ref": f"#/$defs/bench_{name}"}}
                      for name in types]
    out["$defs"].update({f"bench_{name}": benchmark_schema(t) for name, t in types.items()})


@functools.lru_cache(maxsize=4)
def _validator(loaded: Loaded) -> jsonschema.Draft202012Validator:
    return validator(_schema(loaded))


def _key(path: typing.Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def schema_error(err: jsonschema.ValidationError, where: str = "config") -> ConfigError:
    key = _key(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        keys = ", ".join(f"'{_key([*err.absolute_path, e])}'" for e in extra)
        hint = f"expected one of: {', '.join(allowed)}" if allowed else "expected no other keys"
        if isinstance(err.instance, Mapping) and isinstance(err.instance.get("type"), str):
            hint += f" for a benchmark of type {err.instance['type']!r}"
        return ConfigError(f"{where}: unknown key {keys} ({hint})")
    if err.validator == "required":
        return ConfigError(f"{where}: key '{key}' is missing a required entry: {err.message}")
    shown = excerpt(err.instance)
    if err.validator == "enum":
        return ConfigError(f"{where}: key '{key}' = {shown} is not allowed; expected one of {err.validator_value}")
    repeated = _first_repeat(err.instance) if err.validator == "uniqueItems" else []
    if repeated:
        return ConfigError(f"{where}: key '{key}' = {shown}: {excerpt(repeated[0])} is listed twice; each at most once")
    if err.validator in ("maxItems", "maxProperties"):
        return ConfigError(f"{where}: key '{key}' = {shown}: {len(err.instance):,} entries; at most "
                           f"{err.validator_value}")
    # jsonschema's message quotes the whole value: quote an excerpt
    return ConfigError(f"{where}: key '{key}' = {shown}: {err.message.replace(repr(err.instance), shown)}")


def _first_repeat(items: list[Any]) -> list[Any]:
    """``[the first item equal to an earlier one]``, or ``[]``."""
    for i, item in enumerate(items):
        if item in items[:i]:
            return [item]
    return []


def check_schema(cfg: Mapping[str, Any], where: str = "config", load: bool = True) -> None:
    """Validate a whole config; ConfigError naming the first bad key. The plugins it names (a ``methods`` section,
    a benchmark's ``type``) are loaded first, so that the schema covers them (``load=False``: not, in a job's
    process, whose workflow checked the same config: a job loads the plugins of its run only)."""
    for registry, names in ((METHODS, _keys(cfg.get("methods"))),
                            (BENCHMARKS, [b.get("type") for b in _keys(cfg.get("benchmarks")).values()
                                          if isinstance(b, Mapping)])):
        for name in names if load else ():
            if isinstance(name, str):
                registry.get(name)  # looking a plugin up loads it (a failure is refused where the name is used)
    _raise_first(_validator(_loaded()).iter_errors(cfg), where)


def _keys(node: Any) -> Mapping[str, Any]:
    return node if isinstance(node, Mapping) else {}


def check_sections(sections: Mapping[str, Any], where: str) -> None:
    """Validate top-level sections of a config (``{"optim": {...}, ...}``) as :func:`check_schema` would in
    a config that holds them. A run's merged sections are checked this way, not by revalidating the whole
    config once per run (seconds for a paper grid's thousands of runs); the same sections are checked once."""
    key = json.dumps(sections, sort_keys=True, default=repr)
    if key not in _SECTIONS_OK:
        _raise_first(_sections_validator(tuple(sorted(sections)), _loaded()).iter_errors(dict(sections)), where)
        _SECTIONS_OK.add(key)


_SECTIONS_OK: set[str] = set()  # the JSON of sections already found valid (per process, as the schema is)


@functools.lru_cache(maxsize=8)
def _sections_validator(names: tuple[str, ...], loaded: Loaded
                        ) -> jsonschema.Draft202012Validator:
    # the root schema cut to these properties: its $defs (and $ref paths into it) stay as they are
    root = _schema(loaded)
    return validator({**root, "required": [], "properties": {n: root["properties"][n] for n in names}})


def _raise_first(errors: typing.Iterable[jsonschema.ValidationError], where: str) -> None:
    errors = sorted(errors, key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise schema_error(jsonschema.exceptions.best_match(errors), where)
