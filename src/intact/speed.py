"""``intact speed``: the cost of a training step of ``coda_p`` and ``coda_p+intact`` at task 1, with and
without the feature caches, on a timm backbone with random weights (nothing is downloaded).

The method settings come from a config (by default ``configs/paper/imagenet_r.yaml`` over ``config.yaml``:
the paper's CODA-P pool on ViT-B/16); the images are synthetic, kept as the prepared benchmarks keep
them (uint8, at the input size, flipped at random on the device), so a step runs the real loader, loss,
backward and optimizer. Task 0 is skipped (no training: its hypercube comes from one pass over the images)
and every row is measured at task 1, where the InTAct teacher and anchors are active.

Per row: seconds per step (median of ``--repeats`` timed steps after one warm-up step, with their min and
max), backbone passes per step (counted), seconds per evaluation batch (``predict`` at ``--batch``; median,
min, max), peak memory of the row alone (each row runs in a child process of its own, :class:`RowProcess`:
CUDA: its peak allocation; CPU: its peak resident set, torch and backbone included), total and trainable
parameters, the caches' build seconds (once per task; not in a step), and the 1-minute load average before and
after the row. The CPU model and core count are recorded; a warning says when the machine is busy (load
average above half its cores, not counting the threads of the row that steps), since then a row's time is
the load's as much as the code's.

``--pairs`` builds every row first, then times them step by step in turn (row 1 step 1, row 2 step 1,
..., row 1 step 2, ...): a change of load hits all rows alike, and the ratios (medians of the per-step
ratios, with min and max) hold where the absolute times do not. (It needs the memory of all rows at once:
one child process per row, each waiting for the parent's next "step".)
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np
import torch

from intact.cache import lookup, task_caches
from intact.config import benchmark_config, load_config, resolve_run
from intact.data.loader import eval_batches, train_batches
from intact.data.prepared import PreparedImages
from intact.efficiency import parameter_counts, peak_memory_bytes, synchronize
from intact.io import write_json
from intact.methods import create_method
from intact.methods.shared.base import batch_loss, enter_task, leave_task, num_trainable_parameters
from intact.methods.shared.frozen import QUERY, serving
from intact.models.backbone import FrozenViT, create_vit
from intact.speed_report import format_table, ratios
from intact.train import build_optimizer

#: the rows timed when --methods is not given
METHODS = ("coda_p", "coda_p+intact")


class PassCounter:
    """Counts the backbone's forward passes: every pass - unprompted, prefix-prompted, or a method's own path
    through the blocks (InfLoRA's LoRA, S-Prompts' input tokens) - embeds the images once (``tokens``)."""

    def __init__(self, backbone: FrozenViT):
        self.total = 0
        tokens = backbone.tokens

        def counted(x):
            self.total += 1
            return tokens(x)

        backbone.tokens = counted


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else what :mod:`platform` knows)."""
    try:
        return next(ln.partition(":")[2].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def system_load() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def busy(load: float | None, cores: int, own: int = 0) -> bool:
    """Whether other work holds the CPU: the load average, less the ``own`` threads the measurement itself
    keeps running, above half the cores."""
    return load is not None and load - own > 0.5 * cores


def spread(times: list[float]) -> dict[str, float]:
    """Median, min and max of timed repeats (the first, warm-up, entry left out)."""
    timed = times[1:] or times
    return {"median": statistics.median(timed), "min": min(timed), "max": max(timed)}


class Row:
    """One row of the table: ``method`` at task 1 with (``cache``) or without the feature caches, set up and
    ready to time one training step (:meth:`step`) or one evaluation batch (:meth:`eval_batch`) at a time."""

    def __init__(self, cfg: dict, benchmark: str, method: str, cache: bool, *, model: str, batch: int, repeats: int,
                 device: torch.device, amp: bool, classes: int, tasks: int, seed: int = 0):
        self.method, self.cache, self.device, self.batch = method, cache, device, batch
        self.load_before = system_load()
        run = resolve_run(cfg, benchmark, method, seed)
        vit = create_vit(model)
        chans, size = int(vit.patch_embed.proj.in_channels), int(vit.patch_embed.img_size[0])
        backbone = FrozenViT(vit, (0.5,) * chans, (0.5,) * chans)
        run = dataclasses.replace(run, optim=dataclasses.replace(run.optim, batch_size=batch, feature_cache=cache,
                                                                 amp=amp))
        torch.manual_seed(seed)
        m = self.m = create_method(run, backbone, classes, tasks).to(device)
        n = batch * (repeats + 1)
        rng = np.random.default_rng(seed)
        images = rng.integers(0, 256, size=(n, size, size, chans), dtype=np.uint8)
        data = PreparedImages(images, rng.integers(0, classes, size=n), size, augment=True, task=1)
        bf16 = device.type == "cuda" and amp
        self.autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else nullcontext()
        # task 0 left untrained: its hypercube (needed by the InTAct terms at task 1) from one pass over the images
        enter_task(m, 0, data)
        m.eval()
        with self.autocast:
            leave_task(m, 0, data)
        enter_task(m, 1, data)
        m.train()
        self.counter = PassCounter(m.backbone)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        synchronize(device)
        t0 = time.perf_counter()
        self.caches, self.record = task_caches(m, None, data, eval_split="test", batch_size=run.optim.eval_batch_size,
                                               device=device, amp=self.autocast, query_cache=None, enabled=cache)
        synchronize(device)
        self.build_s = time.perf_counter() - t0
        self.opt, _ = build_optimizer(m, run.optim, repeats + 1)
        self.batches = iter(train_batches(data, seed=seed, task=1, epoch=0, batch_size=batch, device=device, keys=True))
        # images 0..batch-1, unflipped: query rows [:batch, 0]
        self.x_eval = next(iter(eval_batches(data, batch, device)))[0]
        self.times: list[float] = []
        self.passes: list[int] = []
        self.eval_times: list[float] = []

    def step(self) -> float:
        """Time one training step (loss, backward, optimizer) on the next batch."""
        x, y, *keys = next(self.batches)
        m, before = self.m, self.counter.total
        synchronize(self.device)
        t = time.perf_counter()
        with self.autocast, serving(m, {k: lookup(c, *keys) for k, c in self.caches.items()}):
            loss, _ = batch_loss(m, x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        m.after_step()
        synchronize(self.device)
        self.times.append(time.perf_counter() - t)
        self.passes.append(self.counter.total - before)
        return self.times[-1]

    @torch.no_grad()
    def eval_batch(self) -> float:
        """Time ``predict`` on one batch, the query read from the cache when there is one."""
        self.m.eval()
        q = self.caches["query"][:self.batch, 0] if "query" in self.caches else None
        synchronize(self.device)
        t = time.perf_counter()
        with self.autocast, serving(self.m, {QUERY: q} if q is not None else {}):
            self.m.predict(self.x_eval)
        synchronize(self.device)
        self.m.train()
        self.eval_times.append(time.perf_counter() - t)
        return self.eval_times[-1]

    def result(self) -> dict[str, Any]:
        counts = parameter_counts(self.m, num_trainable_parameters(self.m))
        step, ev = spread(self.times), spread(self.eval_times)
        return {
            "method": self.method, "cache": self.cache, "step_s": step["median"], "step_min_s": step["min"],
            "step_max_s": step["max"], "step_times_s": self.times[1:],
            "passes_per_step": statistics.median(self.passes[1:]),
            "eval_batch_s": ev["median"], "eval_min_s": ev["min"], "eval_max_s": ev["max"],
            "peak_mb": peak_memory_bytes(self.device) / 2**20, "trainable_params": counts["trainable_parameters"],
            "total_params": counts["total_parameters"], "cache_build_s": self.build_s, "cache_record": self.record,
            "images_per_s": self.batch / step["median"], "load_before": self.load_before, "load_after": system_load(),
        }


def bench_row(cfg: dict, benchmark: str, method: str, cache: bool, *, repeats: int, **kw: Any) -> dict[str, Any]:
    """One row measured on its own: a warm-up and ``repeats`` timed steps, then as many evaluation batches."""
    row = Row(cfg, benchmark, method, cache, repeats=repeats, **kw)
    for _ in range(repeats + 1):
        row.step()
    for _ in range(repeats + 1):
        row.eval_batch()
    return row.result()


def _serve(conn, factory: Callable[..., Any], args: tuple, kwargs: dict, threads: int | None) -> None:
    """The child side of :class:`RowProcess`: build the row, then answer "step" / "eval" / "result" in turn."""
    try:
        if threads:
            torch.set_num_threads(threads)
        row = factory(*args, **kwargs)
        conn.send(("ok", None))
        while True:
            cmd = conn.recv()
            out = row.step() if cmd == "step" else row.eval_batch() if cmd == "eval" else row.result()
            conn.send(("ok", out))
            if cmd == "result":
                return
    except BaseException:  # the parent re-raises it with the child's traceback
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


#: what the fork server of :class:`RowProcess` imports before it forks any row
ROW_PRELOAD = ("torch", "timm", "intact.speed")


class RowProcess:
    """A row (``factory(*args, **kwargs)``, by default a :class:`Row`) built and driven in a child process of
    its own, so that its peak memory is its own: on Linux a process's peak resident set (``ru_maxrss``) can
    only grow, so rows sharing one process would all report the largest. The child is forked from
    multiprocessing's fork server, a fresh interpreter that has imported torch, timm and this module once and
    run nothing (no torch thread pool to inherit), so a row does not pay for the imports; it is built before
    the next row starts."""

    def __init__(self, *args: Any, factory: Callable[..., Any] = Row, threads: int | None = None, **kwargs: Any):
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(ROW_PRELOAD))  # read when the server starts: the first row of a process
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, factory, args, kwargs, threads), daemon=True)
        self.proc.start()
        child.close()
        self._call(None)

    def _call(self, cmd: str | None) -> Any:
        if cmd is not None:
            self.conn.send(cmd)
        try:
            status, out = self.conn.recv()
        except EOFError:
            self.proc.join()
            raise RuntimeError(f"speed row process died (exit code {self.proc.exitcode})") from None
        if status == "error":
            self.proc.join()
            raise RuntimeError(f"speed row process failed:\n{out}")
        return out

    def step(self) -> float:
        return self._call("step")

    def eval_batch(self) -> float:
        return self._call("eval")

    def result(self) -> dict[str, Any]:
        """The row's result; the child then exits."""
        out = self._call("result")
        self.proc.join()
        return out

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def paired_rows(cfg: dict, benchmark: str, specs: list[tuple[str, bool]], *, repeats: int,
                threads: int | None = None, **kw: Any) -> list[dict[str, Any]]:
    """All rows built first (each in its own :class:`RowProcess`), then timed in turn step by step (and
    evaluation batch by batch). One spec: a row measured on its own, as :func:`bench_row` but isolated."""
    rows: list[RowProcess] = []
    try:
        for method, cache in specs:
            rows.append(RowProcess(cfg, benchmark, method, cache, repeats=repeats, threads=threads, **kw))
        for _ in range(repeats + 1):
            for row in rows:
                row.step()
        for _ in range(repeats + 1):
            for row in rows:
                row.eval_batch()
        return [row.result() for row in rows]
    finally:
        for row in rows:
            row.close()


