"""Everything about a config that can be checked without training, checked when the config is validated.

:func:`check_runs` is called by :func:`intact.config.validate_config` (at Snakefile start-up, before any
job): every run that ``run:`` or a study declares is resolved, and its settings are checked against the
method and the backbone - prompt layers past the backbone's depth, a CODA pool too small for the task
count, ``top_k`` larger than the L2P pool, an input size or channel count the backbone does not take, a
method-name override that the run would silently ignore, a method without a ``methods:`` entry, a
non-positive lambda in a sensitivity grid (a log-spaced sweep). Each message names the key.

Imports no torch for the embedded backbone (see :mod:`intact.models.arch`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

#: config keys of each method that list prompted blocks
LAYER_KEYS: dict[str, tuple[str, ...]] = {
    "coda_p": ("layers",), "l2p": ("layers",), "dualprompt": ("g_layers", "e_layers"),
    "finetune": ("layers",), "ewc": ("layers",), "lwf": ("layers",), "joint": ("layers",),
    "c_prompt": ("general_layers",), "ka_prompt": ("general_layers",),  # (expert blocks: checked when built)
}
#: every key of a method's settings that the checks below read
CHECKED_KEYS: dict[str, tuple[str, ...]] = {**LAYER_KEYS, "coda_p": ("layers", "pool_size"), "l2p": ("layers", "pool_size", "top_k")}
#: each method's settings dataclass (the defaults of keys a config leaves out); imported only if needed
SETTINGS_CLASSES: dict[str, str] = {
    "coda_p": "intact.methods.coda_p:CodaConfig", "l2p": "intact.methods.l2p:L2PConfig",
    "dualprompt": "intact.methods.dualprompt:DualPromptConfig", "finetune": "intact.methods.finetune:FinetuneConfig",
    "ewc": "intact.methods.ewc:EwcConfig", "lwf": "intact.methods.lwf:LwfConfig", "joint": "intact.methods.joint:JointConfig",
    "inflora": "intact.methods.inflora:InfloraConfig", "s_prompts": "intact.methods.s_prompts:SPromptsConfig",
    "c_prompt": "intact.methods.c_prompt:CPromptConfig", "ka_prompt": "intact.methods.ka_prompt:KAPromptConfig",
}
#: image channels of each benchmark family
BENCHMARK_CHANNELS: dict[str, int] = {"digits": 1}


def declared_runs(cfg: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, method name) of every run the config declares: ``run.methods`` and each study's runs."""
    from intact.studies import expand_studies

    for m in cfg["run"]["methods"]:
        yield "run.methods", m
    for name, study in expand_studies(cfg).items():
        for m in study.methods:
            yield f"studies.{name}", m


def check_runs(cfg: Mapping[str, Any]) -> None:
    """Resolve and check every declared run on every benchmark of ``run.benchmarks``; raise ConfigError."""
    from intact.config import ConfigError, resolve_run

    _check_grids(cfg)
    seen: set[tuple[str, str]] = set()
    for where, method in declared_runs(cfg):
        for b in cfg["run"]["benchmarks"]:
            if (b, method) in seen:
                continue
            seen.add((b, method))
            try:
                run = resolve_run(cfg, b, method, cfg["run"]["seeds"][0])
                _check_declared(cfg, run)
                _check_name_overrides(method, run)
                _check_backbone_fit(cfg, run)
            except ConfigError as err:
                raise ConfigError(f"{err} (run {method!r}, declared in {where})") from None


def _fail(msg: str):
    from intact.config import ConfigError

    raise ConfigError(f"config: {msg}")


def _check_grids(cfg: Mapping[str, Any]) -> None:
    grid = ((cfg.get("studies") or {}).get("sensitivity") or {}).get("grid", {})
    for key, values in grid.items():
        for i, v in enumerate(values):
            if v <= 0:
                _fail(f"key 'studies.sensitivity.grid.{key}[{i}]' = {v!r}: a sensitivity grid is a log-spaced sweep, "
                      f"so every lambda must be > 0 (lambda = 0 switches the term off: that is studies.ablation)")


