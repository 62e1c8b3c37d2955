"""A finished run folder read into what MLflow gets: params, metrics, tags, artifacts (no mlflow).

Everything is read from the files the pipeline already wrote (``R.csv``, ``metrics.json``, ``task*/train.json``,
``task*/eval.json`` through :func:`intact.results.read_run`, which checks them against each other;
``task*/hypercube.safetensors``); nothing here can change or lose a result.

What lands in MLflow
--------------------
- params: the resolved run config (``train.json["config"]``) flattened with ``.`` (``optim.lr_head``,
  ``intact.lambda_var``, ``settings.pool_size``); lists and ``null`` as JSON.
- metrics, three kinds of step (all with one timestamp, the logging time):
  * per epoch, ``step`` = global epoch index across tasks (0-based; task t's epochs follow task t-1's):
    ``train/<term>`` for every number of an epoch record (``ce``, ``intdrift``, ``feat``, ``var``,
    ``align``, ``feat_gate``, ``acc``, ``seconds``, ``images_per_s``), and ``train/task`` = t, so a
    chart's x-axis can be read back as tasks.
  * per task, ``step`` = task index t: ``acc/<task name>`` (column t of R: accuracy on every task after
    training task t), ``aa_evolution`` (AA over the tasks seen so far), ``certificate`` and
    ``sampled_drift`` (from task 1 on), ``hypercube/<layer>/<task|cumulative>/<stat>`` (log_volume,
    mean_width, radius, dim), ``inside_previous/<layer>/<stat>``, ``task/<stat>`` (train_seconds,
    images_per_s, peak_memory_mb, train_images, eval_seconds).
  * final, ``step`` = T-1 (after the last task): every number of ``metrics.json`` (``aa``, ``caa``,
    ``forgetting_max``, ``forgetting_one_step``, ``bwt``, ``aa_weighted``, ``fwt_vs_chance``,
    ``train_seconds``, ``trainable_parameters``).
- artifacts: ``R.csv``, ``metrics.json``, ``config.json``, ``tasks/task<t>/{train,eval}.json`` and
  ``hypercube.safetensors``, and ``figures/run_summary.png`` (the R heat map and the AA evolution).
- tags: ``intact.run`` (``<benchmark>/<method>/seed<k>``), ``intact.run_key`` (``intact.run`` +
  ``@<config hash>``), ``intact.config_hash``, ``intact.content_hash``, ``intact.current``,
  ``mlflow.source.git.commit`` / ``intact.git_commit``, ``intact.data_sha256.<file>``,
  ``intact.backbone_sha256``, ``intact.snakemake_rules`` (the rules that produced the results),
  ``intact.slurm_job_ids`` (``task:id,...``), ``intact.packages.<name>``, ``intact.plugins.<name>`` (a plugin the
  run loaded: distribution, version, digest), ``intact.host``, ``intact.device``, ``intact.results_dir``,
  ``intact.tracked_by`` (``track_run`` or the command line).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from intact.io import damaged
from intact.plugins import Plugin
from intact.stored_run import StoredRun
from intact.tracking.settings import TRACKER_VERSION
from intact.train_record import FILENAME as TRAIN_JSON, HYPERCUBE
from intact.tune import read_choice


@dataclass(frozen=True)
class RunFolder(StoredRun):
    """A finished run as :func:`intact.results.read_run` reads it, with the files MLflow gets and the tune choice."""

    files: Mapping[str, Path] = field(default_factory=dict)  #: artifact path in MLflow -> local file
    tune: dict[str, Any] | None = None  #: the tune study's choice that asked for this run (intact.tune), if any

    def content_hash(self) -> str:
        """sha256 over the tracker version and every input file's name and bytes."""
        h = hashlib.sha256(f"intact.tracking v{TRACKER_VERSION}\n".encode())
        for name in sorted(self.files):
            h.update(f"{name}\n".encode())
            h.update(hashlib.sha256(self.files[name].read_bytes()).digest())
        return h.hexdigest()


def read_run_folder(path: str | os.PathLike, config_hash: str | None = None) -> RunFolder:
    """A finished run folder, read and checked by :func:`intact.results.read_run` (a clear error names the
    missing, damaged, edited or inconsistent file; ``config_hash``: the hash its config gives now), every task's
    state and hypercube included, with the artifact files MLflow gets."""
    from intact.results import read_run  # numpy and pandas: not at import (the Snakefile imports this package)

    path = Path(path)
    run = read_run(path, config_hash=config_hash, tensors=True)
    files = {"R.csv": path / "R.csv", "metrics.json": path / "metrics.json"}
    for t in range(len(run.evals)):
        for name in (TRAIN_JSON, "eval.json", HYPERCUBE):
            f = path / f"task{t}" / name
            if not f.is_file():
                raise damaged(f, f"missing (metrics.json says {len(run.evals)} tasks)")
            files[f"tasks/task{t}/{name}"] = f
    tune = tune_choice(path, run.metrics)
    if tune is not None:
        files[f"tune/{tune['path'].parent.name}/choice.json"] = tune["path"]
    return RunFolder(**{f.name: getattr(run, f.name) for f in fields(StoredRun)}, files=files, tune=tune)


