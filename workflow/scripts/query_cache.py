"""Snakemake adapter: the query cache of one (benchmark, backbone)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.cache import build_query_cache
from intact.settings import BackboneConfig, build_dataclass
from intact.runtime.joblog import log_to

with log_to(snakemake.log[0], snakemake.rule):
    build_query_cache(
        build_dataclass(BackboneConfig, snakemake.params.backbone, "backbone"), Path(snakemake.input.manifest),
        Path(snakemake.input.backbone), Path(snakemake.output.meta).parent, threads=snakemake.threads,
        benchmark=snakemake.params.benchmark, **snakemake.params.optim,
    )
