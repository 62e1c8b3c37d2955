"""Loading, validating and resolving config.yaml into typed, frozen runs (:mod:`intact.settings`).

A *run* is (benchmark, method name, seed). The resolved :class:`RunConfig` merges, in order: the declared
defaults (a method's in its own module, :mod:`intact.methods.declare`; the other sections' in
:mod:`intact.settings`) -> config.yaml's sections -> the benchmark's ``overrides`` -> the method's own
layers and its protocol's (:mod:`intact.protocols`) -> the overrides encoded in the method name (see
:mod:`intact.naming`). Its hash identifies the run's settings.

This module imports no torch: the Snakefile calls :func:`validate_config` at start-up.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from intact.checks import check_benchmark_settings, check_run_count, check_runs as _check_runs
from intact.data import BENCHMARKS, benchmark_settings
from intact.data.declare import BenchmarkSettings
from intact.paths import expand_path, file_problem
from intact.layering import LayerError, check_size, merge, read_files
from intact.methods import METHODS
from intact.naming import MethodNameError, parse_method_name
from intact.rehearsal import made_backbones, rehearse, synthetic_benchmarks
from intact.protocols import (SECTIONS, declared, named_backbones, problems as protocol_problems, run_backbone,
                              run_layers)
from intact.removed import RENAMED_METHODS, renamed_in_config, renamed_message
from intact.schema import ConfigError, check_schema, check_sections
from intact.settings.experiments import check_experiments
from intact.tune import tune_benchmarks
from intact.settings import (
    EVAL_SPLITS, INTACT_PRESETS, BackboneConfig, HeadConfig, IntactConfig, OptimConfig, RunConfig, RunSection,
    TrackingConfig, build_dataclass,
)

#: the one run-level key a method name may set: ``@run.eval_split=val`` (the search points of studies.tune)
RUN_SECTION, RUN_KEYS = "run", {"eval_split": EVAL_SPLITS}


# --------------------------------------------------------------------------------------------------
# Loading and validation


def load_config(*paths: str | Path, check_files: bool = True) -> dict[str, Any]:
    """Read YAML config files (safe loader), layered in order as Snakemake layers ``configfile`` and
    ``--configfile`` (each file's ``extends`` resolved: :mod:`intact.layering`), and validate the result
    (``check_files=False``: without requiring the data and weights files, as a dry run does)."""
    if not paths:
        raise ConfigError("no config file given")
    for path in map(Path, paths):
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        cfg = read_files(paths)
    except LayerError as err:
        raise ConfigError(str(err)) from None
    validate_config(cfg, check_files=check_files)
    return cfg


def validate_config(cfg: Mapping[str, Any], check_files: bool = True,
                    check_runs: bool = True) -> dict[tuple[str, str], RunConfig]:
    """Check ``cfg`` against the schema and for consistency; raise :class:`ConfigError` on the first problem.
    Return every declared run resolved on its benchmark, (benchmark, method) -> its :class:`RunConfig` at the first
    of ``run.seeds`` (another seed's differs only in ``seed``): the workflow keeps them. ``check_runs=False`` skips
    resolving them (none are returned) and loading the plugins the config names (a cluster job's process, whose
    workflow checked the same config before submitting it)."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("config: expected a mapping at the top level")
    try:
        check_size(cfg)  # before anything walks it: YAML aliases may expand a small file beyond any memory
    except LayerError as err:
        raise ConfigError(str(err)) from None
    if check_runs:
        _check_benchmark_types(cfg)
    _check_renamed(cfg)
    check_schema(cfg, load=check_runs)
    if cfg.get("rehearsal") is not None:   # a rehearsal's layer (intact.rehearsal), in place: every reader sees it
        rehearsed = rehearse(cfg)
        cfg.clear()
        cfg.update(rehearsed)
        check_schema(cfg, load=check_runs)
    check_run_count(cfg)
    benchmarks = cfg["benchmarks"]
    for key, names in (("run.benchmarks", cfg["run"]["benchmarks"]),
                       ("studies.tune.benchmarks", tune_benchmarks(cfg))):
        for b in names:
            if b not in benchmarks:
                raise ConfigError(f"config: key {key!r} names unknown benchmark {b!r}; defined under 'benchmarks': "
                                  f"{', '.join(benchmarks)}")
    for name, bench in benchmarks.items():
        if bench["backbone"] not in cfg["backbones"]:
            raise ConfigError(f"config: key 'benchmarks.{name}.backbone' = {bench['backbone']!r} is not defined under "
                              f"'backbones' (defined: {', '.join(cfg['backbones'])})")
    problems = protocol_problems(cfg)   # a benchmark's layer of an undeclared protocol, a bad same_as_default
    if problems:
        raise ConfigError(f"config: {problems[0]}")
    check_experiments(cfg)
    for name in sorted(named_backbones(cfg)):
        if name not in cfg["backbones"]:
            raise ConfigError(f"config: a per-method layer names backbone {name!r}, which is not defined "
                              f"under 'backbones' (defined: {', '.join(cfg['backbones'])})")
    for name in used_backbones(cfg):
        _check_backbone(cfg, name, load=check_runs)
    if check_files:
        missing = missing_files(cfg)
        if missing:
            raise ConfigError(f"config: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    if not check_runs:
        return {}
    for name in used_benchmarks(cfg):   # the type's own checks, on every benchmark a job prepares
        check_benchmark_settings(benchmark_config(cfg, name))
    # resolve every declared run and check what can be checked without training
    return _check_runs(cfg, lambda benchmark, method: resolve_run(cfg, benchmark, method, cfg["run"]["seeds"][0]))


def _check_renamed(cfg: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the new name, a method name version 0.2.0 replaced (:func:`intact.removed.
    renamed_in_config`)."""
    former = renamed_in_config(cfg)
    if former:
        key, old = former
        raise ConfigError(f"config: key {key!r}: " + renamed_message("method", old, RENAMED_METHODS[old]))


def missing_files(cfg: Mapping[str, Any], prepared: typing.Callable[[str], bool] = lambda b: False) -> list[str]:
    """Messages naming every weights file, data root or split folder the config's runs need that is not there
    (:func:`missing_weights`, then :func:`missing_data`)."""
    data = missing_data(cfg, prepared)
    return [*missing_weights(cfg).values(), *(m for b in data for m in data[b])]


def missing_weights(cfg: Mapping[str, Any], check_fit: bool = False) -> dict[str, str]:
    """Backbone name -> the message naming its weights file, for every backbone a run of the config may use
    (:func:`used_backbones`) whose file is not there; with ``check_fit``, or whose file
    would not load into its model or has another sha256 than the one pinned (:func:`intact.models.backbone.
    weights_problem`: the file's header, the model on torch's meta device; imports torch and timm where a file is
    named; reads a file whole where its sha256 is pinned). Which targets need which backbone:
    :meth:`intact.plan.Plan.backbones`; a run stops only for the files its jobs read."""
    out, made = {}, set(made_backbones(cfg))   # a rehearsal's tiny backbones are made in the DAG
    for name in (n for n in used_backbones(cfg) if n not in made):
        raw = cfg["backbones"][name]["weights"]
        if raw == "pretrain":
            continue
        problem = file_problem("weights file", raw)
        if problem:
            out[name] = (f"key 'backbones.{name}.weights': {problem} "
                         "(expected 'pretrain' or the path of a local .safetensors/.pth/.bin/.npz file)")
        elif check_fit:
            from intact.models.backbone import weights_problem

            path = weights_path(cfg, name)
            unfit = weights_problem(path, cfg["backbones"][name]["model"], cfg["backbones"][name].get("sha256"))
            if unfit:
                out[name] = f"key 'backbones.{name}.weights': weights file {path!r} {unfit}"
    return out


def missing_data(cfg: Mapping[str, Any],
                 prepared: typing.Callable[[str], bool] = lambda b: False) -> dict[str, list[str]]:
    """Benchmark name -> the messages naming its data roots or split folders that are not there, for the
    benchmarks a job prepares (:func:`used_benchmarks`); ``prepared(name)``: the benchmark is prepared already
    (its raw images are no longer needed)."""
    made = set(synthetic_benchmarks(cfg))   # a rehearsal's synthetic data is made in the DAG
    out = {b: benchmark_config(cfg, b).missing_inputs() for b in used_benchmarks(cfg)
           if not prepared(b) and b not in made}
    return {b: m for b, m in out.items() if m}


def trained_benchmarks(cfg: Mapping[str, Any]) -> list[str]:
    """The benchmarks the config's runs train on: ``run.benchmarks`` (the studies' too), then studies.tune's."""
    return list(dict.fromkeys([*cfg["run"]["benchmarks"], *tune_benchmarks(cfg)]))


def used_backbones(cfg: Mapping[str, Any]) -> list[str]:
    """The backbones a run may train on: the trained benchmarks' and those a per-method layer names."""
    return sorted({cfg["benchmarks"][b]["backbone"] for b in trained_benchmarks(cfg)} | named_backbones(cfg))


def used_benchmarks(cfg: Mapping[str, Any]) -> list[str]:
    """The benchmarks a job prepares: those the runs train on, then each whose clean split pretrains a used
    backbone (``weights: pretrain``)."""
    sources = [backbone_config(cfg, n).pretrain.benchmark for n in used_backbones(cfg)
               if weights_path(cfg, n) == "pretrain"]
    return list(dict.fromkeys([*trained_benchmarks(cfg), *sources]))


def prepared_by(cfg: Mapping[str, Any], load: bool = True) -> tuple[list[str], list[str]]:
    """The benchmarks the rule prepare_images builds and those prepare_data builds, as the declarations of their
    types say (``parallel_prepare``). ``load=False``, for a job's own process, which runs the one rule that
    ``--allowed-rules`` names: every benchmark in both lists, no type imported (a plugin the job does not use)."""
    if not load:
        return list(cfg["benchmarks"]), list(cfg["benchmarks"])
    parallel = {n: BENCHMARKS[b["type"]].parallel_prepare for n, b in cfg["benchmarks"].items()}
    return [n for n, p in parallel.items() if p], [n for n, p in parallel.items() if not p]


def weights_path(cfg: Mapping[str, Any], name: str) -> str:
    """The weights file of backbone ``name`` (``~`` and ``$VARS`` expanded), or ``pretrain``."""
    w = cfg["backbones"][name]["weights"]
    return w if w == "pretrain" else expand_path(w)


def _check_benchmark_types(cfg: Mapping[str, Any]) -> None:
    """A benchmark whose type failed to load (a broken plugin) is refused with the registry's one line, not
    as a value outside the schema's list of types."""
    benchmarks = cfg.get("benchmarks")
    for name, bench in (benchmarks.items() if isinstance(benchmarks, Mapping) else ()):
        kind = bench.get("type") if isinstance(bench, Mapping) else None
        if isinstance(kind, str) and kind not in BENCHMARKS and kind in BENCHMARKS.failures:  # (`in` loads it)
            raise ConfigError(f"config: key 'benchmarks.{name}.type': "
                              f"{BENCHMARKS.failures[kind].message(BENCHMARKS.what)}")


def _check_backbone(cfg: Mapping[str, Any], name: str, load: bool = True) -> None:
    """A pretrained backbone's source benchmark is declared and (``load``: importing its type) one that pretrains."""
    backbone = backbone_config(cfg, name)
    if backbone.weights == "pretrain":
        src = backbone.pretrain.benchmark
        if src not in cfg["benchmarks"]:
            raise ConfigError(f"config: key 'backbones.{name}.pretrain.benchmark' = {src!r} is not defined under "
                              "'benchmarks'")
        if load and not BENCHMARKS[cfg["benchmarks"][src]["type"]].pretrains:
            able = ", ".join(n for n, t in BENCHMARKS.loaded().items() if t.pretrains)
            raise ConfigError(f"config: key 'backbones.{name}.pretrain.benchmark' = {src!r}: only the embedded "
                              "benchmark "
                              f"pretrains a backbone here (types: {able}); give the image benchmarks' backbone a local "
                              "weights file")


def _method_sections(cfg: Mapping[str, Any], benchmark: str, method: str) -> tuple[Any, dict[str, Any], str]:
    """The run's parsed name, its merged sections and its backbone's name."""
    try:
        name = parse_method_name(method)
    except MethodNameError as e:
        raise ConfigError(f"config: {e}") from None
    try:
        spec = METHODS[name.base]  # an unknown method, or one whose module / entry point failed to load
    except KeyError as err:
        raise ConfigError(f"config: method {method!r}: {err}") from None
    if name.intact and not spec.accepts_intact:
        accepting = ", ".join(n for n, e in METHODS.loaded().items() if e.accepts_intact)
        reason = f": {spec.intact_refusal}" if spec.intact_refusal else ""
        raise ConfigError(f"config: method {method!r}: {name.base!r} does not accept '+intact'{reason} (methods that "
                          f"do: {accepting})")
    if name.protocol not in declared(cfg):
        raise ConfigError(f"config: method {method!r}: protocol {name.protocol!r} is not declared under 'protocols' "
                          f"(declared: {', '.join(declared(cfg))})")
    layers = run_layers(cfg, benchmark, name.base, name.protocol)
    sections = {s: {} for s in SECTIONS}
    for layer in layers:
        _merge_sections(sections, {s: layer[s] for s in SECTIONS if s in layer})
    for section, values in name.section_overrides().items():
        top, _, rest = section.partition(".")
        if section == RUN_SECTION:
            _check_run_overrides(method, values)
            continue
        if top not in SECTIONS:
            raise ConfigError(f"config: method {method!r}: override section {section!r} is not one of "
                              f"{', '.join(SECTIONS)}")
        nested: dict[str, Any] = dict(values)
        for part in reversed(rest.split(".") if rest else []):
            nested = {part: nested}
        _merge_sections(sections, {top: nested})
    # the rest of the config was validated once (validate_config); only the run's merged sections are new
    check_sections(sections, where=f"method {method!r} on benchmark {benchmark!r}")
    return name, sections, run_backbone(cfg, benchmark, layers)


def _check_run_overrides(method: str, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key not in RUN_KEYS:
            raise ConfigError(f"config: method {method!r}: 'run.{key}' cannot be set in a name (only "
                              f"{', '.join('run.' + k for k in RUN_KEYS)})")
        if value not in RUN_KEYS[key]:
            raise ConfigError(f"config: method {method!r}: 'run.{key}' = {value!r}; expected one of "
                              f"{', '.join(RUN_KEYS[key])}")


def resolve_run(cfg: Mapping[str, Any], benchmark: str, method: str, seed: int,
                eval_split: str | None = None) -> RunConfig:
    """Build the typed :class:`RunConfig` of one run. The split it is evaluated on: ``eval_split`` if given,
    else the name's ``run.eval_split`` (a tuning study's search point), else ``run.eval_split`` of the config."""
    if benchmark not in cfg["benchmarks"]:
        raise ConfigError(f"config: unknown benchmark {benchmark!r}; defined: {', '.join(cfg['benchmarks'])}")
    name, sections, backbone_name = _method_sections(cfg, benchmark, method)
    bench = benchmark_config(cfg, benchmark)
    backbone = backbone_config(cfg, backbone_name)
    return RunConfig(
        benchmark=bench,
        backbone=backbone,
        method=method,
        base=name.base,
        intact=build_dataclass(IntactConfig, sections["intact"], "intact") if name.intact else None,
        settings=method_settings(name.base, sections["methods"].get(name.base)),
        head=build_dataclass(HeadConfig, sections["head"], "head"),
        optim=build_dataclass(OptimConfig, sections["optim"], "optim"),
        seed=int(seed),
        eval_split=(eval_split or name.section_overrides().get(RUN_SECTION, {}).get("eval_split")
                    or build_dataclass(RunSection, cfg["run"], "run").eval_split),
        protocol=name.protocol,
        rehearsal=bool(cfg.get("rehearsal")),
        plugins=run_plugins(name.base, bench.type),
    )


#: (benchmark, method, seed) -> the run's settings
Resolver = Callable[[str, str, int], RunConfig]


def resolver(cfg: Mapping[str, Any], runs: Mapping[tuple[str, str], RunConfig] | None = None) -> Resolver:
    """Each run's settings: the run the config's validation resolved (``runs``, :func:`validate_config`'s:
    (benchmark, method) -> it, at one seed; another seed's differ only in ``seed``), else :func:`resolve_run`."""
    def resolve(benchmark: str, method: str, seed: int) -> RunConfig:
        run = (runs or {}).get((benchmark, method))
        return dataclasses.replace(run, seed=seed) if run is not None else resolve_run(cfg, benchmark, method, seed)
    return resolve


def run_plugins(base: str, kind: str) -> tuple[str, ...]:
    """The plugins a run of method ``base`` on a benchmark of type ``kind`` uses, as installed now
    (:class:`intact.plugins.Plugin`, as text; none for built-ins): part of the run's settings, so of its hash."""
    return tuple(str(p) for p in (METHODS.plugin(base), BENCHMARKS.plugin(kind)) if p)


def benchmark_optim(cfg: Mapping[str, Any], benchmark: str) -> OptimConfig:
    """``optim`` as every run on ``benchmark`` starts from (the declared defaults, the config's section, the
    benchmark's overrides; before any per-method layer): what the benchmark's query cache uses."""
    overrides = (cfg["benchmarks"][benchmark].get("overrides") or {}).get("optim") or {}
    return build_dataclass(OptimConfig, merge(cfg.get("optim") or {}, overrides), "optim")


def tracking_config(cfg: Mapping[str, Any] | None) -> TrackingConfig:
    """The typed ``tracking`` section of a config mapping (declared defaults where absent), checked."""
    raw = dict((cfg or {}).get("tracking") or {})
    check_sections({"tracking": raw}, where="config")
    try:
        return build_dataclass(TrackingConfig, raw, "tracking")
    except ConfigError:
        raise
    except ValueError as e:   # TrackingConfig's own check of its experiment template
        raise ConfigError(f"config: {e}") from None


def backbone_config(cfg: Mapping[str, Any], name: str) -> BackboneConfig:
    raw = {**cfg["backbones"][name], "weights": weights_path(cfg, name)}
    return build_dataclass(BackboneConfig, {"name": name, **raw}, f"backbones.{name}")


def benchmark_config(cfg: Mapping[str, Any], name: str) -> BenchmarkSettings:
    """The typed settings of ``benchmarks.<name>`` (the dataclass its type declares)."""
    return benchmark_settings({"name": name, **{k: v for k, v in cfg["benchmarks"][name].items() if k != "overrides"}})


def run_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """The typed run from its plain form (:meth:`RunConfig.to_dict`, a job's ``params.run``): the inverse of
    ``to_dict``, so ``run_from_dict(run.to_dict()) == run``; refused if its plugins changed since it was resolved."""
    typed = {"benchmark": benchmark_settings(data["benchmark"]),
             "settings": method_settings(data["base"], data["settings"])}
    run = build_dataclass(RunConfig, {**data, **typed}, "run")
    installed = run_plugins(run.base, run.benchmark.type)
    if run.plugins != installed:   # a plugin changed after the workflow resolved the run: its results would lie
        raise ConfigError(f"run {run.method!r} was resolved with plugins {list(run.plugins)}; installed now: "
                          f"{list(installed)}: run snakemake again (the run's hash changes with its plugins)")
    return run


def method_settings(base: str, configured: Mapping[str, Any] | None) -> Any:
    """Method ``base``'s typed settings: its declared defaults, then what the config sets, as written (a
    number stays as the config writes it: the values enter the run's hash)."""
    return build_dataclass(METHODS[base].settings, configured, f"methods.{base}", as_written=True)


# --------------------------------------------------------------------------------------------------
# Helpers


def _merge_sections(sections: dict[str, Any], update: Mapping[str, Any]) -> None:
    """Deep-merge ``update`` into ``sections``; an ``intact.preset`` expands into its switches in place."""
    for name, values in update.items():
        values = dict(values or {})
        if name == "intact" and "preset" in values:
            preset = values["preset"]
            if preset not in INTACT_PRESETS:
                raise ConfigError(f"config: key 'intact.preset' = {preset!r} is not allowed; expected one of "
                                  f"{list(INTACT_PRESETS)}")
            values = {**INTACT_PRESETS[preset], **values}
        sections[name] = merge(sections.get(name, {}), values)


