"""Train one task from the previous task's state: the body of a ``train_task`` job.

Read top to bottom, :func:`train_task` is four steps sharing one :class:`TaskRun`: :func:`set_up` (the
method with the previous task's state, optimizer, feature caches) and :func:`resume` (from this task's
checkpoint), :func:`train_epoch` per epoch, :func:`end_of_task` (hypercubes, efficiency) and
:func:`write_outputs` (state, hypercubes, ``train.json``: :class:`~intact.train_record.TrainRecord`).

Resumable at step granularity: after every epoch (and when SLURM signals the end of the time limit)
the job atomically writes ``checkpoint.pt`` with the trainable state, optimizer, scheduler and the global RNGs'
states (torch's, CUDA's, Python's, NumPy's: a method may draw from any) plus the position in the epoch; a
restarted job continues from there. Batch order is a pure function of (seed, task, epoch), and nothing draws
from the global RNGs between their restore and the next step, so a resumed run is bit-identical to an
uninterrupted one on CPU.
"""

from __future__ import annotations

import math
import signal
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset
from tqdm import tqdm

from intact.cache import QueryCache, lookup, query_settings, task_caches
from intact.data.loader import steps_per_epoch as count_steps, train_batches
from intact.efficiency import efficiency_record, peak_memory_bytes
from intact.evaluate import check_eval_sets, evaluate_method
from intact.guard import CHECK_EVERY, DivergenceGuard, check_saved
from intact.io import load_checkpoint, save_checkpoint, save_tensors, write_record
from intact.methods import METHODS
from intact.methods.shared.base import (ContinualMethod, batch_loss, enter_task, leave_task, load_trainable_state,
                                        trainable_state)
from intact.methods.shared.frozen import serving, serving_pass
from intact.methods.shared.penalties import kept_hypercubes
from intact.protocols import optimizer_name
from intact.provenance import provenance
from intact.regularizers.hypercube import save_hypercubes
from intact.restore import build_method, foreign_checkpoint, task_inputs, written_by
from intact.seeding import configure_torch, derive_seed, rng_state, seed_everything, set_rng_state
from intact.settings import OptimConfig, RunConfig
from intact.train_record import FILENAME as TRAIN_JSON, HYPERCUBE, STATE, TrainRecord

CHECKPOINT = "checkpoint.pt"


class Preempted(SystemExit):
    """Raised after the checkpoint is saved when the scheduler asks the job to stop."""


