"""Imported by the warm parent of a run that tracks (:func:`intact.runtime.warm.preload_modules`): MLflow and its SQL
store, which every ``track_run`` job would otherwise import (about 4 s of its 8 s on 2 cores under load), after the
setting that must precede ``import mlflow`` (no telemetry thread: a parent forks only without threads). A job's own
settings (its HTTP timeouts) are set again when it logs; MLflow reads them then."""

import contextlib

from intact.tracking.mlflow_log import import_mlflow
from intact.settings import TrackingConfig

# nothing to preload where MLflow is not installed (each track_run job then records its run pending, naming the
# missing module) or has no SQL store (mlflow-skinny: an http:// server needs none)
with contextlib.suppress(ImportError):
    import_mlflow(TrackingConfig())
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
