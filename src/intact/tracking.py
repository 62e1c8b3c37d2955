"""MLflow tracking of finished runs: a searchable *view* of ``results/``, never the source of truth.

One MLflow run per (benchmark, method, seed) run folder ``results/runs/<benchmark>/<method>/seed<k>/``,
in one experiment per benchmark (``tracking.experiment``, default ``intact/{benchmark}``). Everything
is read from the files the pipeline already wrote (``R.csv``, ``metrics.json``, ``task*/train.json``,
``task*/eval.json``, ``task*/hypercube.safetensors``); nothing here can change or lose a result.

What lands in MLflow
--------------------
- params: the resolved run config (``train.json["config"]``) flattened with ``.`` (``optim.lr_head``,
  ``intact.lambda_var``, ``settings.pool_size``); lists and ``null`` as JSON.
- metrics, three kinds of step (all with one timestamp, the logging time):
  * per epoch, ``step`` = global epoch index across tasks (0-based; task t's epochs follow task t-1's):
    ``train/<term>`` for every number of an epoch record (``ce``, ``intdrift``, ``feat``, ``var``,
    ``align``, ``feat_gate``, ``acc``, ``seconds``, ``images_per_s``), and ``train/task`` = t, so a
    chart's x-axis can be read back as tasks.
  * per task, ``step`` = task index t: ``acc/<task name>`` (column t of R: accuracy on every task after
    training task t), ``aa_evolution`` (AA over the tasks seen so far), ``certificate`` and
    ``sampled_drift`` (from task 1 on), ``hypercube/<layer>/<task|cumulative>/<stat>`` (log_volume,
    mean_width, radius, dim), ``inside_previous/<layer>/<stat>``, ``task/<stat>`` (train_seconds,
    images_per_s, peak_memory_mb, train_images, eval_seconds).
  * final, ``step`` = T-1 (after the last task): every number of ``metrics.json`` (``aa``, ``caa``,
    ``forgetting_max``, ``forgetting_one_step``, ``bwt``, ``aa_weighted``, ``fwt_vs_chance``,
    ``train_seconds``, ``trainable_parameters``).
- artifacts: ``R.csv``, ``metrics.json``, ``config.json``, ``tasks/task<t>/{train,eval}.json`` and
  ``hypercube.safetensors``, and ``figures/run_summary.png`` (the R heat map and the AA evolution).
- tags: ``intact.run`` (``<benchmark>/<method>/seed<k>``), ``intact.run_key`` (``intact.run`` +
  ``@<config hash>``), ``intact.config_hash``, ``intact.content_hash``, ``intact.current``,
  ``mlflow.source.git.commit`` / ``intact.git_commit``, ``intact.data_sha256.<file>``,
  ``intact.backbone_sha256``, ``intact.snakemake_rules`` (the rules that produced the results),
  ``intact.slurm_job_ids`` (``task:id,...``), ``intact.packages.<name>``, ``intact.host``, ``intact.device``,
  ``intact.results_dir``, ``intact.tracked_by`` (``track_run`` or the command line).

Idempotency
-----------
The MLflow run is found by ``intact.run_key`` (a changed config is a new key, hence a new MLflow run;
the older one stays, tagged ``intact.current=false``). ``intact.content_hash`` is the sha256 of every
input file plus :data:`TRACKER_VERSION`. Tracking again with the same content is a no-op. With changed
content (a task was redone) or after a crashed attempt (a run not FINISHED), a fresh MLflow run is
logged completely and only then the old one is deleted: MLflow params are immutable and metric
histories only grow, so "replace" is the only way to never double a history; logging first and deleting
after means a crash leaves at worst a duplicate, which the next attempt removes. (Deleted runs are
soft-deleted; ``mlflow gc`` purges them.)

Where it logs (first match wins)
--------------------------------
1. an explicit URI (``--uri`` on the command line), 2. the ``MLFLOW_TRACKING_URI`` environment variable
(a per-shell / per-cluster override without editing the committed config), 3. ``tracking.uri`` in
config.yaml, 4. the local store ``sqlite:///<cwd>/mlflow.db`` (MLflow 3's own default, spelt out so MLflow never
falls back to the old ``./mlruns`` file store). With any SQLite store, an experiment created here keeps
its artifacts beside the database, in ``<db dir>/mlruns/<experiment name>`` (MLflow alone would use
``./mlruns`` of whichever directory the first process ran in). Local SQLite
writers are serialised by a lock file next to the database (a fresh database hit by concurrent first
writers breaks in MLflow's schema migration); many cluster jobs should share a tracking server instead.

Failure handling
----------------
Tracking runs after the results are written, in its own local rule. Any failure (server unreachable,
timeout, bad URI, MLflow error) is logged, recorded in the marker ``tracking.json`` next to ``R.csv``
(``status: pending`` + the error), and the step still succeeds. HTTP requests time out after
``tracking.timeout_s`` with ``tracking.retries`` retries, a server is probed (``/health``) before MLflow
is even imported, and the whole step is cut off after ``tracking.deadline_s``.
``python -m intact.tracking sync results/`` later retries every run whose marker is missing, pending,
out of date, or written for another tracking URI.

This module imports neither torch nor mlflow at import time (the Snakefile imports it at start-up).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

TRACKER_VERSION = 1  #: bump when what is logged changes: every run is then re-logged once
MARKER = "tracking.json"
DEFAULT_EXPERIMENT = "intact/{benchmark}"
_EXPERIMENT_FIELDS = ("benchmark", "eval_split")


class TrackingError(RuntimeError):
    """Tracking could not be done now (the results are untouched; retry with ``sync``)."""


# --------------------------------------------------------------------------------------------------
# Configuration


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
    from intact.config import ConfigError, _schema, _schema_error

    raw = dict((cfg or {}).get("tracking") or {})
    schema = _schema()["properties"].get("tracking")
    if schema is not None:
        import jsonschema

        wrapped = {"type": "object", "properties": {"tracking": schema}}
        errors = list(jsonschema.Draft202012Validator(wrapped).iter_errors({"tracking": raw}))
        if errors:
            raise _schema_error(jsonschema.exceptions.best_match(errors))
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
    return f"results/runs/{benchmark}/{method}/seed{seed}/{MARKER}"


def tracking_markers(benchmark: str, methods: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """The markers of every (method, seed) run of a benchmark (for targets: ``all``, studies)."""
    return [marker_path(benchmark, m, s) for m in methods for s in seeds]


def tracking_targets(cfg: Mapping[str, Any]) -> list[str]:
    """The markers of every run of the target ``all`` (``run:`` section) if tracking is enabled."""
    if not tracking_config(cfg).enabled:
        return []
    r = cfg["run"]
    return [m for b in r["benchmarks"] for m in tracking_markers(b, r["methods"], r["seeds"])]


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


# --------------------------------------------------------------------------------------------------
# Reading a run folder (no mlflow)


@dataclass(frozen=True)
class RunFolder:
    """The files of one finished run and their parsed content."""

    path: Path
    metrics: dict[str, Any]
    trains: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    files: dict[str, Path]  #: artifact path in MLflow -> local file

    @property
    def benchmark(self) -> str:
        return self.metrics["benchmark"]

    @property
    def method(self) -> str:
        return self.metrics["method"]

    @property
    def seed(self) -> int:
        return int(self.metrics["seed"])

    @property
    def num_tasks(self) -> int:
        return len(self.evals)

    @property
    def run_name(self) -> str:
        return f"{self.benchmark}/{self.method}/seed{self.seed}"

    @property
    def config_hash(self) -> str:
        return str(self.metrics.get("config_hash") or self.trains[-1].get("config_hash"))

    @property
    def run_key(self) -> str:
        return f"{self.run_name}@{self.config_hash}"

    @property
    def config(self) -> dict[str, Any]:
        return self.trains[-1].get("config") or {}

    def content_hash(self) -> str:
        """sha256 over the tracker version and every input file's name and bytes."""
        h = hashlib.sha256(f"intact.tracking v{TRACKER_VERSION}\n".encode())
        for name in sorted(self.files):
            h.update(f"{name}\n".encode())
            h.update(hashlib.sha256(self.files[name].read_bytes()).digest())
        return h.hexdigest()


