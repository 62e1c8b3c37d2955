"""Snakemake adapter: pretrain a small backbone on a benchmark's clean split."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.settings import BackboneConfig, build_dataclass
from intact.runtime.joblog import log_to
from intact.pretrain import pretrain_backbone

with log_to(snakemake.log[0], snakemake.rule):
    cfg = build_dataclass(BackboneConfig, snakemake.params.backbone, "backbone")
    info = pretrain_backbone(cfg, snakemake.input.manifest, snakemake.output.weights, snakemake.output.info,
                             threads=snakemake.threads,
                             benchmark=snakemake.params.benchmark)
    print(f"clean test accuracy {info['clean_test_accuracy']:.2f}%")
