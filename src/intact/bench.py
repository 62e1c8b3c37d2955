"""``intact bench``: the cost of a training step of ``coda_p`` and ``coda_p+intact`` at task 1, with and
without the feature caches, on a timm backbone with random weights (nothing is downloaded).

The method settings come from a config (by default ``configs/paper/imagenet_r.yaml`` over ``config.yaml``:
the paper's CODA-P pool on ViT-B/16); the images are synthetic, stored as the prepared benchmarks store
them (uint8, at the input size, flipped at random on the device), so a step runs the real loader, loss,
backward and optimizer. Task 0 is skipped (no training: its hypercube comes from one pass over the images)
and every row is measured at task 1, where the InTAct teacher and anchors are active.

Per row: seconds per step (median of ``--repeats`` timed steps after one warm-up step), backbone passes per
step (counted), seconds per evaluation batch (``predict`` at ``--batch``), peak memory (CUDA: allocated,
reset per row; CPU: the process's peak resident set, which only grows), total and trainable parameters,
and the seconds the caches took to build (once per task; not part of a step).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import resource
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from intact.cache import lookup, task_caches
from intact.config import resolve_run, validate_config
from intact.data.loader import eval_batches, train_batches
from intact.data.stored import StoredImages
from intact.efficiency import parameter_counts
from intact.io import write_json
from intact.methods import create_method
from intact.models.backbone import FrozenViT, create_vit
from intact.bench_args import add_arguments
from intact.train import build_optimizer

METHODS = ("coda_p", "coda_p+intact")


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_layered(paths: list[Path]) -> dict:
    """Config files layered in order (as ``snakemake --configfile`` does), validated; data and weights files
    need not exist (the bench uses only the method settings, on synthetic images and random weights)."""
    cfg: dict = {}
    for p in paths:
        cfg = _merge(cfg, yaml.safe_load(Path(p).read_text()) or {})
    validate_config(cfg, check_files=False)
    return cfg


class PassCounter:
    """Counts the backbone's forward passes: unprompted (the query) and prompted."""

    def __init__(self, backbone: FrozenViT):
        self.query = self.prompted = 0
        q, f = backbone.query, backbone.forward

        def query(x, *args, **kwargs):
            self.query += 1
            return q(x, *args, **kwargs)

        def forward(x, prefix=None):
            if prefix:
                self.prompted += 1
                return f(x, prefix)
            return query(x)

        backbone.query, backbone.forward = query, forward

    @property
    def total(self) -> int:
        return self.query + self.prompted


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def bench_row(cfg: dict, benchmark: str, method: str, cache: bool, *, model: str, batch: int, repeats: int,
              device: torch.device, amp: bool, classes: int, tasks: int, seed: int = 0) -> dict[str, Any]:
    """One row of the table: ``method`` at task 1 with (``cache``) or without the feature caches."""
    run = resolve_run(cfg, benchmark, method, seed)
    vit = create_vit(model)
    chans = int(vit.patch_embed.proj.in_channels)
    size = int(vit.patch_embed.img_size[0])
    backbone = FrozenViT(vit, (0.5,) * chans, (0.5,) * chans)
    run = dataclasses.replace(run, optim=dataclasses.replace(run.optim, batch_size=batch, feature_cache=cache, amp=amp))
    torch.manual_seed(seed)
    m = create_method(run, backbone, classes, tasks).to(device)
    n = batch * (repeats + 1)
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, size, size, chans), dtype=np.uint8)
    data = StoredImages(images, rng.integers(0, classes, size=n), size, augment=True, task=1)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if (device.type == "cuda" and amp) else nullcontext()
    # task 0 left untrained: its hypercube (needed by the InTAct terms at task 1) from one pass over the images
    m.begin_task(0, data)
    m.eval()
    with autocast:
        m.end_task(0, data)
    m.begin_task(1, data)
    m.train()
    counter = PassCounter(m.backbone)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    t0 = time.perf_counter()
    caches, record = task_caches(m, None, data, eval_split="test", batch_size=run.optim.eval_batch_size,
                                 device=device, amp=autocast, query_cache=None, enabled=cache)
    _sync(device)
    build_s = time.perf_counter() - t0
    opt, _ = build_optimizer(m, run.optim, repeats + 1)
    times, passes = [], []
    for x, y, *keys in train_batches(data, seed=seed, task=1, epoch=0, batch_size=batch, device=device, keys=True):
        before = counter.total
        _sync(device)
        t = time.perf_counter()
        with autocast, m.using(**{k: lookup(c, *keys) for k, c in caches.items()}):
            loss, _ = m.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        m.after_step()
        _sync(device)
        times.append(time.perf_counter() - t)
        passes.append(counter.total - before)
    # evaluation: predict on one batch, the query read from the cache when there is one
    m.eval()
    eval_times = []
    x = next(iter(eval_batches(data, batch, device)))[0]  # images 0..batch-1, unflipped: query rows [:batch, 0]
    q = caches["query"][:batch, 0] if "query" in caches else None
    with torch.no_grad():
        for _ in range(repeats + 1):
            _sync(device)
            t = time.perf_counter()
            with autocast, m.using(**({"query": q} if q is not None else {})):
                m.predict(x)
            _sync(device)
            eval_times.append(time.perf_counter() - t)
    counts = parameter_counts(m, m.num_trainable_parameters())
    return {
        "method": method, "cache": cache, "step_s": statistics.median(times[1:]),
        "passes_per_step": statistics.median(passes[1:]), "eval_batch_s": statistics.median(eval_times[1:]),
        "peak_mb": _peak_mb(device), "trainable_params": counts["trainable_parameters"],
        "total_params": counts["total_parameters"], "cache_build_s": build_s,
        "cache_record": record, "images_per_s": batch / statistics.median(times[1:]),
    }


