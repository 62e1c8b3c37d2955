"""The per-run results files: R.csv and metrics.json, built from the per-task JSON records, and the one
reader of stored runs (:func:`read_run`), which checks both against those records.

The per-task records (``task<t>/eval.json``, ``task<t>/train.json``) are the primary ones; ``R.csv`` and
``metrics.json`` are derived from them. A machine holding only the ``results/`` tree's JSON and CSV files can
regenerate every report, and an edited or truncated derived file is refused, never read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from intact.io import ArtifactError, check_seal, check_tensors, damaged, read_json, redo_hint, write_json, write_text
from intact.metrics import summarize
from intact.stored_run import StoredRun
from intact.train_record import FILENAME as TRAIN_JSON, TENSOR_DIGESTS, tensor_metadata

#: the files of a run folder (and of each task folder) that :func:`read_run` reads
R_CSV, METRICS_JSON, EVAL_JSON = "R.csv", "metrics.json", "eval.json"
#: R.csv's number format, and how far a value read back may lie from its eval record (half its last digit)
R_FORMAT, R_TOLERANCE = "%.4f", 0.5e-4 + 1e-9

#: metrics.json keys that must be finite for a run to enter a table (certificates may be absent or NaN)
FINITE_METRICS = ("aa", "aa_weighted", "aa_evolution", "forgetting_max", "forgetting_one_step", "bwt", "fwt_vs_chance",
                  "caa")


def accuracy_matrix(evals: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """R as a DataFrame: rows = evaluated task, columns = after training task (both by name)."""
    evals = sorted(evals, key=lambda e: e["task"])
    names = evals[0]["task_names"]
    if [e["task"] for e in evals] != list(range(len(names))):
        raise ValueError(f"expected eval records for tasks 0..{len(names) - 1}, got {[e['task'] for e in evals]}")
    R = np.array([e["accuracy"] for e in evals]).T
    return pd.DataFrame(R, index=pd.Index(names, name="task"), columns=names)


def read_accuracy_matrix(path: str | Path) -> pd.DataFrame:
    return pd.read_csv(path, index_col=0)


def _first(per_layer: dict[str, Any]) -> dict[str, Any]:
    """The entry of the first protected layer (train.json keeps the layers in network order)."""
    return next(iter(per_layer.values()))


def _box(train: dict[str, Any], key: str) -> float | None:
    """``key`` of the first protected layer's cumulative box; None for a method that keeps none (S-Prompts)."""
    per_layer = train.get("hypercube") or {}
    return _first(per_layer)["cumulative"][key] if per_layer else None


def check_records(paths: Sequence[Path], records: Sequence[dict[str, Any]], reference: dict[str, Any],
                  finite: str, source: str = "the run's train.json") -> None:
    """The per-task records of one run, in task order, must all be this run's (``reference``: method, seed,
    config hash, as ``source`` gives them), their field ``finite`` must hold no NaN / Inf, and each must be as its
    job wrote it (:func:`intact.io.check_seal`): a foreign, diverged or edited record never reaches R, metrics,
    a table or a choice."""
    for t, (path, rec) in enumerate(zip(paths, records)):
        if not isinstance(rec, dict):
            raise damaged(path, "not a JSON object")
        if rec.get("task") != t:
            raise damaged(path, f"it is the record of task {rec.get('task')!r}, expected task {t}")
        for key in ("method", "seed", "config_hash"):
            if key in rec and key in reference and rec[key] != reference[key]:
                raise damaged(path, f"it records {key} = {rec[key]!r}, {source} says {reference[key]!r}")
        bad = nonfinite_fields(rec.get(finite), finite)
        if bad:
            raise ArtifactError(f"{path} holds non-finite values ({', '.join(bad[:5])}): the run diverged and is "
                                f"kept out of every table; {redo_hint(path)} after fixing its settings")
        check_seal(path, rec)


