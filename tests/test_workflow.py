"""The Snakemake workflow: DAG dry-runs, lint, bad input, and a real end-to-end run of a tiny config."""

import json
import os
import re
import shutil

import pytest

from conftest import MLFLOW, RAN_A_JOB, REPO, snakemake, tiny_config, write_config
from intact.layering import load_file
from intact.models.backbone import create_vit
from safetensors.torch import save_file


def job_counts(output: str) -> dict[str, int]:
    stats = output.split("Job stats:")[1].split("Reasons")[0] if "Job stats:" in output else ""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", stats, re.M) if m[1] != "total"}


def imported(stderr: str) -> set[str]:
    """The modules a process run with PYTHONPROFILEIMPORTTIME=1 imported (its stderr lists them)."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_default_dag_dry_run(tmp_path):
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    # PYTHONPROFILEIMPORTTIME: the process lists every module it imports (stderr)
    proc = snakemake(tmp_path, "-n", "--quiet", "rules", env={"PYTHONPROFILEIMPORTTIME": "1"})
    out = proc.stdout
    # planning a run never needs torch (intact.io imports it only where a tensor is read or written): every
    # snakemake call, dry runs and each SLURM job's own Snakefile parse included, would pay > 1 s for it
    modules = imported(proc.stderr)
    assert "snakemake.workflow" in modules and not {"torch", "timm"} & modules
    cfg = load_file(REPO / "config.yaml")
    runs = len(cfg["run"]["methods"]) * len(cfg["run"]["seeds"])
    tasks = len(cfg["benchmarks"]["digits"]["domains"])
    counts = job_counts(out)
    assert counts["train_task"] == runs * tasks and "evaluate_task" not in counts  # a task's job also evaluates it
    assert counts["collect_run"] == runs and counts["prepare_data"] == 1 and counts["pretrain_backbone"] == 1
    assert counts["query_cache"] == 1  # one per (benchmark, backbone), shared by every method, seed and task
    assert len(cfg["run"]["seeds"]) >= 3 and {"coda_p", "coda_p+intact"} <= set(cfg["run"]["methods"])


def test_lint_is_clean(tmp_path):
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    proc = snakemake(tmp_path, "--lint", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("mutate, fragment", [
    (lambda c: c["optim"].update(lr_hed=1.0), "optim.lr_hed"),
    (lambda c: c["run"].update(methods=["coda_p", "l2q"]), "'l2q'"),
    (lambda c: c["backbones"]["vit_digits"].update(weights="missing/vit.safetensors"), "missing/vit.safetensors"),
])
def test_bad_config_stops_before_any_job(tmp_path, mutate, fragment):
    cfg = tiny_config()
    mutate(cfg)
    write_config(tmp_path, cfg)
    proc = snakemake(tmp_path, check=False)
    assert proc.returncode != 0
    assert fragment in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


def test_external_weights_replace_pretraining_in_the_dag(tmp_path):
    cfg = tiny_config()
    weights = tmp_path / "my_vit.safetensors"
    save_file(create_vit("vit_digits_p8").state_dict(), str(weights))
    cfg["backbones"]["vit_digits"]["weights"] = str(weights)
    write_config(tmp_path, cfg)
    proc = snakemake(tmp_path, "-n", "--quiet", "rules")
    counts = job_counts(proc.stdout)
    assert counts.get("describe_backbone") == 1 and "pretrain_backbone" not in counts
    assert "MISSING" not in proc.stderr


@pytest.mark.slow
def test_weights_replaced_by_others_with_an_older_mtime_are_described_again(tmp_path):
    """`tar x`, `cp -p` or `rsync -t` can put other weights in place with an older mtime: the mtime trigger missed
    them, and every run kept the results of the weights before (before 2026-12-01). The file's sha256 (cached by
    its size and mtime) is a params entry of describe_backbone, whose new record reruns what trained on it."""
    cfg = tiny_config()
    weights = tmp_path / "my_vit.safetensors"
    save_file(create_vit("vit_digits_p8").state_dict(), str(weights))
    cfg["backbones"]["vit_digits"]["weights"] = str(weights)
    write_config(tmp_path, cfg)
    info = "results/backbones/vit_digits.json"
    snakemake(tmp_path, info)
    assert "Nothing to be done" in snakemake(tmp_path, "-n", info).stdout
    import torch

    old = weights.stat()
    torch.manual_seed(1)
    save_file(create_vit("vit_digits_p8").state_dict(), str(weights))
    os.utime(weights, ns=(old.st_atime_ns, old.st_mtime_ns - 10**10))    # older than what it replaced
    assert job_counts(snakemake(tmp_path, info, "-n", "--quiet", "rules").stdout) == {"describe_backbone": 1}


@pytest.mark.slow
def test_a_weights_file_of_another_shape_stops_the_run_before_its_first_job(tmp_path):
    """Read from its header at start-up (the workflow's main process only): a dry run names it and the targets
    that need it; a real run stops before any job, leaving no results/."""
    cfg = tiny_config()
    weights = tmp_path / "p4.safetensors"
    save_file(create_vit("vit_digits_p4").state_dict(), str(weights))       # the config's model: vit_digits_p8
    cfg["backbones"]["vit_digits"]["weights"] = str(weights)
    write_config(tmp_path, cfg)
    said = (f"key 'backbones.vit_digits.weights': weights file '{weights}' does not fit the model: size mismatch "
            "for pos_embed: the file's [1, 65, 64], the model's [1, 17, 64] (and 1 more)")
    dry = snakemake(tmp_path, "-n")
    assert f"intact: MISSING (a real run whose jobs train on it stops before the first): {said} - needed by: " \
        in dry.stderr
    proc = snakemake(tmp_path, check=False)
    assert proc.returncode != 0 and f"config: {said} (needed by job " in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def workflow_config():
    """The tiny config with 4 epochs per task, so a training job lives long enough to be killed mid-task."""
    cfg = tiny_config()
    cfg["optim"]["epochs"] = 4
    return cfg


@pytest.fixture(scope="module")
def tiny_run(prepared_digits, tmp_path_factory):
    """One uninterrupted pipeline run of the tiny config from the session's prepared benchmark and backbone (the
    rest of the pipeline: the query cache, training, evaluation, collection, reports, tracking), shared by the
    tests below (read-only)."""
    workdir = prepared_digits(workflow_config(), tmp_path_factory.mktemp("tiny_run"))
    snakemake(workdir)
    return workdir


@pytest.mark.slow
def test_end_to_end_outputs_and_nothing_left_to_do(tiny_run):
    res = tiny_run / "results"
    for method in workflow_config()["run"]["methods"]:
        run = res / "runs/digits" / method / "seed0"
        assert (run / "R.csv").exists() and (run / "metrics.json").exists()
        for t in range(3):
            assert {p.name for p in (run / f"task{t}").iterdir()} == {"state.safetensors", "hypercube.safetensors",
                                                                      "train.json", "eval.json"}
    for f in ["tables/digits/default_run.csv", "tables/digits/default_run.md",
              "figures/digits/default_run_aa_evolution.png", "figures/digits/domains.png"]:
        assert (res / f).stat().st_size > 0, f
    table = (res / "tables/digits/default_run.md").read_text()
    assert "`coda_p+intact`" in table and "Forgetting (max-final)" in table
    assert "Nothing to be done" in snakemake(tiny_run, "-n").stdout


@pytest.mark.slow
def test_deleting_a_task_redoes_only_it_and_its_dependents(tiny_run, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    run = work / "results/runs/digits/coda_p+intact/seed0"
    before = (run / "R.csv").read_bytes()
    for f in (run / "task2").iterdir():
        f.unlink()
    counts = job_counts(snakemake(work, "-n", "--quiet", "rules").stdout)
    assert counts.pop("track_run", 1) == 1               # the run's MLflow record depends on it too
    assert counts == {"train_task": 1, "collect_run": 1, "report_default_run": 1, "all": 1,
                      "report_paper_tables": 1, "report_paper_figures": 1}
    snakemake(work)
    assert (run / "R.csv").read_bytes() == before        # same config + seed -> identical R


@pytest.mark.slow
def test_a_missing_weights_file_stops_only_the_targets_that_train_on_it(tiny_run, tmp_path):
    """Issue 32 item 5: a backbone named only by the official protocol, whose weights file is absent, is
    needed by the targets that train its runs (named per target in a dry run), refused at the start of a
    real run of such a target before any job, and not needed by a target that trains only intact runs."""
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    cfg = workflow_config()
    cfg["backbones"]["vit_absent"] = {"model": "vit_digits_p8", "weights": str(tmp_path / "absent.safetensors")}
    cfg["protocols"] = {"official": {"per_method": {"coda_p": {"backbone": "vit_absent"}}}}
    cfg["studies"]["main"] = {"methods": ["coda_p"], "protocols": ["intact", "official"]}
    cfg["tracking"]["enabled"] = False  # a view of finished runs: not what is tested, and an MLflow job less
    write_config(work, cfg)
    line = next(ln for ln in snakemake(work, "-n", "--quiet", "rules").stderr.splitlines() if "vit_absent" in ln)
    assert "absent.safetensors' does not exist" in line and "needed by: study_main, full" in line
    assert "not by: all," in line
    official = work / "results/runs/digits/coda_p@protocol=official"
    refused = snakemake(work, "results/runs/digits/coda_p@protocol=official/seed0/R.csv", check=False)
    assert refused.returncode != 0 and "absent.safetensors' does not exist" in refused.stderr, refused.stderr
    assert "(needed by job " in refused.stderr and not official.exists(), refused.stderr
    run = work / "results/runs/digits/coda_p/seed0"
    for f in (run / "task2").iterdir():  # something for `all` to do: it starts for real, and trains
        f.unlink()
    snakemake(work)
    assert (run / "task2/state.safetensors").exists() and not official.exists()


@pytest.mark.slow
def test_editing_aggregation_code_rebuilds_reports_without_retraining(tiny_run, tmp_path, checkout_edited):
    """Tables and figures list the aggregation code as input. A newer file with the same content (a fresh
    checkout) reruns nothing; an edited report module reruns the reports; an edited metrics module also the
    runs' metrics.json - and never training or evaluation."""
    import os
    import time

    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    tables, metrics = REPO / "src/intact/report/studies.py", REPO / "src/intact/metrics.py"
    saved = {p: (p.read_bytes(), p.stat()) for p in (tables, metrics)}
    try:
        now = time.time() + 5
        os.utime(tables, (now, now))
        assert "Nothing to be done" in snakemake(work, "-n").stdout      # same content: Snakemake's checksum says so
        tables.write_bytes(saved[tables][0] + b"\n# edited by a test\n")
        assert job_counts(snakemake(work, "-n", "--quiet", "rules").stdout) == {"report_default_run": 1, "all": 1}
        metrics.write_bytes(saved[metrics][0] + b"\n# edited by a test\n")
        counts = job_counts(snakemake(work, "-n", "--quiet", "rules").stdout)
        counts.pop("track_run", None)                                  # the MLflow view follows metrics.json
        assert counts == {"collect_run": 2, "report_default_run": 1, "all": 1, "report_paper_tables": 1,
                          "report_paper_figures": 1}, counts
    finally:
        for path, (data, st) in saved.items():
            path.write_bytes(data)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.slow
