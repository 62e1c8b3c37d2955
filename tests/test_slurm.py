"""The cluster profile slurm/config.yaml, on a real SLURM, and what a training job does at its time limit.

- ``test_profile_resolves_from_the_repo_root``: ``snakemake --profile slurm all``, typed in the repository
  root, picks up ./slurm/config.yaml (+ the workflow profile) and gives the GPU rules their requests.
- ``test_profile_runs_the_workflow_on_slurm``: a one-node SLURM with accounting and two fake GPUs
  (tests/slurm_cluster.py) runs a tiny config through the unmodified profile. One train_task job gets
  SIGTERM in mid-training (``scancel --signal=TERM``: the signal SLURM sends the job step for the
  profile's ``--signal=TERM@300``): it saves its checkpoint, Snakemake resubmits it with the next
  attempt's longer time limit, and it resumes. Checked through sacct (rules, GPU TRES, submit lines,
  time limits, states) and the results. Skipped only without root / without the Debian packages.
- ``test_signal_mid_task_checkpoints_and_resumes``: the same, without SLURM: a real SIGUSR1 to a
  training process, then a rerun that resumes and ends bit-identical to an uninterrupted run.

The cluster's partition and account differ from the profile's placeholders; they are layered on top
with a second ``--profile`` that holds only ``default-resources`` (copied from slurm/config.yaml, the
two placeholders replaced): a later profile replaces a top-level key as a whole, while every other key
still comes from the real profile file. Only the polling intervals are set on the command line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from conftest import REPO, pythonpath, tiny_config, write_config
from slurm_cluster import ClusterUnavailable, SlurmCluster, ensure_packages

PROFILE = REPO / "slurm" / "config.yaml"
GPU_RULES = {"pretrain_backbone", "query_cache", "train_task"}
LOCAL_RULES = {"collect_run"}
# The executor plugin (2.8.0) checks its jobs' states `--slurm-init-seconds-before-status-checks` seconds after a
# check that saw no job running, then waits 10 s longer after each check that saw none finish: checks at about
# 1, 12, 33, 64 s of a job's life with 1 (with 6: 6, 22, 48, 84 s). The chain of six jobs below waits for each
# one's next check, so the smallest setting waits least (snakemake_executor_plugin_slurm: check_active_jobs).
POLLING = ["--seconds-between-status-checks", "1", "--slurm-init-seconds-before-status-checks", "1"]
RUN = "results/runs/digits/coda_p+intact/seed0"
# The run's results, up to the local collect_run (the dry run above checks the target `all`; the
# local report/tracking rules would add ~20 s here without touching SLURM).
TARGETS = [f"{RUN}/R.csv", f"{RUN}/metrics.json"]


def profile() -> dict:
    return yaml.safe_load(PROFILE.read_text())


def snakemake_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE_PROFILE")}
    return {**env, **(extra or {})}


def slurm_config(workdir: Path, epochs: int) -> dict:
    """One method, two tasks: the shortest chain with a task that depends on a previous one. The
    backbone is barely pretrained: these tests check the dispatch, not what is learned."""
    cfg = tiny_config(methods=["coda_p+intact"])
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]
    cfg["backbones"]["vit_digits"]["pretrain"]["epochs"] = 3
    cfg["optim"]["epochs"] = epochs
    write_config(workdir, cfg)
    return cfg


def test_profile_resolves_from_the_repo_root(tmp_path):
    p = profile()
    assert p["executor"] == "slurm"
    assert p["retries"] >= 1 and p["rerun-incomplete"] and p["keep-going"]
    assert set(p["rerun-triggers"]) == {"mtime", "params", "input"}
    assert {"slurm_partition", "slurm_account"} <= set(p["default-resources"])
    for rule in GPU_RULES:
        res = p["set-resources"][rule]
        assert res["gpu"] == 1 and "gpus" not in res, rule
        assert "attempt" in str(res["runtime"]), rule
        assert eval(str(res["runtime"]), {"attempt": 2}) > eval(str(res["runtime"]), {"attempt": 1})

    slurm_config(tmp_path, epochs=1)
    # literally `snakemake --profile slurm all` from the repository root (-d: results go elsewhere)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "slurm", "all", "-d", str(tmp_path), "-n"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=snakemake_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"Using profiles? slurm and workflow specific profile profiles/default", out), out[:2000]
    jobs = {m[1]: m[2] for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", out, re.M | re.S)}
    signal_spec = p["set-resources"]["train_task"]["slurm_extra"].strip("'\"")
    assert re.search(r"resources: .*\bgpu=1\b", jobs["train_task"]) and signal_spec in jobs["train_task"]
    assert re.search(r"resources: .*\bruntime=120\b", jobs["train_task"])
    assert re.search(r"resources: .*\bgpu=1\b", jobs["query_cache"])
    assert "gpu=" not in jobs["prepare_data"]
    assert "slurm_partition=" in jobs["train_task"] and "slurm_account=" in jobs["train_task"]


# ---- a real SLURM ---------------------------------------------------------------------------------

def test_each_rule_asks_slurm_for_the_cpus_its_job_uses():
    """A job's script runs its rule's `threads` (Snakemake passes no --set-threads to a SLURM job), beside one for
    Snakemake itself: the GPU rules asked for 4 CPUs and trained on 1 thread (before 2026-12-01)."""
    threads, rule = {}, None
    for line in "".join(f.read_text() for f in sorted((REPO / "workflow/rules").glob("*.smk"))).splitlines():
        if line.startswith("rule "):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("threads:"):
            threads[rule] = int(line.split(":")[1])
    p = profile()
    for rule, res in p["set-resources"].items():
        cpus = res.get("cpus_per_task", p["default-resources"]["cpus_per_task"])
        assert threads.get(rule, 1) <= cpus <= threads.get(rule, 1) + 1, (rule, threads.get(rule, 1), cpus)


@pytest.fixture
def cluster(tmp_path_factory):
    """A running one-node SLURM; every daemon it started is stopped (by PID) afterwards, also on failure."""
    c = None
    try:
        ensure_packages(tmp_path_factory.mktemp("slurm-apt") / "apt.log")
        c = SlurmCluster()
        c.start()
    except ClusterUnavailable as err:
        if c is not None:
            c.stop()
            c.remove()
        pytest.skip(f"no SLURM test cluster: {err}")
    except BaseException:
        if c is not None:
            c.stop()
            c.remove()
        raise
    try:
        yield c
    finally:
        c.stop()
        c.remove()


def override_profile(folder: Path, cluster: SlurmCluster) -> Path:
    """The profile's default-resources with the test cluster's partition and account (see module doc)."""
    resources = dict(profile()["default-resources"])
    resources.update(slurm_partition=repr(cluster.partition), slurm_account=repr(cluster.account))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"default-resources": resources}, sort_keys=False))
    return folder


def job_rule(comment: str) -> str:
    m = re.match(r"rule_(\w+?)(_wildcards_.*)?$", comment)
    return m[1] if m else comment


def minutes(limit: str) -> int:
    days, _, hms = limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


@pytest.mark.slow
def test_profile_runs_the_workflow_on_slurm(cluster, tmp_path):
    work = tmp_path / "work"
    slurm_config(work, epochs=5)
    over = override_profile(tmp_path / "cluster-profile", cluster)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
           "--profile", str(REPO / "slurm"), "--profile", str(over), *POLLING, *TARGETS]
    log = tmp_path / "snakemake.log"
    t0 = time.monotonic()
    with open(log, "w") as out:
        # cwd = the workdir, as `snakemake --profile slurm` run in the repository root; the profile is
        # the repository's file, named by its absolute path
        main = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=snakemake_env(cluster.env))
    try:
        # ---- SIGTERM to train_task 0 in mid-training, as SLURM does for --signal=TERM@300
        task_log = work / "results/logs/train_task/digits/coda_p+intact/seed0/task0.log"
        deadline = time.monotonic() + 240
        signalled = None
        while signalled is None and time.monotonic() < deadline and main.poll() is None:
            text = task_log.read_text(errors="replace") if task_log.exists() else ""
            if "epoch 1/" in text:  # the progress bar exists: the handler is installed, training runs
                queue = cluster.run(["squeue", "-h", "-o", "%i|%k"]).stdout.split()
                job = "|rule_train_task_wildcards_digits_coda_p+intact_0_0"
                ids = [line.split("|")[0] for line in queue if line.endswith(job)]
                assert ids, f"train_task 0 is training but not in the queue: {queue}"
                cluster.run(["scancel", "--signal=TERM", ids[0]])
                signalled = ids[0]
            time.sleep(0.1)
        assert signalled, f"train_task 0 never started training:\n{log.read_text()[-4000:]}"
        main.wait(timeout=max(deadline + 240 - time.monotonic(), 10))
    finally:
        if main.poll() is None:
            main.send_signal(signal.SIGINT)  # Snakemake cancels its SLURM jobs
            main.wait(timeout=60)
    wall = time.monotonic() - t0
    output = log.read_text()
    assert main.returncode == 0, output[-6000:]

    # ---- the results are there; the signalled task resumed from its checkpoint
    run = work / RUN
    for t in range(2):
        assert {"state.safetensors", "hypercube.safetensors", "train.json",
                "eval.json"} <= {p.name for p in (run / f"task{t}").iterdir()}
        assert not (run / f"task{t}/checkpoint.pt").exists()
    assert (run / "R.csv").exists() and (run / "metrics.json").exists()
    record = json.loads((run / "task0/train.json").read_text())
    assert record["resumed_from"] is not None and (record["resumed_from"]["epoch"],
                                                   record["resumed_from"]["step"]) != (0, 0)
    assert len(record["epochs"]) == 5
    assert json.loads((run / "task1/train.json").read_text())["resumed_from"] is None
    slurm_log = (work / f"results/logs/slurm/rule_train_task/digits_coda_p+intact_0_0/{signalled}.log").read_text()
    assert "(signal 15); checkpoint saved" in slurm_log, slurm_log[-3000:]

    # ---- sacct: every non-local rule ran as its own SLURM job, the GPU rules with a GPU
    fields = ["JobID", "Comment", "State", "Timelimit", "AllocTRES", "ReqTRES", "Partition", "Account",
              "SubmitLine"]  # free text last
    jobs = [j for j in cluster.sacct(fields) if j["Comment"].startswith("rule_")]
    by_rule: dict[str, list[dict]] = {}
    for j in jobs:
        by_rule.setdefault(job_rule(j["Comment"]), []).append(j)
    assert set(by_rule) == {"prepare_data", "pretrain_backbone", "query_cache", "train_task"}, jobs
    assert not LOCAL_RULES & set(by_rule)
    assert [len(by_rule[r]) for r in ("prepare_data", "pretrain_backbone", "query_cache", "train_task")] == [1, 1, 1, 3]
    p = profile()
    for j in jobs:
        rule = job_rule(j["Comment"])
        assert j["Partition"] == cluster.partition and j["Account"] == cluster.account, j
        if rule in GPU_RULES:
            assert "gres/gpu=1" in j["AllocTRES"] and "gres/gpu=1" in j["ReqTRES"], j
            assert "--gpus=1" in j["SubmitLine"], j
            res = {**p["default-resources"], **p["set-resources"][rule]}
            assert f"cpus-per-task={res['cpus_per_task']}" in j["SubmitLine"], j
            assert f"--mem {res['mem_mb']}" in j["SubmitLine"], j
        else:
            assert "gpu" not in j["AllocTRES"] + j["ReqTRES"], j
        assert ("--requeue" in j["SubmitLine"]) == bool(p.get("slurm-requeue")), j
        extra = str(p["set-resources"].get(rule, {}).get("slurm_extra", "")).strip("'\"")
        assert not extra or extra in j["SubmitLine"], j  # e.g. --signal=TERM@300 for train_task
        assert j["State"] == ("FAILED" if j["JobID"] == signalled else "COMPLETED"), j
    # the signalled job and its resubmission: attempt 1 and 2 of the profile's runtime expression
    task0 = sorted((j for j in by_rule["train_task"] if j["Comment"].endswith("_0_0")), key=lambda j: int(j["JobID"]))
    assert [j["JobID"] for j in task0][0] == signalled and len(task0) == 2
    runtime = str(p["set-resources"]["train_task"]["runtime"])
    assert [minutes(j["Timelimit"]) for j in task0] == [eval(runtime, {"attempt": a}) for a in (1, 2)]
    assert record["provenance"]["slurm_job_id"] == task0[1]["JobID"]
    print(f"\nSLURM workflow run: {wall:.0f} s wall, {len(jobs)} SLURM jobs")


# ---- the same signal without SLURM ------------------------------------------------------------------

TRAIN_SCRIPT = """
import json, sys
from pathlib import Path
from intact.config import resolve_run
from intact.train import train_task
a = json.loads(sys.argv[1])
run = resolve_run(a["config"], "digits", "coda_p+intact", 0)
train_task(run, 0, manifest=Path(a["manifest"]), backbone_weights=Path(a["weights"]), out_dir=Path(a["out"]),
           threads=1, progress=False)
