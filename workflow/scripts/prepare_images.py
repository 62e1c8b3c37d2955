"""Snakemake adapter: check, decode and store an image benchmark (any type declared with parallel_prepare);
draw its per-task sample picture."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.data import open_benchmark, prepare_benchmark
from intact.rehearsal import banner
from intact.report.plots import draw_preview
from intact.runtime.joblog import job

with job(snakemake) as params:
    out_dir = snakemake.output.manifest.rsplit("/", 1)[0]
    # the manifest it writes is checked against the config (intact.data.manifest): refused before any training
    manifest = prepare_benchmark(params.benchmark, out_dir, workers=snakemake.threads)
    # a rehearsal's synthetic tree (its input): the picture says so
    draw_preview(open_benchmark(manifest), snakemake.output.preview, banner(bool(snakemake.input.synthetic)))