def test_an_edited_or_truncated_derived_record_is_refused_by_the_next_call(tiny_run, tmp_path):
    """Issue 33: what reads a run lists its R.csv and metrics.json as inputs and checks both against the task
    records (intact.results.read_run), so the next `snakemake` after a truncated R.csv, or a valid-JSON edit of
    metrics.json, refuses it naming the file and the --forcerun that redoes it; that command restores the tables."""
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    run = "results/runs/digits/coda_p+intact/seed0"
    table = work / "results/tables/digits/default_run.md"
    before = table.read_text()
    for name, damage in (("R.csv", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
                         ("metrics.json",
                          lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "aa": 1.0})))):
        damage(work / run / name)
        proc = snakemake(work, check=False)
        logs = "".join(p.read_text() for p in (work / "results/logs").rglob("*.log"))
        assert proc.returncode != 0 and "train_task" not in proc.stdout + proc.stderr
        assert f"{run}/{name} is damaged or foreign" in proc.stderr + logs
        assert f"snakemake --forcerun {run}/{name}`" in proc.stderr + logs
        snakemake(work, "--forcerun", f"{run}/{name}")
        assert table.read_text() == before


@pytest.mark.slow
def test_a_report_refuses_a_stored_run_of_an_older_config_that_snakemake_kept(tiny_run, tmp_path):
    """A results tree copied without .snakemake (or `snakemake --touch` after a config change) keeps the runs of
    the config before: the default-run, study and tune tables showed them as current, where the paper's tables skip
    them (before 2026-12-01). Every report now checks each run's config hash against the config's."""
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    cfg = load_file(work / "config.yaml")
    cfg["intact"]["lambda_var"] = 0.5                   # changes the +intact run's hash only
    write_config(work, cfg)
    run = "results/runs/digits/coda_p+intact/seed0"
    proc = snakemake(work, "results/tables/digits/default_run.md", "--forcerun", "report_default_run",
                     "--allowed-rules", "report_default_run", check=False)
    logs = "".join(p.read_text() for p in (work / "results/logs/report_default_run").rglob("*.log"))
    assert proc.returncode != 0 and f"{run}/task0/train.json is damaged or foreign: it records config_hash" in logs


