"""The per-run results files: R.csv and metrics.json, built from the per-task JSON records.

These (with train.json) are the source of truth for every table and figure: a machine holding only
the ``results/`` tree can regenerate all reports.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from intact.io import ArtifactError, damaged, read_json, redo_hint, write_json, write_text
from intact.metrics import summarize


#: metrics.json keys that must be finite for a run to enter a table (certificates may be absent or NaN)
FINITE_METRICS = ("aa", "aa_weighted", "aa_evolution", "forgetting_max", "forgetting_one_step", "bwt", "fwt_vs_chance", "caa")


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


def check_records(paths: Sequence[Path], records: Sequence[dict[str, Any]], reference: dict[str, Any], finite: str) -> None:
    """The per-task records of one run, in task order, must all be this run's (method, seed, config hash)
    and their field ``finite`` must hold no NaN / Inf: a foreign or diverged record never reaches R,
    metrics or a table."""
    for t, (path, rec) in enumerate(zip(paths, records)):
        if rec.get("task") != t:
            raise damaged(path, f"it is the record of task {rec.get('task')!r}, expected task {t}")
        for key in ("method", "seed", "config_hash"):
            if key in rec and key in reference and rec[key] != reference[key]:
                raise damaged(path, f"it records {key} = {rec[key]!r}, the run's train.json says {reference[key]!r}")
        bad = nonfinite_fields(rec.get(finite), finite)
        if bad:
            raise ArtifactError(f"{path} holds non-finite values ({', '.join(bad[:5])}): the run diverged and is "
                                f"kept out of every table; {redo_hint(path)} after fixing its settings")


def nonfinite_fields(obj: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the NaN / Inf numbers in a JSON record (loss terms, accuracies, metrics)."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [prefix or "<value>"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in nonfinite_fields(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in nonfinite_fields(v, f"{prefix}[{i}]")]
    return []


def collect_run(eval_paths: Sequence[Path], train_paths: Sequence[Path], r_csv: Path, metrics_json: Path, num_classes: int) -> dict[str, Any]:
    """Write ``R.csv`` and ``metrics.json`` of one (benchmark, method, seed) run (both listed in task order)."""
    trains = [read_json(p) for p in train_paths]
    evals = [read_json(p) for p in eval_paths]
    reference = {k: trains[0].get(k) for k in ("method", "seed", "config_hash")}
    check_records(train_paths, trains, reference, finite="epochs")      # the per-epoch loss terms
    check_records(eval_paths, evals, reference, finite="accuracy")
    R = accuracy_matrix(evals)
    write_text(r_csv, R.to_csv(float_format="%.4f"))
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
    write_json(metrics_json, record)
    return record


def load_metrics(paths: Sequence[Path]) -> pd.DataFrame:
    """One row per run from ``metrics.json`` files; a run with a non-finite metric is refused (a diverged
    run never reaches a table, even if its metrics were written by hand or by older code)."""
    rows = []
    for p in paths:
        rec = read_json(p)
        bad = [k for k in nonfinite_fields(rec) if k.split("[")[0].split(".")[0] in FINITE_METRICS]
        if bad:
            raise ArtifactError(f"{p} holds non-finite metrics ({', '.join(bad[:5])}): the run diverged and is kept out "
                                f"of every table; {redo_hint(p)} after fixing its settings")
        rows.append(rec)
    return pd.DataFrame(rows)
