"""Snakemake adapter: train one task from the previous task's state, then evaluate it (eval.json)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.runtime.joblog import job
from intact.train import train_task

with job(snakemake) as params:
    prev = Path(snakemake.input.state).parent if "state" in snakemake.input.keys() else None
    train_task(
        params.run, int(snakemake.wildcards.task),
        manifest=Path(snakemake.input.manifest), backbone_weights=Path(snakemake.input.backbone),
        out_dir=Path(snakemake.output.state).parent, prev_dir=prev, threads=snakemake.threads,
        query_cache=Path(snakemake.input.query).parent if "query" in snakemake.input.keys() else None,
        eval_out=Path(snakemake.output.evaluation),
    )
