"""The configuration reference (docs/configuration.md), generated from the declarations so it cannot drift:
each method's settings from its :class:`~intact.methods.declare.Method`, each built-in benchmark type's keys from
its :class:`~intact.data.declare.BenchmarkType`, the shared sections from their declarations in
:mod:`intact.settings`.

    python tools/config_reference.py            # rewrite docs/configuration.md
    python tools/config_reference.py --check    # fail if the committed file is not current (a test runs this)
"""

from __future__ import annotations

import json
import re
from typing import Any

from intact.data import BENCHMARKS, BUILTIN_TYPES
from intact.data.declare import BenchmarkType, benchmark_schema
from intact.methods import METHODS
from intact.methods.declare import Method, settings_schema
from intact.checks import MAX_RUNS
from intact.layering import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES
from intact.naming import NAME_MAX_LENGTH
from intact.schema import MAX_ITEMS, schema
from intact.settings.experiments import EXPERIMENTS
from intact.settings.studies import STUDY_REQUIRED, STUDY_SETTINGS
from intact.settings.fields import nested_settings, type_hints
from intact.settings import (BACKBONE_REQUIRED, RUN_REQUIRED, SECTIONS, BackboneConfig, PretrainConfig, RunSection,
                             defaults, section_schema)


_BOUND_WORDS = {"minimum": "≥ {}", "exclusiveMinimum": "> {}", "maximum": "≤ {}", "exclusiveMaximum": "< {}",
                "multipleOf": "multiple of {}", "minItems": "at least {} items"}
_NON_EMPTY = "at least 1 items"


def _value(v: Any) -> str:
    return f"`{json.dumps(v)}`"


def _type(prop: dict[str, Any]) -> str:
    """The type in words (``null`` left out: the default shows it), only where a default does not show it: no
    default, ``null``, a choice among values."""
    if prop.get("enum"):
        return " | ".join(f"`{e}`" for e in prop["enum"])
    t = prop.get("type", "")
    types = t if isinstance(t, list) else [t]
    names = [f"list of {_type({'type': prop['items']['type']})}" if x == "array" and "type" in prop["items"] else
             "list" if x == "array" else x for x in types if x not in ("", "null")]
    return " or ".join(names)


def _bounds(prop: dict[str, Any]) -> list[str]:
    out = [_BOUND_WORDS[k].format(prop[k]) for k in _BOUND_WORDS if k in prop]
    out += ["each " + _BOUND_WORDS[k].format(v) for k, v in prop.get("items", {}).items() if k in _BOUND_WORDS]
    return ["non-empty" if b == _NON_EMPTY else b for b in out]


def _facts(prop: dict[str, Any], default_shown: bool) -> str:
    """The type where a default does not show it (none, ``null``, a choice among values the meaning does not
    name, each as a word of its own), then the bounds."""
    named = re.findall(r"[\w.]+", prop.get("description", ""))
    choices_named = bool(prop.get("enum")) and all(str(e) in named for e in prop["enum"] if e is not None)
    shown = [] if choices_named or (default_shown and not prop.get("enum")) else [_type(prop)]
    return ", ".join(shown + _bounds(prop))


def _table(props: dict[str, Any], values: dict[str, Any], section: str, seen: dict[tuple, tuple],
           cls: type | None = None) -> list[str]:
    """Every key of ``section``, one line each: ``* `key` = `default` (type, bounds): meaning``. A key declared
    exactly so (bounds and meaning) in an earlier section is listed on one line naming that section, with its
    default where that differs; where ``section`` has every key of that one, the line says so and names only the
    differing defaults. ``seen`` collects the keys (and their defaults) across sections, and each section's keys
    under ``("keys", section)``. A key of settings dataclass ``cls`` that holds settings of its own (a list of them,
    a mapping to them) is followed by their keys, indented (:func:`_nested_table`)."""
    lines, same = [], {}
    seen[("keys", section)] = (section, set(props))
    for key, prop in props.items():
        prop = schema()["$defs"][prop["$ref"].rsplit("/", 1)[1]] | prop if "$ref" in prop else prop
        default = f" = {_value(values[key])}" if key in values else ""
        facts = _facts(prop, key in values and values[key] is not None)
        first, first_default = seen.setdefault((key, facts, prop.get("description", "")), (section, default))
        if first != section:
            same.setdefault(first, []).append((key, "" if default == first_default else default))
            continue
        head = f"* `{key}`{default}" + (f" ({facts})" if facts else "")
        inner = nested_settings(type_hints(cls)[key]) if cls else None
        required, keys = _nested_table(inner, prop, f"{section}.{key}", seen) if inner else ("", [])
        lines += [(f"{head}: {prop['description']}" if prop.get("description") else head) + required, *keys]
    for first, keys in same.items():
        if seen[("keys", first)][1] <= set(props):
            differ = ", ".join(f"`{k}`{d}" for k, d in keys if d)
            lines.append(f"* as in `{first}`, every other key" + (f" ({differ})" if differ else ""))
        else:
            lines.append(f"* as in `{first}`: {', '.join(f'`{k}`{d}' for k, d in keys)}")
    return lines