@pytest.mark.slow
def test_how_mlflow_is_reached_reruns_no_tracking_and_where_it_goes_does(tiny_run, tmp_path):
    """track_run's params held the whole tracking section: a new timeout, retry count or deadline logged every run
    again (before 2026-12-01). Only the server and the experiment are recorded now."""
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    cfg = load_file(work / "config.yaml")
    cfg["tracking"] = {**cfg.get("tracking", {}), "timeout_s": 3, "retries": 0, "deadline_s": 60}
    write_config(work, cfg)
    assert "Nothing to be done" in snakemake(work, "-n").stdout
    cfg["tracking"]["experiment"] = "elsewhere/{benchmark}"
    write_config(work, cfg)
    assert set(job_counts(snakemake(work, "-n", "--quiet", "rules").stdout)) == {"track_run", "all"}


@pytest.mark.slow
def test_an_edited_eval_or_truncated_hypercube_is_refused(tiny_run, tmp_path):
    """Issue 43: a valid-JSON edit of task1/eval.json (which flowed into the tables by mtime) and the last task's
    hypercube truncated to 300 bytes (which track_run uploaded as `done`) are each refused by the next
    `snakemake`, naming the file and the --forcerun that redoes it, before a table or MLflow uses them; that
    command retrains what it names and gives R bit for bit again."""
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    run = "results/runs/digits/coda_p+intact/seed0"
    table, r_csv = work / "results/tables/digits/default_run.md", work / run / "R.csv"
    before, R = table.read_text(), r_csv.read_bytes()
    marker = json.loads((work / run / "tracking.json").read_text())
    tracked = "done" if MLFLOW else "pending"
    assert marker["status"] == tracked

    def edit(path):
        rec = json.loads(path.read_text())
        rec["accuracy"] = [min(100.0, a + 20.0) for a in rec["accuracy"]]
        path.write_text(json.dumps(rec, indent=2))

    for name, damage in (("task1/eval.json", edit),
                         ("task2/hypercube.safetensors", lambda p: p.write_bytes(p.read_bytes()[:300]))):
        damage(work / run / name)
        proc = snakemake(work, check=False)
        logs = "".join(p.read_text() for p in (work / "results/logs").rglob("*.log"))
        assert proc.returncode != 0 and "train_task" not in proc.stdout + proc.stderr
        line = next(ln for ln in (proc.stderr + logs).splitlines() if f"{run}/{name} is damaged or foreign" in ln)
        assert f"snakemake --forcerun {run}/{name}`" in line, line
        assert table.read_text() == before and (not r_csv.exists() or r_csv.read_bytes() == R)   # (a failed job: none)
        track = work / run / "tracking.json"               # nothing uploaded: the marker is as it was, or gone
        assert not track.exists() or json.loads(track.read_text()) == marker
        snakemake(work, "--forcerun", f"{run}/{name}")
        marker, before = json.loads(track.read_text()), table.read_text()   # retrained: new timings in the table
        assert r_csv.read_bytes() == R and marker["status"] == tracked


