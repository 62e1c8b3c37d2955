"""A test kit for methods and benchmarks, the project's own and a plugin's: a tiny config, a tiny benchmark
and a train-and-evaluate helper (docs/adding-a-method.md, "Testing a method")::

    from intact.testing import tiny_bench, tiny_run, train_and_evaluate

    def test_my_method_learns(tmp_path):
        bench = tiny_bench(tmp_path / "bench")                 # 3 digit domains, a pretrained tiny ViT
        run = tiny_run(bench, "my_method+intact", methods={"my_method": {"lam": 0.5}})
        R = train_and_evaluate(bench, run, tmp_path / "run", tasks=2)
        assert R[0, 0] > 50                                    # accuracy in %, chance 10

Imports neither pytest nor snakemake (:func:`snakemake` runs it as a subprocess) nor, until a helper trains,
torch. The tiny config is the checkout's ``config.yaml`` shrunk to seconds: the kit needs the checkout that
holds the Snakefile (``pip install -e``), as running the workflow does.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import yaml

from intact.layering import merge
from intact.methods import METHODS

#: the checkout this package was installed from (src layout: <checkout>/src/intact)
REPO = Path(__file__).resolve().parents[2]


def tiny_config(**run: object) -> dict:
    """The default config shrunk to seconds: 3 domains, 1 epoch, short pretraining, one seed; ``run`` updates
    the ``run`` section (``methods=[...]``)."""
    path = REPO / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"intact.testing needs the intact checkout (its config.yaml and Snakefile): {path} is "
                                "not there; install intact with `pip install -e <checkout>`")
    cfg = copy.deepcopy(yaml.safe_load(path.read_text()))
    cfg["run"].update({"seeds": [0], "methods": ["coda_p", "coda_p+intact"], **run})
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise", "edges"]
    # 25 epochs (~9 s): a weaker backbone leaves every method at chance, and tests of learning test nothing
    cfg["backbones"]["vit_digits"]["pretrain"]["epochs"] = 25
    cfg["optim"]["epochs"] = 1
    # every method's section present (empty: its declared defaults), so a test can set one key
    cfg["methods"] = {name: dict((cfg.get("methods") or {}).get(name, {})) for name in METHODS}
    cfg["methods"]["coda_p"]["pool_size"] = 6
    return cfg


def write_config(workdir: Path, cfg: Mapping[str, Any]) -> Path:
    """``workdir/config.yaml`` holding ``cfg`` (the folder is created)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(dict(cfg), sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 900,
              env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the checkout's Snakefile in ``workdir`` (which holds its own config.yaml) on 2 cores; AssertionError
    with the output's tail if it fails and ``check``."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def tiny_bench(root: Path, cfg: Mapping[str, Any] | None = None) -> dict:
    """Prepare the tiny config's digits benchmark under ``root`` and pretrain its backbone (~85% clean accuracy;
    ~10 s on 2 cores): ``{"config", "manifest", "weights", "root"}``, what the other helpers take."""
    from intact.config import backbone_config, benchmark_config, validate_config
    from intact.data import benchmark_class
    from intact.pretrain import pretrain_backbone

    cfg = copy.deepcopy(dict(cfg or tiny_config()))
    validate_config(cfg)
    bench_cfg = benchmark_config(cfg, "digits")
    manifest = benchmark_class(bench_cfg.type).prepare(bench_cfg, root / "data")
    weights = root / "backbone.safetensors"
    pretrain_backbone(backbone_config(cfg, bench_cfg.backbone), manifest, weights, root / "backbone.json",
                      threads=1, progress=False)
    return {"config": cfg, "manifest": manifest, "weights": weights, "root": root}


def tiny_run(bench: Mapping[str, Any], method: str, seed: int = 0, **sections: Mapping[str, Any]) -> Any:
    """The resolved run (:class:`~intact.settings.RunConfig`) of ``method`` on the tiny benchmark; ``sections``
    are merged over the config first (``methods={"my_method": {...}}``, ``optim={"epochs": 2}``)."""
    from intact.config import resolve_run

    cfg = merge(bench["config"], dict(sections))
    return resolve_run(cfg, "digits", method, seed)


def train_one(bench: Mapping[str, Any], run: Any, out: Path, task: int, prev: Path | None = None, **kw: Any) -> dict:
    """Train task ``task`` of ``run`` on the tiny benchmark into ``out`` (from the state in ``prev``), on one
    thread and without progress bars; ``kw`` goes to :func:`intact.train.train_task`. Its train record."""
    from intact.train import train_task

    return train_task(run, task, manifest=bench["manifest"], backbone_weights=bench["weights"], out_dir=out,
                      prev_dir=prev, threads=1, progress=False, **kw)


def train_and_evaluate(bench: Mapping[str, Any], run: Any, folder: Path, tasks: int) -> Any:
    """Train ``run`` on tasks ``0..tasks-1`` of the tiny benchmark (``folder/task<t>``, each task from the previous
    one's state, as the jobs would) and evaluate after each on every task: R[i, t], the accuracy (%) on task i
    after task t, a torch tensor of (the benchmark's tasks, ``tasks``)."""
    import torch

    from intact.evaluate import evaluate_task

    R = torch.zeros(run.benchmark.num_tasks, tasks)
    for t in range(tasks):
        out = folder / f"task{t}"
        train_one(bench, run, out, t, folder / f"task{t - 1}" if t else None)
        rec = evaluate_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"],
                            state=out / "state.safetensors", out_path=out / "eval.json", threads=1)
        R[:, t] = torch.tensor(rec["accuracy"])
    return R