def _nested_table(cls: type, prop: dict[str, Any], section: str, seen: dict[tuple, tuple]) -> tuple[str, list[str]]:
    """The settings ``cls`` that key ``section`` holds (itself, each element of its list or each value of its
    mapping: ``prop``'s schema): the keys it must set, for the key's line (its description says what it is), and
    its keys' lines, indented."""
    node = prop if "properties" in prop else prop.get("items") or prop["additionalProperties"]
    required = node.get("required", [])
    text = f"; required: {', '.join(f'`{k}`' for k in required)}" if required else ""
    values = {k: v for k, v in defaults(cls).items() if k not in required and v is not None}  # None: not given
    return text, ["  " + line for line in _table(node["properties"], values, section, seen, cls)]


def method_section(m: Method, seen: dict[tuple, tuple]) -> list[str]:
    """One method's part of the reference: what it is, how it composes, its settings."""
    facts = ["accepts `+intact`" if m.accepts_intact else "no `+intact`"]  # why not: validation says
    facts += [f"optimizer: {m.optimizer}"] if m.optimizer != "adam" else []
    facts += [f"penalties: {', '.join(m.penalties)}"] if m.penalties else []
    facts += ["starts every task afresh"] if not m.loads_previous_state else []
    facts += ["a whole network"] if not m.uses_backbone else []
    depth = ", ".join(f"`{k}`" for k in m.layer_keys if not k.endswith("layers"))  # the others: the intro's rule
    facts += [f"blocks checked against the depth: {depth}"] if depth else []
    return [f"### `methods.{m.name}`", "", f"{m.description} ({'; '.join(facts)}).", "",
            *_table(settings_schema(m)["properties"], defaults(m.settings), f"methods.{m.name}", seen), ""]


def benchmark_section(t: BenchmarkType, seen: dict[tuple, tuple]) -> list[str]:
    """One benchmark type's part of the reference: what it is, its tasks, its keys."""
    props = {k: v for k, v in benchmark_schema(t)["properties"].items() if k not in ("type", "overrides")}
    values = {k: v for k, v in defaults(t.settings).items() if k not in t.required}
    facts = [f"{len(t.tasks)} tasks, {t.num_classes} classes"]
    facts += [f"required: {', '.join(f'`{k}`' for k in t.required)}"] if t.required else []
    facts += [f"splits: {', '.join(f'`{s}`' for s in t.splits)}"] if t.splits else []
    return [f"### `type: {t.name}`", "", f"{t.description} ({'; '.join(facts)}).", "",
            *_table(props, values, f"type: {t.name}", seen), ""]


def render() -> str:
    """The whole reference as Markdown."""
    lines = ["# Configuration reference", "",
             "Generated from the declarations by `python tools/config_reference.py` (a test checks it is current);",
             "`config.yaml` sets only what a run changes. Any key may also be set per benchmark or in a run's name",
             "(`coda_p@methods.coda_p.pool_size=20`); `methods`, `head`, `intact`, `optim` and a `backbone` per method",
             "under a protocol: [protocols.md](protocols.md) section 8.",
             "A method's optimizer is Adam unless stated; keys ending in `layers` are checked against the depth.", "",
             *files_section(),
             "## Methods", ""]
    builtins, seen = METHODS.builtins(), {}  # the project's own methods only, whatever else is installed
    for name in sorted(builtins):
        lines += method_section(builtins[name], seen)
    lines += ["## Benchmarks", "", "The keys of `benchmarks.<name>` by `type`; `domains` selects and orders the type's "
              "tasks, each once (default: all).", ""]
    for name in BUILTIN_TYPES:
        lines += benchmark_section(BENCHMARKS[name], seen)
    return "\n".join(lines + shared_sections())


