"""The settings layer: how a setting is declared, and the sections every run shares (no torch; imports only
the foundations).

A setting is a field of a frozen dataclass declared with :func:`setting`: its type, default, a one-line
description and JSON-schema bounds. Everything else about it is derived from that one declaration: the
config schema (:func:`section_schema`), the defaults a run gets, the configuration reference
(docs/configuration.md) and whether the key enters a run's hash at its default (``later``). The same mechanism
declares a method's settings (:mod:`intact.methods.declare`), a benchmark type's (:mod:`intact.data.declare`)
and the shared sections below (``head``, ``intact``, ``optim``, ``backbones.<b>`` with its ``pretrain``,
``tracking``). :class:`RunConfig` is one run's settings, typed, from resolution (:mod:`intact.config`) to the
job: its plain form (:meth:`RunConfig.to_dict`) is what a job receives and what the run's hash is taken of.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from intact.hashing import stable_hash
from intact.naming import DEFAULT_PROTOCOL


class ConfigError(ValueError):
    """Invalid configuration: the message names the key or file and what was expected (raised by every
    layer that checks settings; defined here, the lowest of them)."""


#: the JSON-schema keywords a :func:`setting` may bound a value (or, in ``items``, each element) with
BOUND_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum",
                            "const", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern"})


def setting(default: Any, doc: str = "", *, later: bool = False, items: Mapping[str, Any] | None = None,
            **bounds: Any) -> Any:
    """A settings field: its default, a one-line description, and JSON-schema bounds (``minimum=1``,
    ``exclusiveMinimum=0``, ``multipleOf=2``, ``enum=[...]``, ``minItems=1``; ``items`` bounds each element
    of a list). ``later=True``: a key added after runs were recorded; left out of a run's plain form (and so
    of its hash) while at its default, so finished runs keep their hashes."""
    meta = {"doc": doc, "later": later, "items": dict(items or {}), "bounds": bounds}
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"setting({default!r}): a default must be immutable (a tuple for a list)")
    return dataclasses.field(default=default, metadata=meta)


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
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if dataclasses.is_dataclass(hint):
        return section_schema(hint)
    raise TypeError(f"unsupported settings type {hint!r}: use bool, int, float, str, tuple[X, ...], X | None "
                    "or a settings dataclass")


def fields_schema(settings: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON schema of each field of a settings dataclass (but ``skip``), from its type and its
    :func:`setting` metadata."""
    hints = typing.get_type_hints(settings)
    props: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        if f.name in skip:
            continue
        prop = _type_schema(hints[f.name])
        prop.update(f.metadata.get("bounds", {}))
        if f.metadata.get("items"):
            prop["items"] = {**prop["items"], **f.metadata["items"]}
        if f.metadata.get("doc"):
            prop["description"] = f.metadata["doc"]
        props[f.name] = prop
    return props


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
        for kind, bounds in (("", f.metadata.get("bounds", {})), ("items ", f.metadata.get("items", {}))):
            unknown = sorted(set(bounds) - BOUND_KEYWORDS)
            if unknown:
                fail(f.name, f"unknown {kind}bound {', '.join(unknown)} (known: {', '.join(sorted(BOUND_KEYWORDS))})")
    props, hints = fields_schema(settings, skip), typing.get_type_hints(settings)
    for name, value in defaults(settings).items():
        if name in skip:
            continue
        schema = _type_schema(hints[name]) if name in placeholders else props[name]
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
        if error is not None:
            fail(name, f"default {value!r} breaks its own declaration: {error.message}")


# --------------------------------------------------------------------------------------------------
# Building a typed section from config data, and its plain form


