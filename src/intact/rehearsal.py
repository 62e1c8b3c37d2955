"""A dress rehearsal: a config's whole DAG - the same rules, targets and run names - at toy scale on a CPU, before
GPU time is spent on it (docs/cluster.md, "Rehearse first").

``configs/rehearsal.yaml`` layered over a paper config adds the ``rehearsal:`` section
(:class:`~intact.settings.RehearsalConfig`); :func:`rehearse` derives from it one more layer and merges it over the
config, the way every layer is merged (:func:`intact.layering.merge`), wherever a config is read (the Snakefile,
``intact validate`` and ``intact runs``). That layer changes only the scale:

* **data**: each image benchmark reads a synthetic tree in its real layout, with split lists in the real format,
  that the workflow's rule ``rehearsal_data`` writes (:mod:`intact.data.synthetic`); the first ``domains`` tasks;
  ``image_size`` pixels;
* **backbones**: each backbone with a weights file becomes its tiny stand-in of the same family
  (:func:`stand_in`: the same depth and patch size, so every method's prompt layers exist), whose weights the rule
  ``rehearsal_backbone`` initialises and the ordinary ``describe_backbone`` records with their sha256;
* **budgets**: ``epochs`` and ``batch_size`` in every ``optim`` layer (the protocols' and per-method ones too),
  ``test_resize`` scaled with the images, every seed list cut to its first ``seeds``.

Every run resolved from a rehearsal config records ``rehearsal: true`` (:class:`~intact.settings.RunConfig`), so its
hash differs from the real run's and every table and figure made of it says it is a rehearsal (:func:`banner`).
No torch here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from intact.data import BENCHMARKS
from intact.data.image_config import val_count
from intact.data.synthetic import TREE_KEYS, is_test_image, tree_keys
from intact.layering import merge
from intact.paths import RESULTS
from intact.settings import ConfigError, RehearsalConfig, TrackingConfig, build_dataclass, defaults

#: where a rehearsal's synthetic data and tiny backbones are made (by the workflow's rules)
DATA_DIR = f"{RESULTS}/rehearsal/data/{{benchmark}}"
TREE = f"{DATA_DIR}/tree.json"
WEIGHTS = f"{RESULTS}/rehearsal/backbones/{{backbone}}.safetensors"
#: the prefix of a rehearsal's MLflow experiments (:func:`_experiment`)
REHEARSAL_EXPERIMENT = "rehearsal/"
#: the pixels the paper's test_resize (256) is relative to
PAPER_IMAGE_SIZE = 224
#: what every table and figure of a rehearsal says on itself
BANNER = "REHEARSAL: toy scale (synthetic data, tiny untrained backbones, 1 epoch); these numbers are not results"

#: a timm model name of a family with a stand-in -> the stand-in (12 blocks, 16-px patches: ViT-Ti/S/B/16)
_STAND_INS = {r"vit_(tiny|small|base)_patch16_\d+(\.\w+)?": "vit_rehearsal_p16"}


def settings(cfg: Mapping[str, Any]) -> RehearsalConfig | None:
    """The config's ``rehearsal:`` section, typed; None for a real run."""
    spec = cfg.get("rehearsal")
    return None if spec is None else build_dataclass(RehearsalConfig, spec, "rehearsal")


def stand_in(model: str) -> str:
    """The tiny model that stands in for timm model ``model`` in a rehearsal (same depth and patch size)."""
    for pattern, tiny in _STAND_INS.items():
        if re.fullmatch(pattern, model):
            return tiny
    if model.startswith(("vit_digits_", "vit_rgb_", "vit_rehearsal_")):
        return model  # already tiny
    raise ConfigError(f"config: rehearsal: no tiny stand-in for backbone model {model!r} (intact.rehearsal: "
                      f"{', '.join(_STAND_INS)})")


def synthetic_benchmarks(cfg: Mapping[str, Any]) -> list[str]:
    """The benchmarks whose data a rehearsal of ``cfg`` makes (none for a real config)."""
    if cfg.get("rehearsal") is None:
        return []
    return [b for b, entry in cfg["benchmarks"].items() if entry.get("type") in TREE_KEYS]


