"""The sections every run shares, declared with :func:`~intact.settings.fields.setting`: ``head``, ``intact``,
``optim``, ``tracking`` and each ``backbones.<b>`` entry with its ``pretrain``. Their schema, defaults and
reference are derived from these declarations (:mod:`intact.schema`, :mod:`intact.config_docs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from intact.settings.fields import check_declared, defaults, plain, setting


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
