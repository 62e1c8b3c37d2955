"""Loading, validating and resolving config.yaml into typed, frozen runs (:mod:`intact.settings`).

A *run* is (benchmark, method name, seed). The resolved :class:`RunConfig` merges, in order: the declared
defaults (a method's in its own module, :mod:`intact.methods.declare`; the other sections' in
:mod:`intact.settings`) -> config.yaml's sections -> the benchmark's ``overrides`` -> the overrides encoded
in the method name (see :mod:`intact.naming`). Its hash identifies the run's settings.

This module imports no torch: the Snakefile calls :func:`validate_config` at start-up.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Mapping

from intact.checks import check_runs
from intact.data.image_config import IMAGE_TYPES, ImageBenchmarkConfig, expand_path, missing_path
from intact.layering import LayerError, merge, read_layers
from intact.methods import METHODS
from intact.methods.declare import run_settings
from intact.naming import MethodNameError, parse_method_name
from intact.schema import ConfigError, check_schema
from intact.settings import (  # noqa: F401  (re-exported: the typed sections are part of the config API)
    INTACT_PRESETS, LATER_KEYS, BackboneConfig, BenchmarkConfig, HeadConfig, IntactConfig, OptimConfig, PretrainConfig,
    RunConfig, benchmark_dataclass, build_dataclass,
)

SECTIONS = ("methods", "head", "intact", "optim")
#: the one run-level key a method name may set: ``@run.eval_split=val`` (the search points of studies.tune)
RUN_SECTION, RUN_KEYS = "run", {"eval_split": ("test", "val")}


# --------------------------------------------------------------------------------------------------
# Loading and validation


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file (safe loader; ``extends`` resolved: :mod:`intact.layering`) and validate it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        cfg = read_layers(path)
    except LayerError as err:
        raise ConfigError(str(err)) from None
    validate_config(cfg)
    return cfg


def validate_config(cfg: Mapping[str, Any], check_files: bool = True) -> None:
    """Check ``cfg`` against the schema and for consistency; raise :class:`ConfigError` on the first problem."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("config: expected a mapping at the top level")
    check_schema(cfg)
    benchmarks = cfg["benchmarks"]
    for b in cfg["run"]["benchmarks"]:
        if b not in benchmarks:
            raise ConfigError(f"config: run.benchmarks names unknown benchmark {b!r}; defined under 'benchmarks': {', '.join(benchmarks)}")
    for name, bench in benchmarks.items():
        if bench["backbone"] not in cfg["backbones"]:
            raise ConfigError(f"config: key 'benchmarks.{name}.backbone' = {bench['backbone']!r} is not defined under 'backbones' (defined: {', '.join(cfg['backbones'])})")
    used_backbones = {benchmarks[b]["backbone"] for b in cfg["run"]["benchmarks"]}
    for name in used_backbones:
        _check_backbone(cfg, name)
    if check_files:
        missing = missing_files(cfg)
        if missing:
            raise ConfigError(f"config: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    # resolve every declared run and check what can be checked without training
    check_runs(cfg, lambda benchmark, method: resolve_run(cfg, benchmark, method, cfg["run"]["seeds"][0]))


def missing_files(cfg: Mapping[str, Any], prepared: typing.Callable[[str], bool] = lambda b: False) -> list[str]:
    """Messages naming every weights file, data root or split folder the run needs that is not there.

    ``prepared(name)`` tells whether a benchmark is already prepared (then its raw images are not needed).
    """
    out = []
    for name in sorted({cfg["benchmarks"][b]["backbone"] for b in cfg["run"]["benchmarks"]}):
        raw, path = cfg["backbones"][name]["weights"], weights_path(cfg, name)
        if path != "pretrain" and not Path(path).is_file():
            out.append(f"key 'backbones.{name}.weights': " + missing_path("weights file", raw) + " "
                       "(expected 'pretrain' or the path of a local .safetensors/.pth/.bin/.npz file)")
    for b in cfg["run"]["benchmarks"]:
        bench = benchmark_config(cfg, b)
        if isinstance(bench, ImageBenchmarkConfig) and not prepared(b):
            out += bench.missing_inputs()
    return out


def weights_path(cfg: Mapping[str, Any], name: str) -> str:
    """The weights file of backbone ``name`` (``~`` and ``$VARS`` expanded), or ``pretrain``."""
    w = cfg["backbones"][name]["weights"]
    return w if w == "pretrain" else expand_path(w)


def _check_backbone(cfg: Mapping[str, Any], name: str) -> None:
    bb = cfg["backbones"][name]
    if bb["weights"] == "pretrain":
        src = bb.get("pretrain", {}).get("benchmark", PretrainConfig.benchmark)
        if src not in cfg["benchmarks"]:
            raise ConfigError(f"config: key 'backbones.{name}.pretrain.benchmark' = {src!r} is not defined under 'benchmarks'")
        if cfg["benchmarks"][src]["type"] in IMAGE_TYPES:
            raise ConfigError(f"config: key 'backbones.{name}.pretrain.benchmark' = {src!r}: only the embedded benchmark "
                              "pretrains a backbone here; give the image benchmarks' backbone a local weights file")


def _method_sections(cfg: Mapping[str, Any], benchmark: str, method: str) -> tuple[Any, dict[str, Any]]:
    try:
        name = parse_method_name(method)
    except MethodNameError as e:
        raise ConfigError(f"config: {e}") from None
    if name.base not in METHODS:
        raise ConfigError(f"config: method {method!r}: unknown method {name.base!r} (expected one of: {', '.join(sorted(METHODS))})")
    if name.intact and not METHODS[name.base].accepts_intact:
        accepting = ", ".join(n for n, e in METHODS.items() if e.accepts_intact)
        reason = f": {METHODS[name.base].intact_refusal}" if METHODS[name.base].intact_refusal else ""
        raise ConfigError(f"config: method {method!r}: {name.base!r} does not accept '+intact'{reason} (methods that do: {accepting})")
    sections = {s: {} for s in SECTIONS}
    _merge_sections(sections, {s: cfg.get(s, {}) for s in SECTIONS})
    _merge_sections(sections, cfg["benchmarks"][benchmark].get("overrides", {}) or {})
    for section, values in name.section_overrides().items():
        top, _, rest = section.partition(".")
        if section == RUN_SECTION:
            _check_run_overrides(method, values)
            continue
        if top not in SECTIONS:
            raise ConfigError(f"config: method {method!r}: override section {section!r} is not one of {', '.join(SECTIONS)}")
        nested: dict[str, Any] = dict(values)
        for part in reversed(rest.split(".") if rest else []):
            nested = {part: nested}
        _merge_sections(sections, {top: nested})
    probe = {k: v for k, v in cfg.items()}
    probe.update(sections)
    check_schema(probe, where=f"method {method!r} on benchmark {benchmark!r}")
    return name, sections


def _check_run_overrides(method: str, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key not in RUN_KEYS:
            raise ConfigError(f"config: method {method!r}: 'run.{key}' cannot be set in a name (only {', '.join('run.' + k for k in RUN_KEYS)})")
        if value not in RUN_KEYS[key]:
            raise ConfigError(f"config: method {method!r}: 'run.{key}' = {value!r}; expected one of {', '.join(RUN_KEYS[key])}")


def resolve_run(cfg: Mapping[str, Any], benchmark: str, method: str, seed: int, eval_split: str | None = None) -> RunConfig:
    """Build the typed :class:`RunConfig` of one run. The split it is evaluated on: ``eval_split`` if given,
    else the name's ``run.eval_split`` (a tuning study's search point), else ``run.eval_split`` of the config."""
    if benchmark not in cfg["benchmarks"]:
        raise ConfigError(f"config: unknown benchmark {benchmark!r}; defined: {', '.join(cfg['benchmarks'])}")
    name, sections = _method_sections(cfg, benchmark, method)
    bench = benchmark_config(cfg, benchmark)
    backbone = backbone_config(cfg, bench.backbone)
    return RunConfig(
        benchmark=bench,
        backbone=backbone,
        method=method,
        base=name.base,
        intact=build_dataclass(IntactConfig, sections["intact"], "intact") if name.intact else None,
        settings=run_settings(METHODS[name.base], sections["methods"].get(name.base, {})),
        head=build_dataclass(HeadConfig, sections["head"], "head"),
        optim=build_dataclass(OptimConfig, sections["optim"], "optim"),
        seed=int(seed),
        eval_split=eval_split or name.section_overrides().get(RUN_SECTION, {}).get("eval_split") or cfg["run"].get("eval_split", "test"),
    )


def backbone_config(cfg: Mapping[str, Any], name: str) -> BackboneConfig:
    raw = {**cfg["backbones"][name], "weights": weights_path(cfg, name)}
    return build_dataclass(BackboneConfig, {"name": name, **raw}, f"backbones.{name}")


def benchmark_config(cfg: Mapping[str, Any], name: str) -> BenchmarkConfig | ImageBenchmarkConfig:
    raw = {k: v for k, v in cfg["benchmarks"][name].items() if k != "overrides"}
    return build_dataclass(benchmark_dataclass(raw.get("type")), {"name": name, **raw}, f"benchmarks.{name}")


# --------------------------------------------------------------------------------------------------
# Helpers


def _merge_sections(sections: dict[str, Any], update: Mapping[str, Any]) -> None:
    """Deep-merge ``update`` into ``sections``; an ``intact.preset`` expands into its switches in place."""
    for name, values in update.items():
        values = dict(values or {})
        if name == "intact" and "preset" in values:
            preset = values["preset"]
            if preset not in INTACT_PRESETS:
                raise ConfigError(f"config: key 'intact.preset' = {preset!r} is not allowed; expected one of {list(INTACT_PRESETS)}")
            values = {**INTACT_PRESETS[preset], **values}
        sections[name] = merge(sections.get(name, {}), values)