"""


@pytest.mark.slow
def test_signal_mid_task_checkpoints_and_resumes(tiny_bench, tmp_path):
    """A real SIGUSR1 to a training process: checkpoint and exit; the rerun resumes and matches an uninterrupted run."""
    sig = signal.SIGUSR1
    from intact.config import resolve_run
    from intact.io import load_tensors
    from intact.train import train_task

    cfg = json.loads(json.dumps(tiny_bench["config"]))
    cfg["optim"]["epochs"] = 6
    out = tmp_path / "cut"
    args = json.dumps({"config": cfg, "manifest": str(tiny_bench["manifest"]), "weights": str(tiny_bench["weights"]),
                       "out": str(out)})
    env = {**os.environ, "PYTHONPATH": pythonpath(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-c", TRAIN_SCRIPT, args], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the first end-of-epoch checkpoint: the handler is installed, training goes on
        assert proc.poll() is None, f"training ended before the signal:\n{proc.stderr.read()}"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and f"(signal {int(sig)}); checkpoint saved" in err, err
    assert (out / "checkpoint.pt").exists() and not (out / "state.safetensors").exists()

    run = resolve_run(cfg, "digits", "coda_p+intact", 0)
    kw = dict(manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], threads=1, progress=False)
    record = train_task(run, 0, out_dir=out, **kw)
    assert record["resumed_from"] is not None and record["resumed_from"]["epoch"] >= 1
    assert len(record["epochs"]) == 6 and not (out / "checkpoint.pt").exists()
    full = train_task(run, 0, out_dir=tmp_path / "full", **kw)
    assert full["resumed_from"] is None
    a, b = load_tensors(tmp_path / "full/state.safetensors"), load_tensors(out / "state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
