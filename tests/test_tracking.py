"""MLflow tracking against real components: a real local SQLite store, a real `mlflow server` with
concurrent clients, a closed port, and the Snakemake rule. No mocks."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import MLFLOW, NO_MLFLOW, REPO, snakemake, tiny_config, write_config
from stored_run import rewrite_task
from intact.hashing import stable_hash
from intact.tracking import (
    MARKER, TrackingConfig, build_payload, read_marker, read_run_folder, resolve_uri, sync, track_run,
)

RUN = "runs/digits/coda_p+intact/seed0"
TRACKING_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_TRACKING_URI": ""}  # empty = unset for intact


def test_a_server_whose_uri_holds_credentials_is_probed_with_them_and_they_are_never_shown():
    """urllib takes no user:password@ in a URL: the probe looked the whole of it up as a host name, so every run of
    a server with credentials in its URI stayed pending (before 2026-12-01). They go in a Basic auth header, as
    MLflow sends them; an unreachable one is named without its password."""
    import base64
    import http.server
    import threading

    from intact.tracking.mlflow_log import probe
    from intact.tracking.settings import TrackingError

    seen = []

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        probe(f"http://alice:s%40cret@127.0.0.1:{server.server_port}/", 5)
    finally:
        server.shutdown()
    assert seen == [("/health", "Basic " + base64.b64encode(b"alice:s@cret").decode())]
    with pytest.raises(TrackingError) as err:
        probe(f"http://alice:s3cret@127.0.0.1:{server.server_port}", 2)   # the server is gone
    assert "unreachable" in str(err.value) and "s3cret" not in str(err.value) and "***@127.0.0.1" in str(err.value)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """A developer's $MLFLOW_TRACKING_URI must not leak into the tests (it outranks the config), and
    nothing MLflow writes relative to the working directory may land in the checkout."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def results(tiny_bench, tmp_path_factory) -> Path:
    """A real finished run (3 tasks, coda_p+intact) under results/runs/..., trained as a SLURM job would be."""
    from intact.config import resolve_run
    from intact.evaluate import evaluate_task
    from intact.train import train_task

    root = tmp_path_factory.mktemp("tracking") / "results"
    out = root / RUN
    run = resolve_run(tiny_bench["config"], "digits", "coda_p+intact", 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_JOB_ID", "4242")
        mp.setenv("INTACT_RULE", "train_task")
        for t in range(3):
            train_task(run, t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                       out_dir=out / f"task{t}",
                       prev_dir=out / f"task{t - 1}" if t else None, threads=1, progress=False)
            evaluate_task(run, t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                          state=out / f"task{t}/state.safetensors", out_path=out / f"task{t}/eval.json", threads=1)
    _collect(out)
    return root


def _collect(run_dir: Path) -> None:
    from intact.results import collect_run

    collect_run([run_dir / f"task{t}/eval.json" for t in range(3)], [run_dir / f"task{t}/train.json" for t in range(3)],
                run_dir / "R.csv", run_dir / "metrics.json", 10)


def variant(results: Path, dest_root: Path, method: str, seed: int, shift: float = 0.0, **optim) -> Path:
    """A valid, distinct run folder derived from the trained one: another seed / method / config, its
    accuracies shifted by ``shift`` (R.csv and metrics.json recomputed by the real collect_run)."""
    src = results / RUN
    dst = dest_root / "runs/digits" / method / f"seed{seed}"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(MARKER, "state.safetensors"))
    for t in range(3):
        train = json.loads((dst / f"task{t}/train.json").read_text())
        train["config"].update(method=method, seed=seed)
        train["config"]["optim"].update(optim)
        ev = json.loads((dst / f"task{t}/eval.json").read_text())
        rewrite_task(dst / f"task{t}", {"config": train["config"], "method": method, "seed": seed,
                                        "config_hash": stable_hash(train["config"])},
                     {"accuracy": [min(100.0, a + shift * (i + 1)) for i, a in enumerate(ev["accuracy"])]})
    _collect(dst)
    return dst


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def active_runs(c, experiment: str):
    exp = c.get_experiment_by_name(experiment)
    return [] if exp is None else c.search_runs([exp.experiment_id], max_results=1000)