@pytest.mark.slow
def test_reports_from_copied_results_schedule_no_training(tiny_run, tmp_path):
    """A machine with only the results/ files (no task states, hypercubes or checkpoints) rebuilds every
    table and figure with `make reports`' command, and runs nothing but aggregation."""

    copy = tmp_path / "copy"
    shutil.copy(tiny_run / "config.yaml", copy.mkdir() or copy / "config.yaml")
    for src in (tiny_run / "results").rglob("*"):
        if src.is_file() and src.suffix in (".csv", ".json", ".md", ".png") and "logs" not in src.parts:
            dst = copy / src.relative_to(tiny_run)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)        # copy, not copy2: fresh mtimes, as after an rsync without -t
    assert not list(copy.rglob("*.safetensors"))
    table = copy / "results/tables/digits/default_run.md"
    table.unlink()
    rules = ("reports collect_run report_default_run report_study_main report_study_integration report_study_ablation "
             "report_study_sensitivity").split()
    # as `make reports`: with the tune study's checkpoint in the workflow, --forceall would force training too
    proc = snakemake(copy, "reports", "--forcerun", *rules, "--allowed-rules", *rules)
    out = proc.stdout + proc.stderr
    ran = {m for m in re.findall(r"^(?:local)?rule (\w+):", out, re.M)}
    assert ran and ran <= set(rules), ran
    assert "train_task" not in out and "evaluate_task" not in out and "pretrain_backbone" not in out
    assert table.read_text() == (tiny_run / "results/tables/digits/default_run.md").read_text()


