"""Snakemake adapter: log one finished run to MLflow; succeeds whether or not MLflow is reached (see its
tracking.json), fails on a run whose records are damaged, edited or foreign (nothing is uploaded)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.runtime.joblog import job
from intact.tracking import track_run

with job(snakemake) as params:
    track_run(Path(snakemake.output.marker).parent, params.tracking, force=False, config_hash=params.config_hash)
