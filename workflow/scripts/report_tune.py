"""Snakemake adapter: the tune study's tables (choices on validation, chosen vs baseline on test)."""
from intact.io import read_json
from intact.runtime.joblog import log_to
from intact.report.tune import run_rows, write_tune_report

with log_to(snakemake.log[0], snakemake.rule):
    choices = [read_json(p) for p in snakemake.input.choices]
    runs = run_rows(list(snakemake.input.metrics))
    write_tune_report(choices, runs, snakemake.params.seeds, dict(snakemake.output.items()), snakemake.wildcards.benchmark)
