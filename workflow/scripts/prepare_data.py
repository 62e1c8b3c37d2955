"""Snakemake adapter: build a benchmark prepared in one process (manifest + data) and its preview picture."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.data import open_benchmark, prepare_benchmark
from intact.report.plots import draw_preview
from intact.runtime.joblog import job

with job(snakemake) as params:
    # the manifest it writes is checked against the config (intact.data.manifest): refused before any training
    manifest = prepare_benchmark(params.benchmark, snakemake.output.manifest.rsplit("/", 1)[0])
    draw_preview(open_benchmark(manifest), snakemake.output.preview)
