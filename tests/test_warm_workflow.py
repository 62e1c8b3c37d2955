"""The pipeline run warm and cold (intact.runtime.warm): the same job gives bit-identical outputs either way, and the
warm parent starts and ends with the workflow - on success, on a failed job and on Ctrl-C - leaving no
process behind. A SIGTERM to a warm training job checkpoints it as for a cold one, and the rerun resumes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from intact import io
from conftest import REPO, checkout_lock, plain_signals, process_gone, snakemake, tiny_config, write_config

#: every test here runs workflow jobs: the full tier only (docs/testing.md)
pytestmark = pytest.mark.slow

RUN = "results/runs/digits/coda_p+intact/seed0"
#: the measurements in train.json (also per epoch) and eval.json - wall times, rates, peak memory - and the
#: record's seal, which covers them (each seal is checked by :func:`_record`): everything else must match bit for bit
MEASURED = {"seconds", "images_per_s", "peak_memory_mb", "inference_batch_seconds", io.SEAL}


@pytest.fixture(scope="module")
def prepared(prepared_digits, tmp_path_factory):
    """A workdir (3 tiny tasks of 3 epochs, one method, no tracking) with its data and backbone built (the
    session's). 3 epochs: a SIGTERM can come after the first epoch's checkpoint (an epoch of a tiny task costs
    ~0.3 s: a process start costs more)."""
    cfg = tiny_config(methods=["coda_p+intact"])
    cfg["tracking"]["enabled"] = False
    cfg["optim"]["epochs"] = 3
    return prepared_digits(cfg, tmp_path_factory.mktemp("warm_prepared"))


@pytest.fixture(scope="module")
def cold_run(prepared, tmp_path_factory) -> Path:
    """The prepared workdir run cold (INTACT_WARM=0: every job in a fresh Python), uninterrupted, up to R.csv:
    the reference the warm runs below must equal bit for bit (read-only)."""
    work = _copy(prepared, tmp_path_factory.mktemp("warm_cold_run") / "cold")
    with checkout_lock(tmp_path_factory):  # as the tests that compare with it: one state of the checkout
        proc = snakemake(work, f"{RUN}/R.csv", env={"INTACT_WARM": "0"})
    assert "warm parent" not in proc.stderr
    return work


def _copy(prepared: Path, dst: Path) -> Path:
    shutil.copytree(prepared, dst)
    return dst


def _parent_pid(stderr: str) -> int:
    return int(re.search(r"warm parent \(pid (\d+)", stderr)[1])


def _trace(path: Path) -> list[tuple[str, int, str]]:
    return [(w, int(pid), rest) for w, pid, rest in (line.split(" ", 2) for line in path.read_text().splitlines())]


def _no_process_left(parent: int, trace: Path) -> None:
    assert process_gone(parent), f"the warm parent {parent} is still running"
    for _, pid, _ in _trace(trace):
        assert process_gone(pid), f"job process {pid} is still running"


def _tensors(path: Path) -> tuple[dict, bytes]:
    """A safetensors file as (its header, parsed, and the tensor bytes): the header's metadata keys come in
    an order safetensors draws per process (cold runs differ in it too), so the header is compared parsed."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + size]), raw[8 + size:]


def _record(path: Path):
    """A JSON record without its measurements (at any depth)."""
    def strip(obj):
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in MEASURED}
        return [strip(v) for v in obj] if isinstance(obj, list) else obj
    record = json.loads(path.read_text())
    io.check_seal(path, record)
    return strip(record)


def test_warm_and_cold_runs_are_bit_identical_and_the_parent_ends(prepared, cold_run, tmp_path, checkout_unchanged):
    # checkout_unchanged: train.json records the commit, "-dirty" while tests/test_workflow.py edits a file
    warm_dir, cold_dir = _copy(prepared, tmp_path / "warm"), cold_run
    trace = tmp_path / "trace"
    hot = snakemake(warm_dir, f"{RUN}/R.csv", env={"INTACT_WARM_TRACE": str(trace)})
    started = [rest for what, _, rest in _trace(trace) if what == "start"]
    assert sum("train_task" in s for s in started) == 3 and any("collect_run" in s for s in started)
    assert all(rest == "0" for what, _, rest in _trace(trace) if what == "exit")
    _no_process_left(_parent_pid(hot.stderr), trace)
    for t in range(3):
        hot_task, cold_task = warm_dir / RUN / f"task{t}", cold_dir / RUN / f"task{t}"
        for name in ("state.safetensors", "hypercube.safetensors"):
            assert _tensors(hot_task / name) == _tensors(cold_task / name)
        for name in ("train.json", "eval.json"):
            assert _record(hot_task / name) == _record(cold_task / name)
    assert (warm_dir / RUN / "R.csv").read_bytes() == (cold_dir / RUN / "R.csv").read_bytes()


def test_a_failed_job_fails_the_run_and_the_parent_ends(prepared, tmp_path):
    work = _copy(prepared, tmp_path / "w")
    (work / "results/backbones/vit_digits.safetensors").write_bytes(b"not a safetensors file")
    trace = tmp_path / "trace"
    proc = snakemake(work, f"{RUN}/R.csv", check=False, env={"INTACT_WARM_TRACE": str(trace)})
    assert proc.returncode != 0
    exits = [int(rest) for what, _, rest in _trace(trace) if what == "exit"]
    assert exits and all(os.waitstatus_to_exitcode(s) == 1 for s in exits)  # the job's own status
    assert "Error in rule query_cache" in proc.stdout + proc.stderr  # the first job that reads the backbone
    _no_process_left(_parent_pid(proc.stderr), trace)


