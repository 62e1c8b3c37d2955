"""The MLflow client side: experiments, idempotent logging of one run, the store lock, the deadline.

mlflow is imported inside the functions that need it, never when this module is imported.

Idempotency
-----------
The MLflow run is found by ``intact.run_key`` (a changed config is a new key, hence a new MLflow run;
the older one stays, tagged ``intact.current=false``). ``intact.content_hash`` is the sha256 of every
input file plus :data:`~intact.tracking.settings.TRACKER_VERSION`. Tracking again with the same content
is a no-op. With changed content (a task was redone) or after a crashed attempt (a run not FINISHED), a
fresh MLflow run is logged completely and only then the old one is deleted: MLflow params are
immutable and metric histories only grow, so "replace" is the only way to never double a history;
logging first and deleting after means a crash leaves at worst a duplicate, which the next attempt
removes. (Deleted runs are soft-deleted; ``mlflow gc`` purges them.)

Local SQLite stores
-------------------
With any SQLite store, an experiment created here keeps its artifacts beside the database, in
``<db dir>/mlruns/<experiment name>`` (MLflow alone would use ``./mlruns`` of whichever directory the
first process ran in). Local SQLite writers are serialised by a lock file next to the database (a fresh
database hit by concurrent first writers breaks in MLflow's schema migration); many cluster jobs should
share a tracking server instead.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Sequence

from intact.tracking.record import Payload, RunFolder, build_payload, run_figure
from intact.settings import TrackingConfig
from intact.tracking.settings import ServerDown, TrackingError, redact


def _mlflow_environment(tracking: TrackingConfig) -> None:
    """Settings that must precede ``import mlflow``: no telemetry thread, short HTTP timeouts."""
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"  # its thread mutates os.environ and crashes offline clients
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(tracking.timeout_s)
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(tracking.retries)
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = "1"
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_JITTER"] = "0.5"


def probe(uri: str, timeout_s: float) -> None:
    """Fail fast (without importing mlflow) when an HTTP tracking server cannot be reached at all."""
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme == "file" or (scheme == "" and not uri.startswith("databricks")):
        raise TrackingError(
            f"tracking URI {redact(uri)!r} is MLflow's old file store, which MLflow 3 refuses; "
            "use sqlite:///<path>/mlflow.db or an http(s):// tracking server"
        )
    if scheme not in ("http", "https"):
        return
    # urllib takes no user:password@ in a URL (it looked the whole of it up as a host name, so every run of a
    # server with credentials in its URI stayed pending): they go in a Basic auth header, as MLflow sends them
    parts = urllib.parse.urlsplit(uri.rstrip("/") + "/health")
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    request = urllib.request.Request(urllib.parse.urlunsplit(parts._replace(netloc=netloc)))
    if parts.username is not None:
        user = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(user.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            resp.read(64)
    except urllib.error.HTTPError:
        return  # it answers (perhaps behind auth without /health): let MLflow talk to it
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ServerDown(f"tracking server {redact(uri)} unreachable: {reason}") from None


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    rest = uri[len("sqlite:///"):].split("?")[0]
    return Path(rest) if rest and rest != ":memory:" else None


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Serialise writers of one local SQLite store (a no-op for servers)."""
    db = _sqlite_path(uri)
    if db is None:
        yield
        return
    import fcntl

    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`ServerDown` in the main thread after ``seconds`` (no-op elsewhere / if <= 0)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _expired(signum: int, frame: Any) -> None:
        raise ServerDown(f"tracking took longer than tracking.deadline_s = {seconds} s")

    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def artifact_location(uri: str, name: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite database (``<db dir>/mlruns/<name>``).

    MLflow would put them under ``./mlruns`` of whatever directory the creating process ran in; a
    server (or any other store) decides for itself (None).
    """
    db = _sqlite_path(uri)
    if db is None:
        return None
    return str(db.resolve().parent / "mlruns" / re.sub(r"[^A-Za-z0-9._-]", "_", name))


def experiment_id(client: Any, name: str, uri: str | None = None) -> str:
    """Get or create an experiment by name, safe against concurrent creators (no ``set_experiment``)."""
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=artifact_location(uri or "", name))
        except MlflowException:
            exp = client.get_experiment_by_name(name)  # another process created it first
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def _chunks(items: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _quote(value: str) -> str:
    if "'" in value:
        raise ValueError(f"cannot search MLflow for a value with a quote: {value!r}")
    return f"'{value}'"


def log_run(client: Any, exp_id: str, run: RunFolder, payload: Payload, content_hash: str) -> str:
    """Create a new MLflow run holding everything of ``run``; return its id (FINISHED on success)."""
    from mlflow.entities import Metric, Param, RunTag

    first = {k: payload.tags[k] for k in ("intact.run", "intact.run_key", "intact.config_hash")}
    created = client.create_run(exp_id, run_name=f"{run.method}/seed{run.seed}", tags=first)
    run_id = created.info.run_id
    try:
        tags = {**payload.tags, "intact.content_hash": content_hash}
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v, step in payload.metrics]
        params = [Param(k, v[:6000]) for k, v in payload.params.items()]
        for chunk in _chunks(params, 100):
            client.log_batch(run_id, params=chunk)
        for chunk in _chunks([RunTag(k, v) for k, v in tags.items()], 100):
            client.log_batch(run_id, tags=chunk)
        for chunk in _chunks(metrics, 1000):
            client.log_batch(run_id, metrics=chunk)
        with tempfile.TemporaryDirectory(prefix="intact-tracking-") as tmp:
            stage = Path(tmp)
            for name, src in run.files.items():
                dst = stage / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(src.read_bytes())
            (stage / "config.json").write_text(json.dumps(run.config, indent=2) + "\n")
            (stage / "figures").mkdir()
            try:
                run_figure(run, stage / "figures" / "run_summary.png")
            except Exception as e:  # a figure is never worth a lost run
                print(f"tracking: no run figure ({type(e).__name__}: {e})", file=sys.stderr)
            client.log_artifacts(run_id, str(stage))
        # current only once whole: a failed upload never stands in the view of current runs
        client.set_tag(run_id, "intact.current", "true")
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        with contextlib.suppress(Exception):
            client.set_terminated(run_id, "FAILED")
        raise
    return run_id


def _settle(client: Any, exp_id: str, run_key: str, chash: str, mine: str, action: str) -> tuple[str, str]:
    """The run that stands for ``run_key`` once ``mine`` is whole, and the action: the earliest started FINISHED run
    of that content. A server takes no lock, so two trackers of one run (``sync`` beside the workflow's job) may
    both have uploaded it; each keeps the same one and deletes the rest (a RUNNING run is an upload in progress:
    its tracker settles it when done)."""
    from mlflow.entities import ViewType

    runs = client.search_runs([exp_id], filter_string=f"tags.`intact.run_key` = {_quote(run_key)}",
                              run_view_type=ViewType.ACTIVE_ONLY, max_results=1000)
    done = [r.info for r in runs if r.info.status == "FINISHED" and r.data.tags.get("intact.content_hash") == chash]
    if not any(r.run_id == mine for r in done):
        return mine, action    # not listed yet: nothing to settle against
    first = min(done, key=lambda r: (r.start_time or 0, r.run_id)).run_id
    for r in done:
        if r.run_id != first:
            client.delete_run(r.run_id)
    return first, action if first == mine else "logged by another tracker"


def import_mlflow(tracking: TrackingConfig) -> None:
    _mlflow_environment(tracking)
    import mlflow.tracking  # noqa: F401


def upsert_run(run: RunFolder, uri: str, tracking: TrackingConfig, force: bool) -> dict[str, Any]:
    """Log ``run`` unless an identical FINISHED MLflow run exists; returns the marker fields."""
    _mlflow_environment(tracking)
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    name = tracking.experiment_name(run.benchmark, run.eval_split)
    exp_id = experiment_id(client, name, uri)
    chash = run.content_hash()
    runs = client.search_runs(
        [exp_id], filter_string=f"tags.`intact.run` = {_quote(run.run_name)}",
        run_view_type=ViewType.ACTIVE_ONLY, max_results=1000,
    )
    same = [r for r in runs if r.data.tags.get("intact.run_key") == run.run_key]
    keep = None
    if not force:
        for r in same:
            if r.info.status == "FINISHED" and r.data.tags.get("intact.content_hash") == chash:
                keep = r.info.run_id
                break
    action = "unchanged"
    if keep is None:
        keep = log_run(client, exp_id, run, build_payload(run), chash)
        action = "replaced" if same else "created"
    for r in same:
        if r.info.run_id != keep:
            client.delete_run(r.info.run_id)
    if action != "unchanged":
        keep, action = _settle(client, exp_id, run.run_key, chash, keep, action)
    for r in runs:  # older configs of this (benchmark, method, seed) are not current any more
        if r.data.tags.get("intact.run_key") != run.run_key and r.data.tags.get("intact.current") != "false":
            client.set_tag(r.info.run_id, "intact.current", "false")
    kept = next(r for r in same if r.info.run_id == keep) if action == "unchanged" else None
    if kept is not None and kept.data.tags.get("intact.current") != "true":
        client.set_tag(keep, "intact.current", "true")
    return {"experiment": name, "experiment_id": exp_id, "run_id": keep, "action": action, "content_hash": chash}
