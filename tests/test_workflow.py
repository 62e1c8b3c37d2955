"""The Snakemake workflow: DAG dry-runs, lint, bad input, and a real end-to-end run of a tiny config."""

import re
import shutil

import pytest
import yaml

from conftest import REPO, snakemake, tiny_config, write_config


def job_counts(output: str) -> dict[str, int]:
    stats = output.split("Job stats:")[1].split("Reasons")[0] if "Job stats:" in output else ""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", stats, re.M) if m[1] != "total"}


def test_default_dag_dry_run(tmp_path):
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    out = snakemake(tmp_path, "-n", "--quiet", "rules").stdout
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    runs = len(cfg["run"]["methods"]) * len(cfg["run"]["seeds"])
    tasks = len(cfg["benchmarks"]["digits"]["domains"])
    counts = job_counts(out)
    assert counts["train_task"] == runs * tasks and counts["evaluate_task"] == runs * tasks
    assert counts["collect_run"] == runs and counts["prepare_data"] == 1 and counts["pretrain_backbone"] == 1
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
    weights.write_bytes(b"x")
    cfg["backbones"]["vit_digits"]["weights"] = str(weights)
    write_config(tmp_path, cfg)
    counts = job_counts(snakemake(tmp_path, "-n", "--quiet", "rules").stdout)
    assert counts.get("describe_backbone") == 1 and "pretrain_backbone" not in counts


def workflow_config():
    """The tiny config with 4 epochs per task, so a training job lives long enough to be killed mid-task."""
    cfg = tiny_config()
    cfg["optim"]["epochs"] = 4
    return cfg


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One uninterrupted pipeline run of the tiny config, shared by the tests below (read-only)."""
    workdir = tmp_path_factory.mktemp("tiny_run")
    write_config(workdir, workflow_config())
    snakemake(workdir)
    return workdir


@pytest.mark.slow
def test_end_to_end_outputs_and_nothing_left_to_do(tiny_run):
    res = tiny_run / "results"
    for method in workflow_config()["run"]["methods"]:
        run = res / "runs/digits" / method / "seed0"
        assert (run / "R.csv").exists() and (run / "metrics.json").exists()
        for t in range(3):
            assert {p.name for p in (run / f"task{t}").iterdir()} == {"state.safetensors", "hypercube.safetensors", "train.json", "eval.json"}
    for f in ["tables/digits/default_run.csv", "tables/digits/default_run.md", "figures/digits/default_run_aa_evolution.png", "figures/digits/domains.png"]:
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
    assert counts == {"train_task": 1, "evaluate_task": 1, "collect_run": 1, "report_default_run": 1, "all": 1,
                      "report_paper_tables": 1, "report_paper_figures": 1}
    snakemake(work)
    assert (run / "R.csv").read_bytes() == before        # same config + seed -> identical R


@pytest.mark.slow
def test_editing_aggregation_code_rebuilds_reports_without_retraining(tiny_run, tmp_path):
    """Tables and figures list the aggregation code as input. A newer file with the same content (a fresh
    checkout) reruns nothing; an edited report module reruns the reports; an edited metrics module also the
    runs' metrics.json - and never training or evaluation."""
    import os
    import time

    work = tmp_path / "w"
    shutil.copytree(tiny_run, work, symlinks=True)
    tables, metrics = REPO / "src/intact/report/tables.py", REPO / "src/intact/metrics.py"
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
        assert counts == {"collect_run": 2, "report_default_run": 1, "all": 1, "report_paper_tables": 1, "report_paper_figures": 1}, counts
    finally:
        for path, (data, st) in saved.items():
            path.write_bytes(data)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.slow