def build_dataclass(cls: type, data: Mapping[str, Any] | None, where: str, as_written: bool = False) -> Any:
    """Construct settings dataclass ``cls`` from a mapping: unknown keys are errors, lists become tuples,
    a nested settings dataclass is built too, and an integer becomes a float where the field is a float
    (``as_written=True``: numbers stay as the config writes them, as a method's settings do - they enter
    the run's hash as written, so ``lambda_ewc=1`` keeps the hash it was recorded with)."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"config: unknown key '{where}.{unknown[0]}' (expected one of: {', '.join(sorted(names))})")
    kwargs = {}
    for key, value in data.items():
        hint = _unwrap_optional(hints[key])
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            value = build_dataclass(hint, value, f"{where}.{key}")
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        elif hint is float and isinstance(value, int) and not isinstance(value, bool) and not as_written:
            value = float(value)
        kwargs[key] = value
    return cls(**kwargs)


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


# --------------------------------------------------------------------------------------------------
# The shared sections


@dataclass(frozen=True)
class PretrainConfig:
    """Self-pretraining of a small backbone on a benchmark's clean split (``weights: pretrain``)."""

    benchmark: str = setting("digits", "the benchmark whose clean split pretrains the backbone")
    epochs: int = setting(40, "pretraining epochs", minimum=1)
    batch_size: int = setting(64, "pretraining batch size", minimum=1)
    lr: float = setting(1e-3, "AdamW learning rate", exclusiveMinimum=0)
    weight_decay: float = setting(0.05, "AdamW weight decay", minimum=0)
    label_smoothing: float = setting(0.1, "label smoothing of the pretraining loss", minimum=0, maximum=1)
    seed: int = setting(0, "seed of the initialisation and the batches", minimum=0)


@dataclass(frozen=True)
class BackboneConfig:
    """A frozen timm ViT and where its weights come from (``backbones.<name>``; ``model`` and ``weights``
    are required)."""

    name: str  #: its key under ``backbones``
    model: str = field(metadata={"doc": "a timm ViT name (vit_base_patch16_224, ...) or one of ours "
                                        "(vit_digits_p8, vit_digits_p4)"})
    weights: str = setting("pretrain", "'pretrain' (train it on a benchmark's clean split) or the path of a local "
                           "weights file (.safetensors, .pth, .bin, .npz)")
    sha256: str | None = setting(None, "expected sha256 of the weights file; null records it without checking",
                                 pattern="^[0-9a-f]{64}$")
    input_mean: tuple[float, ...] = setting((0.5,), "per-channel mean subtracted from the [0, 1] input (1 value: "
                                            "every channel)")
    input_std: tuple[float, ...] = setting((0.5,), "per-channel std the input is divided by",
                                           items={"exclusiveMinimum": 0})
    pretrain: PretrainConfig = field(default_factory=PretrainConfig, metadata={"doc": "pretraining (weights: "
                                                                                "pretrain)"})

    @property
    def pretrained_here(self) -> bool:
        return self.weights == "pretrain"


@dataclass(frozen=True)
class HeadConfig:
    """The shared classifier: Linear, or Linear -> LeakyReLU -> ... -> Linear."""

    hidden: tuple[int, ...] = setting((), "hidden widths of the shared classifier; [] is a single Linear layer",
                                      items={"minimum": 1})
    negative_slope: float = setting(0.01, "LeakyReLU slope between the hidden layers", minimum=0)


@dataclass(frozen=True)
class IntactConfig:
    """Weights of the four InTAct terms (0 switches a term off), the hypercube percentile, and the switches
    for the authors' code's deviations (docs/protocols.md section 4; the defaults are the paper). The
    lambdas were chosen for the embedded benchmark (docs/lambda-search.md); the paper's per-benchmark values
    go under ``benchmarks.<b>.overrides``."""

    lambda_intdrift: float = setting(1e-2, "weight of L_IntDrift (the interval bound on the head's drift)", minimum=0)
    lambda_feat: float = setting(30.0, "weight of L_Feat (old data's features kept)", minimum=0)
    lambda_var: float = setting(1e-4, "weight of L_Var (compact features)", minimum=0)
    lambda_align: float = setting(1e-2, "weight of L_Align (new centres near the old box); the paper fixes 1",
                                  minimum=0)
    percentile: float = setting(5.0, "alpha - the hypercube spans the alpha-th to (100-alpha)-th percentile per "
                                "neuron", minimum=0, exclusiveMaximum=50)
    align_eps: float = setting(1e-8, "epsilon of L_Align's denominator", exclusiveMinimum=0)
    preset: str = setting("paper", "paper (the equations) or reference (the authors' code, docs/protocols.md "
                          "section 4; sets the switches below)", enum=["paper", "reference"])
    feat_gate: str = setting("teacher_sample", "teacher_sample: per-sample gate on the teacher feature (paper); "
                             "student_element: per (sample, neuron) gate on the student feature, normalised by the "
                             "in-box count (reference code)", enum=["teacher_sample", "student_element"])
    align_form: str = setting("paper", "paper: squared distance of percentile-box centres / (r + eps); reference: "
                              "batch min/max centres, L2 distance over neurons whose batch interval misses the box, "
                              "/ mean radius", enum=["paper", "reference"])
    protected_layers: str = setting("all", "all: every Linear of the head against its own input's hypercube "
                                    "(paper); cls: only the layer reading the [CLS] token (reference code)",
                                    enum=["all", "cls"])
    percentile_method: str = setting("linear", "linear: interpolated percentiles (numpy default); index: the sorted "
                                     "value at index floor(q/100 * N) (reference code)", enum=["linear", "index"])
    double_ce: bool = setting(False, "count the cross-entropy twice when InTAct is on (a bug of the reference code: "
                              "halves every lambda relative to CE)")
    hypercube_source: str = setting("train", "train: the current task's training data (paper); test_seen: "
                                    "test-set features of all tasks seen so far, re-embedded after each task "
                                    "(reference code; LEAKS TEST DATA, warns)", enum=["train", "test_seen"])


