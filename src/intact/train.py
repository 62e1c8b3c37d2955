"""Train one task from the previous task's state: the body of a ``train_task`` job.

Resumable at step granularity: after every epoch (and when SLURM signals the end of the time limit)
the job atomically writes ``checkpoint.pt`` with the trainable state, optimizer, scheduler and RNG
state plus the position in the epoch; a restarted job continues from there. Batch order is a pure
function of (seed, task, epoch), so a resumed run is bit-identical to an uninterrupted one on CPU.
"""

from __future__ import annotations

import math
import resource
import signal
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset
from tqdm import tqdm

from intact.cache import QueryCache, lookup, task_caches
from intact.config import OptimConfig, RunConfig
from intact.data import open_benchmark
from intact.data.loader import steps_per_epoch as count_steps, train_batches
from intact.efficiency import efficiency_record
from intact.guard import CHECK_EVERY, DivergenceGuard
from intact.io import damaged, load_checkpoint, load_tensors, save_checkpoint, save_tensors, write_json
from intact.methods import METHODS, create_method
from intact.methods.base import ContinualMethod
from intact.models.backbone import create_backbone
from intact.provenance import provenance
from intact.regularizers.hypercube import load_hypercubes, save_hypercubes
from intact.seeding import configure_torch, derive_seed, seed_everything

CHECKPOINT = "checkpoint.pt"


class Preempted(SystemExit):
    """Raised after the checkpoint is saved when the scheduler asks the job to stop."""


