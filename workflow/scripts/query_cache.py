"""Snakemake adapter: the query cache of one (benchmark, backbone)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.cache import build_query_cache
from intact.runtime.joblog import job

with job(snakemake) as params:
    build_query_cache(
        params.backbone, Path(snakemake.input.manifest), Path(snakemake.input.backbone),
        Path(snakemake.output.meta).parent, threads=snakemake.threads, benchmark=params.benchmark, **params.optim,
    )