def tune_choice_files(path: Path, benchmark: str) -> list[Path]:
    """The tune study's choice records of ``benchmark`` beside the run folder ``path``
    (``<results>/runs/<benchmark>/<method>/seed<k>`` -> ``<results>/tune/<benchmark>/<run>/choice.json``), sorted;
    none for a folder outside a results tree."""
    return sorted((path.parents[3] / "tune" / benchmark).glob("*/choice.json")) if len(path.parents) >= 4 else []


def tune_choice(path: Path, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tune study's choice record (:func:`tune_choice_files`) that chose this run for the test split, with its
    path; None for any other run."""
    if metrics["eval_split"] != "test":
        return None
    for f in tune_choice_files(path, str(metrics["benchmark"])):
        choice = read_choice(f)
        if choice["chosen"]["final_name"] == metrics["method"]:
            return {**choice, "path": f}
    return None


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> {"a.b.c": value as text}; strings as is, everything else as JSON."""
    out: dict[str, str] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, str) else json.dumps(v)
    return out


_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")


def _key(name: str) -> str:
    return _BAD_KEY_CHARS.sub("_", name)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


@dataclass(frozen=True)
class Payload:
    """What one run logs: params, metrics (key, value, step), tags. Pure data, no mlflow."""

    params: dict[str, str]
    metrics: list[tuple[str, float, int]]
    tags: dict[str, str]


def build_payload(run: RunFolder) -> Payload:
    """Params, metrics and tags of one run folder (see the module docstring for the names)."""
    return Payload(params=_params(run), metrics=_metrics(run), tags={_key(k): v[:8000] for k, v in _tags(run).items()})


def _params(run: RunFolder) -> dict[str, str]:
    params = flatten(run.config)
    params.setdefault("method", run.method)
    params.setdefault("seed", str(run.seed))
    params["eval_split"] = run.eval_split
    params["num_tasks"] = str(run.num_tasks)
    params["task_names"] = json.dumps(run.metrics.get("task_names"))
    return params


def _metrics(run: RunFolder) -> list[tuple[str, float, int]]:
    metrics: list[tuple[str, float, int]] = []

    def add(key: str, value: Any, step: int) -> None:
        v = _number(value)
        if v is not None:
            metrics.append((_key(key), v, step))

    g = 0
    for t, rec in enumerate(run.trains):  # per epoch, global step
        for ep in rec.get("epochs", []):
            add("train/task", t, g)
            for k, v in ep.items():
                if k != "epoch":
                    add(f"train/{k}", v, g)
            g += 1
    aa_evolution = run.metrics.get("aa_evolution") or []
    for t, (tr, ev) in enumerate(zip(run.trains, run.evals)):  # per task, step = task
        for name, acc in zip(ev["task_names"], ev["accuracy"]):
            add(f"acc/{name}", acc, t)
        if t < len(aa_evolution):
            add("aa_evolution", aa_evolution[t], t)
        add("certificate", tr.get("certificate"), t)
        add("sampled_drift", tr.get("sampled_drift"), t)
        for layer, kinds in (tr.get("hypercube") or {}).items():
            for kind, stats in kinds.items():
                for stat, v in (stats or {}).items():
                    add(f"hypercube/{layer}/{kind}/{stat}", v, t)
        for layer, stats in (tr.get("inside_previous") or {}).items():
            for stat, v in (stats or {}).items():
                add(f"inside_previous/{layer}/{stat}", v, t)
        add("task/train_seconds", tr.get("seconds"), t)
        for k in ("images_per_s", "peak_memory_mb", "train_images"):
            add(f"task/{k}", tr.get(k), t)
        add("task/eval_seconds", ev.get("seconds"), t)
    last, per_task = run.num_tasks - 1, {k for k, _, _ in metrics}
    for k, v in run.metrics.items():  # final, step = last task
        if k not in ("seed", "num_tasks") and k not in per_task:
            add(k, v, last)
    return metrics


