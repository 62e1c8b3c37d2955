"""The tracking step of one run (:func:`track_run`, its marker ``tracking.json``) and :func:`sync`.

Failure handling
----------------
Tracking runs after the results are written, in its own local rule. Any failure (server unreachable,
timeout, bad URI, MLflow error) is logged, recorded in the marker ``tracking.json`` next to ``R.csv``
(``status: pending`` + the error), and the step still succeeds. HTTP requests time out after
``tracking.timeout_s`` with ``tracking.retries`` retries, a server is probed (``/health``) before MLflow
is even imported, and the whole step is cut off after ``tracking.deadline_s``.
``python -m intact.tracking sync results/`` later retries every run whose marker is missing, pending,
out of date, or written for another tracking URI.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from intact.io import ArtifactError, read_json, write_json
from intact.tracking.mlflow_log import deadline, import_mlflow, probe, store_lock, upsert_run
from intact.tracking.record import read_run_folder, tune_choice_files
from intact.paths import MARKER
from intact.settings import TrackingConfig
from intact.tracking.settings import TRACKER_VERSION, TrackingError, redact, resolve_uri, server_down


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def write_marker(path: Path, record: Mapping[str, Any]) -> None:
    """Atomic JSON write (the marker is a Snakemake output)."""
    write_json(path, record)


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
    config_hash: str | None = None,
) -> dict[str, Any]:
    """Log one run folder to MLflow and write ``<run_dir>/tracking.json``. Never raises on a tracking failure.

    The returned (and written) record has ``status``: ``done``, ``pending`` (with ``error``; retry
    with :func:`sync`) or ``disabled``. A run whose records are damaged, edited or of another config than
    ``config_hash`` (:func:`~intact.tracking.record.read_run_folder`) is not a tracking failure: its
    :class:`~intact.io.ArtifactError` is raised before anything is uploaded, and no marker is written.
    """
    tracking = tracking or TrackingConfig()
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.json").is_file():   # a mistyped folder: no marker written into it, or made
        raise ArtifactError(f"{run_dir}: not a finished run folder (no metrics.json)")
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
                run = read_run_folder(run_dir, config_hash)  # every record checked before anything is uploaded
                record.update(run=run.run_name, run_key=run.run_key, config_hash=run.config_hash)
                probe(resolved, tracking.timeout_s)
                import_mlflow(tracking)  # ~1 s; outside the store lock
                with store_lock(resolved):
                    record.update(upsert_run(run, resolved, tracking, force))
            record["status"] = "done"
            record.pop("error", None)
        except ArtifactError:  # damaged results are not a tracking failure: nothing uploaded, no marker
            raise
        except Exception as e:  # every failure: report, keep the results, let the workflow go on
            # MLflow's errors quote the URI as given: its password stays out of the marker and the log
            record["error"] = f"{type(e).__name__}: {e}".replace(resolved, redact(resolved))[:2000]
            down = server_down(e)
            if down:
                record["server_down"] = True   # sync stops at the first such run: the others would wait as long
            print(f"tracking: {run_dir}: {record['error']} - results are safe; retry later with "
                  f"`python -m intact.tracking sync <results dir>`", file=sys.stderr)
            if not isinstance(e, TrackingError) and not down:
                print(traceback.format_exc().replace(resolved, redact(resolved)), end="", file=sys.stderr)
    record["seconds"] = round(time.perf_counter() - t0, 3)
    if record["status"] == "done":
        print(f"tracking: {record['run']} -> {record['tracking_uri']} experiment {record['experiment']!r} "
              f"run {record['run_id']} ({record['action']}, {record['seconds']:.1f} s)", file=sys.stderr)
    if marker:
        write_marker(run_dir / MARKER, record)
    return record


def track_checked(run_dir: str | os.PathLike, tracking: TrackingConfig, **kw: Any) -> dict[str, Any]:
    """:func:`track_run` for the command line: a run whose records are damaged is named (one line) and left out
    (``status: refused``, no marker), and the other runs go on."""
    try:
        return track_run(run_dir, tracking, **kw)
    except ArtifactError as err:
        print(f"tracking: not uploaded: {err}", file=sys.stderr)
        return {"status": "refused", "error": str(err)}


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


def needs_sync(run_dir: Path, uri: str, tracking: TrackingConfig | None = None) -> bool:
    """Missing / pending marker, a marker for another URI, tracker version or experiment, or results newer than it
    (the run's ``R.csv`` and ``metrics.json``, and a tune choice of its benchmark, whose tags a chosen run carries)."""
    m = read_marker(run_dir)
    if not m or m.get("status") != "done" or m.get("tracking_uri") != redact(uri):
        return True
    if m.get("tracker_version") != TRACKER_VERSION:
        return True
    try:
        metrics = read_json(run_dir / "metrics.json")
        experiment = (tracking or TrackingConfig()).experiment_name(metrics["benchmark"], metrics["eval_split"])
    except (OSError, ValueError, KeyError, TypeError):
        return True   # tracking it names what is wrong with it
    if m.get("experiment") != experiment:
        return True
    marker_time = (run_dir / MARKER).stat().st_mtime
    newer = (run_dir / "R.csv", run_dir / "metrics.json", *tune_choice_files(run_dir, str(metrics["benchmark"])))
    return any(p.stat().st_mtime > marker_time for p in newer)


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
    todo = [r for r in find_runs(results) if all_runs or force or needs_sync(r, resolved, tracking)]
    out = []
    for run_dir in todo:
        out.append({"run_dir": str(run_dir), **track_checked(run_dir, dataclasses.replace(tracking, enabled=True),
                                                              uri=uri, force=force)})  # its source recorded as given
        if out[-1].get("server_down"):
            for rest in todo[len(out):]:  # the server is down or does not answer: do not wait once per run
                rec = read_marker(rest) or {}
                rec.update(status="pending", error=out[-1]["error"], tracking_uri=redact(resolved), updated=_now())
                write_marker(rest / MARKER, rec)
                out.append({"run_dir": str(rest), **rec})
            break
    return out
