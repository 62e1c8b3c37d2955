"""Accuracy of one task-state on every task's test set: column ``t`` of the accuracy matrix R."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from intact.config import RunConfig
from intact.data.loader import eval_batches
from intact.io import write_json
from intact.methods.base import ContinualMethod
from intact.seeding import configure_torch
from intact.train import load_method


@torch.no_grad()
def accuracy(method: ContinualMethod, data: Dataset, batch_size: int, device: torch.device) -> tuple[float, int]:
    """Top-1 accuracy (%) of ``method`` on ``data`` and the number of samples."""
    method.eval()
    correct, total = 0, 0
    for x, y in eval_batches(data, batch_size, device):
        correct += int((method.predict(x).argmax(1) == y).sum())
        total += len(y)
    return 100.0 * correct / max(total, 1), total


def evaluate_task(run: RunConfig, task: int, *, manifest: Path, backbone_weights: Path, state: Path,
                  out_path: Path, threads: int | None = None) -> dict[str, Any]:
    """Evaluate the state after ``task`` on all tasks' evaluation sets; write ``eval.json``."""
    device = configure_torch(threads)
    bench, method, _ = load_method(run, manifest, backbone_weights, device, state=state, state_task=task)
    method.task = task
    t0 = time.perf_counter()
    accs, sizes = [], []
    for i in range(bench.num_tasks):
        acc, n = accuracy(method, bench.eval_set(i, run.eval_split), run.optim.eval_batch_size, device)
        accs.append(acc)
        sizes.append(n)
    record = {
        "benchmark": run.benchmark.name, "method": run.method, "seed": run.seed, "task": task,
        "eval_split": run.eval_split, "task_names": bench.task_names,
        "accuracy": accs, "samples": sizes, "seconds": time.perf_counter() - t0,
        "config_hash": run.hash(),
    }
    write_json(out_path, record)
    return record
