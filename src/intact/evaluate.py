"""Accuracy of one task-state on every task's test set: column ``t`` of the accuracy matrix R."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from intact.cache import QueryCache, cache_tasks, query_settings
from intact.settings import RunConfig
from intact.hashing import sha256_file
from intact.guard import NonFiniteError
from intact.io import write_record
from intact.methods.shared.base import ContinualMethod, batches
from intact.methods.shared.frozen import reads_benchmark_queries, serving_pass
from intact.seeding import configure_torch
from intact.restore import build_method


@torch.no_grad()
def accuracy(method: ContinualMethod, data: Dataset, queries: torch.Tensor | None = None) -> tuple[float, int]:
    """Top-1 accuracy (%) of ``method`` on ``data`` and the number of samples; ``queries``: the cached
    query of every image of ``data`` in order (one backbone pass per image instead of two). A NaN or Inf logit is an
    error (:class:`~intact.guard.NonFiniteError`): its argmax would be counted as a prediction."""
    method.eval()
    device = next(method.parameters()).device
    correct, unfinite = (torch.zeros((), dtype=torch.int64, device=device) for _ in range(2))
    total = 0
    with serving_pass(method, data, queries):
        for x, y in batches(method, data):
            logits = method.predict(x)
            correct += (logits.argmax(1) == y).sum()  # summed on the device: one host read per task
            unfinite += (~torch.isfinite(logits)).any(1).sum()
            total += len(y)
    if int(unfinite):
        raise NonFiniteError(f"{int(unfinite)} of {total} images give a NaN or Inf logit: no accuracy is recorded "
                             "(a diverged state, or a damaged input: a query cache, the weights)")
    return 100.0 * int(correct) / max(total, 1), total


def check_eval_sets(run: RunConfig, bench: Any) -> None:
    """Raise ValueError naming the first task whose evaluation split (``run.eval_split``) holds no image: a training
    job that will evaluate checks this before it trains."""
    for i in range(bench.num_tasks):
        if len(bench.eval_set(i, run.eval_split)) == 0:
            raise ValueError(_no_image(run, bench, i))


def _no_image(run: RunConfig, bench: Any, task: int) -> str:
    return (f"run {run.benchmark.name}/{run.method}/seed{run.seed}: task {task} ({bench.task_names[task]!r}) has no "
            f"{run.eval_split} image to evaluate on, so its accuracy is undefined"
            + (" (val_fraction leaves none of any class)" if run.eval_split == "val" else ""))


def evaluate_task(run: RunConfig, task: int, *, manifest: Path, backbone_weights: Path, state: Path,
                  out_path: Path, threads: int | None = None, query_cache: Path | None = None) -> dict[str, Any]:
    """Evaluate the state after ``task`` on all tasks' evaluation sets; write ``eval.json``. With
    ``query_cache`` (and ``optim.feature_cache``) the queries are read from the benchmark's query cache."""
    device = configure_torch(threads)
    bench, method, digest = build_method(run, manifest, backbone_weights, device, state=state, state_task=task)
    method.task = task
    return evaluate_method(run, task, bench, method, device, out_path, query_cache=query_cache, backbone_sha256=digest,
                           state_sha256=sha256_file(state) if state is not None else None)


def evaluate_method(run: RunConfig, task: int, bench, method: ContinualMethod, device: torch.device, out_path: Path,
                    *, query_cache: Path | None = None, backbone_sha256: str | None = None,
                    state_sha256: str | None = None) -> dict[str, Any]:
    """Column ``task`` of R for a loaded ``method`` (also called by the training job right after training);
    ``state_sha256``: the sha256 of the ``state.safetensors`` it holds (the record says what it evaluated)."""
    cached = (QueryCache(query_cache, bench, backbone_sha256,
                         query_settings(run.backbone, bench, device, run.optim.amp))
              if (query_cache and run.optim.feature_cache and reads_benchmark_queries(method)) else None)
    t0 = time.perf_counter()
    accs, sizes = [], []
    for i in range(bench.num_tasks):
        data = bench.eval_set(i, run.eval_split)
        if len(data) == 0:  # prepared images gave no batch and 0 %, which entered R as a number
            raise ValueError(_no_image(run, bench, i))
        tasks = cache_tasks(data, bench, "test", run.eval_split) if cached is not None else None
        queries = cached.for_tasks("test", tasks, device) if tasks is not None else None
        acc, n = accuracy(method, data, None if queries is None else queries[:, 0])
        accs.append(acc)
        sizes.append(n)
    record = {
        "benchmark": run.benchmark.name, "method": run.method, "seed": run.seed, "task": task,
        "eval_split": run.eval_split, "task_names": bench.task_names,
        "accuracy": accs, "samples": sizes, "seconds": time.perf_counter() - t0,
        "config_hash": run.hash(), "state_sha256": state_sha256,
    }
    return write_record(out_path, record)
