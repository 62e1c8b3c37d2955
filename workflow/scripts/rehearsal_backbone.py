"""Snakemake adapter: a rehearsal's tiny backbone, initialised (intact.pretrain.initialise_backbone)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.pretrain import initialise_backbone
from intact.runtime.joblog import job

with job(snakemake) as params:
    initialise_backbone(params.model, params.seed, snakemake.output.weights)
