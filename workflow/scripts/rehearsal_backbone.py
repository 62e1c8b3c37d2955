"""Snakemake adapter: a rehearsal's tiny backbone, initialised (intact.pretrain.initialise_backbone)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.pretrain import initialise_backbone
from intact.runtime.joblog import log_to

with log_to(snakemake.log[0], snakemake.rule):
    initialise_backbone(snakemake.params.model, snakemake.params.seed, snakemake.output.weights)