def nonfinite_fields(obj: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the NaN / Inf numbers in a JSON record (loss terms, accuracies, metrics)."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [prefix or "<value>"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in nonfinite_fields(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in nonfinite_fields(v, f"{prefix}[{i}]")]
    return []


def run_record(evals: Sequence[dict[str, Any]], trains: Sequence[dict[str, Any]],
               num_classes: int | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """R and the ``metrics.json`` record of one run from its per-task records (task order): what
    :func:`collect_run` writes and what :func:`read_run` checks the stored files against."""
    R = accuracy_matrix(evals)
    first = evals[0]
    record: dict[str, Any] = {
        "benchmark": first["benchmark"], "method": first["method"], "seed": first["seed"],
        "eval_split": first["eval_split"], "num_tasks": len(R), "task_names": list(R.index),
        **summarize(R.to_numpy(), sizes=np.array(first["samples"]), num_classes=num_classes),
        "certificate": [t.get("certificate") for t in trains],
        "sampled_drift": [t.get("sampled_drift") for t in trains],
        # the first protected layer's box (the head's: the [CLS] feature)
        "hypercube_log_volume": [_box(t, "log_volume") for t in trains],
        "hypercube_mean_width": [_box(t, "mean_width") for t in trains],
        "feat_gate": [t["epochs"][-1].get("feat_gate") for t in trains],
        "train_seconds": sum(t["seconds"] for t in trains),
        "trainable_parameters": trains[-1]["trainable_parameters"],
        "config_hash": trains[-1]["config_hash"],
        "provenance": trains[-1].get("provenance"),
    }
    return R, record


def _checked_records(eval_paths: Sequence[Path], train_paths: Sequence[Path], config_hash: str | None = None,
                     tensors: bool = False) -> tuple[list[dict], list[dict]]:
    """The per-task records of one run, read and checked (:func:`check_records`), each ``eval.json`` against its
    ``train.json`` (the state it evaluated is the one trained); ``config_hash``: the hash the run's config has
    now (a record of another configuration is refused), else the first ``train.json``'s; ``tensors``: also each
    task's state and hypercube where present (:func:`check_task_files`)."""
    missing = next((p for p in (*train_paths, *eval_paths) if not Path(p).is_file()), None)
    if missing is not None:
        raise damaged(missing, "missing")
    trains = [read_json(p) for p in train_paths]
    evals = [read_json(p) for p in eval_paths]
    first = trains[0] if trains and isinstance(trains[0], dict) else {}
    reference = {k: first.get(k) for k in ("method", "seed", "config_hash")}
    source = "the run's train.json"
    if config_hash is not None:
        reference["config_hash"], source = config_hash, "the run's config"
    check_records(train_paths, trains, reference, finite="epochs", source=source)      # the per-epoch loss terms
    check_records(eval_paths, evals, reference, finite="accuracy", source=source)
    for key, what in (("backbone_sha256", "backbone weights"), ("data_sha256", "prepared data")):
        other = next((p for p, train in zip(train_paths, trains) if train.get(key) != first.get(key)), None)
        if other is not None:   # a task redone after the weights or the data changed (a file kept by its mtime)
            raise ArtifactError(f"{other}: its task trained on other {what} than task 0 ({key} differs from "
                                f"{train_paths[0]}'s), so the run mixes two; redo the whole run: "
                                f"{redo_hint(train_paths[0])}")
    for t, (path, evaluation, train) in enumerate(zip(eval_paths, evals, trains)):
        if not evaluation.get("state_sha256") or evaluation["state_sha256"] != train.get("state_sha256"):
            raise damaged(path, f"it records the state {str(evaluation.get('state_sha256'))[:16]}..., the task's "
                                f"{TRAIN_JSON} {str(train.get('state_sha256'))[:16]}...: not the state trained")
        empty = [i for i, n in enumerate(evaluation.get("samples") or []) if n == 0]
        if empty:  # written before evaluation refused an empty split: its 0 % is no accuracy
            raise damaged(path, f"it evaluated task {empty[0]} on no image, so its accuracy there is undefined")
        if tensors:
            check_task_files(Path(path).parent, train, Path(train_paths[t]))
    return evals, trains


def check_task_files(task_dir: Path, train: Mapping[str, Any], train_path: Path) -> None:
    """The state and hypercube in ``task_dir`` are the ones ``train`` (its ``train.json``) recorded: readable,
    written for its method, task and config hash, with the sha256 it holds. A file that is not there is not
    checked: a copied ``results/`` tree holds only the JSON and CSV files (what reads the tensors requires them)."""
    expect = tensor_metadata(train["method"], train["task"], train["config_hash"])
    for name, key in TENSOR_DIGESTS.items():
        if (task_dir / name).exists():
            check_tensors(task_dir / name, expect, train.get(key), train_path)


def collect_run(eval_paths: Sequence[Path], train_paths: Sequence[Path], r_csv: Path, metrics_json: Path,
                num_classes: int, config_hash: str | None = None) -> dict[str, Any]:
    """Write ``R.csv`` and ``metrics.json`` of one (benchmark, method, seed) run (both listed in task order), from
    its task records once checked, with every task's state and hypercube (:func:`_checked_records`);
    ``config_hash``: the run's, as its config gives it now."""
    R, record = run_record(*_checked_records(eval_paths, train_paths, config_hash, tensors=True), num_classes)
    write_text(r_csv, R.to_csv(float_format=R_FORMAT))
    write_json(metrics_json, record)
    return record


# --------------------------------------------------------------------------------------------------
# The one reader of stored runs: every table, figure, choice and MLflow view reads a run through it


def read_run(path: str | Path, *, config_hash: str | None = None, tensors: bool = False) -> StoredRun:
    """Read the run folder ``path``, checking each derived record against its sources: ``R.csv`` against the
    tasks' ``eval.json``, ``metrics.json`` against what those records (and ``train.json``) give, and those
    records as their jobs wrote them (sealed, this run's, finite: :func:`_checked_records`; ``config_hash``: the
    hash the run's config has now; ``tensors``: every task's state and hypercube too, last task included, where
    present - what the tune choice and MLflow read; a table needs the JSON and CSV files only). A damaged,
    truncated, edited or foreign file is refused (:class:`~intact.io.ArtifactError`) in one line naming it
    and the ``snakemake --forcerun`` that redoes it: no edited number reaches a table or a choice."""
    path = Path(path)
    metrics = read_json(path / METRICS_JSON)
    bad = [k for k in nonfinite_fields(metrics) if k.split("[")[0].split(".")[0] in FINITE_METRICS]
    if bad:
        raise ArtifactError(f"{path / METRICS_JSON} holds non-finite metrics ({', '.join(bad[:5])}): the run "
                            f"diverged and is kept out of every table; {redo_hint(path / METRICS_JSON)} after fixing "
                            "its settings")
    first = path / "task0" / EVAL_JSON
    if not first.is_file():
        raise damaged(path / METRICS_JSON, f"its task records are missing ({first}): it cannot be checked")
    head = read_json(first)
    names = head.get("task_names") if isinstance(head, dict) else None
    if not isinstance(names, list) or not names:
        raise damaged(first, "it names no tasks (task_names)")
    tasks = range(len(names))
    evals, trains = _checked_records([path / f"task{t}" / EVAL_JSON for t in tasks],
                                     [path / f"task{t}" / TRAIN_JSON for t in tasks], config_hash, tensors)
    R, record = run_record(evals, trains, _num_classes(path, evals[0]["benchmark"]))
    _check_r_csv(path / R_CSV, R)
    for key, want in record.items():
        if key not in metrics or not _same(metrics[key], want):
            got = f"{key} = {_short(metrics[key])}" if key in metrics else f"no {key}"
            raise damaged(path / METRICS_JSON, f"it holds {got}, its task records give {_short(want)}")
    return StoredRun(record["benchmark"], record["method"], int(record["seed"]), metrics, tuple(trains), tuple(evals),
                     path)


def _check_r_csv(path: Path, R: pd.DataFrame) -> None:
    """``R.csv`` must hold R as its eval records give it, to the 4 decimals it is written with."""
    try:
        stored = pd.read_csv(path, index_col=0)
        values = stored.to_numpy(dtype=float)
    except FileNotFoundError:
        raise damaged(path, "missing") from None
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise damaged(path, f"not a readable accuracy matrix ({err})") from None
    if [list(map(str, x)) for x in (stored.index, stored.columns)] != [list(R.index), list(R.columns)]:
        raise damaged(path, f"it holds tasks {list(stored.index)} x {list(stored.columns)}, its eval records "
                            f"give {list(R.index)}")
    wrong = np.argwhere(~(np.abs(values - R.to_numpy()) <= R_TOLERANCE))
    if len(wrong):
        i, j = wrong[0]
        raise damaged(path, f"R[{R.index[i]}, {R.columns[j]}] = {values[i, j]}, task{j}/{EVAL_JSON} gives "
                            f"{R.iat[i, j]:.4f}")


def _num_classes(path: Path, benchmark: str) -> int | None:
    """The benchmark's class count from its prepared manifest beside the run's results folder
    (``<results>/data/<benchmark>/manifest.json``), None where the folder holds no manifest (then
    ``fwt_vs_chance`` is not checked)."""
    manifest = path.parents[3] / "data" / benchmark / "manifest.json" if len(path.parents) > 3 else None
    return int(read_json(manifest)["num_classes"]) if manifest is not None and manifest.is_file() else None


def _same(got: Any, want: Any) -> bool:
    """Equal as JSON values; numbers to 1e-9 (a copy on another machine may differ in the last bits), NaN to NaN
    (a certificate that could not be computed)."""
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        return (isinstance(got, (int, float)) and not isinstance(got, bool)
                and (math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9) or math.isnan(got) and math.isnan(want)))
    if isinstance(want, (list, tuple)):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return got == want


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class StoredResults:
    """A set of finished runs, each read by :func:`read_run`; ``stale``: runs skipped as of an older config;
    ``backbones``: benchmark -> the backbone its runs ran on, in words; ``declared``: benchmark -> run -> seeds
    that the config declares, stored or not (empty where the set was read from a list of files)."""

    runs: list[StoredRun] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    backbones: dict[str, str] = field(default_factory=dict)
    declared: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    #: read for a rehearsal's config (intact.rehearsal); :attr:`is_rehearsal` also holds where a run records it
    rehearsal: bool = False

    @classmethod
    def read(cls, metrics_paths: Sequence[str | Path], config_hashes: Mapping[str, str] | None = None) -> StoredResults:
        """The runs whose ``metrics.json`` files are listed (a report rule's inputs); ``config_hashes``: each run
        folder -> the hash its config gives now, checked (a run of an older config is refused)."""
        folders = [os.path.dirname(p) for p in map(str, metrics_paths)]
        return cls([read_run(f, config_hash=None if config_hashes is None else config_hashes[f]) for f in folders])

    @property
    def is_rehearsal(self) -> bool:
        """Whether a table or figure of these runs is a rehearsal's, and must say so on itself."""
        return self.rehearsal or any(r.rehearsal for r in self.runs)

    def benchmarks(self) -> list[str]:
        return list(dict.fromkeys(r.benchmark for r in self.runs))

    def select(self, benchmark: str, method: str) -> list[StoredRun]:
        return [r for r in self.runs if r.benchmark == benchmark and r.method == method]

    def methods(self, benchmark: str | None = None) -> list[str]:
        return list(dict.fromkeys(r.method for r in self.runs if benchmark in (None, r.benchmark)))

    def values(self, benchmark: str, method: str, key: str = "aa") -> dict[int, float]:
        """seed -> ``metrics.json[key]`` of the stored runs of (benchmark, method)."""
        return {r.seed: float(r.metrics[key]) for r in self.select(benchmark, method)}