def _checked(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[Path], dict, str, torch.device]:
    """(config files, their config, benchmark, device) of ``args``, each checked before any row is built: a wrong
    option is one line, exit 2 (it was a traceback, some after a row's process had started)."""
    import timm

    paths = args.config or [Path("config.yaml"), Path("configs/paper/imagenet_r.yaml")]
    try:   # layered as snakemake --configfile; no data or weights needed (synthetic images, random weights)
        cfg = load_config(*paths, check_files=False)
    except ValueError as err:    # ConfigError, LayerError: a missing or invalid file
        p.error(str(err))
    benchmark = args.benchmark or cfg["run"]["benchmarks"][0]
    bad = [f"--{k} {getattr(args, k)}: expected at least 1" for k in ("batch", "repeats", "classes", "threads")
           if getattr(args, k) is not None and getattr(args, k) < 1]
    if benchmark not in cfg["benchmarks"]:
        bad.append(f"--benchmark {benchmark}: not in the config (its benchmarks: {', '.join(cfg['benchmarks'])})")
    else:
        for method in args.methods:
            try:
                resolve_run(cfg, benchmark, method, 0)
            except ValueError as err:
                bad.append(f"--methods {method}: {err}")
    if not timm.is_model(args.model.split(".")[0]):
        bad.append(f"--model {args.model}: not a timm model")
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        bad.append(f"--device {args.device}: {err}")
    else:
        if device.type == "cuda" and not torch.cuda.is_available():
            bad.append(f"--device {args.device}: no CUDA device here")
    if bad:
        p.error("; ".join(bad))
    return paths, cfg, benchmark, device