def format_table(rows: list[dict]) -> str:
    head = f"{'method':<16}{'cache':>6}{'step_s':>9}{'passes':>8}{'eval_s':>9}{'img/s':>9}{'peak_mb':>10}{'trainable':>11}{'total':>12}{'build_s':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['method']:<16}{str(r['cache']).lower():>6}{r['step_s']:>9.3f}{r['passes_per_step']:>8g}"
                     f"{r['eval_batch_s']:>9.3f}{r['images_per_s']:>9.1f}{r['peak_mb']:>10.0f}{r['trainable_params']:>11,}"
                     f"{r['total_params']:>12,}{r['cache_build_s']:>9.2f}")
    by = {(r["method"], r["cache"]): r["step_s"] for r in rows}
    if all((m, c) in by for m in METHODS for c in (True, False)):
        lines.append(f"coda_p+intact / coda_p step (cached): {by[(METHODS[1], True)] / by[(METHODS[0], True)]:.2f}; "
                     f"uncached: {by[(METHODS[1], False)] / by[(METHODS[0], False)]:.2f}; "
                     f"coda_p cached / uncached: {by[(METHODS[0], True)] / by[(METHODS[0], False)]:.2f}")
    return "\n".join(lines)


def run_bench(args: argparse.Namespace) -> int:
    paths = args.config or [Path("config.yaml"), Path("configs/paper/imagenet_r.yaml")]
    cfg = load_layered(paths)
    benchmark = args.benchmark or cfg["run"]["benchmarks"][0]
    # the benchmark's task count sizes the prompt pool per task (ImageNet-R: 15 when domains are not listed)
    tasks = len(cfg["benchmarks"][benchmark].get("domains") or []) or 15
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for method in args.methods:
        for cache in (False, True):
            print(f"bench: {method} cache={str(cache).lower()} ...", file=sys.stderr, flush=True)
            rows.append(bench_row(cfg, benchmark, method, cache, model=args.model, batch=args.batch,
                                  repeats=args.repeats, device=device, amp=args.amp == "on", classes=args.classes,
                                  tasks=tasks))
    print(f"intact bench: {args.model}, batch {args.batch}, {device}"
          f"{' bf16' if device.type == 'cuda' and args.amp == 'on' else ' fp32'}, task 1, median of {args.repeats} steps, "
          f"method settings: {benchmark} ({tasks} tasks) from {', '.join(map(str, paths))}, {torch.get_num_threads()} CPU threads")
    print(format_table(rows))
    if args.json:
        write_json(args.json, {"model": args.model, "batch": args.batch, "device": str(device),
                               "amp": device.type == "cuda" and args.amp == "on", "repeats": args.repeats,
                               "config": [str(p) for p in paths], "benchmark": benchmark, "results": rows})
        print(f"wrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="intact bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return run_bench(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
