"""Snakemake adapter: the tables and figures of one study (from stored runs only)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import log_to
from intact.report.studies import write_study_report
from intact.results import StoredResults

with log_to(snakemake.log[0], snakemake.rule):
    stored = StoredResults.read(snakemake.input.metrics)
    outputs = {k: v for k, v in snakemake.output.items()}
    write_study_report(snakemake.params.study, snakemake.params.spec, stored, outputs, snakemake.wildcards.benchmark,
                       snakemake.params.settings)