def run_speed(args: argparse.Namespace, paths: list[Path], cfg: dict, benchmark: str, device: torch.device) -> int:
    tasks = benchmark_config(cfg, benchmark).num_tasks  # sizes the prompt pool per task
    if args.threads:
        torch.set_num_threads(args.threads)
    cores = os.cpu_count() or 1
    machine = {"cpu_model": cpu_model(), "cores": cores, "torch_threads": torch.get_num_threads(),
               "load_before": system_load()}
    if busy(machine["load_before"], cores):
        print(f"warning: the machine is busy (load average {machine['load_before']:.1f} on {cores} cores): step times "
              "measure the load as well; compare rows with --pairs, or rerun on a quiet machine", file=sys.stderr)
    specs = [(method, cache) for method in args.methods for cache in (False, True)]
    kw = dict(model=args.model, batch=args.batch, repeats=args.repeats, device=device, amp=args.amp == "on",
              classes=args.classes, tasks=tasks, threads=machine["torch_threads"])
    print(f"speed: {len(specs)} rows{' (paired)' if args.pairs else ''}, one process each ...", file=sys.stderr,
          flush=True)
    rows = (paired_rows(cfg, benchmark, specs, **kw) if args.pairs
            else [r for spec in specs for r in paired_rows(cfg, benchmark, [spec], **kw)])
    machine["load_after"] = system_load()
    # while rows run, one of them steps at a time on torch_threads threads: that load is the measurement's own
    machine["busy"] = busy(machine["load_before"], cores) or any(
        busy(v, cores, own=machine["torch_threads"])
        for v in [machine["load_after"]] + [r[k] for r in rows for k in ("load_before", "load_after")])
    print(f"intact speed: {args.model}, batch {args.batch}, {device}"
          f"{' bf16' if device.type == 'cuda' and args.amp == 'on' else ' fp32'}, task 1, median (min, max) of "
          f"{args.repeats} steps{', rows alternated step by step' if args.pairs else ''}, method settings: {benchmark} "
          f"({tasks} tasks) from {', '.join(map(str, paths))}; {machine['cpu_model']}, {cores} cores, "
          f"{machine['torch_threads']} torch threads")
    print(format_table(rows, args.pairs))
    if machine["busy"]:
        print(f"warning: the machine was busy during the measurement (load average above {0.5 * cores:.1f} besides the "
              "measurement's own threads): absolute times are not the code's alone", file=sys.stderr)
    if args.json:
        write_json(args.json, {"model": args.model, "batch": args.batch, "device": str(device),
                               "amp": device.type == "cuda" and args.amp == "on", "repeats": args.repeats,
                               "pairs": args.pairs, "machine": machine, "config": [str(p) for p in paths],
                               "benchmark": benchmark, "results": rows, "ratios": ratios(rows, args.pairs)})
        print(f"wrote {args.json}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``intact speed``."""
    p.add_argument("--model", default="vit_base_patch16_224", help="timm model name (random weights)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--repeats", type=int, default=5, help="timed steps per row (median, min and max are reported)")
    p.add_argument("--amp", choices=["on", "off"], default="on", help="bf16 autocast on CUDA (ignored on CPU)")
    p.add_argument("--classes", type=int, default=200)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--config", action="append", type=Path, default=None,
                   help="config files layered in order (default: config.yaml, configs/paper/imagenet_r.yaml)")
    p.add_argument("--benchmark", default=None,
                   help="whose method settings (default: the config's first run benchmark)")
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--pairs", action="store_true",
                   help="build all rows, then time them in turn step by step: ratios that hold under changing load")
    p.add_argument("--json", type=Path, default=None,
                   help="write {'results': [...], 'machine': ..., 'ratios': ...} here")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="intact speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    return run_speed(args, *_checked(p, args))


if __name__ == "__main__":
    sys.exit(main())