def read_run_folder(path: str | os.PathLike) -> RunFolder:
    """Parse a run folder; a clear error names the missing or inconsistent file."""
    path = Path(path)
    for name in ("R.csv", "metrics.json"):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path / name}: missing (is the run finished? expected R.csv and metrics.json)")
    metrics = json.loads((path / "metrics.json").read_text())
    T = int(metrics["num_tasks"])
    files = {"R.csv": path / "R.csv", "metrics.json": path / "metrics.json"}
    trains, evals = [], []
    for t in range(T):
        task = path / f"task{t}"
        for name in ("train.json", "eval.json", "hypercube.safetensors"):
            f = task / name
            if not f.is_file():
                raise FileNotFoundError(f"{f}: missing (metrics.json says {T} tasks)")
            files[f"tasks/task{t}/{name}"] = f
        trains.append(json.loads((task / "train.json").read_text()))
        evals.append(json.loads((task / "eval.json").read_text()))
        for rec, name in ((trains[-1], "train.json"), (evals[-1], "eval.json")):
            if rec.get("task") != t:
                raise ValueError(f"{task / name}: 'task' = {rec.get('task')!r}, expected {t}")
    return RunFolder(path=path, metrics=metrics, trains=trains, evals=evals, files=files)


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> {"a.b.c": value as text}; strings as is, everything else as JSON."""
    out: dict[str, str] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, str) else json.dumps(v)
    return out


_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")


def _key(name: str) -> str:
    return _BAD_KEY_CHARS.sub("_", name)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


@dataclass(frozen=True)
class Payload:
    """What one run logs: params, metrics (key, value, step), tags. Pure data, no mlflow."""

    params: dict[str, str]
    metrics: list[tuple[str, float, int]]
    tags: dict[str, str]


def build_payload(run: RunFolder) -> Payload:
    """Params, metrics and tags of one run folder (see the module docstring for the names)."""
    params = flatten(run.config)
    params.setdefault("method", run.method)
    params.setdefault("seed", str(run.seed))
    params["eval_split"] = str(run.metrics.get("eval_split", "test"))
    params["num_tasks"] = str(run.num_tasks)
    params["task_names"] = json.dumps(run.metrics.get("task_names"))

    metrics: list[tuple[str, float, int]] = []

    def add(key: str, value: Any, step: int) -> None:
        v = _number(value)
        if v is not None:
            metrics.append((_key(key), v, step))

    g = 0
    for t, rec in enumerate(run.trains):  # per epoch, global step
        for ep in rec.get("epochs", []):
            add("train/task", t, g)
            for k, v in ep.items():
                if k != "epoch":
                    add(f"train/{k}", v, g)
            g += 1
    aa_evolution = run.metrics.get("aa_evolution") or []
    for t, (tr, ev) in enumerate(zip(run.trains, run.evals)):  # per task, step = task
        for name, acc in zip(ev["task_names"], ev["accuracy"]):
            add(f"acc/{name}", acc, t)
        if t < len(aa_evolution):
            add("aa_evolution", aa_evolution[t], t)
        add("certificate", tr.get("certificate"), t)
        add("sampled_drift", tr.get("sampled_drift"), t)
        for layer, kinds in (tr.get("hypercube") or {}).items():
            for kind, stats in kinds.items():
                for stat, v in (stats or {}).items():
                    add(f"hypercube/{layer}/{kind}/{stat}", v, t)
        for layer, stats in (tr.get("inside_previous") or {}).items():
            for stat, v in (stats or {}).items():
                add(f"inside_previous/{layer}/{stat}", v, t)
        add("task/train_seconds", tr.get("seconds"), t)
        for k in ("images_per_s", "peak_memory_mb", "train_images"):
            add(f"task/{k}", tr.get(k), t)
        add("task/eval_seconds", ev.get("seconds"), t)
    last, per_task = run.num_tasks - 1, {k for k, _, _ in metrics}
    for k, v in run.metrics.items():  # final, step = last task
        if k not in ("seed", "num_tasks") and k not in per_task:
            add(k, v, last)

    tags = {
        "intact.run": run.run_name,
        "intact.run_key": run.run_key,
        "intact.config_hash": run.config_hash,
        "intact.benchmark": run.benchmark,
        "intact.method": run.method,
        "intact.seed": str(run.seed),
        "intact.eval_split": str(run.metrics.get("eval_split", "test")),
        "intact.results_dir": str(run.path.resolve()),
        "intact.tracker_version": str(TRACKER_VERSION),
        "mlflow.note.content": (
            f"{run.run_name} (config {run.config_hash}). Source of truth: {run.path.resolve()} "
            "(R.csv, metrics.json, task*/train.json, eval.json); this run is a view logged by intact.tracking."
        ),
    }
    provs = [tr.get("provenance") or {} for tr in run.trains]
    commits = list(dict.fromkeys(p["git_commit"] for p in provs if p.get("git_commit")))
    if commits:
        tags["mlflow.source.git.commit"] = commits[-1]
        tags["intact.git_commit"] = ",".join(commits)
    rules = sorted({p["snakemake_rule"] for p in provs if p.get("snakemake_rule")})
    if rules:
        tags["intact.snakemake_rules"] = ",".join(rules)
    tags["intact.tracked_by"] = os.environ.get("INTACT_RULE") or "python -m intact.tracking"
    jobs = [f"{t}:{p['slurm_job_id']}" for t, p in enumerate(provs) if p.get("slurm_job_id")]
    if jobs:
        tags["intact.slurm_job_ids"] = ",".join(jobs)
    for field in ("host", "device", "python"):
        values = list(dict.fromkeys(str(p[field]) for p in provs if p.get(field)))
        if values:
            tags[f"intact.{field}"] = ",".join(values)
    for name, version in (provs[-1].get("packages") or {}).items():
        tags[f"intact.packages.{name}"] = str(version)
    backbone = list(dict.fromkeys(tr["backbone_sha256"] for tr in run.trains if tr.get("backbone_sha256")))
    if backbone:
        tags["intact.backbone_sha256"] = ",".join(backbone)
    for name, sha in (run.trains[-1].get("data_sha256") or {}).items():
        tags[f"intact.data_sha256.{name}"] = str(sha)
    return Payload(params=params, metrics=metrics, tags={_key(k): v[:8000] for k, v in tags.items()})


def run_figure(run: RunFolder, path: Path) -> Path | None:
    """The run's own figure: R as a heat map and its AA evolution (None if matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a core dependency
        return None
    names = run.evals[0]["task_names"]
    R = [[run.evals[j]["accuracy"][i] for j in range(run.num_tasks)] for i in range(len(names))]
    T = run.num_tasks
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(4.0 + 0.45 * T, 3.2 + 0.2 * T), gridspec_kw={"width_ratios": [1.2, 1]})
    im = ax1.imshow(R, vmin=0, vmax=100, cmap="viridis")
    for i in range(len(names)):
        for j in range(T):
            ax1.text(j, i, f"{R[i][j]:.0f}", ha="center", va="center", fontsize=6, color="w" if R[i][j] < 60 else "k")
    ax1.set_xticks(range(T), names[:T], fontsize=7, rotation=90)
    ax1.set_yticks(range(len(names)), names, fontsize=7)
    ax1.set_xlabel("after training on")
    ax1.set_ylabel("accuracy on")
    ax1.set_title("R: accuracy (%)", fontsize=9)
    fig.colorbar(im, ax=ax1, fraction=0.046)
    aa = run.metrics.get("aa_evolution") or []
    ax2.plot(range(len(aa)), aa, marker="o", ms=3)
    ax2.set_xticks(range(len(aa)), names[:len(aa)], fontsize=7, rotation=90)
    ax2.set_xlabel("after training on")
    ax2.set_ylabel("AA over seen tasks (%)")
    ax2.set_title(f"AA {run.metrics.get('aa', float('nan')):.1f}  BWT {run.metrics.get('bwt', float('nan')):.1f}", fontsize=9)
    ax2.grid(alpha=0.3)
    fig.suptitle(f"{run.run_name} ({run.config_hash})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------------
# Talking to MLflow


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
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            resp.read(64)
    except urllib.error.HTTPError:
        return  # it answers (perhaps behind auth without /health): let MLflow talk to it
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise TrackingError(f"tracking server {redact(uri)} unreachable: {reason}") from None


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
    """Raise :class:`TrackingError` in the main thread after ``seconds`` (no-op elsewhere / if <= 0)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _expired(signum: int, frame: Any) -> None:
        raise TrackingError(f"tracking took longer than tracking.deadline_s = {seconds} s")

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
        tags = {**payload.tags, "intact.content_hash": content_hash, "intact.current": "true"}
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
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        with contextlib.suppress(Exception):
            client.set_terminated(run_id, "FAILED")
        raise
    return run_id


def _import_mlflow(tracking: TrackingConfig) -> None:
    _mlflow_environment(tracking)
    import mlflow.tracking  # noqa: F401


def _track(run: RunFolder, uri: str, tracking: TrackingConfig, force: bool) -> dict[str, Any]:
    """Log ``run`` unless an identical FINISHED MLflow run exists; returns the marker fields."""
    _mlflow_environment(tracking)
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    name = tracking.experiment_name(run.benchmark, str(run.metrics.get("eval_split", "test")))
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
    for r in runs:  # older configs of this (benchmark, method, seed) are not current any more
        if r.data.tags.get("intact.run_key") != run.run_key and r.data.tags.get("intact.current") != "false":
            client.set_tag(r.info.run_id, "intact.current", "false")
    if action == "unchanged" and next(r for r in same if r.info.run_id == keep).data.tags.get("intact.current") != "true":
        client.set_tag(keep, "intact.current", "true")
    return {"experiment": name, "experiment_id": exp_id, "run_id": keep, "action": action, "content_hash": chash}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def write_marker(path: Path, record: Mapping[str, Any]) -> None:
    """Atomic JSON write (the marker is a Snakemake output)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_marker(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def track_run(
    run_dir: str | os.PathLike,
    tracking: TrackingConfig | None = None,
    *,
    uri: str | None = None,
    force: bool = False,
    marker: bool = True,
) -> dict[str, Any]:
    """Log one run folder to MLflow and write ``<run_dir>/tracking.json``. Never raises on failure.

    The returned (and written) record has ``status``: ``done``, ``pending`` (with ``error``; retry
    with :func:`sync`) or ``disabled``.
    """
    tracking = tracking or TrackingConfig()
    run_dir = Path(run_dir)
    t0 = time.perf_counter()
    resolved, source = resolve_uri(tracking, uri)
    record: dict[str, Any] = {
        "status": "pending", "tracking_uri": redact(resolved), "uri_source": source,
        "tracker_version": TRACKER_VERSION, "updated": _now(),
    }
    if not tracking.enabled and uri is None:
        record["status"] = "disabled"
    else:
        try:
            with deadline(tracking.deadline_s):
                run = read_run_folder(run_dir)
                record.update(run=run.run_name, run_key=run.run_key, config_hash=run.config_hash)
                probe(resolved, tracking.timeout_s)
                _import_mlflow(tracking)  # ~1 s; outside the store lock
                with store_lock(resolved):
                    record.update(_track(run, resolved, tracking, force))
            record["status"] = "done"
            record.pop("error", None)
        except Exception as e:  # every failure: report, keep the results, let the workflow go on
            record["error"] = f"{type(e).__name__}: {e}"[:2000]
            print(f"tracking: {run_dir}: {record['error']} - results are safe; retry later with "
                  f"`python -m intact.tracking sync <results dir>`", file=sys.stderr)
            if not isinstance(e, TrackingError):
                traceback.print_exc(file=sys.stderr)
    record["seconds"] = round(time.perf_counter() - t0, 3)
    if record["status"] == "done":
        print(f"tracking: {record['run']} -> {record['tracking_uri']} experiment {record['experiment']!r} "
              f"run {record['run_id']} ({record['action']}, {record['seconds']:.1f} s)", file=sys.stderr)
    if marker:
        write_marker(run_dir / MARKER, record)
    return record


# --------------------------------------------------------------------------------------------------
# Sync: retry what is pending


def find_runs(results: str | os.PathLike) -> list[Path]:
    """Finished run folders under ``results`` (``results/runs/*/*/seed*`` with R.csv + metrics.json).

    ``results`` may be the results folder, its ``runs/`` folder, or a single run folder.
    """
    results = Path(results)
    if (results / "metrics.json").is_file():
        return [results]
    base = results / "runs" if (results / "runs").is_dir() else results
    return sorted(p for p in base.glob("*/*/seed*") if (p / "R.csv").is_file() and (p / "metrics.json").is_file())


def needs_sync(run_dir: Path, uri: str) -> bool:
    """Missing / pending marker, a marker for another URI or tracker version, or results newer than it."""
    m = read_marker(run_dir)
    if not m or m.get("status") != "done" or m.get("tracking_uri") != redact(uri):
        return True
    if m.get("tracker_version") != TRACKER_VERSION:
        return True
    marker_time = (run_dir / MARKER).stat().st_mtime
    return any(p.stat().st_mtime > marker_time for p in (run_dir / "R.csv", run_dir / "metrics.json"))


def sync(
    results: str | os.PathLike,
    tracking: TrackingConfig | None = None,
    *,
    uri: str | None = None,
    all_runs: bool = False,
    force: bool = False,
) -> list[dict[str, Any]]:
    """Track every run under ``results`` that :func:`needs_sync` (every run with ``all_runs``)."""
    tracking = tracking or TrackingConfig()
    resolved, _ = resolve_uri(tracking, uri)
    todo = [r for r in find_runs(results) if all_runs or force or needs_sync(r, resolved)]
    out = []
    for run_dir in todo:
        out.append({"run_dir": str(run_dir), **track_run(run_dir, dataclasses.replace(tracking, enabled=True), uri=resolved, force=force)})
        if out[-1]["status"] != "done" and "unreachable" in out[-1].get("error", ""):
            for rest in todo[len(out):]:  # the server is down: do not wait once per run
                rec = read_marker(rest) or {}
                rec.update(status="pending", error=out[-1]["error"], tracking_uri=redact(resolved), updated=_now())
                write_marker(rest / MARKER, rec)
                out.append({"run_dir": str(rest), **rec})
            break
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m intact.tracking", description="Log finished intact runs to MLflow.")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=None, help="config.yaml whose `tracking:` section to use (default: ./config.yaml if present)")
    common.add_argument("--uri", default=None, help="tracking URI (overrides $MLFLOW_TRACKING_URI and tracking.uri)")
    common.add_argument("--experiment", default=None, help="experiment name template, e.g. 'intact/{benchmark}'")
    common.add_argument("--force", action="store_true", help="re-log even when MLflow already holds identical content")
    t = sub.add_parser("track", parents=[common], help="track run folders (always exits 0; see their tracking.json)")
    t.add_argument("run_dirs", nargs="+", type=Path)
    s = sub.add_parser("sync", parents=[common], help="retry runs whose tracking is missing, pending or outdated (exit 1 if any stays pending)")
    s.add_argument("results", nargs="?", default=Path("results"), type=Path)
    s.add_argument("--all", action="store_true", dest="all_runs", help="every run, not only those that need it")
    st = sub.add_parser("status", help="list the tracking status of every run")
    st.add_argument("results", nargs="?", default=Path("results"), type=Path)
    args = p.parse_args(argv)

    if args.command == "status":
        for r in find_runs(args.results):
            m = read_marker(r) or {"status": "untracked"}
            print(f"{m['status']:9s} {r}  {m.get('tracking_uri', '')}  {m.get('error', '')}")
        return 0
    cfg_path = args.config or ("config.yaml" if Path("config.yaml").is_file() else None)
    tracking = load_tracking_config(cfg_path)
    if args.experiment:
        tracking = dataclasses.replace(tracking, experiment=args.experiment)
    if args.command == "track":
        for d in args.run_dirs:
            track_run(d, dataclasses.replace(tracking, enabled=True), uri=args.uri, force=args.force)
        return 0
    records = sync(args.results, tracking, uri=args.uri, all_runs=args.all_runs, force=args.force)
    pending = [r for r in records if r["status"] != "done"]
    print(f"tracking sync: {len(records) - len(pending)} run(s) tracked, {len(pending)} pending", file=sys.stderr)
    return 1 if pending else 0


if __name__ == "__main__":
    sys.exit(main())
