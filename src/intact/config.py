"""Typed, frozen run configuration, built from config.yaml after schema validation.

``config.yaml`` holds defaults per section; a *run* is (benchmark, method name, seed). The resolved
:class:`RunConfig` merges, in order: section defaults -> the benchmark's ``overrides`` -> the overrides
encoded in the method name (see :mod:`intact.naming`). Its hash identifies the run's settings.

This module imports no torch: the Snakefile calls :func:`validate_config` at start-up.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from intact.data.image_config import IMAGE_TYPES, ImageBenchmarkConfig, expand_path, missing_path
from intact.hashing import stable_hash
from intact.naming import MethodNameError, parse_method_name
from intact.schema import ConfigError, check_schema

SECTIONS = ("methods", "head", "intact", "optim")


# --------------------------------------------------------------------------------------------------
# Typed sections


@dataclass(frozen=True)
class PretrainConfig:
    """Self-pretraining of a small backbone on a benchmark's clean split."""

    benchmark: str = "digits"
    epochs: int = 40
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.05
    label_smoothing: float = 0.1
    seed: int = 0


@dataclass(frozen=True)
class BackboneConfig:
    """A frozen timm ViT and where its weights come from."""

    name: str
    model: str
    weights: str = "pretrain"
    sha256: str | None = None
    input_mean: tuple[float, ...] = (0.5,)
    input_std: tuple[float, ...] = (0.5,)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)

    @property
    def pretrained_here(self) -> bool:
        return self.weights == "pretrain"


@dataclass(frozen=True)
class BenchmarkConfig:
    """A domain-incremental task sequence."""

    name: str
    type: str
    backbone: str
    domains: tuple[str, ...] = ()
    image_size: int = 32
    pretrain_fraction: float = 0.4
    test_fraction: float = 0.4
    val_fraction: float = 0.2
    split_seed: int = 0

    @property
    def num_tasks(self) -> int:
        return len(self.domains)


@dataclass(frozen=True)
class HeadConfig:
    """The shared classifier: Linear, or Linear -> LeakyReLU -> ... -> Linear."""

    hidden: tuple[int, ...] = ()
    negative_slope: float = 0.01


@dataclass(frozen=True)
class IntactConfig:
    """Weights of the four InTAct terms (0 switches a term off) and the hypercube percentile.

    The defaults mirror config.yaml (tests/test_defaults.py): chosen for the embedded benchmark
    (docs/lambda-search.md); the paper's per-benchmark values go under ``benchmarks.<b>.overrides``.
    """

    lambda_intdrift: float = 1e-2
    lambda_feat: float = 30.0
    lambda_var: float = 1e-4
    lambda_align: float = 1e-2
    percentile: float = 5.0
    align_eps: float = 1e-8
    # Switches for the authors' code's deviations (protocols.md section 4); the defaults are the paper.
    preset: str = "paper"
    feat_gate: str = "teacher_sample"
    align_form: str = "paper"
    protected_layers: str = "all"
    percentile_method: str = "linear"
    double_ce: bool = False
    hypercube_source: str = "train"


#: ``intact.preset`` expands into these switches where it is set (later keys may still refine them).
#: The test-set hypercube is deliberately not part of any preset: it must be asked for by name.
INTACT_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"feat_gate": "teacher_sample", "align_form": "paper", "protected_layers": "all",
              "percentile_method": "linear", "double_ce": False},
    "reference": {"feat_gate": "student_element", "align_form": "reference", "protected_layers": "cls",
                  "percentile_method": "index", "double_ce": True},
}


@dataclass(frozen=True)
class OptimConfig:
    epochs: int = 5
    batch_size: int = 64
    eval_batch_size: int = 512
    lr_head: float = 1e-2
    lr_prompt: float = 5e-2
    weight_decay: float = 0.0
    schedule: str = "cosine_step"
    amp: bool = True
    drop_last: bool = False  #: drop each epoch's last partial batch (the reference code does)
    on_nonfinite: str = "stop"  #: stop | skip_batch (see intact.guard)
    max_skipped_fraction: float = 0.01  #: skip_batch fails the job past this fraction of skipped batches
    feature_cache: bool = True  #: read the query / teacher features from caches (false: the live path)


#: (section, class, keys) added after runs were recorded (see RunConfig.to_dict): left out of the hash
#: at their defaults, so runs recorded before them keep their params and hashes
LATER_KEYS = (("optim", OptimConfig, ("drop_last", "on_nonfinite", "max_skipped_fraction", "feature_cache")),)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run's results (benchmark x method x seed)."""

    benchmark: BenchmarkConfig | ImageBenchmarkConfig
    backbone: BackboneConfig
    method: str
    base: str
    intact: IntactConfig | None
    settings: dict[str, Any]  #: the base method's own section, ``methods.<base>``
    head: HeadConfig
    optim: OptimConfig
    seed: int
    eval_split: str = "test"

    def to_dict(self) -> dict[str, Any]:
        """Plain settings (job params, hash). Keys added after results existed are left out while at their
        default, so a new option never makes Snakemake redo finished runs."""
        out = _to_plain(dataclasses.asdict(self))
        for section, cls, keys in LATER_KEYS:
            for k in keys:
                if out[section].get(k) == getattr(cls, k):
                    del out[section][k]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunConfig":
        return build_dataclass(cls, data, "run")

    def hash(self) -> str:
        """A short hash of every setting (seed included)."""
        return stable_hash(self.to_dict())


# --------------------------------------------------------------------------------------------------
# Loading and validation


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file (safe loader) and validate it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    cfg = yaml.safe_load(path.read_text()) or {}
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
    from intact.checks import check_runs

    check_runs(cfg)  # resolves every declared run and checks what can be checked without training


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
    from intact.methods import METHODS

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


def resolve_run(cfg: Mapping[str, Any], benchmark: str, method: str, seed: int, eval_split: str | None = None) -> RunConfig:
    """Build the typed :class:`RunConfig` of one run."""
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
        settings=dict(sections["methods"].get(name.base, {})),
        head=build_dataclass(HeadConfig, sections["head"], "head"),
        optim=build_dataclass(OptimConfig, sections["optim"], "optim"),
        seed=int(seed),
        eval_split=eval_split or cfg["run"].get("eval_split", "test"),
    )


def backbone_config(cfg: Mapping[str, Any], name: str) -> BackboneConfig:
    raw = {**cfg["backbones"][name], "weights": weights_path(cfg, name)}
    return build_dataclass(BackboneConfig, {"name": name, **raw}, f"backbones.{name}")


def benchmark_dataclass(kind: str | None) -> type:
    """The settings class of a benchmark type: the image benchmarks share one, digits has its own."""
    return ImageBenchmarkConfig if kind in IMAGE_TYPES else BenchmarkConfig


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
        _deep_merge(sections.setdefault(name, {}), values)


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in update.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def build_dataclass(cls: type, data: Mapping[str, Any] | None, where: str) -> Any:
    """Construct dataclass ``cls`` from a mapping: unknown keys are errors, lists become tuples."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"config: unknown key '{where}.{unknown[0]}' (expected one of: {', '.join(sorted(names))})")
    kwargs = {}
    for key, value in data.items():
        hint = _unwrap_optional(hints[key])
        if key == "benchmark" and isinstance(value, Mapping):  # a union over the benchmark families
            hint = benchmark_dataclass(value.get("type"))
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            value = build_dataclass(hint, value, f"{where}.{key}")
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        elif hint is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kwargs[key] = value
    return cls(**kwargs)


def _unwrap_optional(hint: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return args[0] if is_union and len(args) == 1 else hint


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_plain(v) for v in obj]
    return obj
