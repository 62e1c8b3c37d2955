"""Hand-built run folders for the tests of what reads stored results: per-task ``eval.json`` / ``train.json``
records (sealed, as the jobs write them) beside a small state and hypercube, and the ``R.csv`` /
``metrics.json`` that the real :func:`intact.results.collect_run` derives from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

import torch

from intact.io import load_tensors, read_json, save_tensors, write_record
from intact.results import collect_run
from intact.train_record import TENSOR_DIGESTS, tensor_metadata


def write_run(folder: Path, R: Sequence[Sequence[float]], *, benchmark: str = "digits", method: str = "coda_p",
              seed: int = 0, split: str = "test", config_hash: str = "h", num_classes: int = 10,
              certificate: float | None = None, provenance: dict[str, Any] | None = None) -> Path:
    """A finished run in ``folder`` whose accuracy matrix is ``R`` (R[i][j]: task i after training task j)."""
    T = len(R)
    names = [f"d{i}" for i in range(T)]
    same = {"benchmark": benchmark, "method": method, "seed": seed, "config_hash": config_hash}
    for t in range(T):
        task = folder / f"task{t}"
        meta = tensor_metadata(method, t, config_hash)
        digests = {key: save_tensors(task / name, {"x": torch.full((2,), float(t))}, meta)
                   for name, key in TENSOR_DIGESTS.items()}
        write_record(task / "eval.json", {**same, "task": t, "task_names": names, "eval_split": split,
                                          "accuracy": [R[i][t] for i in range(T)], "samples": [100] * T,
                                          "state_sha256": digests["state_sha256"]})
        write_record(task / "train.json", {**same, "task": t, "epochs": [{"ce": 1.0, "feat_gate": 0.5}],
                                           "seconds": 2.0, "trainable_parameters": 10, "certificate": certificate,
                                           "provenance": provenance or {"host": "test"}, **digests})
    tasks = [folder / f"task{t}" for t in range(T)]
    collect_run([t / "eval.json" for t in tasks], [t / "train.json" for t in tasks], folder / "R.csv",
                folder / "metrics.json", num_classes)
    return folder


def rewrite_task(task: Path, train: dict[str, Any] | None = None, evaluation: dict[str, Any] | None = None) -> None:
    """Task folder ``task`` as a job of another run would have written it: ``train`` / ``evaluation`` update its
    records, which are sealed again, and its state and hypercube are stored again for the method, task and
    config hash its ``train.json`` then records (their digests follow)."""
    rec = {**read_json(task / "train.json"), **(train or {})}
    meta = tensor_metadata(rec["method"], rec["task"], rec["config_hash"])
    for name, key in TENSOR_DIGESTS.items():
        if (task / name).exists():
            rec[key] = save_tensors(task / name, load_tensors(task / name), meta)
    write_record(task / "train.json", rec)
    ev = {**read_json(task / "eval.json"), **(evaluation or {})}
    write_record(task / "eval.json", {**ev, **{k: rec[k] for k in ("method", "seed", "config_hash", "state_sha256")}})
