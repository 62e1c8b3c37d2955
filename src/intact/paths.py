"""Where a run's files live: one spelling of the run folder for the package and the workflow (no torch)."""

from __future__ import annotations

#: a run's folder as a Snakemake wildcard pattern (and a ``str.format`` template)
RUN_DIR = "results/runs/{benchmark}/{method}/seed{seed}"


def run_dir(benchmark: str, method: str, seed: int | str) -> str:
    """The folder of run (benchmark, method, seed), relative to the working directory."""
    return RUN_DIR.format(benchmark=benchmark, method=method, seed=seed)
