"""The ``tracking:`` section of config.yaml, the tracking URI it resolves to, and the tracking markers.

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

import dataclasses
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from intact.paths import run_dir

TRACKER_VERSION = 1  #: bump when what is logged changes: every run is then re-logged once
MARKER = "tracking.json"
DEFAULT_EXPERIMENT = "intact/{benchmark}"
_EXPERIMENT_FIELDS = ("benchmark", "eval_split")


class TrackingError(RuntimeError):
    """Tracking could not be done now (the results are untouched; retry with ``sync``)."""


@dataclass(frozen=True)
class TrackingConfig:
    """The ``tracking:`` section of config.yaml."""

    enabled: bool = True
    uri: str | None = None  #: None: $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db
    experiment: str = DEFAULT_EXPERIMENT  #: template; fields {benchmark}, {eval_split}
    timeout_s: int = 10  #: per HTTP request
    retries: int = 1  #: HTTP retries per request (MLflow's default 7 means minutes of waiting)
    deadline_s: int = 300  #: the whole tracking step of one run

    def experiment_name(self, benchmark: str, eval_split: str = "test") -> str:
        return self.experiment.format(benchmark=benchmark, eval_split=eval_split)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def tracking_config(cfg: Mapping[str, Any] | None) -> TrackingConfig:
    """The typed ``tracking`` section of a config mapping (defaults where absent), checked."""
    from intact.schema import ConfigError, schema, schema_error

    raw = dict((cfg or {}).get("tracking") or {})
    schema = schema()["properties"].get("tracking")
    if schema is not None:
        import jsonschema

        wrapped = {"type": "object", "properties": {"tracking": schema}}
        errors = list(jsonschema.Draft202012Validator(wrapped).iter_errors({"tracking": raw}))
        if errors:
            raise schema_error(jsonschema.exceptions.best_match(errors))
    names = {f.name for f in dataclasses.fields(TrackingConfig)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"config: unknown key 'tracking.{unknown[0]}' (expected one of: {', '.join(sorted(names))})")
    tc = TrackingConfig(**raw)
    try:
        tc.experiment_name("b", "test")
    except (KeyError, IndexError, ValueError) as e:
        raise ConfigError(
            f"config: key 'tracking.experiment' = {tc.experiment!r}: bad template ({e!r}); "
            f"expected a name with optional fields {', '.join('{' + f + '}' for f in _EXPERIMENT_FIELDS)}"
        ) from None
    return tc


def load_tracking_config(path: str | os.PathLike | None) -> TrackingConfig:
    """The tracking section of a config file (defaults if ``path`` is None or has no section)."""
    if path is None:
        return TrackingConfig()
    import yaml

    return tracking_config(yaml.safe_load(Path(path).read_text()) or {})


def marker_path(benchmark: str, method: str, seed: int) -> str:
    """The tracking marker of one run (a Snakemake target, relative to the workdir)."""
    return f"{run_dir(benchmark, method, seed)}/{MARKER}"


def resolve_uri(tracking: TrackingConfig, uri: str | None = None, cwd: str | os.PathLike | None = None) -> tuple[str, str]:
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
