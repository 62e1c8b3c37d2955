"""MLflow tracking of finished runs: a searchable *view* of ``results/``, never the source of truth.

One MLflow run per (benchmark, method, seed) run folder ``results/runs/<benchmark>/<method>/seed<k>/``,
in one experiment per benchmark (``tracking.experiment``, default ``intact/{benchmark}``). Everything
is read from the files the pipeline already wrote (``R.csv``, ``metrics.json``, ``task*/train.json``,
``task*/eval.json``, ``task*/hypercube.safetensors``); nothing here can change or lose a result.

Modules
-------
- :mod:`~intact.tracking.settings`: the ``tracking:`` config section, where it logs (URI precedence),
  the marker targets.
- :mod:`~intact.tracking.record`: a run folder read into params, metrics, tags and artifacts (what
  lands in MLflow).
- :mod:`~intact.tracking.mlflow_log`: the MLflow client side: experiments, logging a run once
  (idempotency: replace, never double), the SQLite store lock, the deadline.
- :mod:`~intact.tracking.track`: :func:`track_run` (one run -> MLflow -> marker ``tracking.json``;
  failure handling) and :func:`sync` (retry what is pending).
- :mod:`~intact.tracking.cli`: ``python -m intact.tracking status|sync|track``.

This package imports neither torch nor mlflow at import time (the Snakefile imports it at start-up).
"""

from intact.config import tracking_config
from intact.paths import MARKER, marker_path
from intact.settings import TrackingConfig
from intact.tracking.settings import (
    TRACKER_VERSION, TrackingError, load_tracking_config, redact, resolve_uri,
)
from intact.tracking.record import Payload, RunFolder, build_payload, flatten, read_run_folder, run_figure
from intact.tracking.mlflow_log import artifact_location, deadline, experiment_id, log_run, probe, store_lock
from intact.tracking.track import find_runs, needs_sync, read_marker, sync, track_run, write_marker
from intact.tracking.cli import main

__all__ = [
    "MARKER", "TRACKER_VERSION", "TrackingConfig", "TrackingError", "load_tracking_config",
    "marker_path", "redact", "resolve_uri", "tracking_config",
    "Payload", "RunFolder", "build_payload", "flatten", "read_run_folder", "run_figure",
    "artifact_location", "deadline", "experiment_id", "log_run", "probe", "store_lock",
    "find_runs", "needs_sync", "read_marker", "sync", "track_run", "write_marker",
    "main",
]