def test_reports_from_copied_results_schedule_no_training(tiny_run, tmp_path):
    """A machine with only the results/ files (no task states, hypercubes or checkpoints) rebuilds every
    table and figure with `make reports`' command, and runs nothing but aggregation."""
    import os

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
    rules = "reports collect_run report_default_run report_study_main report_study_integration report_study_ablation report_study_sensitivity".split()
    proc = snakemake(copy, "reports", "--forceall", "--allowed-rules", *rules)
    out = proc.stdout + proc.stderr
    ran = {m for m in re.findall(r"^(?:local)?rule (\w+):", out, re.M)}
    assert ran and ran <= set(rules), ran
    assert "train_task" not in out and "evaluate_task" not in out and "pretrain_backbone" not in out
    assert table.read_text() == (tiny_run / "results/tables/digits/default_run.md").read_text()


@pytest.mark.slow
def test_killed_workflow_resumes_exactly(tiny_run, tmp_path):
    """SIGKILL the whole workflow while a task is mid-training: the restart keeps finished tasks, resumes the
    interrupted one from its last epoch checkpoint, and ends with an R bit-identical to an uninterrupted run."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    write_config(tmp_path, workflow_config())
    runs = tmp_path / "results/runs/digits"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    interrupted = None
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            ckpts = [c for c in runs.glob("*/seed0/task*/checkpoint.pt") if not (c.parent / "train.json").exists()]
            if any(c.parent.name != "task0" for c in ckpts):
                interrupted = next(c.parent for c in ckpts if c.parent.name != "task0")
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert interrupted is not None, "never caught a task mid-training"
    # a train job is surely finished (not merely written) when Snakemake has started the next task after it
    def started(task_dir):
        return (task_dir / "checkpoint.pt").exists() or (task_dir / "train.json").exists()

    done = {p: p.stat().st_mtime_ns for p in runs.glob("*/seed0/task*/train.json")
            if started(p.parent.with_name(f"task{int(p.parent.name[4:]) + 1}"))}
    assert done, "no finished task before the kill"

    snakemake(tmp_path, "--unlock")
    snakemake(tmp_path, "--rerun-incomplete")
    for path, mtime in done.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was redone"
    resumed = json.loads((interrupted / "train.json").read_text())["resumed_from"]
    assert resumed is not None and resumed["epoch"] >= 1, resumed
    assert not (interrupted / "checkpoint.pt").exists()
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
    figures = {str(p.relative_to(work)) for p in (work / "results/figures").rglob("*.png") if p.name != "domains.png"}
    assert len(figures) == 6 and figures <= set(embedded), figures - set(embedded)   # 5 paper figures + AA evolution
    assert sum(e["mime_type"] == "image/png" for e in embedded.values()) == len(figures)
    assert html.count("data:image/png") == len(figures)
    tables = {f"results/tables/paper/{t}.{e}" for t in ("main", "ablation", "integration", "hyperparameters", "efficiency")
              for e in ("csv", "tex")}
    assert tables <= set(embedded)
    for path in figures | tables:
        assert len(re.sub("<[^>]+>", "", embedded[path]["caption"])) > 40, path


@pytest.mark.slow
def test_paper_tables_from_copied_results_are_byte_identical(tiny_run, tmp_path):
    """A copy of results/ holding only R.csv / metrics.json / train.json (fresh mtimes, no states): plain
    `snakemake paper_tables` trains nothing and writes the same tables and figures, byte for byte."""
    copy = tmp_path / "copy"
    shutil.copy(tiny_run / "config.yaml", copy.mkdir() or copy / "config.yaml")
    for src in (tiny_run / "results/runs").rglob("*"):
        if src.is_file() and src.name in ("R.csv", "metrics.json", "train.json"):
            dst = copy / src.relative_to(tiny_run)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    proc = snakemake(copy, "paper_tables")
    ran = set(re.findall(r"^(?:local)?rule (\w+):", proc.stdout + proc.stderr, re.M))
    assert ran == {"report_paper_tables", "report_paper_figures", "paper_tables"}, ran
    produced = sorted(p.relative_to(tiny_run) for d in ("tables/paper", "figures/paper") for p in (tiny_run / "results" / d).iterdir())
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
