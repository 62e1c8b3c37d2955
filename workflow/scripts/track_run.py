"""Snakemake adapter: log one finished run to MLflow; succeeds whether or not MLflow is reached (see its
tracking.json), fails on a run whose records are damaged, edited or foreign (nothing is uploaded)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.runtime.joblog import log_to
from intact.tracking import TrackingConfig, track_run

with log_to(snakemake.log[0], snakemake.rule):
    tracking = TrackingConfig(**snakemake.params.tracking)
    track_run(Path(snakemake.output.marker).parent, tracking, force=False, config_hash=snakemake.params.config_hash)