def lr_factor(schedule: str, epochs: int, steps_per_epoch: int):
    """Multiplier of the base learning rate as a function of the global step."""
    total = epochs * steps_per_epoch
    if schedule == "cosine_step":
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * step / total))
    if schedule == "cosine_epoch":
        # the reference code: lr_e = lr0 * cos(99 pi e / (200 (K - 1))), constant within an epoch
        return lambda step: math.cos(99 * math.pi * (step // steps_per_epoch) / (200 * max(epochs - 1, 1)))
    if schedule == "constant":
        return lambda step: 1.0
    raise ValueError(f"optim.schedule = {schedule!r}: expected cosine_step, cosine_epoch or constant")


def build_optimizer(method: ContinualMethod, o: OptimConfig, steps_per_epoch: int):
    opt = method.optimizer(method.param_groups(), weight_decay=o.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(o.schedule, o.epochs, steps_per_epoch))
    return opt, sched


def stored_by(run: RunConfig, task: int) -> dict[str, str]:
    """The metadata of a task's state / hypercube files: who wrote them (checked when they are loaded)."""
    return {"method": run.method, "task": str(task), "config_hash": run.hash()}


def load_method(run: RunConfig, manifest: Path, backbone_weights: Path, device: torch.device,
                state: Path | None = None, hypercubes: Path | None = None, state_task: int | None = None):
    """The benchmark and the method of ``run``, with a stored state (and hypercubes) if given; with
    ``state_task``, files written by another method, task or config are refused."""
    bench = open_benchmark(manifest)
    # the network family trains a whole network of its own: no frozen backbone to build
    backbone, digest = create_backbone(run.backbone, backbone_weights) if METHODS[run.base].uses_backbone else (None, None)
    method = create_method(run, backbone, bench.num_classes, bench.num_tasks)
    expect = stored_by(run, state_task) if state_task is not None else None
    if state is not None:
        tensors = load_tensors(state, expect)
        try:
            method.load_trainable_state(tensors)
        except (ValueError, RuntimeError) as err:
            raise damaged(state, str(err)) from None
    if hypercubes is not None:
        method.hypercubes = load_hypercubes(hypercubes, expect)
    return bench, method.to(device), digest


class _StopFlag:
    """Turns SIGTERM / SIGUSR1 (SLURM's time-limit warnings) into a checkpoint-and-exit request."""

    def __init__(self) -> None:
        self.raised: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_StopFlag":
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.raised = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def hypercube_data(run: RunConfig, bench, task: int, train_set: Dataset) -> Dataset:
    """The data whose features define the task's hypercube: its training data (the paper), or - only when
    asked for by name - the test sets of all tasks seen so far (the reference code; leaks test data)."""
    if run.intact is None or run.intact.hypercube_source == "train":
        return train_set
    warnings.warn(
        "intact.hypercube_source=test_seen builds the hypercube from the TEST sets of all tasks seen so far "
        "(the reference code's behaviour): reported test accuracy is no longer a clean estimate", stacklevel=2)
    return ConcatDataset([bench.eval_set(i, run.eval_split) for i in range(task + 1)])


def train_task(
    run: RunConfig,
    task: int,
    *,
    manifest: Path,
    backbone_weights: Path,
    out_dir: Path,
    prev_dir: Path | None = None,
    threads: int | None = None,
    progress: bool = True,
    max_steps: int | None = None,
    check_every: int = CHECK_EVERY,
    query_cache: Path | None = None,
    eval_out: Path | None = None,
) -> dict[str, Any]:
    """Train ``task`` and write ``state.safetensors``, ``hypercube.safetensors``, ``train.json`` to ``out_dir``.

    ``max_steps`` stops (after checkpointing) once that many optimizer steps ran in this call: a test
    hook that simulates a job killed mid-task. ``check_every``: optimizer steps between two host reads of
    the divergence guard and the running losses (see :mod:`intact.guard`). ``query_cache``: the folder of
    the benchmark's stored query cache (see :mod:`intact.cache`; used when ``optim.feature_cache``).
    ``eval_out``: also evaluate the trained state on every task's test set there (``eval.json``, column
    ``task`` of R, as :func:`intact.evaluate.evaluate_task` would from the saved state) - one job, not two.
    """
    out_dir = Path(out_dir)
    device = configure_torch(threads)
    seed_everything(derive_seed(run.seed, task, "init"))
    # a method that starts every task afresh (joint) neither needs nor loads the previous task's folder
    continues = METHODS[run.base].loads_previous_state
    if task > 0 and prev_dir is None and continues:
        raise ValueError(f"task {task} needs the previous task's folder")
    prev = Path(prev_dir) if (prev_dir is not None and continues) else None
    bench, method, backbone_sha = load_method(
        run, manifest, backbone_weights, device,
        state=prev / "state.safetensors" if prev else None,
        hypercubes=prev / "hypercube.safetensors" if prev else None, state_task=task - 1,
    )
    train_set = method.training_data(bench, task)
    method.begin_task(task, train_set)
    o = run.optim
    n = len(train_set)
    steps_per_epoch = count_steps(n, o.batch_size, o.drop_last)
    opt, sched = build_optimizer(method, o, steps_per_epoch)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if (device.type == "cuda" and o.amp) else nullcontext()
    stored_queries = QueryCache(query_cache, bench, backbone_sha) if (query_cache and o.feature_cache) else None
    caches, cache_record = task_caches(method, bench, train_set, eval_split=run.eval_split, batch_size=o.eval_batch_size,
                                       device=device, amp=amp, query_cache=stored_queries, enabled=o.feature_cache,
                                       progress=progress)

    ckpt_path = out_dir / CHECKPOINT
    run_hash = run.hash()
    epoch, step, history, running, elapsed, resumed_from, guard_state = 0, 0, [], {}, 0.0, None, None
    if ckpt_path.exists():
        ck = load_checkpoint(ckpt_path)
        if ck["run_hash"] == run_hash and ck["task"] == task:
            method.load_trainable_state(ck["method"])
            opt.load_state_dict(ck["optimizer"])
            sched.load_state_dict(ck["scheduler"])
            torch.set_rng_state(ck["rng_cpu"])
            epoch, step, history, running, elapsed = ck["epoch"], ck["step"], ck["history"], ck["running"], ck["elapsed"]
            guard_state = ck.get("guard")
            resumed_from = {"epoch": epoch, "step": step}
            print(f"resuming task {task} from epoch {epoch} step {step}", file=sys.stderr)
        else:
            # never continue from another configuration's or task's checkpoint: start the task afresh
            print(f"ignoring {ckpt_path}: it belongs to config {ck['run_hash']} task {ck['task']}, "
                  f"not {run_hash} task {task}; the task starts from its first epoch", file=sys.stderr)

    guard = DivergenceGuard(
        f"{run.benchmark.name}/{run.method}/seed{run.seed}", task, o.epochs, steps_per_epoch,
        [(k, p) for k, p in method.named_parameters() if p.requires_grad], device,
        policy=o.on_nonfinite, max_skipped_fraction=o.max_skipped_fraction, start_step=epoch * steps_per_epoch + step)
    guard.load_state_dict(guard_state)
    # per-epoch sums of the loss terms (weighted by batch size), kept on the device in float64 - the
    # same arithmetic as summing Python floats, so records are unchanged, without a sync per step
    sums = {k: torch.tensor(v, dtype=torch.float64, device=device) for k, v in running.items() if k != "_n"}
    count = running.get("_n", 0.0)

    def kept() -> str:
        return (f"the last good checkpoint {ckpt_path} is kept" if ckpt_path.exists()
                else "no checkpoint had been written, so none is kept")

    def checkpoint() -> None:
        guard.check(kept())  # never save a diverged state
        save_checkpoint(ckpt_path, {
            "run_hash": run_hash, "task": task, "epoch": epoch, "step": step,
            "method": method.trainable_state(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "rng_cpu": torch.get_rng_state(), "history": history,
            "running": {**{k: float(v) for k, v in sums.items()}, "_n": count} if count else {},
            "elapsed": elapsed + time.perf_counter() - t0, "guard": guard.state_dict(),
        })

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    steps_done = 0
    method.train()
    with _StopFlag() as stop:
        while epoch < o.epochs:
            batches = train_batches(train_set, seed=run.seed, task=task, epoch=epoch, batch_size=o.batch_size,
                                    first=step, device=device, drop_last=o.drop_last, keys=bool(caches))
            bar = tqdm(batches, total=steps_per_epoch, initial=step,
                       desc=f"{run.method} task {task} epoch {epoch + 1}/{o.epochs}", disable=not progress,
                       file=sys.stderr, mininterval=1.0, leave=False)
            epoch_start = time.perf_counter()
            for x, y, *keys in bar:
                cached = {k: lookup(c, *keys) for k, c in caches.items()}
                with amp, method.using(**cached):
                    loss, terms = method.loss(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                good = not guard.skips or guard.batch_ok(loss, terms, epoch, step)
                if good:
                    opt.step()
                    method.after_step()
                sched.step()  # a skipped batch still advances the schedule: lr stays a function of the step
                guard.observe(loss, terms, with_terms=not guard.skips)
                step += 1
                steps_done += 1
                if good:
                    for k, v in terms.items():
                        term = v.detach().to(torch.float64) * len(y)
                        sums[k] = sums[k] + term if k in sums else term
                    count += len(y)
                if steps_done % check_every == 0:
                    guard.check(kept())
                    if count and "ce" in sums:
                        bar.set_postfix(ce=f"{float(sums['ce']) / count:.3f}", refresh=False)
                if stop.raised is not None or (max_steps is not None and steps_done >= max_steps):
                    checkpoint()
                    raise Preempted(f"stopped at epoch {epoch} step {step} (signal {stop.raised}); checkpoint saved")
            guard.check(kept())
            seconds = time.perf_counter() - epoch_start
            history.append({"epoch": epoch + 1, **{k: float(v) / max(count, 1) for k, v in sums.items()},
                            "seconds": seconds, "images_per_s": count / max(seconds, 1e-9)})
            epoch, step, sums, count = epoch + 1, 0, {}, 0.0
            checkpoint()

    train_seconds = elapsed + time.perf_counter() - t0
    method.eval()
    hyper_data = hypercube_data(run, bench, task, train_set)
    # the hypercube pass walks the training images in order, unflipped: variant 0 of the query cache
    queries = caches["query"][:, 0] if ("query" in caches and hyper_data is train_set) else None
    with method.using(**({"eval_query": queries} if queries is not None else {})):
        end = method.end_task(task, hyper_data)
    # after training and the hypercube pass: the timed inference batches (eval mode, no_grad) change nothing stored
    efficiency = efficiency_record(method, train_set, o.batch_size, device, steps=o.epochs * steps_per_epoch)
    peak = (torch.cuda.max_memory_allocated() if device.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    record = {
        "benchmark": run.benchmark.name, "method": run.method, "seed": run.seed, "task": task,
        "task_name": bench.task_names[task], "config_hash": run_hash,
        "train_images": n, "epochs": history, "seconds": train_seconds,
        "images_per_s": n * o.epochs / max(train_seconds, 1e-9), "peak_memory_mb": peak / 2**20,
        **efficiency,  # total / trainable parameters, train_batches, inference_batch_seconds, device
        "certificate": end.pop("certificate", None), **end,
        "resumed_from": resumed_from, "nonfinite": guard.summary(), "feature_cache": cache_record, "backbone_sha256": backbone_sha,
        "data_sha256": bench.manifest["files"], "provenance": provenance(), "config": run.to_dict(),
    }
    try:
        save_tensors(out_dir / "state.safetensors", method.trainable_state(), stored_by(run, task))
        save_hypercubes(out_dir / "hypercube.safetensors", method.hypercubes, stored_by(run, task))
        write_json(out_dir / "train.json", record)
        if eval_out is not None:
            # before the checkpoint goes: a job killed while evaluating resumes after its last epoch
            from intact.evaluate import evaluate_method

            evaluate_method(run, task, bench, method, device, Path(eval_out), query_cache=query_cache,
                            backbone_sha256=backbone_sha)
    except BaseException:
        # a failed write (a full disk) leaves no part of the task's results that could pass for finished
        for name in ("state.safetensors", "hypercube.safetensors", "train.json"):
            (out_dir / name).unlink(missing_ok=True)
        if eval_out is not None:
            Path(eval_out).unlink(missing_ok=True)
        raise
    ckpt_path.unlink(missing_ok=True)
    return record
