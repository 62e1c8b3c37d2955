"""Where a default-run ``train_task`` job spends its time: a per-phase breakdown (issue 18).

    python tools/profile_train_task.py                       # coda_p+intact, task 1, seed 0 of config.yaml
    python tools/profile_train_task.py --method coda_p --task 3 --json out.json
    python tools/profile_train_task.py --cprofile prof.out   # also a cProfile of the job's process
    python tools/profile_train_task.py --warm --repeat 3     # the job started from a warm parent (intact.runtime.warm)

The inputs of the job (the prepared benchmark, a backbone, the benchmark's query cache and tasks
0..task-1) are built first in a scratch folder (``--workdir``; reused when it already holds them). The
backbone is a seeded random initialisation of the configured model, not a pretrained one: every phase
does the same work either way. Then the job runs in a fresh Python process, as Snakemake starts it
(``script:`` preamble imports included), and every phase is timed *exclusively* (a phase nested in
another is not counted twice); "other" is what no phase covers. With ``--warm`` the job's process hands
off to a warm parent, as the workflow's jobs do on a local run (intact.runtime.warm): its "interpreter
start-up" then covers the client's start, its preamble imports and the fork, and the imports cost what is
left. Wall-clock times depend on the load of the machine: run it on a quiet one, and give the command, date,
commit and machine with any number.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = "--job"


# ---- the job's own process --------------------------------------------------------------------------------

class Phases:
    """Exclusive wall time per phase: a phase's time excludes the phases that run inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.stack: list[list[float]] = []  # per open phase: [start, time spent in nested phases]

    def wrap(self, owner: object, attr: str, phase: str) -> None:
        """Replace ``owner.attr`` by a timed wrapper counted as ``phase``."""
        inner = getattr(owner, attr)

        def timed(*args, **kwargs):
            self.stack.append([time.perf_counter(), 0.0])
            try:
                return inner(*args, **kwargs)
            finally:
                start, nested = self.stack.pop()
                total = time.perf_counter() - start
                self.add(phase, total - nested)
                if self.stack:
                    self.stack[-1][1] += total

        setattr(owner, attr, timed)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


def _instrument(phases: Phases) -> None:
    """Time the phases of :func:`intact.train.train_task` through the names it calls."""
    import intact.cache as cache
    import intact.evaluate as evaluate
    import intact.hashing as hashing
    import intact.io as io
    import intact.models.backbone as backbone
    import intact.train as train
    try:  # build_method and what it calls left train.py with issue 15; older commits keep them there
        import intact.restore as restore
    except ImportError:
        restore = train

    phases.wrap(restore, "open_benchmark", "open benchmark (manifest)")
    phases.wrap(restore, "create_backbone", "backbone construction")
    phases.wrap(backbone, "sha256_file", "hashing (backbone weights)")
    phases.wrap(hashing, "sha256_file", "hashing (other files)")
    phases.wrap(restore, "create_method", "method construction")
    phases.wrap(restore, "load_tensors", "read previous state / hypercubes")
    phases.wrap(restore, "load_hypercubes", "read previous state / hypercubes")
    phases.wrap(cache.QueryCache, "for_tasks", "cache reads (stored queries)")
    phases.wrap(cache, "compute_features", "feature passes (teacher / queries)")
    phases.wrap(train, "build_optimizer", "optimizer construction")
    phases.wrap(io, "save_checkpoint", "checkpoint writes")
    phases.wrap(train, "efficiency_record", "efficiency timing (inference batches)")
    phases.wrap(train, "provenance", "provenance (git, versions)")
    phases.wrap(train, "save_tensors", "writing")
    phases.wrap(train, "save_hypercubes", "writing")
    phases.wrap(train, "write_record", "writing")
    phases.wrap(evaluate, "write_record", "writing")
    phases.wrap(evaluate, "evaluate_method", "evaluation (R column)")
    if hasattr(train, "evaluate_method"):  # imported by name since the train/evaluate circle was broken (issue 15)
        phases.wrap(train, "evaluate_method", "evaluation (R column)")
    train.save_checkpoint = io.save_checkpoint

    make = restore.create_method

    def create_method(*args, **kwargs):  # the method's end of task: hypercube pass and certificate
        method = make(*args, **kwargs)
        reg = getattr(method, "reg", None) or getattr(method, "regularizer", None)
        phases.wrap(method, "end_task", "hypercube pass")
        if reg is not None and hasattr(reg, "certificate"):
            phases.wrap(reg, "certificate", "certificate")
        return method

    restore.create_method = create_method