def _tags(run: RunFolder) -> dict[str, str]:
    tags = {
        "intact.run": run.run_name,
        "intact.run_key": run.run_key,
        "intact.config_hash": run.config_hash,
        "intact.benchmark": run.benchmark,
        "intact.method": run.method,
        "intact.seed": str(run.seed),
        "intact.eval_split": run.eval_split,
        "intact.results_dir": str(run.path.resolve()),
        "intact.tracker_version": str(TRACKER_VERSION),
        "mlflow.note.content": (
            f"{run.run_name} (config {run.config_hash}). Source of truth: {run.path.resolve()} "
            "(R.csv, metrics.json, task*/train.json, eval.json); this run is a view logged by intact.tracking."
        ),
    }
    if run.tune is not None:  # this run is a tune study's chosen point: what chose it, on what evidence
        chosen = run.tune["chosen"]
        tags.update({"intact.tune.run": run.tune["run"], "intact.tune.chosen": chosen["final_name"],
                     "intact.tune.settings": json.dumps(chosen["settings"]),
                     "intact.tune.val_aa_mean": f"{chosen['val_aa_mean']:.4f}",
                     "intact.tune.selection_seeds": json.dumps(run.tune["selection_seeds"]),
                     "intact.tune.points": str(len(run.tune["points"])), "intact.tune.tie": str(run.tune["tie"])})
    provs = [tr.get("provenance") or {} for tr in run.trains]
    commits = list(dict.fromkeys(p["git_commit"] for p in provs if p.get("git_commit")))
    if commits:
        tags["mlflow.source.git.commit"] = commits[-1]
        tags["intact.git_commit"] = ",".join(commits)
    rules = sorted({p["snakemake_rule"] for p in provs if p.get("snakemake_rule")})
    if rules:
        tags["intact.snakemake_rules"] = ",".join(rules)
    tags["intact.tracked_by"] = os.environ.get("INTACT_RULE") or "python -m intact.tracking"
    jobs = [f"{t}:{p['slurm_job_id']}" for t, p in enumerate(provs) if p.get("slurm_job_id")]
    if jobs:
        tags["intact.slurm_job_ids"] = ",".join(jobs)
    for key in ("host", "device", "python"):
        values = list(dict.fromkeys(str(p[key]) for p in provs if p.get(key)))
        if values:
            tags[f"intact.{key}"] = ",".join(values)
    for name, version in (provs[-1].get("packages") or {}).items():
        tags[f"intact.packages.{name}"] = str(version)
    for p in provs[-1].get("plugins") or ():
        tags[f"intact.plugins.{p['name']}"] = str(Plugin(**p))
    backbone = list(dict.fromkeys(tr["backbone_sha256"] for tr in run.trains if tr.get("backbone_sha256")))
    if backbone:
        tags["intact.backbone_sha256"] = ",".join(backbone)
    for name, sha in (run.trains[-1].get("data_sha256") or {}).items():
        tags[f"intact.data_sha256.{name}"] = str(sha)
    return tags


def run_figure(run: RunFolder, path: Path) -> Path:
    """The run's own figure: R as a heat map and its AA evolution."""
    from intact.report.plots import plt, write_figure  # matplotlib: not at import (the Snakefile imports this)

    names = run.evals[0]["task_names"]
    R = [[run.evals[j]["accuracy"][i] for j in range(run.num_tasks)] for i in range(len(names))]
    T = run.num_tasks
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(4.0 + 0.45 * T, 3.2 + 0.2 * T),
                                   gridspec_kw={"width_ratios": [1.2, 1]})
    im = ax1.imshow(R, vmin=0, vmax=100, cmap="viridis")
    for i in range(len(names)):
        for j in range(T):
            ax1.text(j, i, f"{R[i][j]:.0f}", ha="center", va="center", fontsize=6, color="w" if R[i][j] < 60 else "k")
    ax1.set_xticks(range(T), names[:T], fontsize=7, rotation=90)
    ax1.set_yticks(range(len(names)), names, fontsize=7)
    ax1.set_xlabel("after training on")
    ax1.set_ylabel("accuracy on")
    ax1.set_title("R: accuracy (%)", fontsize=9)
    fig.colorbar(im, ax=ax1, fraction=0.046)
    aa = run.metrics.get("aa_evolution") or []
    ax2.plot(range(len(aa)), aa, marker="o", ms=3)
    ax2.set_xticks(range(len(aa)), names[:len(aa)], fontsize=7, rotation=90)
    ax2.set_xlabel("after training on")
    ax2.set_ylabel("AA over seen tasks (%)")
    ax2.set_title(f"AA {run.metrics.get('aa', float('nan')):.1f}  BWT {run.metrics.get('bwt', float('nan')):.1f}",
                  fontsize=9)
    ax2.grid(alpha=0.3)
    fig.suptitle(f"{run.run_name} ({run.config_hash})", fontsize=9)
    fig.tight_layout()
    write_figure(fig, [path])
    return path
