"""Shared fixtures: a tiny config, a prepared tiny benchmark + backbone, and a Snakemake runner."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from intact.methods import METHODS

REPO = Path(__file__).resolve().parents[1]


def tiny_config(**run: object) -> dict:
    """The default config shrunk to seconds: 3 domains, 1 epoch, short pretraining, one seed."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["run"].update({"seeds": [0], "methods": ["coda_p", "coda_p+intact"], **run})
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise", "edges"]
    # 25 epochs (~9 s): a weaker backbone leaves every method at chance, and tests of learning test nothing
    cfg["backbones"]["vit_digits"]["pretrain"]["epochs"] = 25
    cfg["optim"]["epochs"] = 1
    # every method's section present (empty: its declared defaults), so a test can set one key
    cfg["methods"] = {name: dict((cfg.get("methods") or {}).get(name, {})) for name in METHODS}
    cfg["methods"]["coda_p"]["pool_size"] = 6
    return cfg


def assert_config_error(mutate, fragments) -> None:
    """``mutate`` applied to the tiny config makes validation fail with a message holding every fragment."""
    from intact.config import ConfigError, validate_config

    cfg = tiny_config()
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def write_config(workdir: Path, cfg: dict) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in ``workdir`` (which holds its own config.yaml)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def _build_tiny_bench(root: Path) -> dict:
    from intact.config import backbone_config, benchmark_config, validate_config
    from intact.data import benchmark_class
    from intact.pretrain import pretrain_backbone

    cfg = tiny_config()
    validate_config(cfg)
    bench_cfg = benchmark_config(cfg, "digits")
    manifest = benchmark_class(bench_cfg.type).prepare(bench_cfg, root / "data")
    weights = root / "backbone.safetensors"
    pretrain_backbone(backbone_config(cfg, "vit_digits"), manifest, weights, root / "backbone.json", threads=1, progress=False)
    return {"config": cfg, "manifest": manifest, "weights": weights, "root": root}


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A prepared 3-domain digits benchmark and a pretrained backbone (~85% clean accuracy; read-only for the
    tests). Built once per session - under pytest-xdist once for all workers: the first builds it under a file
    lock in the run's shared temporary folder, the others wait and read it."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _build_tiny_bench(tmp_path_factory.mktemp("tiny_bench"))
    from filelock import FileLock  # a torch dependency

    shared = tmp_path_factory.getbasetemp().parent / "tiny_bench"
    with FileLock(str(shared) + ".lock"):
        done = shared / "paths.json"
        if not done.exists():
            built = _build_tiny_bench(shared)
            done.write_text(json.dumps({"manifest": str(built["manifest"])}))
    return {"config": tiny_config(), "manifest": Path(json.loads(done.read_text())["manifest"]),
            "weights": shared / "backbone.safetensors", "root": shared}


#: the files whose end-to-end runs take longest (Snakemake pipelines, the SLURM cluster, an MLflow server), first:
#: ``make test`` runs ``pytest -n 2 --dist loadfile --no-loadscope-reorder``, which hands whole files to the two
#: workers in collection order, so the long files start at once instead of last
SLOW_FIRST = ("test_slurm.py", "test_workflow.py", "test_paper_workflow.py", "test_tracking.py", "test_warm_workflow.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Collection order: :data:`SLOW_FIRST`, then every other file as collected (a stable sort: the order of
    the tests within a file is kept)."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))


def train_on_tiny(bench: dict, run, folder: Path, tasks: int):
    """Train ``run`` on tasks ``0..tasks-1`` of the tiny benchmark (``folder/task<t>``, each task from the
    previous one's state) and evaluate after each: R[i, t], the accuracy on task i after task t."""
    import torch

    from intact.evaluate import evaluate_task
    from intact.train import train_task

    R = torch.zeros(tasks, tasks)
    for t in range(tasks):
        out = folder / f"task{t}"
        train_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"], out_dir=out,
                   prev_dir=folder / f"task{t - 1}" if t else None, threads=1, progress=False)
        rec = evaluate_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"],
                            state=out / "state.safetensors", out_path=out / "eval.json", threads=1)
        R[:, t] = torch.tensor(rec["accuracy"])
    return R
