"""The two tiers of the suite (docs/testing.md): a test is in the full tier exactly when it carries the `slow`
mark; the fixtures that hold a pretrained backbone mark every test that uses them, and a fast-tier test whose
Snakemake run executes a job fails, naming the mark it lacks."""

from __future__ import annotations

import subprocess

import pytest

import conftest
from conftest import FULL_TIER_FIXTURES, RAN_A_JOB, in_fast_tier, snakemake, tiny_config, write_config


def test_every_test_that_uses_a_pretrained_fixture_is_in_the_full_tier(request):
    using = [item for item in request.session.items if FULL_TIER_FIXTURES & set(item.fixturenames)]
    assert not [item.nodeid for item in using if in_fast_tier(item)]


def test_a_fast_test_whose_run_executes_a_job_fails_naming_the_mark(tmp_path, monkeypatch):
    # what Snakemake printed for a job it ran (test_snakemake_prints_the_lines_the_tier_check_reads)
    ran = subprocess.CompletedProcess([], 0, "", "[Fri Nov 27 13:18:46 2026]\nFinished jobid: 4 (Rule: prepare_data)\n")
    monkeypatch.setattr(conftest.kit, "snakemake", lambda *args, **kw: ran)
    with pytest.raises(AssertionError, match=r"runs workflow jobs .* mark it @pytest\.mark\.slow"):
        snakemake(tmp_path, "results/figures/digits/domains.png")


@pytest.mark.slow
def test_snakemake_prints_the_lines_the_tier_check_reads(tmp_path):
    """A dry run (no job runs), a real job (prepare_data, the cheapest) run through the kit, and the same target
    again (nothing to do)."""
    write_config(tmp_path, tiny_config())
    dry = snakemake(tmp_path, "-n", "results/figures/digits/domains.png")
    assert "prepare_data" in dry.stdout and not RAN_A_JOB.search(dry.stdout + dry.stderr)
    ran = conftest.kit.snakemake(tmp_path, "results/figures/digits/domains.png")
    assert RAN_A_JOB.search(ran.stdout + ran.stderr), ran.stderr[-3000:]
    again = conftest.kit.snakemake(tmp_path, "results/figures/digits/domains.png")
    assert "Nothing to be done" in again.stdout + again.stderr and not RAN_A_JOB.search(again.stdout + again.stderr)