def _max_items(*path: str) -> int:
    """The ``maxItems`` of the list at ``path`` of the schema (``*``: a mapping's entries)."""
    node = schema()
    for part in path:
        node = node["additionalProperties"] if part == "*" else node["properties"][part]
    return node["maxItems"]


def files_section() -> list[str]:
    """Hand-written: how config files layer (``extends``) and the bounds every config is held to."""
    lists = {"seeds": _max_items("run", "seeds"), "run names": _max_items("run", "methods"),
             "`run.benchmarks`": _max_items("run", "benchmarks"),
             "`studies.main.protocols`": _max_items("studies", "main", "protocols"),
             "values per grid key": _max_items("studies", "sensitivity", "grid", "*"),
             "`studies.tune.searches`": _max_items("studies", "tune", "searches")}
    return [
        "## Config files", "",
        "`snakemake` reads `config.yaml`, then each `--configfile` in order (`intact validate` and `intact runs`: the",
        "files given, `config.yaml` if none), then",
        "`--config key=value`: a later mapping merges into the earlier one key by key, any other value replaces it.",
        "A file may start with `extends: <path>` (**relative to that file**), merged over its base by the same rule",
        "(a cycle or a missing base is refused): `configs/paper/imagenet_r.yaml` gives",
        "`config.yaml` <- `base.yaml` <- `imagenet_r.yaml`.", "",
        "One loader (`layering.load_file`) reads every YAML file, refusing in one line a key given twice, bad YAML,",
        f"over {MAX_FILE_BYTES:,} bytes, {MAX_VALUES:,} values (aliases expanded) or {MAX_DEPTH} levels, an alias",
        "in its own anchor. `snakemake` runs it before reading `config.yaml` but after parsing a `--configfile`, so",
        "**a mapping alias bomb in a `--configfile` hangs `snakemake`** (`intact validate` refuses it).", "",
        "Values: numbers finite, integers in 64 bits, seeds once; at most",
        ", ".join(f"{n:,} {what}" for what, n in lists.items()) + f", {MAX_ITEMS:,} in",
        f"any other list; run names of {NAME_MAX_LENGTH} characters, no whitespace or control character; {MAX_RUNS:,}",
        "declared runs, counted before any grid is expanded.", ""]


def shared_sections() -> list[str]:
    """The sections every run shares and the experiments', declared in :mod:`intact.settings`: their keys, defaults
    and bounds."""
    lines, seen = ["## Shared sections", "", "Declared in `src/intact/settings/sections.py`.", ""], {}
    lines += _section("run", RunSection, seen, RUN_REQUIRED)
    for section, cls in SECTIONS.items():
        lines += _section(section, cls, seen)
    entry = section_schema(BackboneConfig, skip=("name",))["properties"]
    lines += ["### `backbones.<name>`", "", " ".join(BackboneConfig.__doc__.split()), "",
              *_table({k: v for k, v in entry.items() if k != "pretrain"},
                      {k: v for k, v in defaults(BackboneConfig).items() if k not in BACKBONE_REQUIRED},
                      "backbones.<name>", seen), "",
              "### `backbones.<name>.pretrain`", "", " ".join(PretrainConfig.__doc__.split()), "",
              *_table(entry["pretrain"]["properties"], defaults(PretrainConfig), "backbones.<name>.pretrain", seen), ""]
    for name, cls in STUDY_SETTINGS.items():
        lines += _section(f"studies.{name}", cls, seen, STUDY_REQUIRED[name])
    for name, cls in EXPERIMENTS.items():
        lines += _section(f"experiments.{name}", cls, seen)
    return lines


def _section(title: str, cls: type, seen: dict[tuple, tuple], required: tuple[str, ...] = ()) -> list[str]:
    """A section declared by ``cls``: its heading, description, the keys it must set and a line per key (a required
    key without its placeholder default)."""
    text = " ".join(cls.__doc__.split()) + (f" Required: {', '.join(f'`{k}`' for k in required)}." if required else "")
    values = {k: v for k, v in defaults(cls).items() if k not in required}
    return [f"### `{title}`", "", text, "", *_table(section_schema(cls)["properties"], values, title, seen, cls), ""]
