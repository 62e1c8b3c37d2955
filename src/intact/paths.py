"""Where a run's files live: one spelling of the run folder for the package and the workflow (no torch)."""

from __future__ import annotations

import os
from pathlib import Path

#: the folder every output goes under (relative to the working directory)
RESULTS = "results"

#: a run's key: (benchmark, method, seed) as a path, also the run's place under results/logs and timings
RUN_KEY = "{benchmark}/{method}/seed{seed}"

#: a run's folder as a Snakemake wildcard pattern (and a ``str.format`` template)
RUN_DIR = f"{RESULTS}/runs/{RUN_KEY}"


def run_dir(benchmark: str, method: str, seed: int | str, root: str | os.PathLike = RESULTS) -> str:
    """The folder of run (benchmark, method, seed) under the results folder ``root``."""
    return f"{os.fspath(root)}/runs/" + RUN_KEY.format(benchmark=benchmark, method=method, seed=seed)


def task_dir(benchmark: str, method: str, seed: int | str, task: int | str, root: str | os.PathLike = RESULTS) -> str:
    """The folder of task ``task`` of a run: its state, hypercube, train.json and eval.json."""
    return f"{run_dir(benchmark, method, seed, root)}/task{task}"


#: a run's tracking marker: the Snakemake target of its MLflow tracking step (intact.tracking)
MARKER = "tracking.json"


def marker_path(benchmark: str, method: str, seed: int) -> str:
    """The tracking marker of one run (relative to the workdir)."""
    return f"{run_dir(benchmark, method, seed)}/{MARKER}"


def user_cache(name: str) -> Path | None:
    """``intact/<name>`` in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``); None where the user
    has no home folder (nothing is kept then)."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:
        return None
    return base / "intact" / name
