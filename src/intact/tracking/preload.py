"""Imported by the warm parent of a run that tracks (:func:`intact.runtime.warm.preload_modules`): MLflow and its SQL
store, which every ``track_run`` job would otherwise import (about 4 s of its 8 s on 2 cores under load), after the
setting that must precede ``import mlflow`` (no telemetry thread: a parent forks only without threads). A job's own
settings (its HTTP timeouts) are set again when it logs; MLflow reads them then."""

import contextlib

from intact.tracking.mlflow_log import import_mlflow
from intact.settings import TrackingConfig

import_mlflow(TrackingConfig())
with contextlib.suppress(ImportError):   # mlflow-skinny has no SQL store (an http:// server needs none)
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