#: ``intact.preset`` expands into these switches where it is set (later keys may still refine them).
#: The test-set hypercube is deliberately not part of any preset: it must be asked for by name.
INTACT_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"feat_gate": "teacher_sample", "align_form": "paper", "protected_layers": "all",
              "percentile_method": "linear", "double_ce": False},
    "reference": {"feat_gate": "student_element", "align_form": "reference", "protected_layers": "cls",
                  "percentile_method": "index", "double_ce": True},
}

#: ``optim.schedule``: how the learning rate moves over a task
SCHEDULES = ("cosine_step", "cosine_epoch", "cosine_annealing", "multistep", "constant")
#: the optimizers a job can build (``Method.optimizer``, ``optim.optimizer``): torch's Adam, AdamW, SGD
OPTIMIZERS = ("adam", "adamw", "sgd")


@dataclass(frozen=True)
class OptimConfig:
    """Training budget and optimiser of every task of a run."""

    epochs: int = setting(5, "epochs per task", minimum=1)
    batch_size: int = setting(64, "training batch size", minimum=1)
    eval_batch_size: int = setting(512, "batch size of evaluation and feature passes", minimum=1)
    lr_head: float = setting(1e-2, "learning rate of a prompt method's head (a whole network's is "
                             "methods.<name>.lr)", exclusiveMinimum=0)
    lr_prompt: float = setting(5e-2, "learning rate of a prompt method's prompts", exclusiveMinimum=0)
    weight_decay: float = setting(0.0, "weight decay of the optimizer", minimum=0)
    schedule: str = setting("cosine_step", "cosine_step: per-step cosine to 0; cosine_epoch: the reference code's "
                            "per-epoch cosine; cosine_annealing: torch's CosineAnnealingLR per epoch (S-Prompts); "
                            "multistep: times lr_decay at each of milestones (epochs; InfLoRA DomainNet); constant",
                            enum=list(SCHEDULES))
    amp: bool = setting(True, "bfloat16 autocast on CUDA (ignored on CPU)")
    drop_last: bool = setting(False, "drop each epoch's last partial batch (the reference code does)", later=True)
    on_nonfinite: str = setting("stop", "a NaN/Inf loss term, gradient or parameter - stop: fail the job (the last "
                                "good epoch checkpoint is kept); skip_batch: skip batches whose loss or gradients "
                                "are not finite (counted in train.json)", later=True, enum=["stop", "skip_batch"])
    max_skipped_fraction: float = setting(0.01, "skip_batch: the job still fails once more than this fraction of a "
                                          "task's steps was skipped", later=True, minimum=0, maximum=1)
    feature_cache: bool = setting(True, "read the query q(x) (query_cache rule) and the teacher's features "
                                  "(computed at the start of a task) from caches instead of a backbone pass per "
                                  "step; the same result bit for bit on CPU in fp32. false: the live path",
                                  later=True)
    optimizer: str | None = setting(None, "adam | adamw | sgd; null (the default): the optimizer the method "
                                    "declares (Method.optimizer)", later=True, enum=[*OPTIMIZERS, None])
    momentum: float = setting(0.9, "SGD's momentum (the official S-Prompts and InfLoRA scripts: 0.9)", later=True,
                              minimum=0)
    milestones: tuple[int, ...] = setting((), "schedule multistep: the epochs (0-based) from which the lr is "
                                          "multiplied once more by lr_decay", later=True, items={"minimum": 1})
    lr_decay: float = setting(0.1, "schedule multistep: the factor at each milestone", later=True,
                              exclusiveMinimum=0)
    first_task_weight_decay: float | None = setting(
        None, "the first task's weight decay where a script has its own (S-Prompts' init_weight_decay); null (the "
        "default): weight_decay on every task", later=True, minimum=0)
    train_crop: str = setting(
        "benchmark", "benchmark (the default): the prepared images as the benchmark augments them (a random "
        "horizontal flip; a random crop where stored larger, as ImageNet-C); random_resized: torchvision's "
        "RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) of the prepared image, resized to the input side, and the "
        "flip (docs/protocols.md section 8)", later=True, enum=["benchmark", "random_resized"])
    test_resize: int | None = setting(
        None, "null (the default): the prepared test view; R: Resize(R) + CenterCrop(input side) of the original "
        "image, taken from the prepared one (its centre window, resized), as the official test transforms (256); "
        "also the view of every unaugmented pass over training images", later=True, minimum=1)


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking of finished runs (a view of results/, never the source of truth); see intact/tracking/."""

    enabled: bool = setting(True, "the default target `all` logs every run (one local job per run, a few seconds)")
    uri: str | None = setting(None, "tracking URI (http(s)://host:port or sqlite:///path/mlflow.db); null: "
                              "$MLFLOW_TRACKING_URI, else sqlite:///<workdir>/mlflow.db. $MLFLOW_TRACKING_URI "
                              "overrides this key", minLength=1)
    experiment: str = setting("intact/{benchmark}", "experiment name; fields {benchmark}, {eval_split}", minLength=1)
    timeout_s: int = setting(10, "seconds per HTTP request to a tracking server", minimum=1)
    retries: int = setting(1, "HTTP retries per request (MLflow's default of 7 waits minutes for a dead server)",
                           minimum=0, maximum=10)
    deadline_s: int = setting(300, "the longest one run's tracking step may take before it gives up (status "
                              "pending)", minimum=1)

    def experiment_name(self, benchmark: str, eval_split: str = "test") -> str:
        return self.experiment.format(benchmark=benchmark, eval_split=eval_split)

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


#: the top-level sections of config.yaml each of these declares (schema, defaults, reference); the keys of a
#: backbone entry are declared by :class:`BackboneConfig` (``name`` is its key under ``backbones``)
SECTIONS: dict[str, type] = {"head": HeadConfig, "intact": IntactConfig, "optim": OptimConfig,
                             "tracking": TrackingConfig}
#: what each backbone entry must set
BACKBONE_REQUIRED = ("model", "weights")

for _cls in (*SECTIONS.values(), PretrainConfig):
    check_declared(_cls, f"section {_cls.__name__}")
check_declared(BackboneConfig, "section BackboneConfig", skip=("name", "model", "pretrain"))


def section_defaults(section: str) -> dict[str, Any]:
    """The declared defaults of a shared section (``head``, ``intact``, ``optim``, ``tracking``)."""
    return defaults(SECTIONS[section])


# --------------------------------------------------------------------------------------------------
# One run


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run's results (benchmark x method x seed), typed: built once by
    :func:`intact.config.resolve_run`, handed to the job as :meth:`to_dict` (Snakemake's ``params``, so a
    changed setting reruns the run) and rebuilt there by :func:`intact.config.run_from_dict`."""

    #: the settings class its benchmark type declares (a :class:`~intact.data.declare.BenchmarkSettings`)
    benchmark: Any
    backbone: BackboneConfig
    method: str
    base: str
    intact: IntactConfig | None
    settings: Any  #: the base method's own section, ``methods.<base>``: an instance of its declared dataclass
    head: HeadConfig
    optim: OptimConfig
    seed: int
    eval_split: str = "test"
    #: the protocol the run is trained under (``@protocol=<name>``); the default one is left out of the hash
    protocol: str = setting(DEFAULT_PROTOCOL, later=True)

    def to_dict(self) -> dict[str, Any]:
        """The run's plain form (job params, hash): :func:`recorded` - keys declared ``later`` are left out
        while at their default, so a new option never makes Snakemake redo finished runs."""
        return recorded(self)

    def hash(self) -> str:
        """A short hash of every setting (seed included)."""
        return stable_hash(self.to_dict())