def _start(work: Path, trace: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", *args]
    # a session of its own: its process group is what a terminal's Ctrl-C reaches
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "INTACT_WARM_TRACE": str(trace)}, preexec_fn=plain_signals)


def _wait_for_training(work: Path, trace: Path, timeout: float = 600) -> int:
    """The pid of the first train_task job's process (the warm parent's child), once it has started."""
    end = time.time() + timeout
    while time.time() < end:
        if trace.exists() and any("train_task" in rest for what, _, rest in _trace(trace) if what == "start"):
            return next(pid for what, pid, rest in _trace(trace) if what == "start" and "train_task" in rest)
        time.sleep(0.05)
    raise AssertionError("no train_task job started")


def test_ctrl_c_ends_the_run_its_jobs_and_the_parent(prepared, tmp_path):
    """SIGINT to the workflow's process group (a terminal's Ctrl-C) while a training job runs: the job is
    interrupted, Snakemake stops, and neither the warm parent nor any job process is left."""
    work, trace = _copy(prepared, tmp_path / "w"), tmp_path / "trace"
    # tasks of 40 epochs (~15 s each): the SIGINT below must land while the first task trains (a warm 1-epoch
    # task can end within the second this test waits, and the run then raced the signal)
    cfg = yaml.safe_load((work / "config.yaml").read_text())
    cfg["optim"]["epochs"] = 40
    write_config(work, cfg)
    proc = _start(work, trace, f"{RUN}/R.csv")
    try:
        _wait_for_training(work, trace)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, err[-4000:]
    assert any(what == "exit" and os.WIFSIGNALED(int(rest)) or what == "exit" and rest != "0"
               for what, _, rest in _trace(trace))
    _no_process_left(_parent_pid(err), trace)


def test_sigterm_checkpoints_a_warm_job_and_the_rerun_resumes_bit_identically(prepared, cold_run, tmp_path,
                                                                              checkout_unchanged):
    """SIGTERM to a training job's process (the client Snakemake started): as for a cold job, it saves a
    checkpoint and exits; Snakemake sees the failure; the rerun resumes from the checkpoint and gives the
    uninterrupted run's outputs (the module's cold run, INTACT_WARM=0)."""
    work, cold, trace = _copy(prepared, tmp_path / "w"), cold_run, tmp_path / "trace"
    proc = _start(work, trace, f"{RUN}/task0/train.json")  # 3 epochs: the signal comes after the first checkpoint
    try:
        _wait_for_training(work, trace)
        script = next(rest for what, _, rest in _trace(trace) if what == "start" and "train_task" in rest)
        checkpoint = work / RUN / "task0/checkpoint.pt"
        end = time.time() + 600
        while not checkpoint.exists() and time.time() < end and proc.poll() is None:
            time.sleep(0.02)
        os.kill(_client_of(script), signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, err[-4000:]
    log = work / "results/logs/train_task/digits/coda_p+intact/seed0/task0.log"
    assert "checkpoint saved" in log.read_text() + out + err
    assert checkpoint.exists() and not (work / RUN / "task0/train.json").exists()
    _no_process_left(_parent_pid(err), trace)
    snakemake(work, f"{RUN}/task0/train.json")
    assert json.loads((work / RUN / "task0/train.json").read_text())["resumed_from"] is not None
    assert json.loads((cold / RUN / "task0/train.json").read_text())["resumed_from"] is None
    for name in ("state.safetensors", "hypercube.safetensors"):
        assert _tensors(work / RUN / "task0" / name) == _tensors(cold / RUN / "task0" / name)
    assert _record(work / RUN / "task0/eval.json") == _record(cold / RUN / "task0/eval.json")


def _client_of(script: str) -> int:
    """The client of a warm job: the process Snakemake started with the job's script (python <script>)."""
    name = os.path.basename(script).encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and name in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no client runs {script}")


def test_a_run_adopts_the_warm_parent_intact_warm_keeps_and_leaves_it_running(prepared, tmp_path):
    """`intact warm` keeps a warm parent across runs: a run started with the line it prints forks its jobs
    from that parent, starts none of its own and leaves it running; Ctrl-C then ends it, leaving no process."""
    work = _copy(prepared, tmp_path / "w")
    trace = tmp_path / "trace"
    keeper = subprocess.Popen([sys.executable, "-m", "intact.cli", "warm"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "INTACT_WARM_TRACE": str(trace)},
                              preexec_fn=plain_signals)
    try:
        name, _, path = keeper.stdout.readline().strip().removeprefix("export ").partition("=")
        assert name == "INTACT_WARM_SOCKET" and path.startswith("@intact-warm-")
        parent = int(re.search(r"pid (\d+)", keeper.stderr.readline())[1])
        proc = snakemake(work, f"{RUN}/task0/train.json", env={name: path})
        assert "kept, not stopped by this run" in proc.stderr, proc.stderr[-3000:]
        assert "warm parent (pid" not in proc.stderr
        started = [rest for what, _, rest in _trace(trace) if what == "start"]
        assert [s.rsplit(".", 2)[-2] for s in started] == ["query_cache", "train_task"]
        assert keeper.poll() is None and not process_gone(parent, timeout=0)
    finally:
        keeper.send_signal(signal.SIGINT)
        keeper.wait(60)
    assert keeper.returncode == 0
    _no_process_left(parent, trace)
