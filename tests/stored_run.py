"""Hand-built run folders for the tests of what reads stored results: per-task ``eval.json`` / ``train.json``
records and the ``R.csv`` / ``metrics.json`` that the real :func:`intact.results.collect_run` derives from them."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from intact.io import write_json
from intact.results import collect_run


def write_run(folder: Path, R: Sequence[Sequence[float]], *, benchmark: str = "digits", method: str = "coda_p",
              seed: int = 0, split: str = "test", config_hash: str = "h", num_classes: int = 10,
              certificate: float | None = None) -> Path:
    """A finished run in ``folder`` whose accuracy matrix is ``R`` (R[i][j]: task i after training task j)."""
    T = len(R)
    names = [f"d{i}" for i in range(T)]
    same = {"benchmark": benchmark, "method": method, "seed": seed, "config_hash": config_hash}
    for t in range(T):
        write_json(folder / f"task{t}/eval.json", {**same, "task": t, "task_names": names, "eval_split": split,
                                                  "accuracy": [R[i][t] for i in range(T)], "samples": [100] * T})
        write_json(folder / f"task{t}/train.json", {**same, "task": t, "epochs": [{"ce": 1.0, "feat_gate": 0.5}],
                                                   "seconds": 2.0, "trainable_parameters": 10,
                                                   "certificate": certificate, "provenance": {"host": "test"}})
    tasks = [folder / f"task{t}" for t in range(T)]
    collect_run([t / "eval.json" for t in tasks], [t / "train.json" for t in tasks], folder / "R.csv",
                folder / "metrics.json", num_classes)
    return folder
