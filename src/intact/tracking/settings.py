"""The ``tracking:`` section of config.yaml (declared in :mod:`intact.settings`), the tracking URI it resolves to,
and the tracking markers.

Where it logs (first match wins)
--------------------------------
1. an explicit URI (``--uri`` on the command line), 2. the ``MLFLOW_TRACKING_URI`` environment variable
(a per-shell / per-cluster override without editing the committed config), 3. ``tracking.uri`` in
config.yaml, 4. the local store ``sqlite:///<cwd>/mlflow.db`` (MLflow 3's own default, spelt out so MLflow
never falls back to the old ``./mlruns`` file store). Where a SQLite store keeps its artifacts and how
its writers are serialised: :mod:`intact.tracking.mlflow_log`.

Each run's marker ``results/runs/<benchmark>/<method>/seed<k>/tracking.json`` is the Snakemake target
of its tracking step (:func:`marker_path`; which runs' markers a target asks for: :mod:`intact.plan`).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from intact.config import tracking_config
from intact.layering import read_files
from intact.settings import TrackingConfig

TRACKER_VERSION = 1  #: bump when what is logged changes: every run is then re-logged once


class TrackingError(RuntimeError):
    """Tracking could not be done now (the results are untouched; retry with ``sync``)."""


class ServerDown(TrackingError):
    """The tracking server cannot be reached, or did not answer in time: every other run would wait as long."""


def server_down(err: BaseException | None) -> bool:
    """Whether ``err``, or an error it was raised from or while handling, says the server is down or does not
    answer (a connection refused or timed out: MLflow wraps them in its own exception after its retries)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (ServerDown, TimeoutError, ConnectionError)):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def load_tracking_config(path: str | os.PathLike | None) -> TrackingConfig:
    """The tracking section of a config file, its ``extends`` resolved (defaults if ``path`` is None or no layer
    has the section)."""
    if path is None:
        return TrackingConfig()
    return tracking_config(read_files([path]))


def resolve_uri(tracking: TrackingConfig, uri: str | None = None,
                cwd: str | os.PathLike | None = None) -> tuple[str, str]:
    """(tracking URI, where it came from): argument > $MLFLOW_TRACKING_URI > config > local SQLite."""
    if uri:
        return uri, "argument"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    if tracking.uri:
        return tracking.uri, "config"
    db = Path(cwd or os.getcwd()).resolve() / "mlflow.db"
    return f"sqlite:///{db}", "default"


def redact(uri: str) -> str:
    """The URI without a password (safe for logs and marker files)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None and parts.username is None:
        return uri
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))
