"""Snakemake adapter: check and record a user-supplied backbone weights file."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.settings import BackboneConfig, build_dataclass
from intact.runtime.joblog import log_to
from intact.pretrain import describe_weights

with log_to(snakemake.log[0], snakemake.rule):
    cfg = build_dataclass(BackboneConfig, snakemake.params.backbone, "backbone")
    describe_weights(cfg, snakemake.input.weights, snakemake.output.info)
