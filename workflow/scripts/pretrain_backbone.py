"""Snakemake adapter: pretrain a small backbone on a benchmark's clean split."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.pretrain import pretrain_backbone

with job(snakemake) as params:
    info = pretrain_backbone(params.backbone, snakemake.input.manifest, snakemake.output.weights,
                             snakemake.output.info, threads=snakemake.threads, benchmark=params.benchmark)
    print(f"clean test accuracy {info['clean_test_accuracy']:.2f}%")
