"""Snakemake adapter: R.csv + metrics.json of one run."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.io import read_json
from intact.runtime.joblog import log_to
from intact.results import collect_run

with log_to(snakemake.log[0], snakemake.rule):
    num_classes = read_json(snakemake.input.manifest)["num_classes"]
    collect_run(snakemake.input.evals, snakemake.input.trains, snakemake.output.R, snakemake.output.metrics,
                num_classes, config_hash=snakemake.params.config_hash)
