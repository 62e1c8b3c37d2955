"""Snakemake adapter: train one task from the previous task's state, then evaluate it (eval.json)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.config import run_from_dict
from intact.runtime.joblog import log_to
from intact.train import train_task

with log_to(snakemake.log[0], snakemake.rule):
    prev = Path(snakemake.input.state).parent if "state" in snakemake.input.keys() else None
    train_task(
        run_from_dict(snakemake.params.run), int(snakemake.wildcards.task),
        manifest=Path(snakemake.input.manifest), backbone_weights=Path(snakemake.input.backbone),
        out_dir=Path(snakemake.output.state).parent, prev_dir=prev, threads=snakemake.threads,
        query_cache=Path(snakemake.input.query).parent if "query" in snakemake.input.keys() else None,
        eval_out=Path(snakemake.output.evaluation),
    )
