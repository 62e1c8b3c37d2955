"""Snakemake adapter: the tables and figures of one study (from stored runs only)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.report.studies import write_study_report
from intact.results import StoredResults

with job(snakemake) as params:
    stored = StoredResults.read(snakemake.input.metrics, params.config_hashes)
    write_study_report(params.study, params.spec, stored, dict(snakemake.output.items()), snakemake.wildcards.benchmark,
                       methods=params.methods, defaults=params.defaults)
