"""The typed, frozen settings of a run (torch-free, imports nothing of the pipeline's upper layers).

Every section of config.yaml that is not a method's or a benchmark's own (``head``, ``intact``, ``optim``,
``backbones``) is a dataclass here; a method's settings are declared in its own module
(:mod:`intact.methods.declare`), a benchmark type's in its own (:mod:`intact.data.declare`). :func:`build_dataclass` turns a mapping into one of them and
:func:`intact.layering.merge` is the one config merge (config layers, benchmark overrides, name overrides).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from intact.data import BENCHMARK_TYPES  # noqa: F401  (the registry: discovering it declares every type)
from intact.data.declare import BenchmarkSettings, benchmark_type
from intact.data.digits import BenchmarkConfig  # noqa: F401  (re-exported: digits' settings, declared in its module)
from intact.data.image_config import ImageBenchmarkConfig
from intact.hashing import stable_hash
from intact.naming import DEFAULT_PROTOCOL


class ConfigError(ValueError):
    """Invalid configuration: the message names the key or file and what was expected (raised by every
    layer that checks settings; defined here, the lowest of them)."""


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
    # Switches for the authors' code's deviations (docs/protocols.md section 4); the defaults are the paper.
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
    #: adam | adamw | sgd; None: the optimizer the method declares (``Method.optimizer``)
    optimizer: str | None = None
    momentum: float = 0.9  #: SGD's momentum (the official S-Prompts and InfLoRA scripts: 0.9)
    milestones: tuple[int, ...] = ()  #: schedule ``multistep``: the epochs at which the lr is multiplied by lr_decay
    lr_decay: float = 0.1  #: schedule ``multistep``: the factor at each milestone


#: (section, class, keys) added after runs were recorded (see RunConfig.to_dict): left out of the hash
#: at their defaults, so runs recorded before them keep their params and hashes
LATER_KEYS = (("optim", OptimConfig, ("drop_last", "on_nonfinite", "max_skipped_fraction", "feature_cache",
                                      "optimizer", "momentum", "milestones", "lr_decay")),
              ("benchmark", ImageBenchmarkConfig, ("c_transform", "val_fraction", "val_seed")))


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run's results (benchmark x method x seed)."""

    benchmark: BenchmarkSettings  #: the settings class its type declares (:mod:`intact.data.declare`)
    backbone: BackboneConfig
    method: str
    base: str
    intact: IntactConfig | None
    settings: dict[str, Any]  #: the base method's own section, ``methods.<base>``
    head: HeadConfig
    optim: OptimConfig
    seed: int
    eval_split: str = "test"
    #: the protocol the run is trained under (``@protocol=<name>``); the default one is left out of the hash
    protocol: str = DEFAULT_PROTOCOL

    def to_dict(self) -> dict[str, Any]:
        """Plain settings (job params, hash). Keys added after results existed are left out while at their
        default, so a new option never makes Snakemake redo finished runs."""
        out = _to_plain(dataclasses.asdict(self))
        for section, cls, keys in LATER_KEYS:
            if not isinstance(getattr(self, section), cls):
                continue  # a key of that name in another class (digits' val_fraction) was always recorded
            for k in keys:
                if k in out[section] and out[section][k] == _to_plain(getattr(cls, k)):
                    del out[section][k]
        if out["protocol"] == RunConfig.protocol:
            del out["protocol"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunConfig":
        return build_dataclass(cls, data, "run")

    def hash(self) -> str:
        """A short hash of every setting (seed included)."""
        return stable_hash(self.to_dict())


def benchmark_dataclass(kind: str | None) -> type:
    """The settings class that benchmark type ``kind`` declares."""
    try:
        return benchmark_type(str(kind)).settings
    except KeyError as err:
        raise ConfigError(f"config: {err.args[0]}") from None


def benchmark_settings(data: Mapping[str, Any]) -> BenchmarkSettings:
    """A benchmark's typed settings from their plain form (``{"name": ..., "type": ..., ...}``: a job's params)."""
    return build_dataclass(benchmark_dataclass(data.get("type")), data, f"benchmarks.{data.get('name')}")


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