def _check_declared(cfg: Mapping[str, Any], run) -> None:
    if run.base not in (cfg.get("methods") or {}):
        _fail(f"method {run.method!r}: {run.base!r} is not declared under 'methods' (declared: "
              f"{', '.join(cfg.get('methods') or {}) or 'none'}); add a 'methods.{run.base}' entry with its settings")


def _check_name_overrides(method: str, run) -> None:
    from intact.naming import parse_method_name

    for section in parse_method_name(method).section_overrides():
        top, _, rest = section.partition(".")
        if top == "intact" and run.intact is None:
            _fail(f"method {method!r}: sets InTAct keys but the run has no '+intact', so they would be ignored "
                  f"(did you mean {run.base + '+intact' + method[len(run.base):]!r}?)")
        if top == "methods" and rest.split(".")[0] != run.base:
            _fail(f"method {method!r}: overrides 'methods.{rest}', which a {run.base!r} run never reads "
                  f"(only 'methods.{run.base}' applies)")


def _settings(run) -> dict[str, Any]:
    """The run's method settings, with the method's defaults for the checked keys the config leaves out
    (importing the method's settings class - and torch - only then)."""
    from intact.config import build_dataclass
    from intact.registry import load_target

    if set(CHECKED_KEYS.get(run.base, ())) <= set(run.settings) or run.base not in SETTINGS_CLASSES:
        return dict(run.settings)
    return dataclasses.asdict(build_dataclass(load_target(SETTINGS_CLASSES[run.base]), run.settings, f"methods.{run.base}"))


def _check_backbone_fit(cfg: Mapping[str, Any], run) -> None:
    from intact.models.arch import backbone_arch

    bb, bench = run.backbone, run.benchmark
    try:
        arch = backbone_arch(bb.model)
    except ValueError as err:
        _fail(f"key 'backbones.{bb.name}.model' = {bb.model!r}: {err}")
    if arch.problem:
        _fail(f"key 'backbones.{bb.name}.model' = {bb.model!r}: prompts cannot be attached: {arch.problem}")
    settings = _settings(run)
    for key in LAYER_KEYS.get(run.base, ()):
        layers = list(settings.get(key) or [])
        if layers and max(layers) >= arch.depth:
            _fail(f"key 'methods.{run.base}.{key}' = {layers}: block {max(layers)} does not exist - backbone "
                  f"{bb.name!r} ({bb.model}) has depth {arch.depth} (blocks 0-{arch.depth - 1})")
    if run.base == "coda_p" and settings.get("pool_size", 0) < bench.num_tasks:
        _fail(f"key 'methods.coda_p.pool_size' = {settings.get('pool_size')}: fewer components than the "
              f"{bench.num_tasks} tasks of benchmark {bench.name!r} (pool_size / tasks new ones per task)")
    if run.base == "l2p" and settings.get("top_k", 1) > settings.get("pool_size", 1):
        _fail(f"key 'methods.l2p.top_k' = {settings['top_k']}: larger than methods.l2p.pool_size = {settings['pool_size']}")
    channels = BENCHMARK_CHANNELS.get(bench.type)
    if channels is not None and arch.in_chans != channels:
        _fail(f"key 'benchmarks.{bench.name}.backbone' = {bb.name!r}: {bb.model} takes {arch.in_chans}-channel "
              f"images, benchmark {bench.name!r} has {channels}")
    for key in ("input_mean", "input_std"):
        n = len(getattr(bb, key))
        if n not in (1, arch.in_chans):
            _fail(f"key 'backbones.{bb.name}.{key}' has {n} values; {bb.model} takes {arch.in_chans}-channel images "
                  f"(expected 1 value{f' or {arch.in_chans}' if arch.in_chans != 1 else ''})")
    if arch.img_size is not None and bench.type in BENCHMARK_CHANNELS and (bench.image_size,) * 2 != arch.img_size:
        _fail(f"key 'benchmarks.{bench.name}.image_size' = {bench.image_size}: backbone {bb.name!r} ({bb.model}) "
              f"takes {arch.img_size[0]}x{arch.img_size[1]} images")
