"""Snakemake adapter: R.csv + metrics.json of one run."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.io import read_json
from intact.runtime.joblog import job
from intact.results import collect_run

with job(snakemake) as params:
    num_classes = read_json(snakemake.input.manifest)["num_classes"]
    collect_run(snakemake.input.evals, snakemake.input.trains, snakemake.output.R, snakemake.output.metrics,
                num_classes, config_hash=params.config_hash)