def job(spec_path: str) -> None:
    """The body of the profiled process: imports, then :func:`intact.train.train_task`, timed per phase."""
    started, t = time.time(), time.perf_counter()
    try:  # what Snakemake's script preamble imports before the script runs
        import snakemake.iocontainers  # noqa: F401
        import snakemake.logging  # noqa: F401
    except ImportError:
        pass
    preamble = time.perf_counter() - t
    try:  # older commits have no warm parent
        from intact.runtime.warm import hand_off
    except ImportError:
        def hand_off():
            pass
    hand_off()  # as the adapters: with a warm parent (--warm) the rest runs in its fresh child
    spec = json.loads(Path(spec_path).read_text())
    phases = Phases()
    phases.add("interpreter start-up", started - spec["spawned"])
    phases.add("imports: snakemake script preamble", preamble)
    t = time.perf_counter()
    from intact.config import run_from_dict
    from intact.runtime.joblog import log_to  # noqa: F401  (the adapter's imports)
    from intact.train import train_task
    phases.add("imports: intact.train (torch, timm, ...)", time.perf_counter() - t)
    heavy = sorted(m for m in ("mlflow", "pandas", "matplotlib", "sklearn", "scipy", "snakemake.workflow")
                   if m in sys.modules)

    _instrument(phases)
    if spec.get("cprofile"):
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t = time.perf_counter()
    record = train_task(run_from_dict(spec["run"]), spec["task"], manifest=Path(spec["manifest"]),
                        backbone_weights=Path(spec["backbone"]), out_dir=Path(spec["out"]),
                        prev_dir=Path(spec["prev"]) if spec["prev"] else None, threads=spec["threads"],
                        progress=False, query_cache=Path(spec["query"]), eval_out=Path(spec["out"]) / "eval.json")
    job_seconds = time.perf_counter() - t
    if spec.get("cprofile"):
        prof.disable()
        prof.dump_stats(spec["cprofile"])
    covered = sum(v for k, v in phases.seconds.items() if not k.startswith(("interpreter", "imports")))
    loop = record["seconds"] - phases.seconds.get("checkpoint writes", 0.0)
    phases.add("training loop (train.json seconds, checkpoints apart)", loop)
    phases.add("other (setup, loaders, not covered above)", job_seconds - covered - loop)
    print(json.dumps({"phases": phases.seconds, "train_seconds": record["seconds"], "heavy_imports": heavy,
                      "process_seconds": time.time() - spec["spawned"]}))


# ---- preparing the inputs and reporting --------------------------------------------------------------------