def histories(c, run) -> dict[str, list[tuple[int, float, int]]]:
    return {k: sorted((m.step, m.value, m.timestamp) for m in c.get_metric_history(run.info.run_id, k))
            for k in run.data.metrics}


def expected_histories(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for key, value, step in build_payload(read_run_folder(run_dir)).metrics:
        out.setdefault(key, []).append((step, value))
    return {k: sorted(v) for k, v in out.items()}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def assert_artifacts_match(c, run_id: str, run_dir: Path, tmp: Path) -> None:
    """Every input file is stored byte for byte; plus the config and the run's figure."""
    local = c.download_artifacts(run_id, "", str(tmp))
    got = {p.relative_to(local).as_posix(): p for p in Path(local).rglob("*") if p.is_file()}
    want = {"R.csv": run_dir / "R.csv", "metrics.json": run_dir / "metrics.json"}
    for t in range(3):
        for name in ("train.json", "eval.json", "hypercube.safetensors"):
            want[f"tasks/task{t}/{name}"] = run_dir / f"task{t}/{name}"
    assert set(got) == set(want) | {"config.json", "figures/run_summary.png"}
    assert {k: sha256(got[k]) for k in want} == {k: sha256(v) for k, v in want.items()}
    assert got["figures/run_summary.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------------
# (a) what one run logs, local SQLite store


@pytest.fixture(scope="module")
def local_store(tmp_path_factory) -> Path:
    """One working directory whose default SQLite store the local tests share (its schema is made once)."""
    if not MLFLOW:
        pytest.skip(NO_MLFLOW)
    return tmp_path_factory.mktemp("local_store").resolve()


def test_logs_params_metrics_tags_and_artifacts_to_the_default_local_store(results, local_store, monkeypatch, tmp_path):
    """No URI anywhere: MLflow 3's sqlite:///<cwd>/mlflow.db + ./mlruns, never the old file store."""
    run_dir = results / RUN
    monkeypatch.chdir(local_store)
    record = track_run(run_dir, TrackingConfig())
    uri = f"sqlite:///{local_store}/mlflow.db"
    assert record["status"] == "done" and record["action"] == "created"
    assert record["uri_source"] == "default" and record["tracking_uri"] == uri
    assert read_marker(run_dir) == record

    c = client(uri)
    runs = active_runs(c, "intact/digits")
    assert len(runs) == 1 and runs[0].info.run_id == record["run_id"] and runs[0].info.status == "FINISHED"
    r = runs[0]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    train = [json.loads((run_dir / f"task{t}/train.json").read_text()) for t in range(3)]
    evals = [json.loads((run_dir / f"task{t}/eval.json").read_text()) for t in range(3)]

    # params: the resolved config, flattened
    p = r.data.params
    assert p["method"] == "coda_p+intact" and p["seed"] == "0" and p["optim.epochs"] == "1"
    assert p["intact.lambda_var"] == json.dumps(train[-1]["config"]["intact"]["lambda_var"])
    assert json.loads(p["benchmark.domains"]) == ["blur", "noise", "edges"] and p["settings.pool_size"] == "6"

    # final metrics at step T-1, per-task metrics at step = task, per-epoch losses at the global epoch
    h = histories(c, r)
    for k in ("aa", "caa", "forgetting_max", "forgetting_one_step", "bwt", "aa_weighted", "fwt_vs_chance"):
        assert [(s, v) for s, v, _ in h[k]] == [(2, pytest.approx(metrics[k]))], k
    for i, name in enumerate(["blur", "noise", "edges"]):
        want = [(t, pytest.approx(evals[t]["accuracy"][i])) for t in range(3)]
        assert [(s, v) for s, v, _ in h[f"acc/{name}"]] == want
    assert [v for _, v, _ in h["aa_evolution"]] == pytest.approx(metrics["aa_evolution"])
    assert [(s, v) for s, v, _ in h["certificate"]] == [(t, pytest.approx(train[t]["certificate"])) for t in (1, 2)]
    assert [v for _, v, _ in h["hypercube/fc0/cumulative/log_volume"]] == pytest.approx(metrics["hypercube_log_volume"])
    assert len(h["train/ce"]) == 3  # one epoch per task: global epoch step = task here
    for term in ("ce", "intdrift", "feat", "var", "align"):
        want = [(t, pytest.approx(train[t]["epochs"][0][term])) for t in range(3) if term in train[t]["epochs"][0]]
        assert want and [(s, v) for s, v, _ in h[f"train/{term}"]] == want, term
    assert [v for _, v, _ in h["train/task"]] == [0, 1, 2]
    assert h == {k: sorted((s, v, h[k][0][2]) for s, v in vals) for k, vals in expected_histories(run_dir).items()}

    # tags: identity, provenance, checksums
    tags = r.data.tags
    prov = train[-1]["provenance"]
    assert tags["intact.run"] == "digits/coda_p+intact/seed0" and tags["intact.config_hash"] == metrics["config_hash"]
    assert tags["intact.run_key"] == f"digits/coda_p+intact/seed0@{metrics['config_hash']}"
    assert tags["intact.current"] == "true"
    assert tags["intact.slurm_job_ids"] == "0:4242,1:4242,2:4242" and tags["intact.snakemake_rules"] == "train_task"
    assert tags["intact.backbone_sha256"] == train[0]["backbone_sha256"]
    assert tags["intact.data_sha256.data.safetensors"] == train[0]["data_sha256"]["data.safetensors"]
    assert tags["intact.packages.torch"] == prov["packages"]["torch"]
    assert tags["intact.packages.mlflow"] == prov["packages"]["mlflow"]
    if prov["git_commit"]:
        assert tags["mlflow.source.git.commit"] == prov["git_commit"]
    assert tags["mlflow.runName"] == "coda_p+intact/seed0" and tags["intact.tracked_by"] == "python -m intact.tracking"
    assert_artifacts_match(c, r.info.run_id, run_dir, tmp_path / "dl")
    exp = c.get_experiment(record["experiment_id"])
    assert exp.artifact_location == str(local_store / "mlruns/intact_digits")
    assert (local_store / "mlruns/intact_digits" / record["run_id"] / "artifacts/R.csv").is_file()


def test_uri_precedence(monkeypatch, tmp_path):
    cfg = TrackingConfig(uri="http://config:5000")
    assert resolve_uri(TrackingConfig(), cwd=tmp_path) == (f"sqlite:///{tmp_path.resolve()}/mlflow.db", "default")
    assert resolve_uri(cfg) == ("http://config:5000", "config")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert resolve_uri(cfg) == ("http://env:5000", "MLFLOW_TRACKING_URI")
    assert resolve_uri(cfg, "http://arg:5000") == ("http://arg:5000", "argument")


def test_a_damaged_or_edited_run_is_named_and_never_uploaded(tmp_path, capsys):
    """Issue 43: the last task's truncated hypercube (uploaded as `done` before) and a valid-JSON edit of an
    eval.json are named in one line with the --forcerun that redoes them, before MLflow is contacted: no store,
    no marker. The command line names the run, goes on with the others, and exits 1."""
    from intact.io import ArtifactError
    from intact.tracking.cli import main
    from stored_run import write_run

    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", [[90.0, 80.0], [20.0, 85.0]])
    uri = f"sqlite:///{tmp_path / 'store'}/mlflow.db"

    def edit(path):
        path.write_text(path.read_text().replace('"accuracy": [\n    80.0', '"accuracy": [\n    99.0'))

    for name, damage in (("task1/hypercube.safetensors", lambda p: p.write_bytes(p.read_bytes()[:100])),
                         ("task1/eval.json", edit)):
        saved = (run / name).read_bytes()
        damage(run / name)
        assert (run / name).read_bytes() != saved
        with pytest.raises(ArtifactError) as err:
            track_run(run, TrackingConfig(uri=uri))
        msg = str(err.value)
        assert msg.startswith(f"{run / name} is damaged") and f"--forcerun {run / name}`" in msg and "\n" not in msg
        assert not (run / MARKER).exists() and not (tmp_path / "store").exists()
        (run / name).write_bytes(saved)
    (run / "task1/hypercube.safetensors").write_bytes(b"\0" * 100)
    capsys.readouterr()
    assert main(["sync", str(tmp_path / "results"), "--uri", uri]) == 1
    err = capsys.readouterr().err
    assert f"tracking: not uploaded: {run / 'task1/hypercube.safetensors'} is damaged" in err and "1 refused" in err
    assert not (run / MARKER).exists() and not (tmp_path / "store").exists()


def test_a_mistyped_folder_config_or_experiment_is_one_line_and_writes_nothing(tmp_path, capsys):
    """`track typo_run` exited 0, made the folder and left a pending marker in it; `sync` and `status` of a missing
    path said "0 run(s) tracked" with exit 0; a missing --config or an unknown template field was a traceback, or a
    KeyError recorded as pending over a done marker (before 2026-12-01)."""
    from intact.tracking.cli import main
    from stored_run import write_run

    (tmp_path / "results").mkdir()
    assert main(["track", str(tmp_path / "typo_run")]) == 1
    assert "typo_run: not a finished run folder (no metrics.json)" in capsys.readouterr().err
    assert not (tmp_path / "typo_run").exists()
    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", [[90.0, 80.0], [20.0, 85.0]])
    for argv, fragment in ((["sync", str(tmp_path / "nosuch")], "nosuch: no such folder"),
                           (["status", str(tmp_path / "nosuch")], "nosuch: no such folder"),
                           (["sync", str(tmp_path / "results"), "--config", "nosuch.yaml"],
                            "'nosuch.yaml' does not exist"),
                           (["track", str(run), "--experiment", "x/{foo}"], "bad template (KeyError('foo'))")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and fragment in err and "Traceback" not in err, err
    assert not (run / MARKER).exists()


def test_a_server_that_answers_its_health_check_but_not_its_api_stops_sync_at_the_first_run(tmp_path, capsys):
    """Its requests time out: MLflow wraps that in its own exception after its retries, which `sync` did not read
    as a server down, so it waited as long for every run and printed a 30-line traceback for each (before
    2026-12-01). Now the first run's time-out is one line, and the rest are marked pending at once."""
    if not MLFLOW:
        pytest.skip(NO_MLFLOW)
    import http.server
    import threading

    from stored_run import write_run

    class Hanging(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/health":
                time.sleep(3)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hanging)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    runs = [write_run(tmp_path / f"results/runs/digits/coda_p/seed{s}", [[90.0, 80.0], [20.0, 85.0]], seed=s)
            for s in (0, 1)]
    try:
        out = sync(tmp_path / "results", TrackingConfig(timeout_s=1, retries=0),
                   uri=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert [r["status"] for r in out] == ["pending", "pending"] and out[0].get("server_down"), out
    assert out[1]["error"] == out[0]["error"] and read_marker(runs[1])["status"] == "pending"
    assert "Traceback" not in capsys.readouterr().err


def test_two_trackers_of_one_run_settle_on_one_mlflow_run(tmp_path, monkeypatch):
    """A server takes no lock: `sync` typed beside the workflow's tracking job of the same run left two current
    MLflow runs, and a plain `sync` never removed one (before 2026-12-01). Here another tracker's upload of the same
    content finishes first (started first): this tracker deletes its own and names that one."""
    if not MLFLOW:
        pytest.skip(NO_MLFLOW)
    from intact.tracking import mlflow_log
    from stored_run import write_run

    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", [[90.0, 80.0], [20.0, 85.0]])
    uri = f"sqlite:///{tmp_path / 'store'}/mlflow.db"
    uploaded = []

    def raced(*args, **kw):
        uploaded.extend([log_run(*args, **kw), log_run(*args, **kw)])   # the other tracker's, then this one's
        return uploaded[-1]

    log_run = mlflow_log.log_run
    monkeypatch.setattr(mlflow_log, "log_run", raced)
    record = track_run(run, TrackingConfig(uri=uri))
    assert record["action"] == "logged by another tracker" and record["run_id"] == uploaded[0], record
    assert [r.info.run_id for r in active_runs(client(uri), "intact/digits")] == [uploaded[0]]


# --------------------------------------------------------------------------------------------------
# (b) idempotency


def test_tracking_twice_keeps_one_run_and_the_same_histories(results, local_store, tmp_path):
    run_dir = variant(results, tmp_path / "results", "coda_p+intact", 1, shift=0.5)
    uri = f"sqlite:///{local_store}/mlflow.db"
    cfg = TrackingConfig(uri=uri, experiment="idem/{benchmark}")
    first = track_run(run_dir, cfg)  # from another working directory: artifacts still go beside the database
    assert first["status"] == "done" and first["uri_source"] == "config" and first["experiment"] == "idem/digits"
    assert (local_store / "mlruns/idem_digits" / first["run_id"] / "artifacts/R.csv").is_file()
    c = client(uri)
    before = histories(c, active_runs(c, "idem/digits")[0])
    second = track_run(run_dir, cfg)
    assert second["status"] == "done" and second["action"] == "unchanged" and second["run_id"] == first["run_id"]
    runs = active_runs(c, "idem/digits")
    assert len(runs) == 1 and histories(c, runs[0]) == before

    # a redone task (new content, same config): the run is replaced, never doubled
    ev = json.loads((run_dir / "task2/eval.json").read_text())
    rewrite_task(run_dir / "task2", evaluation={"accuracy": [12.5, *ev["accuracy"][1:]]})
    _collect(run_dir)
    third = track_run(run_dir, cfg)
    assert third["action"] == "replaced" and third["run_id"] != first["run_id"]
    runs = active_runs(c, "idem/digits")
    assert [r.info.run_id for r in runs] == [third["run_id"]]
    after = histories(c, runs[0])
    assert {k: len(v) for k, v in after.items()} == {k: len(v) for k, v in before.items()}
    assert after["acc/blur"][-1][1] == 12.5 and c.get_run(first["run_id"]).info.lifecycle_stage == "deleted"

    # a crashed attempt (a half-logged duplicate, still RUNNING) is removed by the next tracking
    exp_id = third["experiment_id"]
    stray = c.create_run(exp_id, tags={k: runs[0].data.tags[k] for k in ("intact.run", "intact.run_key")}).info.run_id
    assert track_run(run_dir, cfg)["action"] == "unchanged"
    assert [r.info.run_id for r in active_runs(c, "idem/digits")] == [third["run_id"]]
    assert c.get_run(stray).info.lifecycle_stage == "deleted"
    # an upload that fails half-way leaves a FAILED run that is not current (before 2026-12-01 it was tagged current
    # before its metrics and artifacts) and a pending marker; the next tracking removes it
    from mlflow.tracking import MlflowClient

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MlflowClient, "log_artifacts", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
        assert track_run(run_dir, cfg, force=True)["status"] == "pending"
    failed = [r for r in active_runs(c, "idem/digits") if r.info.run_id != third["run_id"]]
    assert [(r.info.status, r.data.tags.get("intact.current")) for r in failed] == [("FAILED", None)]
    assert track_run(run_dir, cfg)["action"] == "unchanged"
    assert [r.info.run_id for r in active_runs(c, "idem/digits")] == [third["run_id"]]

    # a changed config is a new run key: a second MLflow run, the old one no longer current
    other = variant(results, tmp_path / "other", "coda_p+intact", 1, shift=0.5, lr_head=0.02)
    fourth = track_run(other, cfg)
    assert fourth["action"] == "created"
    current = {r.info.run_id: r.data.tags["intact.current"] for r in active_runs(c, "idem/digits")}
    assert current == {third["run_id"]: "false", fourth["run_id"]: "true"}


# --------------------------------------------------------------------------------------------------
# (c), (d) a real tracking server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on 127.0.0.1 (2 workers, SQLite backend, proxied artifacts), stopped by process group."""
    if not MLFLOW:
        pytest.skip(NO_MLFLOW)
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(root / "server.log", "w")
    # the server migrates the fresh SQLite schema once, before its workers start: no concurrent first writers
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "2",
         "--backend-store-uri", f"sqlite:///{root}/mlflow.db", "--artifacts-destination", str(root / "artifacts")],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.read().strip() == b"OK":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, **TRACKING_ENV}
    return subprocess.Popen([sys.executable, "-m", "intact.tracking", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_clients_lose_nothing(results, mlflow_server, tmp_path):
    """Four processes track four runs at once into one new experiment (created by whoever is first)."""
    root = tmp_path / "results"
    runs = [variant(results, root, m, s, shift=0.1 * k) for k, (m, s) in
            enumerate([("coda_p", 0), ("coda_p", 1), ("coda_p+intact", 1), ("coda_p+intact", 2)])]
    experiment = "concurrent/{benchmark}"
    procs = [cli("track", str(r), "--uri", mlflow_server, "--experiment", experiment, cwd=tmp_path) for r in runs]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(runs), outs
    records = [read_marker(r) for r in runs]
    assert all(m["status"] == "done" for m in records), [(m.get("error"), o[1][-2000:]) for m, o in zip(records, outs)]

    c = client(mlflow_server)
    assert len({m["experiment_id"] for m in records}) == 1
    tracked = {r.data.tags["intact.run"]: r for r in active_runs(c, "concurrent/digits")}
    assert set(tracked) == {f"digits/{r.parent.name}/{r.name}" for r in runs}
    for run_dir, record in zip(runs, records):
        r = tracked[f"digits/{run_dir.parent.name}/{run_dir.name}"]
        assert r.info.run_id == record["run_id"] and r.info.status == "FINISHED"
        got = {k: [(s, v) for s, v, _ in hist] for k, hist in histories(c, r).items()}
        assert got == expected_histories(run_dir)
        assert r.data.params["seed"] == run_dir.name.removeprefix("seed")
        assert_artifacts_match(c, r.info.run_id, run_dir, tmp_path / "dl" / r.info.run_id)


def gave_up_at_the_probe(record: dict, uri: str) -> bool:
    """The step ended at its first request, refused: the probe of ``<uri>/health``, made before MLflow is imported,
    so no MLflow request, retry or back-off waited on the dead server. (What it took stays in the marker's
    ``seconds``, not asserted: docs/testing.md.)"""
    probe = f"ServerDown: tracking server {uri} unreachable: "
    return record["error"].startswith(probe) and "Connection refused" in record["error"] and "seconds" in record


def test_unreachable_server_leaves_pending_and_sync_uploads_later(results, mlflow_server, tmp_path):
    root = tmp_path / "results"
    run_dir = variant(results, root, "coda_p", 3, shift=0.2)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = cli("track", str(run_dir), "--uri", dead, "--experiment", "late/{benchmark}", cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    record = read_marker(run_dir)
    assert record["status"] == "pending" and record["tracking_uri"] == dead
    assert gave_up_at_the_probe(record, dead)

    # `sync` against a dead server stays pending (exit 1), against the live one uploads it
    assert sync(root, TrackingConfig(experiment="late/{benchmark}"), uri=dead)[0]["status"] == "pending"
    proc = cli("sync", str(root), "--uri", mlflow_server, "--experiment", "late/{benchmark}", cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    record = read_marker(run_dir)
    assert record["status"] == "done" and record["tracking_uri"] == mlflow_server
    c = client(mlflow_server)
    [r] = active_runs(c, "late/digits")
    assert r.info.run_id == record["run_id"]
    assert {k: [(s, v) for s, v, _ in hist] for k, hist in histories(c, r).items()} == expected_histories(run_dir)
    # nothing left to do
    assert sync(root, TrackingConfig(experiment="late/{benchmark}"), uri=mlflow_server) == []
    # but for another experiment, or after a tune choice of its benchmark is written (its tags may change), the run is
    # logged again (before 2026-12-01 its marker sufficed: plain `sync` did nothing)
    [moved] = sync(root, TrackingConfig(experiment="moved/{benchmark}"), uri=mlflow_server)
    assert moved["status"] == "done" and moved["experiment"] == "moved/digits"
    choice = root / "tune/digits/coda_p+intact/choice.json"
    from intact.io import write_record

    write_record(choice, {"chosen": {"final_name": "coda_p+intact@lambda_feat=1"}})   # another run chosen
    os.utime(choice, (time.time() + 5, time.time() + 5))
    assert [r["action"] for r in sync(root, TrackingConfig(experiment="moved/{benchmark}"), uri=mlflow_server)] \
        == ["unchanged"]


def test_sync_reads_the_tracking_section_of_the_base_a_config_extends(results, tmp_path):
    """``sync --config configs/paper/imagenet_r.yaml`` uses the ``tracking:`` section of the base.yaml it extends
    (issue 44): here the base names a server where nothing listens, so the run stays pending there (the
    overlay alone would have left it to the default local store, done)."""
    from intact.tracking.cli import main

    paper = tmp_path / "paper"
    paper.mkdir()
    dead = f"http://127.0.0.1:{free_port()}"
    base = (REPO / "configs/paper/base.yaml").read_text()
    assert base.count("\n  uri: null ") == 1
    (paper / "base.yaml").write_text(base.replace("\n  uri: null ", f"\n  uri: {dead} "))
    shutil.copy(REPO / "configs/paper/imagenet_r.yaml", paper / "imagenet_r.yaml")
    run_dir = variant(results, tmp_path / "results", "coda_p", 4)
    assert main(["sync", str(tmp_path / "results"), "--config", str(paper / "imagenet_r.yaml")]) == 1
    record = read_marker(run_dir)
    assert (record["status"], record["tracking_uri"], record["uri_source"]) == ("pending", dead, "config")


# --------------------------------------------------------------------------------------------------
# The Snakemake rule


def test_all_includes_tracking_markers_only_when_enabled():
    from intact.config import ConfigError
    from intact.plan import Plan

    def markers(cfg):
        return [f for f in Plan(cfg).all_targets() if f.endswith(MARKER)]

    cfg = tiny_config()
    assert markers(cfg) == [f"results/runs/digits/{m}/seed0/{MARKER}" for m in ("coda_p", "coda_p+intact")]
    cfg["tracking"] = {**cfg.get("tracking", {}), "enabled": False}
    assert markers(cfg) == []
    for bad, fragment in [({"enabld": True}, "tracking.enabld"), ({"experiment": "x/{bench}"}, "tracking.experiment")]:
        with pytest.raises(ConfigError, match=fragment):
            markers({**cfg, "tracking": bad})


def test_track_run_rule_never_fails_the_workflow(results, tmp_path):
    """The rule with an unreachable server: the workflow succeeds, the marker says pending."""
    cfg = tiny_config()
    cfg["tracking"] = {"enabled": True, "uri": f"http://127.0.0.1:{free_port()}", "experiment": "wf/{benchmark}",
                       "timeout_s": 2}
    write_config(tmp_path, cfg)
    shutil.copytree(results / RUN, tmp_path / "results" / RUN, ignore=shutil.ignore_patterns(MARKER))
    out = snakemake(tmp_path, f"results/{RUN}/{MARKER}", env=TRACKING_ENV)
    assert "track_run" in out.stdout + out.stderr
    record = read_marker(tmp_path / "results" / RUN)
    assert record["status"] == "pending" and gave_up_at_the_probe(record, cfg["tracking"]["uri"])
    log = (tmp_path / "results/logs/track_run/digits/coda_p+intact/seed0.log").read_text()
    assert "results are safe" in log and "intact.tracking sync" in log
