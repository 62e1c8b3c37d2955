"""Snakemake adapter: evaluate one task-state on every task's test set."""
from pathlib import Path

from intact.config import RunConfig
from intact.evaluate import evaluate_task
from intact.joblog import log_to

with log_to(snakemake.log[0], snakemake.rule):
    evaluate_task(
        RunConfig.from_dict(snakemake.params.run), int(snakemake.wildcards.task),
        manifest=Path(snakemake.input.manifest), backbone_weights=Path(snakemake.input.backbone),
        state=Path(snakemake.input.state), out_path=Path(snakemake.output.record), threads=snakemake.threads,
        query_cache=Path(snakemake.input.query).parent if "query" in snakemake.input.keys() else None,
    )
