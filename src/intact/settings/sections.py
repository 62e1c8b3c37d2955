"""The sections every run shares, declared with :func:`~intact.settings.fields.setting`: ``run``, ``head``,
``intact``, ``optim``, ``tracking`` and each ``backbones.<b>`` entry with its ``pretrain``. Their schema, defaults and
reference are derived from these declarations (:mod:`intact.schema`, :mod:`intact.config_docs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from intact.settings.fields import check_declared, defaults, setting


#: the splits a run is evaluated on; the first is the default
EVAL_SPLITS = ("test", "val")


@dataclass(frozen=True)
class RunSection:
    """What target `all` runs: each method on each benchmark and seed."""

    benchmarks: tuple[str, ...] = setting((), "", minItems=1, maxItems=50, uniqueItems=True)
    methods: tuple[str, ...] = setting((), "run names, e.g. coda_p+intact@lambda_var=0.1", minItems=1, maxItems=500,
                                       uniqueItems=True)
    seeds: tuple[int, ...] = setting((), "", minItems=1, maxItems=100, uniqueItems=True, items={"minimum": 0})
    eval_split: str = setting(EVAL_SPLITS[0], "val: train on train minus val, evaluate on val (a search "
                              "point's)", enum=list(EVAL_SPLITS))


#: what the ``run`` section must set
RUN_REQUIRED = ("benchmarks", "methods", "seeds")


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
    """A frozen timm ViT and where its weights come from."""

    name: str  #: its key under ``backbones``
    model: str = field(metadata={"doc": "a timm ViT name (vit_base_patch16_224, ...) or one of ours "
                                        "(vit_digits_p8, vit_digits_p4)"})
    weights: str = setting("pretrain", "'pretrain' (on a benchmark's clean split) or a local weights file "
                           "(.safetensors, .pth, .bin, .npz)")
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
    """The four InTAct terms' weights (0: off), the hypercube percentile, and switches for the authors' code's
    departures (docs/protocols.md section 4; defaults: the paper's). λ: chosen on digits (docs/lambda-search.md);
    the paper's per benchmark go under ``benchmarks.<b>.overrides``."""

    lambda_intdrift: float = setting(1e-2, "weight of L_IntDrift (the interval bound on the head's drift)", minimum=0)
    lambda_feat: float = setting(30.0, "weight of L_Feat (old data's features kept)", minimum=0)
    lambda_var: float = setting(1e-4, "weight of L_Var (compact features)", minimum=0)
    lambda_align: float = setting(1e-2, "weight of L_Align (new centres near the old box); the paper fixes 1",
                                  minimum=0)
    percentile: float = setting(5.0, "alpha: the box spans the alpha-th to (100-alpha)-th percentile per neuron",
                                minimum=0, exclusiveMaximum=50)
    align_eps: float = setting(1e-8, "epsilon of L_Align's denominator", exclusiveMinimum=0)
    preset: str = setting("paper", "paper (the equations) or reference (the authors' code: sets the switches "
                          "below)", enum=["paper", "reference"])
    feat_gate: str = setting("teacher_sample", "teacher_sample: per-sample gate on the teacher feature (paper); "
                             "student_element: per (sample, neuron) on the student feature, / in-box count (reference)",
                             enum=["teacher_sample", "student_element"])
    align_form: str = setting("paper", "paper: squared distance of box centres / (r + eps); reference: batch min/max "
                              "centres, L2 over neurons whose batch interval misses the box, / mean radius",
                              enum=["paper", "reference"])
    protected_layers: str = setting("all", "all: every Linear of the head, against its input's box (paper); cls: "
                                    "only the layer reading [CLS] (reference)",
                                    enum=["all", "cls"])
    percentile_method: str = setting("linear", "linear: interpolated (numpy's default); index: the sorted value at "
                                     "floor(q/100 * N) (reference)", enum=["linear", "index"])
    double_ce: bool = setting(False, "CE counted twice with InTAct (the reference code's bug: halves each lambda "
                              "against CE)")
    var_norm: str = setting("sum", "L_Var over neurons: sum (paper) or mean (reference: the Table's lambda_var)",
                            later=True, enum=["sum", "mean"])
    hypercube_source: str = setting("train", "train: the task's training data (paper); test_seen: the test features "
                                    "of every task so far (reference; LEAKS TEST DATA, warns)",
                                    enum=["train", "test_seen"])


#: ``intact.preset`` expands into these switches where it is set (later keys may still refine them).
#: The test-set hypercube is deliberately not part of any preset: it must be asked for by name.
INTACT_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"feat_gate": "teacher_sample", "align_form": "paper", "protected_layers": "all",
              "percentile_method": "linear", "double_ce": False, "var_norm": "sum"},
    "reference": {"feat_gate": "student_element", "align_form": "reference", "protected_layers": "cls",
                  "percentile_method": "index", "double_ce": True, "var_norm": "mean"},
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
    lr_head: float = setting(1e-2, "learning rate of a prompt method's head (a network's: methods.<name>.lr)",
                             exclusiveMinimum=0)
    lr_prompt: float = setting(5e-2, "learning rate of a prompt method's prompts", exclusiveMinimum=0)
    weight_decay: float = setting(0.0, "weight decay of the optimizer", minimum=0)
    schedule: str = setting("cosine_step", "cosine_step: per-step cosine to 0; cosine_epoch: per-epoch (reference); "
                            "cosine_annealing: CosineAnnealingLR per epoch; multistep: x lr_decay at each milestone; "
                            "constant",
                            enum=list(SCHEDULES))
    amp: bool = setting(True, "bfloat16 autocast on CUDA (ignored on CPU)")
    drop_last: bool = setting(False, "drop each epoch's last partial batch (the reference code does)", later=True)
    on_nonfinite: str = setting("stop", "on a NaN/Inf loss, gradient or parameter: stop (fail; the last good "
                                "epoch's checkpoint kept) or skip_batch (skipped, counted in train.json)",
                                later=True, enum=["stop", "skip_batch"])
    max_skipped_fraction: float = setting(0.01, "skip_batch: fail once more than this share of a task's steps is "
                                          "skipped", later=True, minimum=0, maximum=1)
    feature_cache: bool = setting(True, "the query's and teacher's features from caches, not a backbone pass per "
                                  "step (bit-identical on CPU, fp32); false: live",
                                  later=True)
    optimizer: str | None = setting(None, "adam | adamw | sgd; null: the method's own (Method.optimizer)",
                                    later=True, enum=[*OPTIMIZERS, None])
    momentum: float = setting(0.9, "SGD's momentum (the official S-Prompts and InfLoRA scripts: 0.9)", later=True,
                              minimum=0)
    milestones: tuple[int, ...] = setting((), "multistep: the epochs (0-based) at which the lr is multiplied by "
                                          "lr_decay", later=True, items={"minimum": 1})
    lr_decay: float = setting(0.1, "multistep: the factor at each milestone", later=True,
                              exclusiveMinimum=0)
    first_task_weight_decay: float | None = setting(
        None, "the first task's weight decay (S-Prompts' init_weight_decay); null: weight_decay", later=True,
        minimum=0)
    train_crop: str = setting(
        "benchmark", "benchmark: the benchmark's own (a flip; ImageNet-C: a random crop); random_resized: "
        "RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) of the prepared image, and the flip", later=True,
        enum=["benchmark", "random_resized"])
    test_resize: int | None = setting(
        None, "null: the prepared test view; R: Resize(R) + CenterCrop (the official scripts: 256), from the "
        "prepared image, also for unaugmented training passes", later=True,
        minimum=1)


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking of finished runs (a view of results/, never the source of truth; docs/tracking.md)."""

    enabled: bool = setting(True, "log every run of target `all` (one local job per run)")
    uri: str | None = setting(None, "http(s)://host:port or sqlite:///path/mlflow.db; null: sqlite:///<workdir>/"
                              "mlflow.db; $MLFLOW_TRACKING_URI overrides it", minLength=1)
    experiment: str = setting("intact/{benchmark}", "experiment name; fields {benchmark}, {eval_split}", minLength=1)
    timeout_s: int = setting(10, "seconds per HTTP request to a tracking server", minimum=1)
    retries: int = setting(1, "HTTP retries per request (MLflow's 7 wait minutes for a dead server)",
                           minimum=0, maximum=10)
    deadline_s: int = setting(300, "the longest a run's tracking step may take (then: status pending)", minimum=1)

    def __post_init__(self) -> None:
        """The experiment template is checked wherever it is set (config, ``--experiment``): a field it does not know
        failed every run's tracking step, each run left pending."""
        try:
            self.experiment_name("b", "test")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"key 'tracking.experiment' = {self.experiment!r}: bad template ({e!r}); expected a name "
                             f"with optional fields {{benchmark}}, {{eval_split}}") from None

    def experiment_name(self, benchmark: str, eval_split: str = EVAL_SPLITS[0]) -> str:
        return self.experiment.format(benchmark=benchmark, eval_split=eval_split)


