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


@pytest.mark.slow
def test_end_to_end_tiny_run_is_resumable_and_exact(tmp_path, tiny_bench):
    cfg = tiny_config()
    write_config(tmp_path, cfg)
    snakemake(tmp_path)
    res = tmp_path / "results"
    for method in cfg["run"]["methods"]:
        run = res / "runs/digits" / method / "seed0"
        assert (run / "R.csv").exists() and (run / "metrics.json").exists()
        for t in range(3):
            assert {p.name for p in (run / f"task{t}").iterdir()} == {"state.safetensors", "hypercube.safetensors", "train.json", "eval.json"}
    for f in ["tables/digits/main.csv", "tables/digits/main.md", "figures/digits/aa_evolution.png", "figures/digits/domains.png"]:
        assert (res / f).stat().st_size > 0, f
    table = (res / "tables/digits/main.md").read_text()
    assert "`coda_p+intact`" in table and "Forgetting (max-final)" in table

    # everything up to date: nothing to do
    assert "Nothing to be done" in snakemake(tmp_path, "-n").stdout

    # deleting the last task of one run redoes that task and what depends on it, nothing else
    run = res / "runs/digits/coda_p+intact/seed0"
    before = (run / "R.csv").read_bytes()
    for f in (run / "task2").iterdir():
        f.unlink()
    counts = job_counts(snakemake(tmp_path, "-n", "--quiet", "rules").stdout)
    assert counts == {"train_task": 1, "evaluate_task": 1, "collect_run": 1, "report_main": 1, "all": 1}
    snakemake(tmp_path)
    assert (run / "R.csv").read_bytes() == before        # same config + seed -> identical R
