"""workflow/rules/scheduler.smk: Snakemake's scheduler runs a round when a job ends, not in ever more chains of timers
(docs/log/2026-11-28-scheduler-timers.md). A toy workflow of short jobs, with and without that file included."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import REPO

JOBS = 10
TOY = '''
rule all:
    input: expand("out/{{i}}.txt", i=range({jobs}))

rule one:
    output: "out/{{i}}.txt"
    shell: "sleep 1.0; touch {{output}}"
'''


def _rounds(tmp_path, name: str, head: str = "") -> tuple[int, float]:
    """Scheduling rounds of a run of the toy on one core (Snakemake's debug line of each round with jobs to start),
    and the run's seconds."""
    workdir = tmp_path / name
    workdir.mkdir()
    (workdir / "Snakefile").write_text(head + TOY.format(jobs=JOBS))
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--verbose", "--workflow-profile", "none"]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr.count("Resources before job selection"), time.monotonic() - t0


@pytest.mark.slow
def test_the_scheduler_runs_a_round_per_finished_job_not_per_timer(tmp_path):
    ours, seconds = _rounds(tmp_path, "ours", f'include: "{REPO / "workflow" / "rules" / "scheduler.smk"}"\n')
    # a round when a job ends or starts, and one a second from the one pending timer: linear in the jobs
    assert ours <= 2 * JOBS + seconds, f"{ours} rounds for {JOBS} jobs in {seconds:.0f} s with scheduler.smk"
    plain, seconds = _rounds(tmp_path, "plain")
    # the control: without it, every job's round adds a chain of a round a second, so the rounds grow as jobs x seconds;
    # should this fail, a newer Snakemake no longer does that, and scheduler.smk can go
    assert plain > 2 * JOBS + seconds + JOBS, f"{plain} rounds for {JOBS} jobs in {seconds:.0f} s without scheduler.smk"