#: where the random-kill test may SIGKILL the workflow: (name, trigger, rule, delay range in seconds)
KILL_POINTS = [
    ("training, after an epoch checkpoint", "checkpoint", "train_task", (0.0, 0.5)),
    ("between tasks", "finished", "train_task", (0.0, 0.2)),
    ("training, a random moment of a job", "started", "train_task", (0.0, 3.0)),
    ("evaluation", "evaluating", "train_task", (0.0, 0.05)),  # train.json written, eval.json not yet (< 1 s)
    ("collection of R", "started", "collect_run", (0.0, 0.5)),
]


#: file-based kill triggers: (a task file that exists, the task file not yet written)
FILE_TRIGGERS = {"checkpoint": ("checkpoint.pt", "train.json"), "evaluating": ("train.json", "eval.json")}


def _run_until_kill(workdir, point, rng, log):
    """Start the workflow; SIGKILL its whole process group at ``point`` (or let it finish). Returns whether it
    was killed, and the outputs of every job Snakemake reported as finished before that."""
    import os
    import queue
    import signal
    import subprocess
    import sys
    import threading
    import time

    name, trigger, rule, (lo, hi) = point
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    jobs, current, finished, fire_at, target = {}, None, [], None, None
    deadline = time.time() + 900
    try:
        while time.time() < deadline:
            try:
                line = lines.get(timeout=0.02)
            except queue.Empty:
                line = None
                if proc.poll() is not None and lines.empty():
                    break
            if line is not None:
                log.append(line)
                if m := re.match(r"^(?:local)?rule (\w+):", line):
                    current = {"rule": m[1], "output": []}
                elif current is not None and (m := re.match(r"^\s+output: (.*)$", line)):
                    current["output"] = m[1].split(", ")
                elif current is not None and (m := re.match(r"^\s+jobid: (\d+)$", line)):
                    jobs[m[1]] = current
                    if fire_at is None and trigger == "started" and current["rule"] == rule:
                        target, fire_at = current, time.time() + rng.uniform(lo, hi)
                    current = None
                elif m := re.match(r"^Finished jobid: (\d+) \(Rule: (\w+)\)", line):
                    job = jobs.get(m[1])
                    if job:
                        finished.append(job)
                    if fire_at is None and trigger == "finished" and m[2] == rule:
                        target, fire_at = job, time.time() + rng.uniform(lo, hi)
            if fire_at is None and trigger in FILE_TRIGGERS:
                # a task folder holding the trigger's first file but not yet its second: the job is in between
                present, pending = FILE_TRIGGERS[trigger]
                for f in workdir.glob(f"results/runs/*/*/seed*/task*/{present}"):
                    if not (f.parent / pending).exists():
                        target = {"rule": rule, "output": [str(f.parent.relative_to(workdir) / pending)]}
                        fire_at = time.time() + rng.uniform(lo, hi)
                        break
            if fire_at is not None and time.time() >= fire_at:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                done = all((workdir / f).exists() for f in target["output"])
                print(f"SIGKILL at: {name} - {target['rule']} -> {target['output'][0]} "
                      f"({'its outputs were complete' if done else 'its outputs were not written yet'})")
                return True, finished, done
        return False, finished, None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_random_kills_resume_exactly(tiny_run, tmp_path):
    """SIGKILL the whole workflow at randomly chosen moments (seeded; the seed and each kill are printed) -
    during training (after an epoch checkpoint and at a random moment), between tasks, during evaluation and
    collection - restarting each time as docs/cluster.md says (`snakemake --unlock`, then the same command).
    Finished jobs are never redone, an interrupted task resumes from its checkpoint, and the final R is
    bit-identical to the uninterrupted run's. To stay cheap, data and backbone are copied from that run and
    MLflow tracking (a view of the results, not part of R) is off; its query cache is copied too."""
    import json
    import os
    import random

    seed = int(os.environ.get("INTACT_KILL_SEED", "2026"))
    rng = random.Random(seed)
    print(f"random kill points: seed {seed} (set INTACT_KILL_SEED to replay another)")
    cfg = workflow_config()
    cfg["tracking"]["enabled"] = False
    write_config(tmp_path, cfg)
    for part in ("data", "backbones", "cache", "figures/digits/domains.png"):
        src, dst = tiny_run / "results" / part, tmp_path / "results" / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    kills, kept, log = [], {}, []
    for point in KILL_POINTS:
        killed, finished, outputs_done = _run_until_kill(tmp_path, point, rng, log)
        for job in finished:                             # surely complete: Snakemake said so before the kill
            for f in job["output"]:
                path = tmp_path / f
                if path.exists() and path.suffix == ".json" and "train_task" == job["rule"]:
                    kept.setdefault(path, path.stat().st_mtime_ns)
        if not killed:
            break
        kills.append((point, outputs_done))
        snakemake(tmp_path, "--unlock")
    snakemake(tmp_path)                                  # the same command as the first start
    assert len(kills) >= 5, f"only {len(kills)} kill points were reached:\n{''.join(log[-50:])}"
    assert {p[0] for p, _ in kills} == {p[0] for p in KILL_POINTS}
    during = {p[2] for p, done in kills if p[1] != "finished" and done is False}
    assert {"train_task", "collect_run"} <= during, during
    assert any(p[1] == "evaluating" and done is False for p, done in kills), kills  # killed while evaluating
    for path, mtime in kept.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was redone"
    resumed = [json.loads(p.read_text())["resumed_from"]
               for p in tmp_path.glob("results/runs/*/*/seed0/task*/train.json")]
    assert any(r is not None and r["epoch"] >= 1 for r in resumed), resumed
    assert not list(tmp_path.glob("results/runs/**/checkpoint.pt"))
    for method in ("coda_p", "coda_p+intact"):
        a = (tmp_path / f"results/runs/digits/{method}/seed0/R.csv").read_bytes()
        b = (tiny_run / f"results/runs/digits/{method}/seed0/R.csv").read_bytes()
        assert a == b, method


