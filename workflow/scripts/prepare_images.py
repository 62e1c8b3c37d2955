"""Snakemake adapter: check, decode and store an image benchmark; draw its per-task sample picture."""
from intact.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.config import build_dataclass
from intact.data import benchmark_class, open_benchmark
from intact.data.image_config import ImageBenchmarkConfig
from intact.data.preview import task_preview
from intact.joblog import log_to

with log_to(snakemake.log[0], snakemake.rule):
    cfg = build_dataclass(ImageBenchmarkConfig, snakemake.params.benchmark, "benchmark")
    out_dir = snakemake.output.manifest.rsplit("/", 1)[0]
    manifest = benchmark_class(cfg.type).prepare(cfg, out_dir, workers=snakemake.threads)
    task_preview(open_benchmark(manifest), snakemake.output.preview)
