"""Snakemake adapter: build a benchmark (manifest + data) and its preview picture."""
from intact.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.config import BenchmarkConfig, build_dataclass
from intact.data import benchmark_class, open_benchmark
from intact.joblog import log_to
from intact.report.plots import domain_preview

with log_to(snakemake.log[0], snakemake.rule):
    cfg = build_dataclass(BenchmarkConfig, snakemake.params.benchmark, "benchmark")
    manifest = benchmark_class(cfg.type).prepare(cfg, snakemake.output.manifest.rsplit("/", 1)[0])
    domain_preview(*open_benchmark(manifest).preview(), snakemake.output.preview)
