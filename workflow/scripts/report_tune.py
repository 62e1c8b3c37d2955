"""Snakemake adapter: the tune study's tables (choices on validation, chosen vs baseline on test)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.report.tune import write_tune_report
from intact.results import StoredResults
from intact.tune import read_choice

with job(snakemake) as params:
    choices = [read_choice(p) for p in snakemake.input.choices]
    stored = StoredResults.read(snakemake.input.metrics, params.config_hashes)
    write_tune_report(choices, stored, params.seeds, dict(snakemake.output.items()), snakemake.wildcards.benchmark)
