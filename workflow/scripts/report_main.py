"""Snakemake adapter: the default run's table (CSV + Markdown, InTAct's paired gain) and AA-evolution plot."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.report.studies import write_default_report
from intact.results import StoredResults

with job(snakemake) as params:
    stored = StoredResults.read(snakemake.input.metrics, params.config_hashes)
    write_default_report(stored, params.methods, dict(snakemake.output.items()), snakemake.wildcards.benchmark)