def made_backbones(cfg: Mapping[str, Any]) -> list[str]:
    """The backbones whose weights a rehearsal of ``cfg`` makes (none for a real config)."""
    if cfg.get("rehearsal") is None:
        return []
    return [n for n, entry in cfg["backbones"].items() if entry.get("weights") == WEIGHTS.format(backbone=n)]


def rehearse(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with its rehearsal layer merged over it (a new mapping; ``cfg`` unchanged); a copy of ``cfg`` without a
    ``rehearsal:`` section. Idempotent: a rehearsed config rehearses to itself."""
    r = settings(cfg)
    if r is None:
        return dict(cfg)
    layer = {"benchmarks": {b: _benchmark(b, entry, r) for b, entry in (cfg.get("benchmarks") or {}).items()},
             "backbones": {n: _backbone(n, entry, r) for n, entry in (cfg.get("backbones") or {}).items()},
             "tracking": {"experiment": _experiment(cfg)}}
    out = merge(cfg, layer)
    _cap_budgets(out, r)
    _cut_seeds(out, r.seeds)
    _check_scale(out, r)
    return out


def _check_scale(cfg: Mapping[str, Any], r: RehearsalConfig) -> None:
    """Refuse a rehearsal whose scale its jobs cannot run, naming the ``rehearsal`` key (validation's own error
    would name a key the rehearsal set): a tune study left fewer than two selection seeds; a synthetic tree that
    leaves a task no validation image where a run reads the validation part (a tune study's search points, or
    ``run.eval_split: val``); a batch larger than a task's training images where a layer drops the last partial
    batch (``drop_last``: no step would be taken)."""
    tuned = (cfg.get("studies") or {}).get("tune")
    if tuned and r.seeds < 2:
        raise ConfigError(f"config: key 'rehearsal.seeds' = {r.seeds}: the tune study chooses by the mean over at "
                          "least 2 selection seeds (studies.tune.selection_seeds), and the rehearsal cuts every seed "
                          "list to its first `seeds`; rehearse with seeds >= 2")
    reads_val = bool(tuned) or (cfg.get("run") or {}).get("eval_split") == "val"
    drops_last = any(layer.get("drop_last") for layer in _optim_layers(cfg))
    train = sum(not is_test_image(n) for n in range(r.per_class))
    for name in synthetic_benchmarks(cfg):
        entry = cfg["benchmarks"][name]
        fraction = {**defaults(BENCHMARKS[entry["type"]].settings), **entry}["val_fraction"]
        val = val_count(fraction, train) if reads_val else 0
        if reads_val and val < 1:
            raise ConfigError(f"config: key 'rehearsal.per_class' = {r.per_class}: leaves each class {train} "
                              f"training images a task, of which val_fraction {fraction} of benchmark {name!r} takes "
                              "none for the validation part that the tune's search points are evaluated on; raise "
                              "per_class")
        least = r.classes * (train - val)
        if drops_last and r.batch_size > least:
            raise ConfigError(f"config: key 'rehearsal.batch_size' = {r.batch_size}: more than the {least} training "
                              f"images of a task in the synthetic tree of benchmark {name!r}, and an optim layer sets "
                              f"drop_last, so its runs would take no step; use batch_size <= {least}")


def _experiment(cfg: Mapping[str, Any]) -> str:
    """The MLflow experiment of the rehearsal's runs: the config's under ``rehearsal/``, so that a rehearsal
    logged to the real runs' server never takes their place as a run's current one (``intact.current``)."""
    name = build_dataclass(TrackingConfig, dict(cfg.get("tracking") or {}), "tracking").experiment
    return name if name.startswith(REHEARSAL_EXPERIMENT) else REHEARSAL_EXPERIMENT + name


def _benchmark(name: str, entry: Mapping[str, Any], r: RehearsalConfig) -> dict[str, Any]:
    kind = entry.get("type")
    if kind not in BENCHMARKS:
        return {}  # validation names the unknown type
    domains = list(entry.get("domains") or BENCHMARKS[kind].tasks)[:r.domains]
    if kind not in TREE_KEYS:
        return {"domains": domains}  # embedded data (digits) or a plugin's: its own, fewer tasks
    return {**tree_keys(kind, DATA_DIR.format(benchmark=name)), "domains": domains, "image_size": r.image_size}


def _backbone(name: str, entry: Mapping[str, Any], r: RehearsalConfig) -> dict[str, Any]:
    if entry.get("weights") == "pretrain":
        return {"pretrain": {"epochs": r.epochs}}  # made in the DAG already: a shorter pretraining
    return {"model": stand_in(str(entry.get("model"))), "weights": WEIGHTS.format(backbone=name), "sha256": None}


def _cap_budgets(cfg: dict[str, Any], r: RehearsalConfig) -> None:
    """Every ``optim`` layer of the config, in place: the top-level section, and the protocols', per-method and
    per-benchmark ones where they set ``epochs`` or ``batch_size``; a paper-scale ``test_resize`` (Resize(256)
    before the 224-px crop) scaled to the rehearsal's pixels. ``experiments`` (not in a paper config's DAG) keep
    theirs."""
    cfg["optim"] = {**(cfg.get("optim") or {}), "epochs": r.epochs, "batch_size": r.batch_size}
    for layer in _optim_layers(cfg):
        layer.update({k: v for k, v in (("epochs", r.epochs), ("batch_size", r.batch_size)) if k in layer})
        if isinstance(layer.get("test_resize"), int) and layer["test_resize"] >= PAPER_IMAGE_SIZE:
            layer["test_resize"] = round(layer["test_resize"] * r.image_size / PAPER_IMAGE_SIZE)


def _optim_layers(node: Any) -> list[dict[str, Any]]:
    """Every mapping under a key ``optim`` below ``node`` (outside ``experiments`` and method sections)."""
    if not isinstance(node, dict):
        return []
    out = []
    for k, v in node.items():
        if k == "optim" and isinstance(v, dict):
            out.append(v)
        elif k not in ("experiments", "methods", "rehearsal"):
            out += _optim_layers(v)
    return out


def _cut_seeds(cfg: dict[str, Any], n: int) -> None:
    """Every seed list of the config cut to its first ``n`` seeds, in place."""
    cfg["run"]["seeds"] = list(cfg["run"]["seeds"])[:n]
    studies = cfg.get("studies") or {}
    for owner in [studies, *(s for s in studies.values() if isinstance(s, dict))]:
        for key in ("seeds", "selection_seeds"):
            if isinstance(owner.get(key), list):
                owner[key] = owner[key][:n]


def tree_params(cfg: Mapping[str, Any], benchmark: str) -> dict[str, Any]:
    """What the synthetic tree of ``benchmark`` is made of (the rule ``rehearsal_data``'s params)."""
    r, entry = settings(cfg), cfg["benchmarks"][benchmark]
    return {"type": entry["type"], "tasks": list(entry["domains"]), "per_class": r.per_class, "classes": r.classes,
            "seed": r.seed}


def make_tree(params: Mapping[str, Any], record: str | Path) -> dict[str, Any]:
    """Write the synthetic tree ``params`` describe (:func:`tree_params`) beside ``record`` (its folder emptied first),
    then ``record``: what was written, with a digest of every file (written last: a killed job leaves none)."""
    from intact.data.synthetic import write_tree
    from intact.hashing import files_digest
    from intact.io import write_json

    out = Path(record).parent
    for folder in (out / name for name in {*TREE_KEYS[params["type"]].values()}):
        shutil.rmtree(folder, ignore_errors=True)
    write_tree(params["type"], out, params["tasks"], params["per_class"], params["classes"], params["seed"])
    files = sorted(str(p) for p in out.rglob("*") if p.is_file() and p != Path(record))
    info = {**params, "files": len(files), "digest": files_digest(files), "banner": BANNER}
    write_json(record, info)
    return info


def banner(rehearsal: bool) -> str | None:
    """The line every table and figure of a rehearsal carries (None for real results)."""
    return BANNER if rehearsal else None
