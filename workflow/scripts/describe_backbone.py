"""Snakemake adapter: check and record a user-supplied backbone weights file."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.pretrain import describe_weights

with job(snakemake) as params:
    describe_weights(params.backbone, snakemake.input.weights, snakemake.output.info)
