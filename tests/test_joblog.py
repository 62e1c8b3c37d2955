"""A job's log file (intact.runtime.joblog.log_to) holds what the job printed and, when it fails, its traceback."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from conftest import REPO
from intact.config import ConfigError, benchmark_config, load_config, resolve_run, tracking_config
from intact.runtime.joblog import job, job_params, log_to
from intact.settings import recorded
from intact.settings.experiments import EXPERIMENTS, experiment_settings, experiments_params


def test_an_exception_leaving_the_job_is_written_to_its_log(tmp_path):
    log = tmp_path / "logs" / "job.log"
    with pytest.raises(ValueError, match="boom"):
        with log_to(log, "some_rule"):
            os.write(1, b"before the failure\n")   # fd 1 (pytest replaces sys.stdout)
            raise ValueError("boom")
    text = log.read_text()
    assert "before the failure" in text and "Traceback (most recent call last)" in text
    assert text.rstrip().endswith("ValueError: boom")
    with log_to(log):
        os.write(2, b"a later job\n")   # fds restored and the log appended to
    assert log.read_text().startswith(text) and log.read_text().endswith("a later job\n")


def test_a_jobs_params_arrive_in_their_typed_forms(tmp_path):
    """What each rule hands its script (its plain form, as Snakemake records it) comes back as the typed object the
    workflow resolved; entries without a declared form are handed on as they are."""
    cfg = load_config(str(REPO / "config.yaml"), check_files=False)
    run = resolve_run(cfg, "digits", "coda_p+intact", 0)
    bench = benchmark_config(cfg, "digits")
    params = job_params({"run": run.to_dict(), "backbone": recorded(run.backbone), "benchmark": recorded(bench),
                         "tracking": recorded(tracking_config(cfg)), "experiments": experiments_params(cfg),
                         "config_hash": run.hash(), "seeds": [0, 1]})
    assert params.run == run and params.run.hash() == run.hash()
    assert params.backbone == run.backbone and params.benchmark == bench
    assert params.tracking == tracking_config(cfg)
    assert params.experiments == {name: experiment_settings(cfg, name) for name in EXPERIMENTS}
    assert (params.config_hash, params.seeds) == (run.hash(), [0, 1])
    assert job_params({"benchmark": bench}).benchmark is bench   # typed already (a rule that records none of it)
    tracking = tracking_config(cfg)
    assert job_params({"tracking": tracking}).tracking is tracking   # typed: track_run records where, not how
    # an experiment rule records its own experiment only: a drift setting reran the toy (before 2026-12-01)
    toy = experiments_params(cfg, "toy")
    assert list(toy) == ["toy"]
    assert job_params({"experiments": toy}).experiments == {"toy": experiment_settings(cfg, "toy")}


def test_a_setting_that_does_not_build_fails_the_job_in_its_log(tmp_path):
    job_ = SimpleNamespace(log=[str(tmp_path / "job.log")], rule="train_task",
                           params={"backbone": {"name": "b", "model": "vit", "depth": 4}})
    with pytest.raises(ConfigError, match="backbone.depth"):
        with job(job_):
            pass
    assert "unknown key 'backbone.depth'" in (tmp_path / "job.log").read_text()
