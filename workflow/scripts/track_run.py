"""Snakemake adapter: log one finished run to MLflow; always succeeds (see its tracking.json)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from pathlib import Path

from intact.runtime.joblog import log_to
from intact.tracking import TrackingConfig, track_run

with log_to(snakemake.log[0], snakemake.rule):
    tracking = TrackingConfig(**snakemake.params.tracking)
    track_run(Path(snakemake.output.marker).parent, tracking, force=False)