def prepare(cfg: dict, method: str, seed: int, task: int, work: Path, threads: int) -> dict:
    """The inputs of task ``task``'s job in ``work`` (reused where present): data, backbone, query cache,
    and the earlier tasks' states."""
    import torch

    from intact.cache import build_query_cache
    from intact.config import backbone_config, benchmark_config, resolve_run
    from intact.data import benchmark_class
    from intact.io import save_tensors
    from intact.models.backbone import create_vit
    from intact.train import train_task

    run = resolve_run(cfg, "digits", method, seed)
    bench_cfg = benchmark_config(cfg, "digits")
    manifest = work / "data" / "manifest.json"
    if not manifest.exists():
        manifest = benchmark_class(bench_cfg.type).prepare(bench_cfg, work / "data")
    weights = work / "backbone.safetensors"
    if not weights.exists():
        torch.manual_seed(0)
        vit = create_vit(backbone_config(cfg, bench_cfg.backbone).model)
        save_tensors(weights, {k: v.contiguous() for k, v in vit.state_dict().items()})
    query = work / "cache"
    if not (query / "query.json").exists():
        build_query_cache(run.backbone, manifest, weights, query, threads=threads, progress=False)
    root = work / "runs" / method / f"seed{seed}"
    for t in range(task):
        d = root / f"task{t}"
        if not (d / "train.json").exists():
            print(f"preparing: training task {t} ...", file=sys.stderr)
            train_task(run, t, manifest=manifest, backbone_weights=weights, out_dir=d,
                       prev_dir=root / f"task{t - 1}" if t else None, threads=threads, progress=False,
                       query_cache=query, eval_out=d / "eval.json")
    return {"run": run.to_dict(), "task": task, "manifest": str(manifest), "backbone": str(weights),
            "query": str(query), "prev": str(root / f"task{task - 1}") if task else None,
            "out": str(work / "profiled" / method / f"task{task}"), "threads": threads}


def _warm_parent():
    """A warm parent preloading what the workflow's parent preloads (the job scripts' imports)."""
    from intact.runtime.warm import preload_modules, start

    scripts = sorted(str(p) for p in (REPO / "workflow" / "scripts").glob("*.py"))
    parent = start(preload_modules(scripts, tracking=False))
    if parent is None:
        raise SystemExit("--warm: no warm parent started (INTACT_WARM=0?)")
    return parent


def table(result: dict) -> str:
    phases = result["phases"]
    total = sum(phases.values())
    lines = [f"{'phase':58s} {'seconds':>8s} {'share':>6s}"]
    for name, s in sorted(phases.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:58s} {s:8.3f} {100 * s / total:5.1f}%")
    training = phases.get("training loop (train.json seconds, checkpoints apart)", 0.0)
    lines.append(f"{'total (process start to end)':58s} {total:8.3f}")
    lines.append(f"{'not training (total - training loop)':58s} {total - training:8.3f}")
    lines.append(f"heavy modules imported by the job: {', '.join(result['heavy_imports']) or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from intact.cli import existing_file  # here, not at the top: the profiled job's process runs this file too

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=existing_file, default=str(REPO / "config.yaml"))
    p.add_argument("--method", default="coda_p+intact")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task", type=int, default=1, help="the profiled task (>= 1 loads a previous state)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the rule's threads: 1)")
    p.add_argument("--workdir", default=str(REPO / "results" / "profile"), help="scratch folder for the inputs")
    p.add_argument("--repeat", type=int, default=1, help="profiled runs of the job (each in a fresh process)")
    p.add_argument("--cprofile", default=None, help="write a cProfile of the job to this file")
    p.add_argument("--json", default=None, help="also write the breakdown(s) as JSON here")
    p.add_argument("--warm", action="store_true", help="start the job from a warm parent (one unreported "
                   "warm-up run first: in a workflow the parent has imported before most jobs start)")
    a = p.parse_args(argv)

    from intact.config import load_config
    from intact.provenance import git_commit

    work = Path(a.workdir)
    spec = prepare(load_config(a.config), a.method, a.seed, a.task, work, a.threads)
    spec["cprofile"] = a.cprofile
    results = []
    parent = _warm_parent() if a.warm else None
    try:
        for i in range(a.repeat + bool(parent)):
            spec["spawned"] = time.time()
            (work / "job.json").write_text(json.dumps(spec))
            proc = subprocess.run([sys.executable, __file__, JOB, str(work / "job.json")], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                raise SystemExit(f"the profiled job failed:\n{proc.stderr[-4000:]}")
            if parent and i == 0:
                continue  # the warm-up run
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(table(results[-1]) + "\n")
    finally:
        if parent:
            parent.stop()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    meta = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": git_commit(), "load_average_after": load, "method": a.method, "task": a.task, "warm": a.warm}
    print(json.dumps(meta))
    if a.json:
        Path(a.json).write_text(json.dumps({**meta, "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == JOB:
        job(sys.argv[2])
    else:
        main()
