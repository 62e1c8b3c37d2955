"""A finished run's record: :class:`StoredRun`, what :func:`intact.results.read_run` (the one reader of a run
folder) returns and every table, figure, choice and MLflow view reads. No numpy or pandas at import."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping


@dataclass(frozen=True)
class StoredRun:
    """One finished run: its ``metrics.json`` and per-task ``train.json`` / ``eval.json`` records (task order), the
    one record type of a run (MLflow's view adds its files: :class:`intact.tracking.record.RunFolder`)."""

    benchmark: str
    method: str
    seed: int
    metrics: Mapping[str, Any]
    trains: tuple[Mapping[str, Any], ...]
    evals: tuple[Mapping[str, Any], ...] = ()
    path: Path | None = None

    def diagonal_mean(self) -> float:
        """Mean of R's diagonal: how well each task is learned when it is learned (plasticity)."""
        import numpy as np  # not at import: intact.tracking derives from this class at Snakefile start-up

        return float(np.mean([e["accuracy"][e["task"]] for e in self.evals]))

    @property
    def num_tasks(self) -> int:
        return len(self.evals)

    @property
    def eval_split(self) -> str:
        """The split R was measured on (``metrics.json`` has recorded it since the first version)."""
        return str(self.metrics["eval_split"])

    @property
    def run_name(self) -> str:
        return f"{self.benchmark}/{self.method}/seed{self.seed}"

    @property
    def config_hash(self) -> str:
        return str(self.metrics.get("config_hash") or self.trains[-1].get("config_hash"))

    @property
    def run_key(self) -> str:
        """The run and the config it ran with: ``<benchmark>/<method>/seed<k>@<config hash>``."""
        return f"{self.run_name}@{self.config_hash}"

    @property
    def config(self) -> Mapping[str, Any]:
        """The resolved run config its last ``train.json`` records."""
        return self.trains[-1].get("config") or {}

    @property
    def rehearsal(self) -> bool:
        """Whether the run is a rehearsal's (its train.json records the run's settings: intact.rehearsal)."""
        return any(bool((t.get("config") or {}).get("rehearsal")) for t in self.trains)