@dataclass(frozen=True)
class RehearsalConfig:
    """A dress rehearsal of the config's whole DAG at toy scale (intact.rehearsal; configs/rehearsal.yaml): the same
    rules and run names on synthetic data and tiny backbones made in the DAG; every table and figure says so."""

    domains: int = setting(3, "the first domains of each benchmark: its tasks (at least 2, the digits' least)",
                           minimum=2)
    epochs: int = setting(1, "epochs per task, in every optim layer", minimum=1)
    batch_size: int = setting(8, "training batch size, in every optim layer (a few steps per task)", minimum=1)
    seeds: int = setting(2, "every seed list cut to its first seeds (2: an interval wherever a table shows one)",
                         minimum=1)
    image_size: int = setting(32, "the image benchmarks' input side: the tiny backbones' (each takes 32 px)",
                              enum=[32])
    classes: int = setting(8, "classes of the synthetic images (labels 0 .. classes-1 of the benchmark's)", minimum=2)
    per_class: int = setting(6, "synthetic images per class and task; every third a test image", minimum=3)
    seed: int = setting(0, "seeds the synthetic images and the tiny backbones' initialisation", minimum=0)


#: the top-level sections of config.yaml each of these declares (schema, defaults, reference); the keys of a
#: backbone entry are declared by :class:`BackboneConfig` (``name`` is its key under ``backbones``)
SECTIONS: dict[str, type] = {"head": HeadConfig, "intact": IntactConfig, "optim": OptimConfig,
                             "tracking": TrackingConfig}
#: what each backbone entry must set
BACKBONE_REQUIRED = ("model", "weights")

for _cls in (*SECTIONS.values(), PretrainConfig, RehearsalConfig):
    check_declared(_cls, f"section {_cls.__name__}")
check_declared(RunSection, "section RunSection", placeholders=RUN_REQUIRED)
check_declared(BackboneConfig, "section BackboneConfig", skip=("name", "model", "pretrain"))


def section_defaults(section: str) -> dict[str, Any]:
    """The declared defaults of a shared section (``head``, ``intact``, ``optim``, ``tracking``)."""
    return defaults(SECTIONS[section])