@pytest.mark.slow
def test_html_report_holds_every_table_and_figure(tiny_run, tmp_path):
    """`snakemake --report results/report.html` after the default run: every figure the report rules drew
    (PNG) and every paper table is embedded, each with its caption."""
    import json

    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    snakemake(work, "--report", "results/report.html")
    html = (work / "results/report.html").read_text()
    # the report embeds its files as one JS object: `results = {"<path>": {"name", "caption", "data", ...}}`
    embedded, _ = json.JSONDecoder().raw_decode(html, html.index("results = {") + len("results = "))
    figures = {str(p.relative_to(work)) for p in (work / "results/figures").rglob("*.png")}
    # 5 paper figures + the default run's AA evolution + the benchmark's domain samples
    assert len(figures) == 7 and figures <= set(embedded), figures - set(embedded)
    assert sum(e["mime_type"] == "image/png" for e in embedded.values()) == len(figures)
    assert html.count("data:image/png") == len(figures)
    tables = {f"results/tables/paper/{t}.{e}" for t in ("main", "ablation", "integration", "hyperparameters",
                                                        "efficiency")
              for e in ("csv", "tex")}
    assert tables <= set(embedded)
    for path in figures | tables:
        assert len(re.sub("<[^>]+>", "", embedded[path]["caption"])) > 40, path