def lr_factor(schedule: str, epochs: int, steps_per_epoch: int, milestones: tuple[int, ...] = (), decay: float = 0.1):
    """Multiplier of the base learning rate as a function of the global step."""
    total = epochs * steps_per_epoch
    if schedule == "cosine_step":
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * step / total))
    if schedule == "cosine_epoch":
        # the reference code: lr_e = lr0 * cos(99 pi e / (200 (K - 1))), constant within an epoch
        return lambda step: math.cos(99 * math.pi * (step // steps_per_epoch) / (200 * max(epochs - 1, 1)))
    if schedule == "cosine_annealing":
        # torch's CosineAnnealingLR(T_max=epochs) stepped once per epoch (the S-Prompts code)
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * (step // steps_per_epoch) / epochs))
    if schedule == "multistep":
        # torch's MultiStepLR(milestones, gamma=decay) stepped once per epoch (InfLoRA's DomainNet code)
        return lambda step: decay ** sum(step // steps_per_epoch >= m for m in milestones)
    if schedule == "constant":
        return lambda step: 1.0
    raise ValueError(f"optim.schedule = {schedule!r}: expected cosine_step, cosine_epoch, cosine_annealing, multistep "
                     "or constant")


#: the optimizers a job builds, by the names of :data:`intact.methods.declare.OPTIMIZERS`
OPTIMIZER_CLASSES = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


def build_optimizer(method: ContinualMethod, o: OptimConfig, steps_per_epoch: int, first_task: bool = False):
    """The task's optimizer (``optim.optimizer``, else the method's declared one) and its lr schedule;
    ``first_task``: the run's first task, whose weight decay is ``optim.first_task_weight_decay`` where set."""
    name = optimizer_name(method.run)
    extra = {"momentum": o.momentum} if name == "sgd" else {}
    decay = o.first_task_weight_decay if (first_task and o.first_task_weight_decay is not None) else o.weight_decay
    opt = OPTIMIZER_CLASSES[name](method.param_groups(), weight_decay=decay, **extra)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_factor(o.schedule, o.epochs, steps_per_epoch, tuple(o.milestones), o.lr_decay))
    return opt, sched


def optimizer_record(opt: torch.optim.Optimizer, o: OptimConfig) -> dict[str, Any]:
    """``train.json``'s record of a task's optimizer as built, each group at step 0 (C-Prompt sets its own)."""
    groups = [{"name": g.get("name", str(i)), "lr": g.get("initial_lr", g["lr"]), "weight_decay": g["weight_decay"],
               "parameters": sum(p.numel() for p in g["params"])} for i, g in enumerate(opt.param_groups)]
    return {"class": type(opt).__name__, **{k: v for k, v in opt.defaults.items() if k in ("betas", "eps", "momentum")},
            "schedule": o.schedule, "groups": groups}


class _StopFlag:
    """Turns SIGTERM / SIGUSR1 (SLURM's time-limit warnings) into a checkpoint-and-exit request."""

    def __init__(self) -> None:
        self.raised: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
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


@dataclass
class TaskRun:
    """What the steps of one task's training share: the run, its method and data, the optimizer, and the
    position (epoch, step) with the running loss sums of the current epoch."""

    run: RunConfig
    task: int
    out_dir: Path
    device: torch.device
    bench: Any
    method: ContinualMethod
    train_set: Dataset
    backbone_sha: str | None
    opt: torch.optim.Optimizer
    sched: Any
    amp: Any
    caches: dict[str, torch.Tensor]
    cache_record: dict[str, Any]
    steps_per_epoch: int
    #: what the task starts from (:func:`task_inputs`): a checkpoint written from other inputs is not resumed
    inputs: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    step: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    #: per-epoch sums of the loss terms (weighted by batch size), on the device in float64 - the same
    #: arithmetic as summing Python floats, so records are unchanged, without a sync per step
    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    count: float = 0.0
    elapsed: float = 0.0  #: seconds of training before this process (a resumed job)
    t0: float = 0.0       #: when this process started training
    epoch_start: float = 0.0  #: when this epoch started (a job resumed mid-epoch: its seconds before, back)
    steps_done: int = 0   #: optimizer steps in this process
    resumed_from: dict[str, int] | None = None
    guard: DivergenceGuard | None = None

    @property
    def ckpt_path(self) -> Path:
        return self.out_dir / CHECKPOINT

    def kept(self) -> str:
        return (f"the last good checkpoint {self.ckpt_path} is kept" if self.ckpt_path.exists()
                else "no checkpoint had been written, so none is kept")


# ---- step 1: set-up and resume -----------------------------------------------------------------------
def set_up(run: RunConfig, task: int, out_dir: Path, manifest: Path, backbone_weights: Path, prev_dir: Path | None,
           threads: int | None, progress: bool, query_cache: Path | None) -> TaskRun:
    """The method with the previous task's state and hypercubes, begun on ``task``; its optimizer and caches."""
    device = configure_torch(threads)
    seed_everything(derive_seed(run.seed, task, "init"))
    # a method that starts every task afresh (joint) neither needs nor loads the previous task's folder
    continues = METHODS[run.base].loads_previous_state
    if task > 0 and prev_dir is None and continues:
        raise ValueError(f"task {task} needs the previous task's folder")
    prev = Path(prev_dir) if (prev_dir is not None and continues) else None
    bench, method, backbone_sha = build_method(
        run, manifest, backbone_weights, device,
        state=prev / STATE if prev else None, hypercubes=prev / HYPERCUBE if prev else None, state_task=task - 1,
    )
    train_set = method.training_data(bench, task)
    enter_task(method, task, train_set)
    o = run.optim
    steps_per_epoch = count_steps(len(train_set), o.batch_size, o.drop_last)
    opt, sched = build_optimizer(method, o, steps_per_epoch, first_task=task == 0)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if (device.type == "cuda" and o.amp) else nullcontext()
    cached_queries = (QueryCache(query_cache, bench, backbone_sha, query_settings(run.backbone, bench, device, o.amp))
                      if (query_cache and o.feature_cache) else None)
    caches, cache_record = task_caches(method, bench, train_set, eval_split=run.eval_split,
                                       batch_size=o.eval_batch_size,
                                       device=device, amp=amp, query_cache=cached_queries, enabled=o.feature_cache,
                                       progress=progress)
    return TaskRun(run, task, Path(out_dir), device, bench, method, train_set, backbone_sha, opt, sched, amp,
                   caches, cache_record, steps_per_epoch, task_inputs(backbone_sha, bench, prev))


def resume(job: TaskRun) -> None:
    """Continue from this task's checkpoint if it belongs to this config and task; set up the guard."""
    run, o, guard_state, running = job.run, job.run.optim, None, {}
    if job.ckpt_path.exists():
        ck = load_checkpoint(job.ckpt_path)
        foreign = foreign_checkpoint(ck, run, job.task, job.inputs)
        if foreign is None:
            load_trainable_state(job.method, ck["method"])
            job.opt.load_state_dict(ck["optimizer"])
            job.sched.load_state_dict(ck["scheduler"])
            set_rng_state(ck["rng"])
            job.epoch, job.step, job.history = ck["epoch"], ck["step"], ck["history"]
            running, job.elapsed = ck["running"], ck["elapsed"]
            job.epoch_start = time.perf_counter() - ck.get("epoch_seconds", 0.0)
            guard_state = ck.get("guard")
            job.resumed_from = {"epoch": job.epoch, "step": job.step}
            print(f"resuming task {job.task} from epoch {job.epoch} step {job.step}", file=sys.stderr)
        else:
            # never continue from another configuration's, task's or inputs' checkpoint: start the task afresh
            print(f"ignoring {job.ckpt_path}: {foreign}; the task starts from its first epoch", file=sys.stderr)
    job.guard = DivergenceGuard(
        f"{run.benchmark.name}/{run.method}/seed{run.seed}", job.task, o.epochs, job.steps_per_epoch,
        [(k, p) for k, p in job.method.named_parameters() if p.requires_grad], job.device,
        policy=o.on_nonfinite, max_skipped_fraction=o.max_skipped_fraction,
        start_step=job.epoch * job.steps_per_epoch + job.step,
        buffers=list(job.method.named_buffers()))
    job.guard.load_state_dict(guard_state)
    job.sums = {k: torch.tensor(v, dtype=torch.float64, device=job.device) for k, v in running.items() if k != "_n"}
    job.count = running.get("_n", 0.0)


def checkpoint(job: TaskRun) -> None:
    """Save the position, the trainable state, optimizer, scheduler and the global RNGs (torch's, CUDA's, Python's,
    NumPy's: a method may draw from any of them; never a diverged state)."""
    job.guard.check(job.kept())
    save_checkpoint(job.ckpt_path, {
        "run_hash": job.run.hash(), "task": job.task, "inputs": job.inputs, "epoch": job.epoch, "step": job.step,
        "method": trainable_state(job.method), "optimizer": job.opt.state_dict(), "scheduler": job.sched.state_dict(),
        "rng": rng_state(), "history": job.history,
        "running": {**{k: float(v) for k, v in job.sums.items()}, "_n": job.count} if job.count else {},
        "elapsed": job.elapsed + time.perf_counter() - job.t0, "guard": job.guard.state_dict(),
        "epoch_seconds": time.perf_counter() - job.epoch_start if job.step else 0.0,
    })


# ---- step 2: one epoch -------------------------------------------------------------------------------
def train_epoch(job: TaskRun, stop: _StopFlag, progress: bool, max_steps: int | None, check_every: int) -> None:
    """Train from the current position to the end of the epoch, then record it and checkpoint.
    Raises :class:`Preempted` (after checkpointing) on a stop signal or after ``max_steps`` steps; on the epoch's
    last step, after recording the epoch (a checkpoint at its end would resume into an empty epoch)."""
    run, o, method, guard = job.run, job.run.optim, job.method, job.guard
    batches = train_batches(job.train_set, seed=run.seed, task=job.task, epoch=job.epoch, batch_size=o.batch_size,
                            first=job.step, device=job.device, drop_last=o.drop_last, keys=bool(job.caches))
    bar = tqdm(batches, total=job.steps_per_epoch, initial=job.step,
               desc=f"{run.method} task {job.task} epoch {job.epoch + 1}/{o.epochs}", disable=not progress,
               file=sys.stderr, mininterval=1.0, leave=False)
    job.epoch_start, preempted = job.epoch_start if job.step else time.perf_counter(), None
    for x, y, *keys in bar:
        cached = {k: lookup(c, *keys) for k, c in job.caches.items()}
        guard.snapshot()  # skip_batch: a skipped batch's forward must not leave its BatchNorm statistics
        with job.amp, serving(method, cached):
            loss, terms = batch_loss(method, x, y)
        job.opt.zero_grad(set_to_none=True)
        loss.backward()
        good = not guard.skips or guard.batch_ok(loss, terms, job.epoch, job.step)
        if good:
            job.opt.step()
            method.after_step()
        job.sched.step()  # a skipped batch still advances the schedule: lr stays a function of the step
        guard.observe(loss, terms, with_terms=not guard.skips)
        job.step += 1
        job.steps_done += 1
        if good:
            for k, v in terms.items():
                term = v.detach().to(torch.float64) * len(y)
                job.sums[k] = job.sums[k] + term if k in job.sums else term
            job.count += len(y)
        if job.steps_done % check_every == 0:
            guard.check(job.kept())
            if job.count and "ce" in job.sums:
                bar.set_postfix(ce=f"{float(job.sums['ce']) / job.count:.3f}", refresh=False)
        if stop.raised is not None or (max_steps is not None and job.steps_done >= max_steps):
            preempted = f"stopped at epoch {job.epoch} step {job.step} (signal {stop.raised}); checkpoint saved"
            if job.step < job.steps_per_epoch:
                checkpoint(job)
                raise Preempted(preempted)
            break
    bar.close()
    guard.check(job.kept())
    seconds = time.perf_counter() - job.epoch_start
    job.history.append({"epoch": job.epoch + 1, **{k: float(v) / max(job.count, 1) for k, v in job.sums.items()},
                        "seconds": seconds, "images_per_s": job.count / max(seconds, 1e-9)})
    job.epoch, job.step, job.sums, job.count = job.epoch + 1, 0, {}, 0.0
    checkpoint(job)
    if preempted:
        raise Preempted(preempted)


# ---- step 3: end of task -----------------------------------------------------------------------------
def end_of_task(job: TaskRun) -> TrainRecord:
    """The method's end of task (hypercubes, certificate, EWC's Fisher), the efficiency measurement, and the
    task's :class:`~intact.train_record.TrainRecord`."""
    run, o, method = job.run, job.run.optim, job.method
    train_seconds = job.elapsed + time.perf_counter() - job.t0
    method.eval()
    # a pass over the training images walks them in order, unflipped: variant 0 of the query cache
    queries = job.caches["query"][:, 0] if "query" in job.caches else None
    with serving_pass(method, job.train_set, queries):
        end = leave_task(method, job.task, job.train_set, hypercube_data(run, job.bench, job.task, job.train_set))
    # after training and the hypercube pass: the timed inference batches (eval mode, no_grad) change nothing saved
    efficiency = efficiency_record(method, job.train_set, o.batch_size, job.device,
                                   steps=o.epochs * job.steps_per_epoch)
    peak = peak_memory_bytes(job.device)
    n = len(job.train_set)
    return TrainRecord(
        benchmark=run.benchmark.name, method=run.method, seed=run.seed, task=job.task,
        task_name=job.bench.task_names[job.task], config_hash=run.hash(), train_images=n, epochs=job.history,
        seconds=train_seconds, images_per_s=n * o.epochs / max(train_seconds, 1e-9), peak_memory_mb=peak / 2**20,
        efficiency=efficiency, certificate=end.pop("certificate", None), end=end, resumed_from=job.resumed_from,
        nonfinite=job.guard.summary(), feature_cache=job.cache_record, optimizer=optimizer_record(job.opt, o),
        backbone_sha256=job.backbone_sha,
        data_sha256=job.bench.manifest["files"], state_sha256=None, hypercube_sha256=None,  # written last
        provenance=provenance(), config=run.to_dict(),
    )


# ---- step 4: outputs ---------------------------------------------------------------------------------
def write_outputs(job: TaskRun, record: TrainRecord, eval_out: Path | None, query_cache: Path | None) -> None:
    """``state.safetensors``, ``hypercube.safetensors``, ``train.json`` (and ``eval.json``), all or none;
    then the checkpoint goes."""
    run, out_dir = job.run, job.out_dir
    cubes, state = kept_hypercubes(job.method), trainable_state(job.method)
    check_saved(f"{run.benchmark.name}/{run.method}/seed{run.seed}", job.task, state, cubes)
    try:
        record.state_sha256 = save_tensors(out_dir / STATE, state, written_by(run, job.task))
        record.hypercube_sha256 = save_hypercubes(out_dir / HYPERCUBE, cubes, written_by(run, job.task))
        write_record(out_dir / TRAIN_JSON, record.to_json())
        if eval_out is not None:
            # before the checkpoint goes: a job killed while evaluating resumes after its last epoch
            evaluate_method(run, job.task, job.bench, job.method, job.device, Path(eval_out), query_cache=query_cache,
                            backbone_sha256=job.backbone_sha, state_sha256=record.state_sha256)
    except BaseException:
        # a failed write (a full disk) leaves no part of the task's results that could pass for finished
        for name in (STATE, HYPERCUBE, TRAIN_JSON):
            (out_dir / name).unlink(missing_ok=True)
        if eval_out is not None:
            Path(eval_out).unlink(missing_ok=True)
        raise
    job.ckpt_path.unlink(missing_ok=True)


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
    """Train ``task`` and write ``state.safetensors``, ``hypercube.safetensors``, ``train.json`` to ``out_dir``;
    return the ``train.json`` record.

    ``max_steps`` stops (after checkpointing) once that many optimizer steps ran in this call: a test
    hook that simulates a job killed mid-task. ``check_every``: optimizer steps between two host reads of
    the divergence guard and the running losses (see :mod:`intact.guard`). ``query_cache``: the folder of
    the benchmark's query cache (see :mod:`intact.cache`; used when ``optim.feature_cache``).
    ``eval_out``: also evaluate the trained state on every task's test set there (``eval.json``, column
    ``task`` of R, as :func:`intact.evaluate.evaluate_task` would from the saved state) - one job, not two.
    """
    job = set_up(run, task, out_dir, manifest, backbone_weights, prev_dir, threads, progress, query_cache)
    if eval_out is not None:  # before the training, not after it
        check_eval_sets(run, job.bench)
    resume(job)
    if job.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    job.t0 = time.perf_counter()
    job.method.train()
    with _StopFlag() as stop:
        while job.epoch < run.optim.epochs:
            train_epoch(job, stop, progress, max_steps, check_every)
    record = end_of_task(job)
    write_outputs(job, record, eval_out, query_cache)
    return record.to_json()
