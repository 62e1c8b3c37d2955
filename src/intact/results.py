"""The per-run results files: R.csv and metrics.json, built from the per-task JSON records.

These (with train.json) are the source of truth for every table and figure: a machine holding only
the ``results/`` tree can regenerate all reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from intact.io import read_json, write_json, write_text
from intact.metrics import summarize


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


def collect_run(eval_paths: Sequence[Path], train_paths: Sequence[Path], r_csv: Path, metrics_json: Path, num_classes: int) -> dict[str, Any]:
    """Write ``R.csv`` and ``metrics.json`` of one (benchmark, method, seed) run."""
    evals = [read_json(p) for p in eval_paths]
    trains = sorted((read_json(p) for p in train_paths), key=lambda r: r["task"])
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
        "hypercube_log_volume": [_first(t["hypercube"])["cumulative"]["log_volume"] for t in trains],
        "hypercube_mean_width": [_first(t["hypercube"])["cumulative"]["mean_width"] for t in trains],
        "feat_gate": [t["epochs"][-1].get("feat_gate") for t in trains],
        "train_seconds": sum(t["seconds"] for t in trains),
        "trainable_parameters": trains[-1]["trainable_parameters"],
        "config_hash": trains[-1]["config_hash"],
        "provenance": trains[-1].get("provenance"),
    }
    write_json(metrics_json, record)
    return record


def load_metrics(paths: Sequence[Path]) -> pd.DataFrame:
    """One row per run from ``metrics.json`` files."""
    return pd.DataFrame([read_json(p) for p in paths])