@pytest.mark.slow
def test_paper_tables_from_copied_results_are_byte_identical(tiny_run, tmp_path):
    """A copy of results/ holding only the runs' records, R.csv / metrics.json / eval.json / train.json (fresh
    mtimes, no states; the reader checks the first two against the others): plain `snakemake paper_tables`
    trains nothing and writes the same tables and figures, byte for byte."""
    copy = tmp_path / "copy"
    shutil.copy(tiny_run / "config.yaml", copy.mkdir() or copy / "config.yaml")
    for src in (tiny_run / "results/runs").rglob("*"):
        if src.is_file() and src.name in ("R.csv", "metrics.json", "eval.json", "train.json"):
            dst = copy / src.relative_to(tiny_run)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    proc = snakemake(copy, "paper_tables")
    ran = set(re.findall(r"^(?:local)?rule (\w+):", proc.stdout + proc.stderr, re.M))
    assert ran == {"report_paper_tables", "report_paper_figures", "paper_tables"}, ran
    produced = sorted(p.relative_to(tiny_run) for d in ("tables/paper", "figures/paper")
                      for p in (tiny_run / "results" / d).iterdir())
    assert len(produced) == 17 + 10
    for rel in produced:
        assert (copy / rel).read_bytes() == (tiny_run / rel).read_bytes(), rel
    main = (tiny_run / "results/tables/paper/main.md").read_text()
    assert "`coda_p+intact` − `coda_p`" in main and " of 1 |" in main     # the paired block, measured
    # the efficiency fields every train.json now records reach the table
    import json

    import pandas as pd

    train = json.loads((tiny_run / "results/runs/digits/coda_p+intact/seed0/task1/train.json").read_text())
    assert train["total_parameters"] > train["trainable_parameters"] > 0 and train["inference_batch_seconds"] > 0
    eff = pd.read_csv(tiny_run / "results/tables/paper/efficiency.csv").set_index(["benchmark", "run"])
    row = eff.loc[("digits", "coda_p+intact")]
    assert row["here_total"] == train["total_parameters"] and row["here_inference_batch"] > 0 and row["here_seeds"] == 1


@pytest.mark.slow
def test_diverging_config_fails_the_workflow_and_reaches_no_table(tiny_run, tmp_path):
    """The issue's new-user config - InTAct lambdas of 1e38 - makes snakemake exit non-zero naming the term that
    went non-finite; the diverged run leaves no task result and no table row. (The plain run is unchanged by
    the intact section, so it is copied from the shared run instead of retrained, with the query cache; MLflow
    tracking, a view of finished runs, is off.)"""
    cfg = workflow_config()
    cfg["intact"].update(lambda_var=1.0e38, lambda_feat=1.0e38)
    cfg["tracking"]["enabled"] = False
    write_config(tmp_path, cfg)
    for part in ("data", "backbones", "cache", "figures/digits/domains.png", "runs/digits/coda_p"):
        src, dst = tiny_run / "results" / part, tmp_path / "results" / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    proc = snakemake(tmp_path, "--keep-going", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "NonFiniteError" in out, out[-3000:]
    assert "run digits/coda_p+intact/seed0, task 0, epoch 1/4, step 1/11: the loss term 'var'" in out, out[-3000:]
    task0 = tmp_path / "results/runs/digits/coda_p+intact/seed0/task0"
    assert not any((task0 / f).exists() for f in ("state.safetensors", "hypercube.safetensors", "train.json"))
    tables = tmp_path / "results/tables"
    reached = tables.exists() and any("coda_p+intact" in f.read_text() for f in tables.rglob("*.*"))
    assert not reached, "a diverged run reached a table"


#: bad values given with --configfile after a finished run (issue 43 item 3), and the line that refuses each
BAD_OVERLAYS = {
    "intact:\n  lambda_feat: .nan\n": "config: key 'intact.lambda_feat' = nan: not a finite number",
    "optim:\n  lr_head: .inf\n": "config: key 'optim.lr_head' = inf: not a finite number",
    "benchmarks:\n  digits:\n    domains: [blur, blur, edges]\n": "'blur' is listed twice",
    f"backbones:\n  vit_digits:\n    pretrain:\n      seed: {2**64}\n":
        "config: key 'backbones.vit_digits.pretrain.seed' = 18446744073709551616: does not fit in 64 bits",
    "optim:\n  epochs: 4\noptim:\n  lr_head: 0.02\n":
        "bad.yaml', line 3: key 'optim' is given twice in one mapping (first on line 1)",
}


@pytest.mark.slow
def test_bad_values_stop_before_any_job(tiny_run, tmp_path):
    """Each bad value is refused by `snakemake` in one line naming the key (a key given twice: the file and the
    line, read again by the Snakefile after Snakemake's own loader kept the last), before any job: the results of
    the finished run, its backbone and data included, stay byte for byte (a job of the same run, backbone or
    benchmark under the bad value would first have removed them)."""
    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)

    def results() -> dict:
        return {p.relative_to(work): p.read_bytes() for p in sorted((work / "results").rglob("*")) if p.is_file()}

    before = results()
    assert any(p.suffix == ".safetensors" and p.parts[1] == "backbones" for p in before)
    for overlay, expected in BAD_OVERLAYS.items():
        (work / "bad.yaml").write_text(overlay)
        proc = snakemake(work, "--configfile", str(work / "bad.yaml"), check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and len([ln for ln in out.splitlines() if expected in ln]) == 1, out[-3000:]
        assert "Traceback" not in out and not RAN_A_JOB.search(out), out[-3000:]
        assert results() == before, f"{overlay!r} changed the results"
